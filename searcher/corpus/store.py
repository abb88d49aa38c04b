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

from searcher.corpus.chunking import Chunk
from searcher.corpus.readers import Kind, SkipReason

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
    vector BLOB
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
            chunk_id = conn.execute(
                "INSERT INTO chunks (document, ordinal, heading, page, text, vector) "
                "VALUES (?, ?, ?, ?, ?, ?)",
                (doc_id, chunk.ordinal, chunk.heading, chunk.page, chunk.text,
                 None if vector is None else vector.tobytes()),
            ).lastrowid  # fmt: skip
            conn.execute(
                "INSERT INTO chunks_fts (rowid, text, heading, collection) VALUES (?, ?, ?, ?)",
                (chunk_id, chunk.text, chunk.heading or "", new.collection),
            )
        conn.execute(
            "DELETE FROM skipped WHERE collection = ? AND path = ?", (new.collection, new.path)
        )
        _bump(conn, new.collection)


def touch_document(conn: sqlite3.Connection, file_id: int, mtime_ns: int) -> None:
    """A file whose content did not change but whose mtime did: remember the new mtime,
    so the next run skips it without reading it."""
    with transaction(conn):
        conn.execute("UPDATE documents SET mtime_ns = ? WHERE id = ?", (mtime_ns, file_id))


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


def keyword_search(
    conn: sqlite3.Connection, collection: str, match: str, limit: int
) -> list[tuple[int, float]]:
    """``(chunk id, BM25 score)`` of the best ``limit`` chunks matching the FTS5 query
    ``match``, best first (FTS5's bm25() is lower for better: negated here)."""
    rows = conn.execute(
        "SELECT rowid, bm25(chunks_fts) AS s FROM chunks_fts "
        "WHERE chunks_fts MATCH ? AND collection = ? ORDER BY s LIMIT ?",
        (match, collection, limit),
    )
    return [(chunk_id, -score) for chunk_id, score in rows]


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
class VectorMatrix:
    """A collection's chunk vectors: ``ids[i]`` is the chunk of row ``i``."""

    generation: int
    ids: np.ndarray
    matrix: np.ndarray


def load_vectors(conn: sqlite3.Connection, collection: str) -> VectorMatrix:
    """Every vector of ``collection`` as one float32 matrix (read in one consistent
    snapshot with the generation it belongs to)."""
    conn.execute("BEGIN")
    try:
        gen = generation(conn, collection)
        rows = conn.execute(
            "SELECT c.id, c.vector FROM chunks c JOIN documents d ON d.id = c.document "
            "WHERE d.collection = ? AND c.vector IS NOT NULL ORDER BY c.id",
            (collection,),
        ).fetchall()
    finally:
        conn.execute("COMMIT")
    if not rows:
        return VectorMatrix(gen, np.zeros(0, dtype=np.int64), np.zeros((0, 0), dtype=np.float32))
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    matrix = np.frombuffer(b"".join(r[1] for r in rows), dtype=np.float32).reshape(len(rows), -1)
    return VectorMatrix(gen, ids, matrix)


class VectorCache:
    """Each collection's vector matrix, re-read when its generation changed; shared by the
    threads that search (a lock keeps one reload at a time)."""

    def __init__(self) -> None:
        self._matrices: dict[str, VectorMatrix] = {}
        self._lock = threading.Lock()

    def matrix(self, conn: sqlite3.Connection, collection: str) -> VectorMatrix:
        """The current vectors of ``collection``."""
        current = generation(conn, collection)
        with self._lock:
            cached = self._matrices.get(collection)
            if cached is None or cached.generation != current:
                cached = self._matrices[collection] = load_vectors(conn, collection)
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
