"""The embedded state engine: one SQLite file shared by every process on the machine.

WAL mode lets readers run beside one writer, a busy timeout makes writers queue instead of
failing, and ``BEGIN IMMEDIATE`` makes the read-modify-write steps (token buckets)
atomic across processes. Calls run on one worker thread owned by the store, so the event
loop never waits for a lock or a checkpoint; the small ones of the request path (get, set,
counters, buckets) first try on the loop's own connection, which never waits: with no
busy timeout, a lock held elsewhere sends the call to the thread, and it never
checkpoints (the thread does, every ``CHECKPOINT_EVERY`` of its writes). That saves the
thread hop (~0.08 ms) on every API key check and cache hit.

A damaged file (``PRAGMA quick_check`` at the first connection, or "database disk image is
malformed" from any call) is moved aside and replaced by a fresh one, its API keys
carried over as far as they can be read (``sqlite_repair``); the call that met the damage
runs again on the fresh file. A process whose file another one replaced notices within a
second and reopens it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import sqlite3
import threading
import time
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import TypeVar

import numpy as np

from searcher.errors import StateUnavailable
from searcher.state.base import StateEngine, StateStats, TokenGrant, VectorRow, refill
from searcher.state.sqlite_repair import (
    file_id,
    integrity_problem,
    is_corruption,
    move_aside,
    repair_lock,
    report,
)

log = logging.getLogger(__name__)
T = TypeVar("T")

_SCHEMA = """
CREATE TABLE IF NOT EXISTS kv (
    key TEXT PRIMARY KEY, value BLOB NOT NULL, expires_at REAL NOT NULL
) WITHOUT ROWID;
CREATE INDEX IF NOT EXISTS kv_expires ON kv(expires_at);
CREATE TABLE IF NOT EXISTS counters (
    key TEXT PRIMARY KEY, value INTEGER NOT NULL, expires_at REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS buckets (
    key TEXT PRIMARY KEY, tokens REAL NOT NULL, updated_at REAL NOT NULL
) WITHOUT ROWID;
CREATE TABLE IF NOT EXISTS vectors (
    seq INTEGER PRIMARY KEY AUTOINCREMENT, space TEXT NOT NULL, item_id TEXT NOT NULL,
    vector BLOB NOT NULL, meta BLOB NOT NULL, expires_at REAL NOT NULL
);
CREATE INDEX IF NOT EXISTS vectors_space ON vectors(space, seq);
"""
_NEVER = float("inf")
CHECKPOINT_EVERY = 500  # writes on the loop's connection between two checkpoints
# An idle bucket is full again after burst / rate seconds; keep its row at most a day.
_BUCKET_IDLE_S = 86_400.0
_LOOK_EVERY_S = 1.0  # how often a process looks whether another replaced the file


def _as_bytes(value: object) -> bytes | None:
    """A BLOB column's value; text (another program wrote the file) as its UTF-8 bytes,
    anything else None: a value that does not decode is a miss, never a failure."""
    if isinstance(value, bytes | bytearray | memoryview):
        return bytes(value)
    if isinstance(value, str):
        return value.encode("utf-8", "surrogatepass")
    return None


def _prefix_range(prefix: str) -> tuple[str, str]:
    """Bounds such that ``lo <= key < hi`` holds exactly for keys starting with prefix."""
    return prefix, prefix + "\U0010ffff"


class SqliteStore:
    """``StateStore`` on a SQLite file (``path``); ``clock`` is injectable for tests."""

    engine: StateEngine = "sqlite"

    def __init__(
        self, path: Path, busy_timeout_ms: int = 5000, clock: Callable[[], float] = time.time
    ) -> None:
        self.path = path
        self.location = str(path)
        self._clock = clock
        self._busy_timeout_ms = busy_timeout_ms
        self._executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="searcher-state")
        self._db: sqlite3.Connection | None = None
        self._quick_db: sqlite3.Connection | None = None  # the loop's own connection
        self._quick_thread: int | None = None
        self._quick_writes = 0
        self._checkpoints: set[asyncio.Future[None]] = set()
        self._file: tuple[int, int] | None = None  # the file the connections opened
        self._generation = 0  # bumped at each (re)connection of the thread
        self._quick_generation = 0
        self._next_look = 0.0

    # --- plumbing ------------------------------------------------------------------------

    def _open(self) -> sqlite3.Connection:
        db = sqlite3.connect(
            self.path,
            timeout=self._busy_timeout_ms / 1000,
            isolation_level=None,  # autocommit; transactions are explicit
            check_same_thread=False,  # only ever used on the store's one thread
        )
        try:
            db.execute(f"PRAGMA busy_timeout = {int(self._busy_timeout_ms)}")
            db.execute("PRAGMA journal_mode = WAL")
            db.execute("PRAGMA synchronous = NORMAL")  # a cache: durability at checkpoints
            db.executescript(_SCHEMA)
        except BaseException:
            db.close()
            raise
        return db

    def _replaced(self) -> bool:
        """Whether the file at ``path`` is no longer the one opened (another process
        repaired it, or it was deleted); looked at once a second at most."""
        now = time.monotonic()
        if self._file is None or now < self._next_look:
            return False
        if file_id(self.path) != self._file:
            return True  # looked at again on the next call, until reopened
        self._next_look = now + _LOOK_EVERY_S
        return False

    def _connect(self) -> sqlite3.Connection:
        """The thread's connection, checked (``quick_check``) when first opened, the file
        repaired when damaged, reopened when another process replaced it."""
        if self._db is not None and self._replaced():
            self._close_thread_db()
        if self._db is None:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            self._db = self._checked_connection()
            self._file = file_id(self.path)
            self._generation += 1
        return self._db

    def _checked_connection(self) -> sqlite3.Connection:
        """A connection to a file ``quick_check`` finds sound: the one at ``path``, or a
        fresh one in its place when it is damaged."""
        opened = file_id(self.path)
        try:
            db = self._open()
        except sqlite3.DatabaseError as exc:
            if not is_corruption(exc):
                raise
            self._repair(str(exc), opened)
            return self._open()
        try:
            problem = integrity_problem(db)
        except BaseException:
            db.close()
            raise
        if problem is None:
            return db
        db.close()
        self._repair(problem, opened)
        return self._open()

    def _close_thread_db(self) -> None:
        if self._db is not None:
            with contextlib.suppress(sqlite3.Error):
                self._db.close()
            self._db = None

    def _repair(self, problem: str, opened: tuple[int, int] | None) -> None:
        """Move the damaged file aside and start a fresh one with the keys that could be
        read, unless another process did so since ``opened`` was the file at ``path``."""
        with repair_lock(self.path):
            if file_id(self.path) != opened:
                return  # replaced meanwhile: the new file is opened (and checked) next
            repair = move_aside(self.path, problem)
            fresh = self._open()
            try:
                kept = repair.salvaged
                fresh.executemany(
                    "INSERT OR REPLACE INTO kv (key, value, expires_at) VALUES (?, ?, ?)",
                    kept.kv,
                )
                fresh.executemany(
                    "INSERT OR REPLACE INTO counters (key, value, expires_at) VALUES (?, ?, ?)",
                    kept.counters,
                )
            finally:
                fresh.close()
        log.error("%s", report(self.path, problem, repair))

    def _quick_connection(self) -> sqlite3.Connection | None:
        """The connection of the calling thread's event loop; None until the store's thread
        has made the schema, or when called from another thread than the first caller."""
        if self._db is None or self._replaced():
            return None  # the thread (re)opens the file first
        if self._quick_db is not None and self._quick_generation != self._generation:
            # The thread reopened the file (repaired, or replaced by another process): this
            # connection still reads the old one.
            if self._quick_thread == threading.get_ident():
                self._quick_db.close()
                self._quick_db = None
            else:
                return None
        if self._quick_db is None:
            # Bound to this thread: any use from another would raise, never corrupt.
            db = sqlite3.connect(self.path, timeout=0, isolation_level=None)
            db.execute("PRAGMA busy_timeout = 0")  # never wait for a lock on the loop
            db.execute("PRAGMA synchronous = NORMAL")
            db.execute("PRAGMA wal_autocheckpoint = 0")  # checkpoints run on the thread
            self._quick_db, self._quick_thread = db, threading.get_ident()
            self._quick_generation = self._generation
        return self._quick_db if self._quick_thread == threading.get_ident() else None

    async def _quick(self, fn: Callable[[sqlite3.Connection], T], writes: bool) -> T:
        """``fn`` on the loop's connection if it needs no lock held elsewhere, else (and
        until the schema exists) on the store's thread."""
        db = self._quick_connection()
        if db is not None:
            try:
                result = fn(db)
            except sqlite3.Error as exc:
                busy = isinstance(exc, sqlite3.OperationalError) and (
                    exc.sqlite_errorcode & 0xFF
                ) in (sqlite3.SQLITE_BUSY, sqlite3.SQLITE_LOCKED)
                # Another process holds the write lock: wait for it on the thread. A damaged
                # file: the thread repairs it and runs the call again.
                if not busy and not is_corruption(exc):
                    raise StateUnavailable(f"state file {self.path}: {exc}") from exc
            else:
                if writes:
                    self._wrote()
                return result
        return await self._call(fn)

    def _wrote(self) -> None:
        self._quick_writes += 1
        if self._quick_writes % CHECKPOINT_EVERY == 0:
            # Handed to the thread at once (quick calls do not yield to the loop). RESTART
            # waits there for the writer of the moment, copies every frame, and makes the
            # next write start the log from its beginning, so the file stops growing;
            # quick writes meanwhile find the lock taken and queue on the thread.
            def checkpoint() -> None:
                if self._db is not None:
                    with contextlib.suppress(sqlite3.Error):  # the next one tries again
                        self._db.execute("PRAGMA wal_checkpoint(RESTART)").fetchall()

            task = asyncio.get_running_loop().run_in_executor(self._executor, checkpoint)
            self._checkpoints.add(task)
            task.add_done_callback(self._checkpoints.discard)

    async def _call(self, fn: Callable[[sqlite3.Connection], T]) -> T:
        def run() -> T:
            try:
                try:
                    return fn(self._connect())
                except sqlite3.DatabaseError as exc:
                    if not is_corruption(exc):
                        raise
                    opened = self._file
                    self._close_thread_db()
                    self._repair(str(exc), opened)
                    return fn(self._connect())  # once more, on the fresh file
            except sqlite3.Error as exc:
                raise StateUnavailable(f"state file {self.path}: {exc}") from exc
            except OSError as exc:
                raise StateUnavailable(f"state file {self.path}: {exc.strerror or exc}") from exc

        return await asyncio.get_running_loop().run_in_executor(self._executor, run)

    def _expiry(self, ttl_s: float | None) -> float:
        return _NEVER if ttl_s is None else self._clock() + ttl_s

    # --- key/value -----------------------------------------------------------------------

    async def get(self, key: str) -> bytes | None:
        now = self._clock()

        def run(db: sqlite3.Connection) -> bytes | None:
            # fetchall: the statement runs to its end, so no read snapshot stays open.
            rows = db.execute(
                "SELECT value FROM kv WHERE key = ? AND expires_at > ?", (key, now)
            ).fetchall()
            return _as_bytes(rows[0][0]) if rows else None

        return await self._quick(run, writes=False)

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        if ttl_s <= 0:
            return
        expires = self._expiry(ttl_s)
        await self._quick(
            lambda db: db.execute(
                "INSERT OR REPLACE INTO kv (key, value, expires_at) VALUES (?, ?, ?)",
                (key, value, expires),
            ),
            writes=True,
        )

    async def swap(self, key: str, value: bytes, ttl_s: float) -> bytes | None:
        now, expires = self._clock(), self._expiry(ttl_s)

        def run(db: sqlite3.Connection) -> bytes | None:
            rows = db.execute(
                "SELECT value FROM kv WHERE key = ? AND expires_at > ?", (key, now)
            ).fetchall()
            db.execute(
                "INSERT OR REPLACE INTO kv (key, value, expires_at) VALUES (?, ?, ?)",
                (key, value, expires),
            )
            return _as_bytes(rows[0][0]) if rows else None

        return await self._quick(_under_write_lock(run), writes=True)

    async def delete(self, key: str) -> bool:
        def run(db: sqlite3.Connection) -> int:
            # Whatever the key holds, as Redis's DEL: a counter deleted must start again.
            return sum(
                db.execute(f"DELETE FROM {table} WHERE key = ?", (key,)).rowcount
                for table in ("kv", "counters", "buckets")
            )

        return await self._quick(run, writes=True) > 0

    # --- counters and buckets ------------------------------------------------------------

    async def incr(self, key: str, amount: int = 1, ttl_s: float | None = None) -> int:
        now, expires = self._clock(), self._expiry(ttl_s)

        def run(db: sqlite3.Connection) -> int:
            # An expired counter starts again from this increment, with a new window.
            row = db.execute(
                """INSERT INTO counters (key, value, expires_at) VALUES (:key, :amount, :exp)
                ON CONFLICT(key) DO UPDATE SET
                  value = CASE WHEN expires_at <= :now THEN :amount ELSE value + :amount END,
                  expires_at = CASE WHEN expires_at <= :now THEN :exp ELSE expires_at END
                RETURNING value""",
                {"key": key, "amount": amount, "exp": expires, "now": now},
            ).fetchall()
            return int(row[0][0])

        return await self._quick(run, writes=True)

    async def take(
        self, key: str, rate_per_s: float, burst: float, cost: float = 1.0
    ) -> TokenGrant:
        now = self._clock()

        def run(db: sqlite3.Connection) -> TokenGrant:
            row = db.execute(
                "SELECT tokens, updated_at FROM buckets WHERE key = ?", (key,)
            ).fetchone()
            tokens, updated = (row[0], row[1]) if row else (burst, now)
            grant, left = refill(tokens, updated, now, rate_per_s, burst, cost)
            db.execute(
                "INSERT OR REPLACE INTO buckets (key, tokens, updated_at) VALUES (?, ?, ?)",
                (key, left, now),
            )
            return grant

        return await self._quick(_under_write_lock(run), writes=True)

    # --- vectors -------------------------------------------------------------------------

    async def add_vector(
        self, space: str, item_id: str, vector: np.ndarray, meta: bytes, ttl_s: float
    ) -> None:
        blob = np.asarray(vector, dtype=np.float32).tobytes()
        expires = self._expiry(ttl_s)
        await self._call(
            lambda db: db.execute(
                "INSERT INTO vectors (space, item_id, vector, meta, expires_at) "
                "VALUES (?, ?, ?, ?, ?)",
                (space, item_id, blob, meta, expires),
            )
        )

    async def vectors_after(
        self, space: str, cursor: str | None, limit: int = 5000
    ) -> list[VectorRow]:
        after = int(cursor) if cursor and cursor.isdigit() else 0

        def run(db: sqlite3.Connection) -> list[VectorRow]:
            rows = db.execute(
                "SELECT seq, item_id, vector, meta, expires_at FROM vectors "
                "WHERE space = ? AND seq > ? ORDER BY seq LIMIT ?",
                (space, after, limit),
            ).fetchall()
            return [
                VectorRow(str(seq), str(item), np.frombuffer(vector, dtype=np.float32), meta, exp)
                for seq, item, blob, raw_meta, exp in rows
                if (vector := _as_bytes(blob)) is not None
                and len(vector) % 4 == 0
                and (meta := _as_bytes(raw_meta)) is not None
                and isinstance(exp, int | float)
            ]  # a row that does not decode is skipped, as a value that does not is a miss

        return await self._call(run)

    # --- housekeeping --------------------------------------------------------------------

    async def clear(self, prefix: str = "") -> int:
        lo, hi = _prefix_range(prefix)

        def run(db: sqlite3.Connection) -> int:
            removed = 0
            for table, column in (
                ("kv", "key"), ("counters", "key"), ("buckets", "key"), ("vectors", "space")
            ):  # fmt: skip
                removed += db.execute(
                    f"DELETE FROM {table} WHERE {column} >= ? AND {column} < ?", (lo, hi)
                ).rowcount
            return removed

        return await self._call(run)

    async def prune(self) -> int:
        now = self._clock()

        def run(db: sqlite3.Connection) -> int:
            removed = db.execute("DELETE FROM kv WHERE expires_at <= ?", (now,)).rowcount
            removed += db.execute("DELETE FROM counters WHERE expires_at <= ?", (now,)).rowcount
            removed += db.execute("DELETE FROM vectors WHERE expires_at <= ?", (now,)).rowcount
            removed += db.execute(
                "DELETE FROM buckets WHERE updated_at <= ?", (now - _BUCKET_IDLE_S,)
            ).rowcount
            return removed

        return await self._call(run)

    async def stats(self, prefix: str = "") -> StateStats:
        now = self._clock()
        lo, hi = _prefix_range(prefix)

        def run(db: sqlite3.Connection) -> tuple[int, int, int]:
            def count(table: str, column: str) -> int:
                sql = (
                    f"SELECT count(*) FROM {table}"
                    f" WHERE expires_at > ? AND {column} >= ? AND {column} < ?"
                )
                return int(db.execute(sql, (now, lo, hi)).fetchone()[0])

            return count("kv", "key"), count("counters", "key"), count("vectors", "space")

        entries, counters, vectors = await self._call(run)
        return StateStats(self.engine, self.location, entries, counters, vectors)

    async def ping(self) -> None:
        await self._call(lambda db: db.execute("SELECT 1").fetchone())

    async def checkpointed(self) -> None:
        """Return once the WAL checkpoints handed to the store's thread have run."""
        if self._checkpoints:
            await asyncio.gather(*self._checkpoints, return_exceptions=True)

    async def aclose(self) -> None:
        await self.checkpointed()
        if self._quick_db is not None:
            self._quick_db.close()
            self._quick_db = None

        def close() -> None:
            if self._db is not None:
                self._db.close()
                self._db = None

        await asyncio.get_running_loop().run_in_executor(self._executor, close)
        self._executor.shutdown(wait=False)


def _under_write_lock(fn: Callable[[sqlite3.Connection], T]) -> Callable[[sqlite3.Connection], T]:
    """``fn`` as one transaction that takes the write lock before it reads: what it reads
    cannot change before it writes (no lost update, no stale value read)."""

    def run(db: sqlite3.Connection) -> T:
        db.execute("BEGIN IMMEDIATE")
        try:
            result = fn(db)
            db.execute("COMMIT")
        except BaseException:
            db.execute("ROLLBACK")
            raise
        return result

    return run
