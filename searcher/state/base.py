"""What the service shares between requests, workers and replicas: the typed interface
both state engines (SQLite files, Redis) implement.

Values are bytes; JSON goes through ``get_json``/``set_json``. Nothing read from the state
is ever trusted as code (no pickle), and an entry that does not decode is a miss.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Literal, Protocol

import numpy as np
import orjson

StateEngine = Literal["sqlite", "redis"]


@dataclass(frozen=True)
class TokenGrant:
    """The answer of a token bucket: allowed or not, and when to come back."""

    allowed: bool
    remaining: float
    retry_after_s: float


@dataclass(frozen=True)
class VectorRow:
    """One stored vector. ``cursor`` is opaque and increases in insertion order."""

    cursor: str
    item_id: str
    vector: np.ndarray
    meta: bytes
    expires_at: float


@dataclass(frozen=True)
class StateStats:
    engine: StateEngine
    location: str
    entries: int
    counters: int
    vectors: int


@dataclass(frozen=True)
class StateHealth:
    engine: StateEngine
    location: str
    ok: bool
    failures: int
    last_error: str | None


class StateStore(Protocol):
    """Key/value with TTL, counters with expiry, token buckets and vector rows.

    Engines raise ``StateUnavailable`` when the store cannot be reached; callers that must
    never fail because of it use ``FailSoftStore``."""

    engine: StateEngine
    location: str

    async def get(self, key: str) -> bytes | None:
        """The value, or None if absent or expired."""
        ...

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        """Store ``value`` for ``ttl_s`` seconds (``ttl_s <= 0`` stores nothing)."""
        ...

    async def swap(self, key: str, value: bytes, ttl_s: float) -> bytes | None:
        """Store ``value`` for ``ttl_s`` seconds and return what the key held (None if
        absent or expired), atomically across every process sharing the store."""
        ...

    async def delete(self, key: str) -> bool:
        """Remove the key, whatever it holds (a value, a counter, a bucket); True if it
        was there."""
        ...

    async def incr(self, key: str, amount: int = 1, ttl_s: float | None = None) -> int:
        """Add ``amount`` atomically and return the new value. ``ttl_s`` starts when the
        counter is created (a fixed window), not on every increment."""
        ...

    async def take(
        self, key: str, rate_per_s: float, burst: float, cost: float = 1.0
    ) -> TokenGrant:
        """Take ``cost`` tokens from a bucket refilled at ``rate_per_s`` up to ``burst``,
        atomically across every process sharing the store."""
        ...

    async def add_vector(
        self, space: str, item_id: str, vector: np.ndarray, meta: bytes, ttl_s: float
    ) -> None:
        """Append a float32 vector with its metadata to ``space``."""
        ...

    async def vectors_after(
        self, space: str, cursor: str | None, limit: int = 5000
    ) -> list[VectorRow]:
        """Rows of ``space`` added after ``cursor`` (all rows when None), oldest first,
        expired rows included (readers drop them by ``expires_at``)."""
        ...

    async def clear(self, prefix: str = "") -> int:
        """Remove every key, counter, bucket and vector space starting with ``prefix``."""
        ...

    async def prune(self) -> int:
        """Remove expired entries now; the number removed."""
        ...

    async def stats(self, prefix: str = "") -> StateStats:
        """Live entries, counters and vectors (of spaces) whose keys start with ``prefix``."""
        ...

    async def ping(self) -> None:
        """Raise ``StateUnavailable`` unless the store answers."""
        ...

    async def aclose(self) -> None: ...


def encode_json(value: Any) -> bytes:
    return orjson.dumps(value)


def decode_json(raw: bytes | None) -> Any | None:
    """The decoded JSON value; None for a missing or corrupt entry (a miss, not an error)."""
    if raw is None:
        return None
    try:
        return orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None


async def get_json(store: StateStore, key: str) -> Any | None:
    return decode_json(await store.get(key))


async def set_json(store: StateStore, key: str, value: Any, ttl_s: float) -> None:
    await store.set(key, encode_json(value), ttl_s)


def refill(
    tokens: float, updated_at: float, now: float, rate_per_s: float, burst: float, cost: float
) -> tuple[TokenGrant, float]:
    """One token-bucket step (the SQLite engine's arithmetic; Redis runs the same in Lua):
    the grant and the tokens left."""
    tokens = min(burst, tokens + max(0.0, now - updated_at) * rate_per_s)
    if tokens >= cost:
        return TokenGrant(True, tokens - cost, 0.0), tokens - cost
    wait = (cost - tokens) / rate_per_s if rate_per_s > 0 else float("inf")
    return TokenGrant(False, tokens, wait), tokens
