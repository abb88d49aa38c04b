"""A corrupt SQLite state file: told apart from other failures, moved aside, and what can
still be read of the API keys carried over to a fresh file.

The state file is mostly caches (answers, vectors, breaker and pacing state, buckets),
which a fresh file rebuilds as requests come. API keys are the exception: lost, every
client gets 401 until the operator re-creates them. So before the file is moved aside,
the rows under ``auth:`` are read as far as they can be (each table from both ends, so a
bad page in the middle costs only the rows behind it) and handed back to be written into
the fresh file. One process repairs at a time (a lock file beside the state file); the
others find the file replaced and reopen it.
"""

from __future__ import annotations

import contextlib
import fcntl
import logging
import os
import sqlite3
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from searcher.errors import StateUnavailable

log = logging.getLogger(__name__)

# SQLite's primary result codes for a damaged file (extended codes keep them in the low
# byte): SQLITE_CORRUPT "database disk image is malformed", SQLITE_NOTADB "file is not a
# database".
_CORRUPT, _NOTADB = 11, 26
KEPT_PREFIX = "auth:"  # API keys, their slots and counters, quotas and usage
_KEY_RECORDS = "auth:key:"
_CREATED = "auth:created"
_LOST = (
    "cached answers and semantic-cache vectors, rate-limit buckets, circuit-breaker and "
    "pacing state, research job records"
)


def is_corruption(exc: BaseException) -> bool:
    """Whether ``exc`` says the file itself is damaged (not busy, not unreachable)."""
    code = getattr(exc, "sqlite_errorcode", None)
    return (
        isinstance(exc, sqlite3.DatabaseError)
        and code is not None
        and (code & 0xFF)
        in (
            _CORRUPT,
            _NOTADB,
        )
    )


def integrity_problem(db: sqlite3.Connection) -> str | None:
    """None when ``PRAGMA quick_check`` finds the open file sound, else what it found."""
    try:
        rows = db.execute("PRAGMA quick_check").fetchall()
    except sqlite3.DatabaseError as exc:
        if is_corruption(exc):
            return str(exc)
        raise
    found = [line for row in rows for line in str(row[0]).splitlines()]
    if found == ["ok"]:
        return None
    more = f" (and {len(found) - 1} more problems)" if len(found) > 1 else ""
    return f"quick_check: {found[0]}{more}"


@dataclass(frozen=True)
class SalvagedRows:
    """The ``auth:`` rows read from a damaged file, ready to write into a fresh one."""

    kv: list[tuple[str, bytes, float]]
    counters: list[tuple[str, int, float]]

    @property
    def keys(self) -> int:
        return sum(1 for key, _, _ in self.kv if key.startswith(_KEY_RECORDS))

    @property
    def keys_created(self) -> int | None:
        """How many keys were ever created, if that counter could be read."""
        return next((int(v) for k, v, _ in self.counters if k == _CREATED), None)


@dataclass(frozen=True)
class Repair:
    moved_to: Path
    salvaged: SalvagedRows


def _rows(db: sqlite3.Connection, table: str, columns: str) -> list[tuple[Any, ...]]:
    """The table's rows under ``auth:`` that can be read, walking the key's b-tree from
    each end until a damaged page stops the walk."""
    found: dict[str, tuple[Any, ...]] = {}
    for order in ("ASC", "DESC"):
        sql = f"SELECT {columns} FROM {table} WHERE key >= ? AND key < ? ORDER BY key {order}"
        with contextlib.suppress(sqlite3.DatabaseError):
            for row in db.execute(sql, (KEPT_PREFIX, KEPT_PREFIX[:-1] + ";")):
                found.setdefault(str(row[0]), row)
    return list(found.values())


def salvage(path: Path) -> SalvagedRows:
    """What can still be read of the ``auth:`` rows of the file at ``path``."""
    try:
        db = sqlite3.connect(f"file:{path}?mode=ro", uri=True, timeout=1)
    except sqlite3.Error:
        return SalvagedRows([], [])
    try:
        kv = [
            (str(k), v if isinstance(v, bytes) else str(v).encode(), float(e))
            for k, v, e in _rows(db, "kv", "key, value, expires_at")
            if isinstance(v, bytes | str) and isinstance(e, int | float)
        ]
        counters = [
            (str(k), int(v), float(e))
            for k, v, e in _rows(db, "counters", "key, value, expires_at")
            if isinstance(v, int) and isinstance(e, int | float)
        ]
    finally:
        db.close()
    return SalvagedRows(kv, counters)


@contextlib.contextmanager
def repair_lock(path: Path) -> Iterator[None]:
    """Held by one process at a time: the one that repairs the file at ``path``."""
    lock = path.with_name(path.name + ".repair-lock")
    with open(lock, "a+b") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            yield
        finally:
            fcntl.flock(handle, fcntl.LOCK_UN)


def file_id(path: Path) -> tuple[int, int] | None:
    """Which file is at ``path`` (device, inode); None if none is."""
    try:
        stat = os.stat(path)
    except FileNotFoundError:
        return None
    return stat.st_dev, stat.st_ino


def move_aside(path: Path, reason: str) -> Repair:
    """Salvage the keys of the damaged file at ``path``, then rename it (and its WAL) to
    ``<name>.corrupt-<UTC time>``; its shared-memory index is removed (a fresh one is
    built). Raises ``StateUnavailable`` saying what to do when the file cannot be moved.
    Call it holding ``repair_lock``."""
    salvaged = salvage(path)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
    moved = path.with_name(f"{path.name}.corrupt-{stamp}")
    try:
        os.replace(path, moved)
        for suffix in ("-wal", "-journal"):
            with contextlib.suppress(FileNotFoundError):
                os.replace(f"{path}{suffix}", f"{moved}{suffix}")
        with contextlib.suppress(FileNotFoundError):
            os.unlink(f"{path}-shm")
    except OSError as exc:
        raise StateUnavailable(
            f"state file {path} is corrupt ({reason}) and cannot be moved aside "
            f"({exc.strerror or exc}): stop searcher, move the file away, and start it "
            "again (it starts a fresh one; API keys must then be re-created with "
            "`searcher keys create`)"
        ) from exc
    return Repair(moved, salvaged)


def report(path: Path, reason: str, repair: Repair) -> str:
    """What was lost, what was kept and what the operator must do, in one log message."""
    kept = repair.salvaged
    created = kept.keys_created
    if created is not None and kept.keys >= created:
        keys = f"all {kept.keys} API keys were recovered"
    elif kept.keys:
        of = f" of {created}" if created is not None else ""
        keys = (
            f"{kept.keys}{of} API keys were recovered; any other must be re-created "
            "(`searcher keys list` shows those kept, `searcher keys create NAME` makes one)"
        )
    else:
        keys = (
            "no API key could be recovered: if keys were in use, re-create each one with "
            "`searcher keys create NAME` and hand the new secrets out"
        )
    return (
        f"state file {path} is corrupt ({reason}): moved it aside to {repair.moved_to} and "
        f"started a fresh one. Lost: {_LOST}; they rebuild as requests come. {keys}."
    )
