"""The serving side of the corpus index: searches and full-mode reads from any number of
threads, each on its own read connection to the one SQLite file (WAL: they never wait
for ``index add``), sharing one cache of vector matrices."""

from __future__ import annotations

import sqlite3
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

import numpy as np

from searcher.corpus import retrieval, store
from searcher.corpus.retrieval import DocumentMatch, Fusion

if TYPE_CHECKING:
    from searcher.config import CorpusSettings


class CollectionMissing(Exception):
    """A collection that was never indexed; its name is the message."""


class CorpusReader:
    """Read access to the index at ``path`` (created empty if absent)."""

    def __init__(
        self, path: Path, candidates: int = 200, rrf_k: int = 60, keyword_weight: float = 0.9,
        vector_weight: float = 0.1, chunks_summed: int = 1,
        fusion: Fusion = "relative_score",
    ) -> None:  # fmt: skip
        self.path = path
        self.candidates = candidates
        self.rrf_k = rrf_k
        self.keyword_weight = keyword_weight
        self.vector_weight = vector_weight
        self.chunks_summed = chunks_summed
        self.fusion: Fusion = fusion
        self._vectors = store.VectorCache()
        self._local = threading.local()
        self._opened: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    @classmethod
    def from_settings(cls, path: Path, corpus: CorpusSettings) -> CorpusReader:
        """A reader of the index at ``path`` fusing as ``corpus.*`` says."""
        return cls(
            path, corpus.candidates, corpus.rrf_k, corpus.keyword_weight,
            corpus.vector_weight, corpus.chunks_summed, corpus.fusion,
        )  # fmt: skip

    def _conn(self) -> sqlite3.Connection:
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = store.connect(self.path)
            with self._lock:
                self._opened.append(conn)
        return conn

    def embedders(self, collections: Sequence[str]) -> dict[str, str | None]:
        """The embedder each collection's vectors came from. Raises
        ``CollectionMissing`` for one not in the index."""
        conn = self._conn()
        found = {}
        for name in collections:
            exists, embedder = store.collection_embedder(conn, name)
            if not exists:
                raise CollectionMissing(name)
            found[name] = embedder
        return found

    def search(
        self,
        collections: Sequence[str],
        text: str,
        query_vectors: dict[str, np.ndarray],
        max_documents: int,
    ) -> list[DocumentMatch]:
        """The best documents of ``collections`` for ``text`` (see
        ``retrieval.search_collections``)."""
        return retrieval.search_collections(
            self._conn(), self._vectors, collections, text, query_vectors, max_documents,
            self.candidates, self.rrf_k, self.keyword_weight, self.vector_weight,
            self.chunks_summed, self.fusion,
        )  # fmt: skip

    def content(
        self, collections: Sequence[str], path: str, page: int | None, query: str, max_chars: int
    ) -> str | None:
        """Full mode's text of the document at ``path``: its best chunk for ``query`` and
        the neighbours; ``None`` when no collection of these holds it."""
        return retrieval.passage_with_neighbours(
            self._conn(), collections, path, page, query, max_chars
        )

    def close(self) -> None:
        """Close every thread's connection."""
        with self._lock:
            for conn in self._opened:
                conn.close()
            self._opened.clear()
