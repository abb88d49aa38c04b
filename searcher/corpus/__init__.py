"""Own documents: readers, chunking, the embedded index and the indexer behind
``searcher index`` and the ``local`` backend adapter."""
