"""Shared state: one interface (``StateStore``), two engines (SQLite files, Redis)."""

from __future__ import annotations

from pathlib import Path

from searcher.config import StateSettings
from searcher.fetch.urls import without_password
from searcher.state.base import (
    StateEngine,
    StateHealth,
    StateStats,
    StateStore,
    TokenGrant,
    VectorRow,
    get_json,
    set_json,
)
from searcher.state.failsoft import FailSoftStore
from searcher.state.redis_store import RedisStore
from searcher.state.sqlite_store import SqliteStore

__all__ = [
    "FailSoftStore",
    "RedisStore",
    "SqliteStore",
    "StateEngine",
    "StateHealth",
    "StateStats",
    "StateStore",
    "TokenGrant",
    "VectorRow",
    "build_store",
    "get_json",
    "open_store",
    "set_json",
    "store_location",
]


def _sqlite_path(settings: StateSettings) -> Path:
    return settings.directory() / "state.sqlite3"


def store_location(settings: StateSettings) -> str:
    """Where the configured state lives (a Redis URL without password, or the file)."""
    return (
        without_password(settings.redis_url) if settings.redis_url else str(_sqlite_path(settings))
    )


def build_store(settings: StateSettings) -> StateStore:
    """The configured engine (not yet connected): Redis when ``redis_url`` is set, else
    the SQLite file in ``state.dir``."""
    if settings.redis_url:
        return RedisStore(settings.redis_url, settings.redis_prefix, settings.redis_timeout_s)
    return SqliteStore(_sqlite_path(settings), settings.sqlite_busy_timeout_ms)


async def open_store(settings: StateSettings) -> FailSoftStore:
    """The configured store, checked once: raises ``StateUnavailable`` (with a message
    naming the setting) when it cannot be reached at start-up."""
    store = build_store(settings)
    try:
        await store.ping()
    except BaseException:
        await store.aclose()
        raise
    return FailSoftStore(store, settings.retry_after_failure_s)
