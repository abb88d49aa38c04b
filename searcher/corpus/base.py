"""What a corpus store is: the records the indexer writes and serving reads, and the one
interface both stores (``store.SqliteStore``, embedded; ``qdrant_store.QdrantStore``, a
Qdrant server or its local mode) implement, so that the indexer, ``searcher index`` and
the ``local`` backend never know which one they use."""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol

import numpy as np

from searcher.corpus.chunking import Chunk
from searcher.corpus.readers import Kind, SkipReason


@dataclass(frozen=True)
class StoredFile:
    """What the index knows of a file, to tell whether it changed."""

    id: int
    size: int
    mtime_ns: int
    sha256: str


@dataclass(frozen=True)
class DocumentRow:
    """One indexed document, as ``searcher index status`` lists it."""

    collection: str
    path: str
    kind: str
    title: str
    size: int
    chunks: int
    indexed_at: float


@dataclass(frozen=True)
class SkippedRow:
    collection: str
    path: str
    reason: SkipReason
    detail: str
    at: float


@dataclass(frozen=True)
class ChunkRow:
    """A chunk with its document, as search answers it."""

    id: int
    document: int
    ordinal: int
    heading: str | None
    page: int | None
    text: str
    path: str
    title: str
    kind: str
    collection: str


@dataclass(frozen=True)
class NewDocument:
    """A file's new index entry: its identity, its chunks, and their vectors (one row per
    chunk, or ``None`` when no embedder is configured)."""

    collection: str
    path: str
    kind: Kind
    title: str
    size: int
    mtime_ns: int
    sha256: str
    chunks: Sequence[Chunk]
    vectors: np.ndarray | None


# How the keyword and vector lists of chunks become one (corpus.fusion).
Fusion = Literal["rrf", "relative_score"]


@dataclass(frozen=True)
class Fusing:
    """How a search fuses its lists (``corpus.*``): ``candidates`` chunks from each list,
    weighted; a list weighted 0 is not searched (keywords still, when there are no
    vectors); a document scored by the sum of its best ``chunks_summed`` chunks."""

    candidates: int = 200
    rrf_k: int = 60
    keyword_weight: float = 0.9
    vector_weight: float = 0.1
    chunks_summed: int = 1
    fusion: Fusion = "relative_score"


@dataclass(frozen=True)
class DocumentMatch:
    """One document found: its best chunks (best first) and its fused score."""

    score: float
    chunks: tuple[ChunkRow, ...]

    @property
    def best(self) -> ChunkRow:
        return self.chunks[0]


class CorpusStore(Protocol):
    """A corpus index. Writes come from one ``searcher index`` run at a time; reads from
    any number of threads (and processes) while it writes. Every write that changes what
    a collection answers bumps its ``generation``."""

    # --- writing (the indexer and ``searcher index remove``) ---

    def ensure_collection(self, collection: str, embedder: str | None) -> None:
        """Create ``collection`` if new; when ``embedder`` differs from the one its vectors
        came from, drop every document so that the run indexes them again."""
        ...

    def stored_files(self, collection: str) -> dict[str, StoredFile]:
        """Every indexed file of ``collection``, by path."""
        ...

    def replace_document(self, new: NewDocument) -> None:
        """Index ``new`` in place of what the index held for its path."""
        ...

    def touch_document(self, collection: str, path: str, mtime_ns: int) -> None:
        """Remember a new mtime of a file whose content did not change."""
        ...

    def remove_documents(self, collection: str, paths: Iterable[str]) -> int:
        """Drop the documents and skip records of ``paths``; how many documents went."""
        ...

    def remove_collection(self, collection: str) -> int:
        """Drop ``collection`` entirely; how many documents it had."""
        ...

    def record_skip(self, collection: str, path: str, reason: SkipReason, detail: str) -> None:
        """Remember why ``path`` is not indexed; a document it was before is dropped."""
        ...

    def publish(self, collection: str) -> None:
        """Make what readers load of ``collection`` current after a run of writes (the
        embedded store writes a snapshot for them to map when enough changed; Qdrant
        serves its writes as they come and does nothing)."""
        ...

    # --- reading (status and search) ---

    def collections(self) -> list[str]:
        """The names of the collections, sorted."""
        ...

    def documents(self, collection: str | None = None) -> list[DocumentRow]:
        """Indexed documents (of ``collection``, or all), by collection and path."""
        ...

    def skipped(self, collection: str | None = None) -> list[SkippedRow]:
        """Skipped files (of ``collection``, or all) with their reasons."""
        ...

    def collection_embedder(self, collection: str) -> tuple[bool, str | None]:
        """Whether ``collection`` exists, and the embedder of its vectors."""
        ...

    def generation(self, collection: str) -> int:
        """A number that changes whenever what ``collection`` answers changes; -1 for a
        collection that does not exist."""
        ...

    def search(
        self,
        collections: Sequence[str],
        text: str,
        query_vectors: dict[str, np.ndarray],
        max_documents: int,
        fusing: Fusing,
    ) -> list[DocumentMatch]:
        """The best ``max_documents`` documents of ``collections`` for ``text``: keyword
        and (where ``query_vectors`` has the collection's query vector) vector lists of
        chunks, fused as ``fusing`` says, grouped by document."""
        ...

    def content(
        self, collections: Sequence[str], path: str, page: int | None, query: str, max_chars: int
    ) -> str | None:
        """Full mode's text of the document at ``path``: its best chunk for ``query`` (on
        ``page`` for a PDF page) with its neighbours; ``None`` when no collection of these
        holds it."""
        ...

    def close(self) -> None:
        """Release connections and clients."""
        ...
