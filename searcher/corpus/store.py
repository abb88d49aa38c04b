"""The embedded corpus index: one SQLite file (``corpus.sqlite3``) holding each collection's
documents, their chunks, an FTS5 index of the chunks (BM25) and each chunk's vector as a
float32 blob.

Vectors and BM25 postings are searched in numpy over each collection's snapshot, arrays
memory-mapped from files beside the index (``snapshot``), with the chunks a write changed
since laid over it in memory (``live_index``): after a write a reader reads only what the
write changed (chunks carry the generation that wrote them; removed chunk ids are logged
in ``removed_chunks``). Generations come from one sequence, so a collection dropped and
made again never repeats one. Not
``sqlite-vec``: its ``vec0`` tables are a brute-force scan too, at 100,000 chunks of 256
dimensions one numpy product is a few milliseconds (``bench/corpus.py``), and it would
add a native extension that must load into every Python's sqlite3.

WAL mode: any number of readers (every ``serve`` worker) while one ``index add`` writes.
Each file is written in one transaction, so an interrupted run leaves every file either
as it was or fully indexed.
"""

from __future__ import annotations

import logging
import re
import shutil
import sqlite3
import threading
import time
from collections.abc import Iterable, Iterator, Sequence
from contextlib import contextmanager
from pathlib import Path

import numpy as np

from searcher.corpus import keyword_index, live_index, retrieval, snapshot, sparse
from searcher.corpus.base import (
    ChunkRow,
    DocumentMatch,
    DocumentRow,
    Fusing,
    NewDocument,
    SkippedRow,
    StoredFile,
)
from searcher.corpus.live_index import Changes, LiveIndex
from searcher.corpus.readers import SkipReason
from searcher.corpus.snapshot import Snapshot
from searcher.errors import StateUnavailable

log = logging.getLogger(__name__)

__all__ = [
    "ChunkRow", "DocumentMatch", "DocumentRow", "NewDocument", "SkippedRow", "StoredFile",
]  # fmt: skip

FILE_NAME = "corpus.sqlite3"

_SCHEMA = """
CREATE TABLE IF NOT EXISTS collections (
    name TEXT PRIMARY KEY,
    embedder TEXT,               -- the embedder of its vectors; NULL = none (BM25 only)
    generation INTEGER NOT NULL DEFAULT 0,
    created INTEGER NOT NULL DEFAULT 0  -- its first generation: older snapshots are not its
);
-- The last generation given to any collection (one row).
CREATE TABLE IF NOT EXISTS sequence (id INTEGER PRIMARY KEY CHECK (id = 0), generation INTEGER);
-- Chunks dropped, by the generation that dropped them: what readers take out of their
-- snapshot when they catch up.
CREATE TABLE IF NOT EXISTS removed_chunks (
    collection TEXT NOT NULL,
    chunk INTEGER NOT NULL,
    generation INTEGER NOT NULL
);
CREATE INDEX IF NOT EXISTS removed_chunks_by_generation ON removed_chunks (collection, generation);
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
    terms BLOB,                  -- its BM25 terms (sparse.term_counts), read by serving
    generation INTEGER           -- the generation that wrote it
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
    mode; ``isolation_level=None``: transactions are explicit (``transaction``).
    ``StateUnavailable`` when its folder or file cannot be used (a file where the folder
    should be, no permission, not an SQLite file)."""
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        conn = sqlite3.connect(path, isolation_level=None, check_same_thread=False)
    except (OSError, sqlite3.Error) as exc:
        raise StateUnavailable(f"cannot use the corpus index {path}: {exc}") from exc
    try:
        conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_ms)}")
        conn.execute("PRAGMA journal_mode = WAL")
        conn.execute("PRAGMA synchronous = NORMAL")
        conn.execute("PRAGMA foreign_keys = ON")
        conn.executescript(_SCHEMA)
        _upgrade(conn)
    except sqlite3.Error as exc:
        conn.close()
        raise StateUnavailable(f"cannot use the corpus index {path}: {exc}") from exc
    return conn


def _upgrade(conn: sqlite3.Connection) -> None:
    """Columns an index written by an earlier version lacks, and the sequence's row."""
    columns = {row[1] for row in conn.execute("PRAGMA table_info(chunks)")}
    if "terms" not in columns:  # an index written before BM25 moved to memory
        conn.execute("ALTER TABLE chunks ADD COLUMN terms BLOB")
    if "generation" not in columns:  # before readers caught up incrementally
        conn.execute("ALTER TABLE chunks ADD COLUMN generation INTEGER")
    if "created" not in {row[1] for row in conn.execute("PRAGMA table_info(collections)")}:
        conn.execute("ALTER TABLE collections ADD COLUMN created INTEGER NOT NULL DEFAULT 0")
    conn.execute("CREATE INDEX IF NOT EXISTS chunks_by_generation ON chunks (generation)")
    if conn.execute("SELECT 1 FROM sequence").fetchone() is None:
        conn.execute(
            "INSERT OR IGNORE INTO sequence (id, generation) "
            "SELECT 0, coalesce(max(generation), 0) FROM collections"
        )


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
        if row is None:
            conn.execute(
                "INSERT INTO collections (name, embedder) VALUES (?, ?)", (collection, embedder)
            )
            created = _bump(conn, collection)
            conn.execute("UPDATE collections SET created = ? WHERE name = ?", (created, collection))
            return
        gen = _bump(conn, collection)
        for (doc_id,) in conn.execute(
            "SELECT id FROM documents WHERE collection = ?", (collection,)
        ).fetchall():
            _delete_document(conn, doc_id, collection, gen)
        conn.execute("UPDATE collections SET embedder = ? WHERE name = ?", (embedder, collection))


def replace_document(conn: sqlite3.Connection, new: NewDocument) -> None:
    """Index ``new`` in place of what the index held for its path, in one transaction."""
    now = time.time()
    with transaction(conn):
        old = conn.execute(
            "SELECT id FROM documents WHERE collection = ? AND path = ?",
            (new.collection, new.path),
        ).fetchone()
        gen = _bump(conn, new.collection)
        if old is not None:
            _delete_document(conn, old[0], new.collection, gen)
        doc_id = conn.execute(
            "INSERT INTO documents (collection, path, kind, title, size, mtime_ns, sha256, "
            "chunks, indexed_at) VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?)",
            (new.collection, new.path, new.kind, new.title, new.size, new.mtime_ns,
             new.sha256, len(new.chunks), now),
        ).lastrowid  # fmt: skip
        vectors = None if new.vectors is None else new.vectors.astype(np.float32)
        # Two statements for all the chunks, not two a chunk: SQLite's round trips were
        # a fifth of indexing a typical file.
        conn.executemany(
            "INSERT INTO chunks (document, ordinal, heading, page, text, vector, terms, "
            "generation) VALUES (?, ?, ?, ?, ?, ?, ?, ?)",
            [(doc_id, chunk.ordinal, chunk.heading, chunk.page, chunk.text,
              None if vectors is None else vectors[index].tobytes(),
              sparse.term_counts(f"{chunk.heading or ''}\n{chunk.text}").tobytes(), gen)
             for index, chunk in enumerate(new.chunks)],
        )  # fmt: skip
        conn.execute(
            "INSERT INTO chunks_fts (rowid, text, heading, collection) "
            "SELECT id, text, coalesce(heading, ''), ? FROM chunks WHERE document = ? "
            "ORDER BY id",
            (new.collection, doc_id),
        )
        conn.execute(
            "DELETE FROM skipped WHERE collection = ? AND path = ?", (new.collection, new.path)
        )


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
                _delete_document(conn, row[0], collection, _bump(conn, collection))
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
        conn.execute("DELETE FROM removed_chunks WHERE collection = ?", (collection,))
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
            _delete_document(conn, row[0], collection, _bump(conn, collection))
        conn.execute(
            "INSERT OR REPLACE INTO skipped (collection, path, reason, detail, at) "
            "VALUES (?, ?, ?, ?, ?)",
            (collection, path, reason, detail, time.time()),
        )


def _delete_document(
    conn: sqlite3.Connection, doc_id: int, collection: str | None = None, gen: int = 0
) -> None:
    """Drop a document and its chunks; with ``collection``, log the chunks as removed by
    generation ``gen`` (readers catching up take them out)."""
    if collection is not None:
        conn.execute(
            "INSERT INTO removed_chunks (collection, chunk, generation) "
            "SELECT ?, id, ? FROM chunks WHERE document = ?",
            (collection, gen, doc_id),
        )
    conn.execute(
        "DELETE FROM chunks_fts WHERE rowid IN (SELECT id FROM chunks WHERE document = ?)",
        (doc_id,),
    )
    conn.execute("DELETE FROM chunks WHERE document = ?", (doc_id,))
    conn.execute("DELETE FROM documents WHERE id = ?", (doc_id,))


def _bump(conn: sqlite3.Connection, collection: str) -> int:
    """Give ``collection`` the sequence's next generation (inside a write transaction);
    returns it."""
    conn.execute("UPDATE sequence SET generation = generation + 1 WHERE id = 0")
    (gen,) = conn.execute("SELECT generation FROM sequence WHERE id = 0").fetchone()
    conn.execute("UPDATE collections SET generation = ? WHERE name = ?", (gen, collection))
    return int(gen)


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


def _state(conn: sqlite3.Connection, collection: str) -> tuple[int, int]:
    """(generation, created) of ``collection``; (-1, -1) for one that does not exist."""
    row = conn.execute(
        "SELECT generation, created FROM collections WHERE name = ?", (collection,)
    ).fetchone()
    return (-1, -1) if row is None else (int(row[0]), int(row[1]))


def _chunk_arrays(
    rows: list[tuple[int, bytes | None, bytes | None, int, str | None]],
) -> tuple[np.ndarray, np.ndarray, np.ndarray | None, tuple[bytes, ...]]:
    """Rows of (id, vector, terms, document, text when no terms) as ids, documents, the
    vector matrix (``None`` unless every chunk has one) and the stored terms."""
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    blobs = tuple(r[2] if r[2] is not None else sparse.term_counts(r[4] or "").tobytes()
                  for r in rows)  # fmt: skip
    documents = np.fromiter((r[3] for r in rows), dtype=np.int64, count=len(rows))
    with_vectors = [r[1] for r in rows if r[1] is not None]
    matrix = None
    if rows and len(with_vectors) == len(rows):
        matrix = np.frombuffer(b"".join(with_vectors), dtype=np.float32).reshape(len(rows), -1)
    return ids, documents, matrix, blobs


_CHUNK_COLUMNS_READ = (
    "SELECT c.id, c.vector, c.terms, c.document, "
    "CASE WHEN c.terms IS NULL THEN coalesce(c.heading, '') || char(10) || c.text END "
)
_CHUNK_DATA = (
    _CHUNK_COLUMNS_READ + "FROM chunks c JOIN documents d ON d.id = c.document "
    "WHERE d.collection = ? "
)
# The chunks a generation after ``since`` wrote, found by their generation first (CROSS
# JOIN keeps that order): by document first, SQLite reads every chunk of the collection.
_CHUNKS_SINCE = (
    _CHUNK_COLUMNS_READ + "FROM chunks c CROSS JOIN documents d ON d.id = c.document "
    "WHERE c.generation > ? AND d.collection = ? "
)


def load_index(conn: sqlite3.Connection, collection: str) -> Snapshot:
    """Every chunk's vector and terms of ``collection``, read in one consistent snapshot
    with the generation it belongs to."""
    conn.execute("BEGIN")
    try:
        gen = generation(conn, collection)
        rows = conn.execute(_CHUNK_DATA + "ORDER BY c.id", (collection,)).fetchall()
    finally:
        conn.execute("COMMIT")
    ids, documents, matrix, blobs = _chunk_arrays(rows)
    if matrix is None:  # keywords only (a collection indexed without an embedder)
        matrix = np.zeros((0, 0), dtype=np.float32)
    keywords = keyword_index.build(blobs)
    return Snapshot(gen, ids, documents, matrix, keywords, retrieval.SignBits.of(matrix))


def changes_since(conn: sqlite3.Connection, collection: str, since: int) -> Changes:
    """What the writes to ``collection`` after generation ``since`` did, read in one
    consistent snapshot: chunks removed, chunks added."""
    conn.execute("BEGIN")
    try:
        gen = generation(conn, collection)
        removed = [r[0] for r in conn.execute(
            "SELECT chunk FROM removed_chunks WHERE collection = ? AND generation > ?",
            (collection, since),
        )]  # fmt: skip
        # Sorted here: an ORDER BY makes SQLite walk the chunks by id, all of them.
        rows = sorted(conn.execute(_CHUNKS_SINCE, (since, collection)), key=lambda r: r[0])
    finally:
        conn.execute("COMMIT")
    ids, documents, matrix, blobs = _chunk_arrays(rows)
    return Changes(gen, np.asarray(removed, dtype=np.int64), ids, documents, matrix, blobs)


def changed_since(conn: sqlite3.Connection, collection: str, since: int) -> int:
    """How many chunks of ``collection`` were added or removed after generation ``since``."""
    (added,) = conn.execute(
        "SELECT count(*) FROM chunks c CROSS JOIN documents d ON d.id = c.document "
        "WHERE c.generation > ? AND d.collection = ?",
        (since, collection),
    ).fetchone()
    (removed,) = conn.execute(
        "SELECT count(*) FROM removed_chunks WHERE collection = ? AND generation > ?",
        (collection, since),
    ).fetchone()
    return int(added) + int(removed)


# A new snapshot is written when this many chunks changed since the last one (at least
# SNAPSHOT_AFTER_MIN): what each reader holds in memory and reads again on a write stays
# small beside the collection.
SNAPSHOT_AFTER_SHARE = 0.1
SNAPSHOT_AFTER_MIN = 5_000


def snapshot_due(changed: int, size: int, at_least: int = SNAPSHOT_AFTER_MIN) -> bool:
    """Whether ``changed`` chunks since a snapshot of ``size`` call for a new one."""
    return changed >= max(at_least, int(size * SNAPSHOT_AFTER_SHARE))


def _empty_snapshot(gen: int) -> Snapshot:
    none = np.zeros(0, dtype=np.int64)
    matrix = np.zeros((0, 0), dtype=np.float32)
    return Snapshot(gen, none, none, matrix, keyword_index.build([]))


class IndexCache:
    """Each collection's ``LiveIndex`` for the threads that search: its newest snapshot
    (mapped from ``folder``/COLLECTION, written when there is none) with the changes
    since read on each new generation. When the changes grow large, a new snapshot is
    written in the background (one writer across workers) and taken up once there."""

    def __init__(self, folder: Path, database: Path, snapshot_after: int) -> None:
        self.folder = folder
        self.snapshot_after = snapshot_after
        self._database = database
        self._live: dict[str, LiveIndex] = {}
        self._lock = threading.Lock()
        self._building: set[str] = set()

    def index(self, conn: sqlite3.Connection, collection: str) -> LiveIndex:
        """The current index of ``collection``."""
        current, created = _state(conn, collection)
        with self._lock:
            live = self._live.get(collection)
            if live is None or live.generation != current:
                live = self._live[collection] = self._caught_up(conn, collection, live, created)
        if live.changed and snapshot_due(
            live.changed, live.base.keywords.size, self.snapshot_after
        ):
            self._build_in_background(collection)
        return live

    def _caught_up(
        self, conn: sqlite3.Connection, collection: str, live: LiveIndex | None, created: int
    ) -> LiveIndex:
        if created < 0:
            return live_index.over(_empty_snapshot(-1))
        found = snapshot.newest(self.folder / collection)
        if found is not None and found[0] < created:  # a dropped collection's
            found = None
        if (
            live is None
            or live.base.generation < created
            or (found is not None and found[0] > live.base.generation)
        ):
            live = live_index.over(self._base(conn, collection, found))
        try:
            return live_index.applied(live, changes_since(conn, collection, live.generation))
        except live_index.NeedsSnapshot:
            return live_index.over(self._base(conn, collection, None))

    def _base(
        self, conn: sqlite3.Connection, collection: str, found: tuple[int, Path] | None
    ) -> Snapshot:
        for _ in range(2):
            if found is None:
                break
            try:
                return snapshot.mapped(found[1])
            except FileNotFoundError:  # replaced by a newer one meanwhile: take that
                found = snapshot.newest(self.folder / collection)
            except snapshot.Damaged as exc:  # the database counts: written again from it
                log.warning("collection %r: %s; reading it again", collection, exc)
                snapshot.discard(found[1])
                break
        read = load_index(conn, collection)
        try:
            return snapshot.mapped(snapshot.write(self.folder / collection, read))
        except (OSError, snapshot.Damaged):  # a read-only state directory: serve from memory
            return read

    def _build_in_background(self, collection: str) -> None:
        with self._lock:
            if collection in self._building:
                return
            self._building.add(collection)
        threading.Thread(
            target=self._build, args=(collection,), name=f"snapshot-{collection}", daemon=True
        ).start()

    def _build(self, collection: str) -> None:
        written = False
        try:
            written = publish(self._database, self.folder, collection, self.snapshot_after)
        finally:
            with self._lock:
                self._building.discard(collection)
                if written:  # the next query maps it, with no write needed to notice
                    self._live.pop(collection, None)


def _forget_removed(conn: sqlite3.Connection, collection: str, through: int) -> None:
    """Drop the removal log up to generation ``through``, the snapshot before the newest:
    a reader catches up from the newest (or, in the moment it is replaced, the one
    before), never from older."""
    with transaction(conn):
        conn.execute(
            "DELETE FROM removed_chunks WHERE collection = ? AND generation <= ?",
            (collection, through),
        )


def publish(
    database: Path, folder: Path, collection: str, at_least: int = SNAPSHOT_AFTER_MIN
) -> bool:
    """Write a new snapshot of ``collection`` when none is there or enough changed since
    (``snapshot_due``), unless another process is writing one; whether one was written."""
    target = folder / collection
    conn = connect(database)
    try:
        gen, created = _state(conn, collection)
        if gen < 0:
            return False
        found = snapshot.newest(target)
        if found is not None and found[0] >= created:
            try:
                size = snapshot.size(found[1])
            except snapshot.Damaged:  # the next reader to map it writes it again
                return False
            if size is not None and not snapshot_due(
                changed_since(conn, collection, found[0]), size, at_least
            ):
                return False
        with snapshot.building(target) as mine:
            if mine:
                snapshot.write(target, load_index(conn, collection))
                if found is not None:
                    _forget_removed(conn, collection, found[0])
            return mine
    finally:
        conn.close()


# A chunk's document as one number: the collection's place in the query above these bits.
_DOCUMENT_BITS = 40


def _document_codes(
    ids: np.ndarray, owners_of: Sequence[tuple[int, LiveIndex, list[tuple[int, float]]]]
) -> np.ndarray:
    """The document of each chunk of ``ids`` as one number (collection and document; -1
    for none), from the lists that found them (``(collection number, index, list)``)."""
    if not len(ids):  # every list empty
        return np.zeros(0, dtype=np.int64)
    found = [np.fromiter((cid for cid, _ in ranked), dtype=np.int64, count=len(ranked))
             for _, _, ranked in owners_of]  # fmt: skip
    codes = [
        (np.int64(number) << _DOCUMENT_BITS) | live_index.documents_of(index, listed)
        for (number, index, _), listed in zip(owners_of, found, strict=True)
    ]
    listed, coded = np.concatenate(found), np.concatenate(codes)
    order = np.argsort(listed, kind="stable")
    listed, coded = listed[order], coded[order]
    at = np.minimum(np.searchsorted(listed, ids), len(listed) - 1)
    return np.where(listed[at] == ids, coded[at], -1)


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

    def __init__(
        self, path: Path, busy_timeout_ms: int = 5000, snapshot_after: int = SNAPSHOT_AFTER_MIN
    ) -> None:
        self.path = path
        self._busy_timeout_ms = busy_timeout_ms
        folder = path.parent / f"{path.stem}.snapshots"
        self._indexes = IndexCache(folder, path, snapshot_after)
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
        removed = remove_collection(self.conn(), collection)
        shutil.rmtree(self._indexes.folder / collection, ignore_errors=True)
        return removed

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

    def index(self, collection: str) -> LiveIndex:
        """The index serving searches ``collection`` with (current generation)."""
        return self._indexes.index(self.conn(), collection)

    def publish(self, collection: str) -> None:
        """A new snapshot of ``collection`` for readers to map, when it has none or
        enough changed since its last (``snapshot_due``)."""
        publish(self.path, self._indexes.folder, collection, self._indexes.snapshot_after)

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
        owners_of: list[tuple[int, LiveIndex, list[tuple[int, float]]]] = []
        for number, collection in enumerate(collections):
            index = self.index(collection)
            if keyword_weight > 0:
                lists.append(live_index.keyword_list(index, terms, fusing.candidates))
                weights.append(keyword_weight)
            vector = query_vectors.get(collection) if fusing.vector_weight > 0 else None
            if vector is not None:
                lists.append(live_index.vector_list(index, vector, fusing.candidates))
                weights.append(fusing.vector_weight)
            for ranked in lists[len(owners_of) :]:
                owners_of.append((number, index, ranked))
        fused = retrieval.fuse(lists, weights, fusing)
        ids = np.fromiter(fused, dtype=np.int64, count=len(fused))
        scores = np.fromiter(fused.values(), dtype=np.float64, count=len(fused))
        return retrieval.best_documents(
            ids, scores, _document_codes(ids, owners_of),
            lambda chosen: chunks_by_id(self.conn(), chosen), max_documents,
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
