"""The embedded corpus index: one SQLite file (``corpus.sqlite3``) holding each collection's
documents, their chunks, an FTS5 index of the chunks (BM25) and each chunk's vector as a
float32 blob.

Vectors are searched by brute-force cosine over a matrix kept in memory per collection and
re-read only when the collection changed (a generation number each write bumps). Not
``sqlite-vec``: its ``vec0`` tables are a brute-force scan too, at 100,000 chunks of 256
dimensions one numpy product is a few milliseconds (``bench/corpus.py``), and it would
add a native extension that must load into every Python's sqlite3.

WAL mode: any number of readers (every ``serve`` worker) while one ``index add`` writes.
Each file is written in one transaction, so an interrupted run leaves every file either
as it was or fully indexed.
"""

from __future__ import annotations

import re
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from searcher.corpus import keyword_index, retrieval, sparse
from searcher.corpus.base import (
    ChunkRow,
    DocumentMatch,
    DocumentRow,
    Fusing,
    NewDocument,
    SkippedRow,
    StoredFile,
)
from searcher.corpus.keyword_index import KeywordIndex
from searcher.corpus.readers import SkipReason

__all__ = [
    "ChunkRow", "DocumentMatch", "DocumentRow", "NewDocument", "SkippedRow", "StoredFile",
]  # fmt: skip

FILE_NAME = "corpus.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS collections (
    name TEXT PRIMARY KEY,
    embedder TEXT,               -- the embedder of its vectors; NULL = none (BM25 only)
    generation INTEGER NOT NULL DEFAULT 0
);
CREATE TABLE IF NOT EXISTS documents (
    id INTEGER PRIMARY KEY,
    collection TEXT NOT NULL,
    path TEXT NOT NULL,
    kind TEXT NOT NULL,
    title TEXT NOT NULL,
    size INTEGER NOT NULL,
    mtime_ns INTEGER NOT NULL,
    sha256 TEXT NOT NULL,
    chunks INTEGER NOT NULL,
    indexed_at REAL NOT NULL,
    UNIQUE (collection, path)
);
CREATE TABLE IF NOT EXISTS chunks (
    id INTEGER PRIMARY KEY,
    document INTEGER NOT NULL REFERENCES documents(id) ON DELETE CASCADE,
    ordinal INTEGER NOT NULL,
    heading TEXT,
    page INTEGER,
    text TEXT NOT NULL,
    vector BLOB,
    terms BLOB                   -- its BM25 terms (sparse.term_counts), read by serving
);
CREATE INDEX IF NOT EXISTS chunks_by_document ON chunks (document, ordinal);
-- The collection beside the text: BM25 is filtered by it without a join (which doubled
-- the time of a query matching most chunks).
CREATE VIRTUAL TABLE IF NOT EXISTS chunks_fts USING fts5 (
    text, heading, collection UNINDEXED, tokenize = 'porter unicode61 remove_diacritics 2'
);
CREATE TABLE IF NOT EXISTS skipped (
    collection TEXT NOT NULL,
    path TEXT NOT NULL,
    reason TEXT NOT NULL,
    detail TEXT NOT NULL,
    at REAL NOT NULL,
    PRIMARY KEY (collection, path)
);
"""


def connect(path: Path, busy_timeout_ms: int = 5000) -> sqlite3.Connection:
    """A connection to the index at ``path`` (created with its schema if new), in WAL
    mode; ``isolation_level=None``: transactions are explicit (``transaction``)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
    conn.execute("PRAGMA journal_mode = WAL")
    conn.execute("PRAGMA synchronous = NORMAL")
    conn.execute("PRAGMA foreign_keys = ON")
    conn.executescript(_SCHEMA)
    columns = {row[1] for row in conn.execute("PRAGMA table_info(chunks)")}
    if "terms" not in columns:  # an index written before BM25 moved to memory
        conn.execute("ALTER TABLE chunks ADD COLUMN terms BLOB")
    return conn


@contextmanager
def transaction(conn: sqlite3.Connection) -> Iterator[None]:
    """One write transaction: committed when the block ends, rolled back on any exception
    (Ctrl-C included), so nothing is ever half-written."""
    conn.execute("BEGIN IMMEDIATE")
    try:
        yield
    except BaseException:
        conn.execute("ROLLBACK")
        raise
    conn.execute("COMMIT")


# --- writing (the indexer) -----------------------------------------------------------


def stored_files(conn: sqlite3.Connection, collection: str) -> dict[str, StoredFile]:
    """Every indexed file of ``collection``, by path."""
    rows = conn.execute(
        "SELECT path, id, size, mtime_ns, sha256 FROM documents WHERE collection = ?",
        (collection,),
    )
    return {path: StoredFile(id_, size, mtime, digest) for path, id_, size, mtime, digest in rows}


def ensure_collection(conn: sqlite3.Connection, collection: str, embedder: str | None) -> None:
    """Create ``collection`` if new. Its vectors must all come from one embedder: when
    ``embedder`` differs from the one it was indexed with, every document is dropped so
    that the run indexes them again."""
    row = conn.execute("SELECT embedder FROM collections WHERE name = ?", (collection,)).fetchone()
    if row is not None and row[0] == embedder:
        return
    with transaction(conn):
        if row is not None:
            for (doc_id,) in conn.execute(
                "SELECT id FROM documents WHERE collection = ?", (collection,)
            ).fetchall():
                _delete_document(conn, doc_id)
        conn.execute(
            "INSERT INTO collections (name, embedder) VALUES (?, ?) "
            "ON CONFLICT (name) DO UPDATE SET embedder = excluded.embedder, "
            "generation = generation + 1",
            (collection, embedder),
        )


def replace_document(conn: sqlite3.Connection, new: NewDocument) -> None:
    """Index ``new`` in place of what the index held for its path, in one transaction."""
    now = time.time()
    with transaction(conn):
        old = conn.execute(
            "SELECT id FROM documents WHERE collection = ? AND path = ?",
            (new.collection, new.path),
        ).fetchone()
        if old is not None:
            _delete_document(conn, old[0])
        doc_id = conn.execute(
            "INSERT INTO documents (collection, path, kind, title, size, mtime_ns, sha256, "
            "chunks, indexed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (new.collection, new.path, new.kind, new.title, new.size, new.mtime_ns,
             new.sha256, len(new.chunks), now),
        ).lastrowid  # fmt: skip
        for index, chunk in enumerate(new.chunks):
            vector = None if new.vectors is None else new.vectors[index].astype(np.float32)
            terms = sparse.term_counts(f"{chunk.heading or ''}\n{chunk.text}")
            chunk_id = conn.execute(
                "INSERT INTO chunks (document, ordinal, heading, page, text, vector, terms) "
                "VALUES (?, ?, ?, ?, ?, ?, ?)",
                (doc_id, chunk.ordinal, chunk.heading, chunk.page, chunk.text,
                 None if vector is None else vector.tobytes(), terms.tobytes()),
            ).lastrowid  # fmt: skip
            conn.execute(
                "INSERT INTO chunks_fts (rowid, text, heading, collection) VALUES (?, ?, ?, ?)",
                (chunk_id, chunk.text, chunk.heading or "", new.collection),
            )
        conn.execute(
            "DELETE FROM skipped WHERE collection = ? AND path = ?", (new.collection, new.path)
        )
        _bump(conn, new.collection)


def touch_document(conn: sqlite3.Connection, collection: str, path: str, mtime_ns: int) -> None:
    """A file whose content did not change but whose mtime did: remember the new mtime,
    so the next run skips it without reading it."""
    with transaction(conn):
        conn.execute(
            "UPDATE documents SET mtime_ns = ? WHERE collection = ? AND path = ?",
            (mtime_ns, collection, path),
        )


def remove_documents(conn: sqlite3.Connection, collection: str, paths: Iterable[str]) -> int:
    """Drop the documents (and skip records) of ``paths``, each in its own transaction;
    how many documents were dropped."""
    removed = 0
    for path in paths:
        with transaction(conn):
            row = conn.execute(
                "SELECT id FROM documents WHERE collection = ? AND path = ?", (collection, path)
            ).fetchone()
            conn.execute(
                "DELETE FROM skipped WHERE collection = ? AND path = ?", (collection, path)
            )
            if row is not None:
                _delete_document(conn, row[0])
                _bump(conn, collection)
                removed += 1
    return removed


def remove_collection(conn: sqlite3.Connection, collection: str) -> int:
    """Drop ``collection`` entirely, in one transaction; how many documents it had."""
    with transaction(conn):
        ids = [
            r[0]
            for r in conn.execute("SELECT id FROM documents WHERE collection = ?", (collection,))
        ]
        for doc_id in ids:
            _delete_document(conn, doc_id)
        conn.execute("DELETE FROM skipped WHERE collection = ?", (collection,))
        conn.execute("DELETE FROM collections WHERE name = ?", (collection,))
    return len(ids)


def record_skip(
    conn: sqlite3.Connection, collection: str, path: str, reason: SkipReason, detail: str
) -> None:
    """Remember why ``path`` is not indexed; a document it was before is dropped."""
    with transaction(conn):
        row = conn.execute(
            "SELECT id FROM documents WHERE collection = ? AND path = ?", (collection, path)
        ).fetchone()
        if row is not None:
            _delete_document(conn, row[0])
            _bump(conn, collection)
        conn.execute(
            "INSERT OR REPLACE INTO skipped (collection, path, reason, detail, at) "
            "VALUES (?, ?, ?, ?, ?)",
            (collection, path, reason, detail, time.time()),
        )


def _delete_document(conn: sqlite3.Connection, doc_id: int) -> None:
    conn.execute(
        "DELETE FROM chunks_fts WHERE rowid IN (SELECT id FROM chunks WHERE document = ?)",
        (doc_id,),
    )
    conn.execute("DELETE FROM chunks WHERE document = ?", (doc_id,))
    conn.execute("DELETE FROM documents WHERE id = ?", (doc_id,))


def _bump(conn: sqlite3.Connection, collection: str) -> None:
    conn.execute("UPDATE collections SET generation = generation + 1 WHERE name = ?", (collection,))


# --- reading (status and search) -----------------------------------------------------


def collections(conn: sqlite3.Connection) -> list[str]:
    """The names of the collections, sorted."""
    return [r[0] for r in conn.execute("SELECT name FROM collections ORDER BY name")]


def documents(conn: sqlite3.Connection, collection: str | None = None) -> list[DocumentRow]:
    """Indexed documents (of ``collection``, or all), by collection and path."""
    where, args = ("WHERE collection = ?", (collection,)) if collection else ("", ())
    rows = conn.execute(
        "SELECT collection, path, kind, title, size, chunks, indexed_at FROM documents "
        f"{where} ORDER BY collection, path",
        args,
    )
    return [DocumentRow(*row) for row in rows]


def skipped(conn: sqlite3.Connection, collection: str | None = None) -> list[SkippedRow]:
    """Skipped files (of ``collection``, or all) with their reasons."""
    where, args = ("WHERE collection = ?", (collection,)) if collection else ("", ())
    rows = conn.execute(
        f"SELECT collection, path, reason, detail, at FROM skipped {where} "
        "ORDER BY collection, path",
        args,
    )
    return [SkippedRow(*row) for row in rows]


def collection_embedder(conn: sqlite3.Connection, collection: str) -> tuple[bool, str | None]:
    """Whether ``collection`` exists, and the embedder of its vectors."""
    row = conn.execute("SELECT embedder FROM collections WHERE name = ?", (collection,)).fetchone()
    return (row is not None, None if row is None else row[0])


def generation(conn: sqlite3.Connection, collection: str) -> int:
    row = conn.execute(
        "SELECT generation FROM collections WHERE name = ?", (collection,)
    ).fetchone()
    return -1 if row is None else int(row[0])


_CHUNK_COLUMNS = (
    "c.id, c.document, c.ordinal, c.heading, c.page, c.text, d.path, d.title, d.kind, d.collection"
)


def chunks_by_id(conn: sqlite3.Connection, ids: Sequence[int]) -> dict[int, ChunkRow]:
    """The chunks of ``ids`` with their documents."""
    if not ids:
        return {}
    marks = ",".join("?" * len(ids))
    rows = conn.execute(
        f"SELECT {_CHUNK_COLUMNS} FROM chunks c JOIN documents d ON d.id = c.document "
        f"WHERE c.id IN ({marks})",
        tuple(ids),
    )
    return {row[0]: ChunkRow(*row) for row in rows}


def document_chunks(
    conn: sqlite3.Connection, collections_: Sequence[str], path: str
) -> list[ChunkRow]:
    """Every chunk of the document at ``path`` in one of ``collections_``, in order."""
    marks = ",".join("?" * len(collections_))
    rows = conn.execute(
        f"SELECT {_CHUNK_COLUMNS} FROM chunks c JOIN documents d ON d.id = c.document "
        f"WHERE d.path = ? AND d.collection IN ({marks}) ORDER BY d.collection, c.ordinal",
        (path, *collections_),
    )
    return [ChunkRow(*row) for row in rows]


def best_in_document(conn: sqlite3.Connection, document: int, match: str) -> int | None:
    """The ordinal of the chunk of ``document`` that best matches ``match``, or None."""
    row = conn.execute(
        "SELECT c.ordinal FROM chunks_fts f JOIN chunks c ON c.id = f.rowid "
        "WHERE chunks_fts MATCH ? AND c.document = ? ORDER BY bm25(chunks_fts) LIMIT 1",
        (match, document),
    ).fetchone()
    return None if row is None else int(row[0])


@dataclass(frozen=True)
class CollectionIndex:
    """A collection's chunks as serving searches them: ``ids[i]`` is the chunk of row
    ``i`` of the vector ``matrix`` and of the ``keywords`` postings; ``generation`` says
    which state of the collection they are."""

    generation: int
    ids: np.ndarray
    documents: np.ndarray  # the document of each row
    matrix: np.ndarray
    keywords: KeywordIndex
    signs: retrieval.SignBits | None = None  # a large matrix's first pass

    @property
    def nbytes(self) -> int:
        signs = self.signs.nbytes if self.signs is not None else 0
        held = self.ids.nbytes + self.documents.nbytes + self.matrix.nbytes
        return int(held + self.keywords.nbytes + signs)


def load_index(conn: sqlite3.Connection, collection: str) -> CollectionIndex:
    """Every chunk's vector and terms of ``collection``, read in one consistent snapshot
    with the generation it belongs to."""
    conn.execute("BEGIN")
    try:
        gen = generation(conn, collection)
        rows = conn.execute(
            "SELECT c.id, c.vector, c.terms, c.document, "
            "CASE WHEN c.terms IS NULL THEN coalesce(c.heading, '') || char(10) || c.text END "
            "FROM chunks c JOIN documents d ON d.id = c.document "
            "WHERE d.collection = ? ORDER BY c.id",
            (collection,),
        ).fetchall()
    finally:
        conn.execute("COMMIT")
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    blobs = [r[2] if r[2] is not None else sparse.term_counts(r[4]).tobytes() for r in rows]
    documents = np.fromiter((r[3] for r in rows), dtype=np.int64, count=len(rows))
    with_vectors = [r[1] for r in rows if r[1] is not None]
    if rows and len(with_vectors) == len(rows):
        matrix = np.frombuffer(b"".join(with_vectors), dtype=np.float32).reshape(len(rows), -1)
    else:  # keywords only (a collection indexed without an embedder)
        matrix = np.zeros((0, 0), dtype=np.float32)
    keywords = keyword_index.build(blobs)
    return CollectionIndex(gen, ids, documents, matrix, keywords, retrieval.SignBits.of(matrix))


class IndexCache:
    """Each collection's ``CollectionIndex``, read again when its generation changed;
    shared by the threads that search (a lock keeps one reload at a time)."""

    def __init__(self) -> None:
        self._indexes: dict[str, CollectionIndex] = {}
        self._lock = threading.Lock()

    def index(self, conn: sqlite3.Connection, collection: str) -> CollectionIndex:
        """The current index of ``collection``."""
        current = generation(conn, collection)
        with self._lock:
            cached = self._indexes.get(collection)
            if cached is None or cached.generation != current:
                cached = self._indexes[collection] = load_index(conn, collection)
            return cached


_COLLECTION_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,63}")


def check_collection_name(name: str) -> str:
    """``name`` if it can name a collection (letters, digits, ``_ . -``; at most 64);
    raises ``ValueError`` saying what is allowed."""
    if not _COLLECTION_NAME.fullmatch(name):
        raise ValueError(
            f"{name!r} is not a collection name (letters, digits, '_', '.', '-'; "
            "starting with a letter or digit; at most 64)"
        )
    return name


class SqliteStore:
    """The embedded store (``CorpusStore``) on the SQLite file at ``path``: each thread on
    its own connection (WAL: readers never wait for the writer), sharing one
    ``IndexCache`` of the collections' vectors and keyword postings."""

    def __init__(self, path: Path, busy_timeout_ms: int = 5000) -> None:
        self.path = path
        self._busy_timeout_ms = busy_timeout_ms
        self._indexes = IndexCache()
        self._local = threading.local()
        self._opened: list[sqlite3.Connection] = []
        self._lock = threading.Lock()

    def conn(self) -> sqlite3.Connection:
        """This thread's connection (opened, and the schema created, on first use)."""
        conn: sqlite3.Connection | None = getattr(self._local, "conn", None)
        if conn is None:
            conn = self._local.conn = connect(self.path, self._busy_timeout_ms)
            with self._lock:
                self._opened.append(conn)
        return conn

    def ensure_collection(self, collection: str, embedder: str | None) -> None:
        ensure_collection(self.conn(), collection, embedder)

    def stored_files(self, collection: str) -> dict[str, StoredFile]:
        return stored_files(self.conn(), collection)

    def replace_document(self, new: NewDocument) -> None:
        replace_document(self.conn(), new)

    def touch_document(self, collection: str, path: str, mtime_ns: int) -> None:
        touch_document(self.conn(), collection, path, mtime_ns)

    def remove_documents(self, collection: str, paths: Iterable[str]) -> int:
        return remove_documents(self.conn(), collection, paths)

    def remove_collection(self, collection: str) -> int:
        return remove_collection(self.conn(), collection)

    def record_skip(self, collection: str, path: str, reason: SkipReason, detail: str) -> None:
        record_skip(self.conn(), collection, path, reason, detail)

    def collections(self) -> list[str]:
        return collections(self.conn())

    def documents(self, collection: str | None = None) -> list[DocumentRow]:
        return documents(self.conn(), collection)

    def skipped(self, collection: str | None = None) -> list[SkippedRow]:
        return skipped(self.conn(), collection)

    def collection_embedder(self, collection: str) -> tuple[bool, str | None]:
        return collection_embedder(self.conn(), collection)

    def generation(self, collection: str) -> int:
        return generation(self.conn(), collection)

    def index(self, collection: str) -> CollectionIndex:
        """The in-memory index serving searches ``collection`` with (current generation)."""
        return self._indexes.index(self.conn(), collection)

    def search(
        self,
        collections: Sequence[str],
        text: str,
        query_vectors: dict[str, np.ndarray],
        max_documents: int,
        fusing: Fusing,
    ) -> list[DocumentMatch]:
        """Per collection the best chunks by BM25 (in memory, ``keyword_index``) and by
        cosine, all lists fused as ``fusing`` says, grouped by document."""
        keyword_weight = fusing.keyword_weight
        if keyword_weight <= 0 and not query_vectors:
            keyword_weight = 1.0  # no vectors to search instead: keywords, whatever the weight
        terms = sparse.query_term_ids(text)
        lists: list[list[tuple[int, float]]] = []
        weights: list[float] = []
        owners_of: list[tuple[str, CollectionIndex, list[tuple[int, float]]]] = []
        for collection in collections:
            index = self.index(collection)
            if keyword_weight > 0:
                rows, scores = keyword_index.search(index.keywords, terms, fusing.candidates)
                lists.append(list(zip(index.ids[rows].tolist(), scores.tolist(), strict=True)))
                weights.append(keyword_weight)
            vector = query_vectors.get(collection) if fusing.vector_weight > 0 else None
            if vector is not None:
                lists.append(retrieval.vector_scores(
                    index.ids, index.matrix, vector, fusing.candidates, index.signs
                ))  # fmt: skip
                weights.append(fusing.vector_weight)
            for ranked in lists[len(owners_of) :]:
                owners_of.append((collection, index, ranked))
        fused = retrieval.fuse(lists, weights, fusing)
        owners: dict[int, tuple[str, int]] = {}
        for collection, index, ranked in owners_of:
            ids = np.fromiter((cid for cid, _ in ranked), dtype=np.int64, count=len(ranked))
            documents = index.documents[np.searchsorted(index.ids, ids)]
            owners.update(
                zip(ids.tolist(), [(collection, d) for d in documents.tolist()], strict=True)
            )
        return retrieval.documents_of(
            fused, owners, lambda ids: chunks_by_id(self.conn(), ids), max_documents,
            fusing.chunks_summed,
        )  # fmt: skip

    def content(
        self, collections: Sequence[str], path: str, page: int | None, query: str, max_chars: int
    ) -> str | None:
        chunks = document_chunks(self.conn(), collections, path)
        if not chunks:
            return None
        first = chunks[0]
        chunks = [c for c in chunks if c.collection == first.collection]
        match = retrieval.fts_query(query)
        best = best_in_document(self.conn(), first.document, match) if match else None
        return retrieval.around(chunks, retrieval.centre_on_page(chunks, page, best), max_chars)

    def close(self) -> None:
        """Close every thread's connection."""
        with self._lock:
            for conn in self._opened:
                conn.close()
            self._opened.clear()
