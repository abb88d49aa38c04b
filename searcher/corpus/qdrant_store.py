"""The corpus in Qdrant (``corpus.qdrant_url``, else ``state.qdrant_url``): each collection
is one Qdrant collection of its chunks with a dense vector (the embedder's) and a sparse
one (BM25 terms from ``sparse``; Qdrant applies the IDF, ``Modifier.IDF``), searched with
Qdrant's own prefetch + RRF fusion as seed 002 does. What ``searcher index status`` lists
(collections, documents, skipped files, generations) lives beside them in
``searcher_corpus_meta``, payload-only points, so every process that points at the same
server sees the same index.

Qdrant has no transactions: a document is written chunks first (under a new document id),
then its entry, then its older chunks are deleted. An interrupted write leaves at most
chunks of an id no entry names; the next run re-indexes that file (its entry still has the
old hash) and deletes them.

The location is a server (``http://host:6333``) or qdrant-client's local mode: ``:memory:``
(one process, gone at exit) or a directory (one process at a time holds it).
"""

from __future__ import annotations

import functools
import hashlib
import secrets
import threading
import time
import uuid
import warnings
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager, nullcontext
from typing import TYPE_CHECKING, Any, TypeVar

import numpy as np

from searcher.corpus import retrieval, sparse
from searcher.corpus.base import (
    ChunkRow,
    DocumentMatch,
    DocumentRow,
    Fusing,
    NewDocument,
    SkippedRow,
    StoredFile,
)
from searcher.corpus.readers import SkipReason
from searcher.errors import StateUnavailable

if TYPE_CHECKING:
    from qdrant_client import QdrantClient, models

META = "searcher_corpus_meta"
CHUNKS_PREFIX = "searcher_corpus__"
DENSE = "dense"
SPARSE = "sparse"
_PAGE = 1000
_ID_SPACE = uuid.UUID("5f0c8d3e-27a1-4c2e-9a53-27c0a1e5f00d")
T = TypeVar("T")


def require_client() -> None:
    """Raises ``StateUnavailable`` naming the extra when qdrant-client is not installed."""
    try:
        import qdrant_client  # noqa: F401
    except ImportError as exc:
        raise StateUnavailable(
            "corpus.qdrant_url (or state.qdrant_url) is set but qdrant-client is not "
            "installed (pip install 'searcher[qdrant]')"
        ) from exc


def client_for(location: str, timeout_s: float = 10.0) -> QdrantClient:
    """A client of the Qdrant at ``location`` that answered. Raises ``StateUnavailable``
    when qdrant-client is missing (naming the extra) or Qdrant does not answer."""
    require_client()
    from qdrant_client import QdrantClient

    try:
        if location.startswith(("http://", "https://")):
            client = QdrantClient(
                url=location, timeout=max(1, round(timeout_s)), check_compatibility=False
            )
        elif location == ":memory:":
            client = QdrantClient(location=":memory:")
        else:
            client = QdrantClient(path=location)
        client.get_collections()
    except Exception as exc:  # HTTP, gRPC, OS errors, a directory another process holds
        raise StateUnavailable(f"Qdrant at {location} (corpus): {exc}") from exc
    return client


def _point_id(*parts: object) -> str:
    return str(uuid.uuid5(_ID_SPACE, "\x1f".join(str(p) for p in parts)))


def _chunk_id(document: int, ordinal: int) -> int:
    """A chunk's point id: 63 bits of a hash of its document id and place."""
    digest = hashlib.blake2b(f"{document}:{ordinal}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big") >> 1


class QdrantStore:
    """A ``CorpusStore`` in Qdrant (see the module's docstring)."""

    def __init__(self, location: str) -> None:
        self.location = location
        # Local mode is plain Python structures: one caller at a time.
        local = not location.startswith(("http://", "https://"))
        self._lock: threading.RLock | None = threading.RLock() if local else None
        self._opening = threading.Lock()
        self._client: QdrantClient | None = None
        self._ready = False

    @classmethod
    def open(cls, location: str) -> QdrantStore:
        """The store at ``location`` (see the module's docstring), connected on first use
        (a ``serve`` with no ``local`` instance never holds a local-mode directory).
        Raises ``StateUnavailable`` when qdrant-client is not installed."""
        require_client()
        return cls(location)

    @property
    def client(self) -> QdrantClient:
        """The client, connected (and checked) on first use; ``StateUnavailable`` when
        Qdrant does not answer."""
        with self._opening:
            if self._client is None:
                self._client = client_for(self.location)
            return self._client

    def _guard(self) -> AbstractContextManager[Any]:
        return self._lock if self._lock is not None else nullcontext()

    def _call(self, work: Callable[[], T]) -> T:
        """``work`` on the client; any failure of Qdrant becomes ``StateUnavailable``."""
        with self._guard(), warnings.catch_warnings():
            # Local mode warns that payload indexes do nothing there.
            warnings.simplefilter("ignore")
            try:
                if not self._ready:
                    self._ensure_meta()
                return work()
            except StateUnavailable:
                raise
            except Exception as exc:
                raise StateUnavailable(f"Qdrant (corpus): {exc}") from exc

    def _ensure_meta(self) -> None:
        from qdrant_client import models

        if not self.client.collection_exists(META):
            self.client.create_collection(META, vectors_config={})
            for key in ("type", "collection", "path"):
                self.client.create_payload_index(META, key, models.PayloadSchemaType.KEYWORD)
        self._ready = True

    # --- meta points ---

    def _meta(self, kind: str, collection: str | None = None) -> Iterator[dict[str, Any]]:
        from qdrant_client import models

        must: list[Any] = [models.FieldCondition(key="type", match=models.MatchValue(value=kind))]
        if collection is not None:
            must.append(
                models.FieldCondition(key="collection", match=models.MatchValue(value=collection))
            )
        yield from (p.payload or {} for p in self._scroll(META, models.Filter(must=must)))

    def _scroll(self, name: str, where: models.Filter) -> Iterator[Any]:
        offset = None
        while True:
            points, offset = self.client.scroll(
                name, scroll_filter=where, limit=_PAGE, offset=offset, with_payload=True
            )
            yield from points
            if offset is None:
                return

    def _collection_meta(self, collection: str) -> dict[str, Any] | None:
        found = self.client.retrieve(META, [_point_id("collection", collection)])
        return (found[0].payload or {}) if found else None

    def _put_meta(self, key: tuple[str, ...], payload: dict[str, Any]) -> None:
        from qdrant_client import models

        point = models.PointStruct(id=_point_id(*key), vector={}, payload=payload)
        self.client.upsert(META, [point], wait=True)

    def _bump(self, collection: str) -> None:
        # One writer at a time (``searcher index``): a read-modify-write is enough.
        meta = self._collection_meta(collection)
        if meta is not None:
            self.client.set_payload(
                META,
                {"generation": int(meta.get("generation", 0)) + 1},
                points=[_point_id("collection", collection)],
                wait=True,
            )

    # --- writing ---

    def ensure_collection(self, collection: str, embedder: str | None) -> None:
        def work() -> None:
            meta = self._collection_meta(collection)
            if meta is not None and meta.get("embedder") == embedder:
                return
            generation = -1 if meta is None else int(meta.get("generation", 0))
            if meta is not None:  # another embedder: every vector goes
                self._drop(collection)
            self._put_meta(
                ("collection", collection),
                {"type": "collection", "collection": collection, "embedder": embedder,
                 "generation": generation + 1},
            )  # fmt: skip

        self._call(work)

    def _chunks_collection(self, collection: str, dimensions: int | None) -> str:
        """The Qdrant collection of ``collection``'s chunks, created on its first
        document (the vectors' size is known then)."""
        from qdrant_client import models

        name = CHUNKS_PREFIX + collection
        if not self.client.collection_exists(name):
            dense = {} if dimensions is None else {
                DENSE: models.VectorParams(size=dimensions, distance=models.Distance.COSINE)
            }  # fmt: skip
            self.client.create_collection(
                name,
                vectors_config=dense,
                sparse_vectors_config={
                    SPARSE: models.SparseVectorParams(modifier=models.Modifier.IDF)
                },
            )
            for key, kind in (("path", models.PayloadSchemaType.KEYWORD),
                              ("document", models.PayloadSchemaType.INTEGER)):  # fmt: skip
                self.client.create_payload_index(name, key, kind)
        return name

    def _drop(self, collection: str) -> int:
        """Delete every chunk and meta point of ``collection``; how many documents."""
        from qdrant_client import models

        count = sum(1 for _ in self._meta("document", collection))
        name = CHUNKS_PREFIX + collection
        if self.client.collection_exists(name):
            self.client.delete_collection(name)
        where = models.Filter(must=[
            models.FieldCondition(key="collection", match=models.MatchValue(value=collection))
        ])  # fmt: skip
        self.client.delete(META, models.FilterSelector(filter=where), wait=True)
        return count

    def stored_files(self, collection: str) -> dict[str, StoredFile]:
        return self._call(lambda: {
            d["path"]: StoredFile(d["document"], d["size"], d["mtime_ns"], d["sha256"])
            for d in self._meta("document", collection)
        })  # fmt: skip

    def replace_document(self, new: NewDocument) -> None:
        self._call(lambda: self._replace(new))

    def _replace(self, new: NewDocument) -> None:
        from qdrant_client import models

        dims = None if new.vectors is None else int(new.vectors.shape[1])
        name = self._chunks_collection(new.collection, dims)
        document = secrets.randbits(62)
        points = [
            models.PointStruct(
                id=_chunk_id(document, chunk.ordinal),
                vector=self._vectors(chunk.heading, chunk.text, new.vectors, index),
                payload={
                    "document": document,
                    "ordinal": chunk.ordinal,
                    "heading": chunk.heading,
                    "page": chunk.page,
                    "text": chunk.text,
                    "path": new.path,
                    "title": new.title,
                    "kind": new.kind,
                },
            )
            for index, chunk in enumerate(new.chunks)
        ]
        self.client.upsert(name, points, wait=True)
        self._put_meta(
            ("document", new.collection, new.path),
            {"type": "document", "collection": new.collection, "path": new.path,
             "kind": new.kind, "title": new.title, "size": new.size, "mtime_ns": new.mtime_ns,
             "sha256": new.sha256, "chunks": len(new.chunks), "indexed_at": time.time(),
             "document": document},
        )  # fmt: skip
        self.client.delete(META, [_point_id("skip", new.collection, new.path)], wait=True)
        where = models.Filter(
            must=[models.FieldCondition(key="path", match=models.MatchValue(value=new.path))],
            must_not=[
                models.FieldCondition(key="document", match=models.MatchValue(value=document))
            ],
        )
        self.client.delete(name, models.FilterSelector(filter=where), wait=True)
        self._bump(new.collection)

    @staticmethod
    def _vectors(
        heading: str | None, text: str, vectors: np.ndarray | None, index: int
    ) -> dict[str, Any]:
        from qdrant_client import models

        pairs = sparse.term_counts(f"{heading or ''}\n{text}")
        weights = sparse.saturated(
            pairs["count"], float(pairs["count"].sum()), sparse.TYPICAL_TERMS
        )
        found: dict[str, Any] = {
            SPARSE: models.SparseVector(indices=pairs["id"].tolist(), values=weights.tolist())
        }
        if vectors is not None:
            found[DENSE] = vectors[index].astype(np.float32).tolist()
        return found

    def touch_document(self, collection: str, path: str, mtime_ns: int) -> None:
        self._call(lambda: self.client.set_payload(
            META, {"mtime_ns": mtime_ns}, points=[_point_id("document", collection, path)],
            wait=True,
        ))  # fmt: skip

    def _forget(self, collection: str, path: str) -> bool:
        """Delete the chunks, entry and skip record of ``path``; whether it was indexed."""
        from qdrant_client import models

        held = self.client.retrieve(META, [_point_id("document", collection, path)])
        name = CHUNKS_PREFIX + collection
        if self.client.collection_exists(name):
            where = models.Filter(
                must=[models.FieldCondition(key="path", match=models.MatchValue(value=path))]
            )
            self.client.delete(name, models.FilterSelector(filter=where), wait=True)
        gone: list[Any] = [
            _point_id("document", collection, path),
            _point_id("skip", collection, path),
        ]
        self.client.delete(META, gone, wait=True)
        return bool(held)

    def remove_documents(self, collection: str, paths: Iterable[str]) -> int:
        def work() -> int:
            removed = 0
            for path in paths:
                if self._forget(collection, path):
                    self._bump(collection)
                    removed += 1
            return removed

        return self._call(work)

    def publish(self, collection: str) -> None:
        """Nothing to do: Qdrant searches what was written as soon as it is."""

    def remove_collection(self, collection: str) -> int:
        return self._call(lambda: self._drop(collection))

    def record_skip(self, collection: str, path: str, reason: SkipReason, detail: str) -> None:
        def work() -> None:
            if self._forget(collection, path):
                self._bump(collection)
            self._put_meta(
                ("skip", collection, path),
                {"type": "skip", "collection": collection, "path": path, "reason": reason,
                 "detail": detail, "at": time.time()},
            )  # fmt: skip

        self._call(work)

    # --- reading ---

    def collections(self) -> list[str]:
        return self._call(lambda: sorted(m["collection"] for m in self._meta("collection")))

    def documents(self, collection: str | None = None) -> list[DocumentRow]:
        rows = self._call(lambda: [
            DocumentRow(d["collection"], d["path"], d["kind"], d["title"], d["size"],
                        d["chunks"], d["indexed_at"])
            for d in self._meta("document", collection)
        ])  # fmt: skip
        return sorted(rows, key=lambda d: (d.collection, d.path))

    def skipped(self, collection: str | None = None) -> list[SkippedRow]:
        rows = self._call(lambda: [
            SkippedRow(s["collection"], s["path"], s["reason"], s["detail"], s["at"])
            for s in self._meta("skip", collection)
        ])  # fmt: skip
        return sorted(rows, key=lambda s: (s.collection, s.path))

    def collection_embedder(self, collection: str) -> tuple[bool, str | None]:
        meta = self._call(lambda: self._collection_meta(collection))
        return (meta is not None, None if meta is None else meta.get("embedder"))

    def generation(self, collection: str) -> int:
        meta = self._call(lambda: self._collection_meta(collection))
        return -1 if meta is None else int(meta.get("generation", 0))

    def search(
        self,
        collections: Sequence[str],
        text: str,
        query_vectors: dict[str, np.ndarray],
        max_documents: int,
        fusing: Fusing,
    ) -> list[DocumentMatch]:
        """Per collection one Qdrant query: the dense and the sparse prefetch fused by
        Qdrant's RRF, as seed 002 does (its own constant; a list weighted 0 is left out;
        ``corpus.rrf_k`` fuses the lists of several collections)."""
        if fusing.vector_weight <= 0:
            query_vectors = {}
        terms = sparse.query_term_ids(text)
        if fusing.keyword_weight <= 0 and query_vectors:
            terms = terms[:0]
        lists: list[list[int]] = []
        rows: dict[int, ChunkRow] = {}
        for collection in collections:
            points = self._call(
                functools.partial(
                    self._query,
                    collection,
                    terms,
                    query_vectors.get(collection),
                    fusing.candidates,
                )
            )
            lists.append([int(p.id) for p in points])
            rows.update((int(p.id), _row(collection, int(p.id), p.payload or {})) for p in points)
        fused = retrieval.rrf(lists, fusing.rrf_k)
        owners = {cid: (row.collection, row.document) for cid, row in rows.items()}
        return retrieval.documents_of(
            fused, owners, lambda _: rows, max_documents, fusing.chunks_summed
        )

    def _query(
        self, collection: str, terms: np.ndarray, vector: np.ndarray | None, limit: int
    ) -> list[Any]:
        from qdrant_client import models

        name = CHUNKS_PREFIX + collection
        if not self.client.collection_exists(name):
            return []
        keywords = models.SparseVector(indices=terms.tolist(), values=[1.0] * len(terms))
        has_dense = DENSE in (self.client.get_collection(name).config.params.vectors or {})
        if vector is None or not has_dense:
            if len(terms) == 0:
                return []
            found = self.client.query_points(
                name, query=keywords, using=SPARSE, limit=limit, with_payload=True
            )
            return list(found.points)
        prefetch = [models.Prefetch(query=vector.astype(np.float32).tolist(), using=DENSE,
                                    limit=limit)]  # fmt: skip
        if len(terms):
            prefetch.append(models.Prefetch(query=keywords, using=SPARSE, limit=limit))
        found = self.client.query_points(
            name, prefetch=prefetch, query=models.FusionQuery(fusion=models.Fusion.RRF),
            limit=limit, with_payload=True,
        )  # fmt: skip
        return list(found.points)

    def content(
        self, collections: Sequence[str], path: str, page: int | None, query: str, max_chars: int
    ) -> str | None:
        for collection in collections:
            chunks, best = self._call(functools.partial(self._document, collection, path, query))
            if chunks:
                centre = retrieval.centre_on_page(chunks, page, best)
                return retrieval.around(chunks, centre, max_chars)
        return None

    def _document(
        self, collection: str, path: str, query: str
    ) -> tuple[list[ChunkRow], int | None]:
        """The chunks of the document at ``path`` in order, and the ordinal of the one
        that best matches ``query`` by keywords."""
        from qdrant_client import models

        name = CHUNKS_PREFIX + collection
        if not self.client.collection_exists(name):
            return [], None
        where = models.Filter(
            must=[models.FieldCondition(key="path", match=models.MatchValue(value=path))]
        )
        chunks = [_row(collection, int(p.id), p.payload or {}) for p in self._scroll(name, where)]
        chunks.sort(key=lambda c: c.ordinal)
        terms = sparse.query_term_ids(query)
        if not chunks or len(terms) == 0:
            return chunks, None
        found = self.client.query_points(
            name, query=models.SparseVector(indices=terms.tolist(), values=[1.0] * len(terms)),
            using=SPARSE, query_filter=where, limit=1, with_payload=["ordinal"],
        ).points  # fmt: skip
        return chunks, (int((found[0].payload or {})["ordinal"]) if found else None)

    def close(self) -> None:
        with self._guard(), self._opening:
            if self._client is not None:
                self._client.close()
                self._client = None
                self._ready = False


def _row(collection: str, point: int, payload: dict[str, Any]) -> ChunkRow:
    return ChunkRow(
        point, int(payload["document"]), int(payload["ordinal"]), payload.get("heading"),
        payload.get("page"), payload["text"], payload["path"], payload["title"],
        payload["kind"], collection,
    )  # fmt: skip
