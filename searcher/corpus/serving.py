"""The serving side of the corpus index: searches and full-mode reads from any number of
threads, on whichever store holds the collections (``base.CorpusStore``: the embedded
SQLite file, or Qdrant)."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from searcher.corpus.base import CorpusStore, DocumentMatch, Fusing, Fusion
from searcher.corpus.store import SqliteStore

if TYPE_CHECKING:
    from searcher.config import CorpusSettings


class CollectionMissing(Exception):
    """A collection that was never indexed; its name is the message."""


class CorpusReader:
    """Read access to a corpus store: ``source`` is the store, or the path of an embedded
    index (created empty if absent)."""

    def __init__(
        self, source: Path | CorpusStore, candidates: int = 200, rrf_k: int = 60,
        keyword_weight: float = 0.9, vector_weight: float = 0.1, chunks_summed: int = 1,
        fusion: Fusion = "relative_score",
    ) -> None:  # fmt: skip
        self.store: CorpusStore = SqliteStore(source) if isinstance(source, Path) else source
        self.candidates = candidates
        self.rrf_k = rrf_k
        self.keyword_weight = keyword_weight
        self.vector_weight = vector_weight
        self.chunks_summed = chunks_summed
        self.fusion: Fusion = fusion

    @classmethod
    def from_settings(
        cls, source: Path | CorpusStore, corpus: CorpusSettings, provider: str
    ) -> CorpusReader:
        """A reader of ``source`` fusing as ``corpus.*`` says, for queries embedded by an
        embedder of ``provider`` (``embeddings.provider``: it picks the unset weights)."""
        keyword, vector = corpus.fusion_weights(provider)
        return cls(
            source, corpus.candidates, corpus.rrf_k, keyword, vector, corpus.chunks_summed,
            corpus.fusion,
        )  # fmt: skip

    def embedders(self, collections: Sequence[str]) -> dict[str, str | None]:
        """The embedder each collection's vectors came from. Raises
        ``CollectionMissing`` for one not in the index."""
        found = {}
        for name in collections:
            exists, embedder = self.store.collection_embedder(name)
            if not exists:
                raise CollectionMissing(name)
            found[name] = embedder
        return found

    def generations(self, collections: Sequence[str]) -> dict[str, int]:
        """Each collection's generation (-1: not indexed): what a cached answer drawn from
        them must match to be served."""
        return {name: self.store.generation(name) for name in collections}

    def search(
        self,
        collections: Sequence[str],
        text: str,
        query_vectors: dict[str, np.ndarray],
        max_documents: int,
    ) -> list[DocumentMatch]:
        """The best documents of ``collections`` for ``text`` (see
        ``CorpusStore.search``)."""
        fusing = Fusing(
            self.candidates, self.rrf_k, self.keyword_weight, self.vector_weight,
            self.chunks_summed, self.fusion,
        )  # fmt: skip
        return self.store.search(collections, text, query_vectors, max_documents, fusing)

    def content(
        self, collections: Sequence[str], path: str, page: int | None, query: str, max_chars: int
    ) -> str | None:
        """Full mode's text of the document at ``path``: its best chunk for ``query`` and
        the neighbours; ``None`` when no collection of these holds it."""
        return self.store.content(collections, path, page, query, max_chars)

    def close(self) -> None:
        """Close the store's connections."""
        self.store.close()
