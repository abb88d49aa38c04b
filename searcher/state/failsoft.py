"""A state store whose failures never fail a request.

While serving, a lost Redis (or an unusable state file) must cost the cache, not the
answer: reads become misses, writes are dropped, rate limits allow. Failures are counted
for ``/v1/health``, and after one the store is left alone for ``cooldown_s`` so that
requests do not each wait for a connect timeout.
"""

from __future__ import annotations

import logging
import time
from collections.abc import Awaitable, Callable
from typing import TypeVar

import numpy as np

from searcher.errors import StateEntryUnusable, StateUnavailable
from searcher.state.base import StateHealth, StateStats, StateStore, TokenGrant, VectorRow

log = logging.getLogger(__name__)
T = TypeVar("T")


class FailSoftStore:
    """Wraps a ``StateStore``: same interface, soft defaults when it is unavailable."""

    def __init__(
        self,
        inner: StateStore,
        cooldown_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.inner = inner
        self.engine = inner.engine
        self.location = inner.location
        self.failures = 0
        self.last_error: str | None = None
        self._cooldown_s = cooldown_s
        self._clock = clock
        self._down_until = 0.0
        # Told of every operation served without the store (the metrics count them).
        self.on_failure: Callable[[], None] | None = None
        # Since when every operation has reached the store (None while it is down): it
        # answered when it was opened.
        self._up_since: float | None = clock()
        self.strict = StrictStore(self)

    @property
    def ok(self) -> bool:
        """False while the last operation failed (and its cooldown runs)."""
        return self._clock() >= self._down_until and self.last_error is None

    def up_for(self) -> float:
        """Seconds since the store last failed an operation of this process (since it was
        opened if none did); 0 while it is down."""
        return 0.0 if self._up_since is None else self._clock() - self._up_since

    def health(self) -> StateHealth:
        return StateHealth(self.engine, self.location, self.ok, self.failures, self.last_error)

    async def check(self) -> StateHealth:
        """``health()``, after asking a store that failed once more (when its cooldown is
        over): otherwise a process that no request sends to the store would report it
        down for ever after it came back."""
        if self.last_error is not None and self._clock() >= self._down_until:
            await self._soft(self.inner.ping, None)
        return self.health()

    def _failed(self) -> None:
        self.failures += 1
        if self.on_failure is not None:
            self.on_failure()

    async def _soft(self, op: Callable[[], Awaitable[T]], default: T) -> T:
        try:
            return await self.attempt(op)
        except StateUnavailable:  # an unusable entry too: a miss for that entry only
            return default

    async def attempt(self, op: Callable[[], Awaitable[T]]) -> T:
        """Run ``op`` on the store, counted as every operation is (failures, cooldown),
        but raising ``StateUnavailable`` where the soft methods give a default: for a
        caller that must tell an absent entry from a store it cannot reach."""
        if self._clock() < self._down_until:
            self._failed()
            raise StateUnavailable(self.last_error or f"state store {self.location} is down")
        try:
            result = await op()
        except StateEntryUnusable:
            self._failed()
            raise  # that entry only: the store is up, no cooldown
        except StateUnavailable as exc:
            self._failed()
            if self.last_error is None:
                log.warning("state store unavailable, caches off until it is back: %s", exc)
            self.last_error = str(exc)
            self._down_until = self._clock() + self._cooldown_s
            self._up_since = None
            raise
        if self.last_error is not None:
            log.warning("state store is back: %s", self.location)
            self.last_error = None
        if self._up_since is None:
            self._up_since = self._clock()
        return result

    async def get(self, key: str) -> bytes | None:
        return await self._soft(lambda: self.inner.get(key), None)

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        await self._soft(lambda: self.inner.set(key, value, ttl_s), None)

    async def swap(self, key: str, value: bytes, ttl_s: float) -> bytes | None:
        return await self._soft(lambda: self.inner.swap(key, value, ttl_s), None)

    async def delete(self, key: str) -> bool:
        return await self._soft(lambda: self.inner.delete(key), False)

    async def incr(self, key: str, amount: int = 1, ttl_s: float | None = None) -> int:
        return await self._soft(lambda: self.inner.incr(key, amount, ttl_s), 0)

    async def take(
        self, key: str, rate_per_s: float, burst: float, cost: float = 1.0
    ) -> TokenGrant:
        allowed = TokenGrant(True, burst, 0.0)
        return await self._soft(lambda: self.inner.take(key, rate_per_s, burst, cost), allowed)

    async def add_vector(
        self, space: str, item_id: str, vector: np.ndarray, meta: bytes, ttl_s: float
    ) -> None:
        await self._soft(lambda: self.inner.add_vector(space, item_id, vector, meta, ttl_s), None)

    async def vectors_after(
        self, space: str, cursor: str | None, limit: int = 5000
    ) -> list[VectorRow]:
        return await self._soft(lambda: self.inner.vectors_after(space, cursor, limit), [])

    async def clear(self, prefix: str = "") -> int:
        return await self.inner.clear(prefix)  # an explicit command: its failure is reported

    async def prune(self) -> int:
        return await self.inner.prune()

    async def stats(self, prefix: str = "") -> StateStats:
        return await self.inner.stats(prefix)

    async def ping(self) -> None:
        await self.inner.ping()

    async def aclose(self) -> None:
        await self.inner.aclose()


class StrictStore:
    """A ``FailSoftStore`` that raises: the same store, counted the same way, each
    operation raising ``StateUnavailable`` when the store cannot be reached."""

    def __init__(self, outer: FailSoftStore) -> None:
        self.outer = outer
        self.engine = outer.engine
        self.location = outer.location

    async def get(self, key: str) -> bytes | None:
        return await self.outer.attempt(lambda: self.outer.inner.get(key))

    async def set(self, key: str, value: bytes, ttl_s: float) -> None:
        await self.outer.attempt(lambda: self.outer.inner.set(key, value, ttl_s))

    async def swap(self, key: str, value: bytes, ttl_s: float) -> bytes | None:
        return await self.outer.attempt(lambda: self.outer.inner.swap(key, value, ttl_s))

    async def delete(self, key: str) -> bool:
        return await self.outer.attempt(lambda: self.outer.inner.delete(key))

    async def incr(self, key: str, amount: int = 1, ttl_s: float | None = None) -> int:
        return await self.outer.attempt(lambda: self.outer.inner.incr(key, amount, ttl_s))

    async def take(
        self, key: str, rate_per_s: float, burst: float, cost: float = 1.0
    ) -> TokenGrant:
        inner = self.outer.inner
        return await self.outer.attempt(lambda: inner.take(key, rate_per_s, burst, cost))

    async def add_vector(
        self, space: str, item_id: str, vector: np.ndarray, meta: bytes, ttl_s: float
    ) -> None:
        inner = self.outer.inner
        await self.outer.attempt(lambda: inner.add_vector(space, item_id, vector, meta, ttl_s))

    async def vectors_after(
        self, space: str, cursor: str | None, limit: int = 5000
    ) -> list[VectorRow]:
        return await self.outer.attempt(
            lambda: self.outer.inner.vectors_after(space, cursor, limit)
        )

    async def clear(self, prefix: str = "") -> int:
        return await self.outer.attempt(lambda: self.outer.inner.clear(prefix))

    async def prune(self) -> int:
        return await self.outer.attempt(self.outer.inner.prune)

    async def stats(self, prefix: str = "") -> StateStats:
        return await self.outer.attempt(lambda: self.outer.inner.stats(prefix))

    async def ping(self) -> None:
        await self.outer.attempt(self.outer.inner.ping)

    async def aclose(self) -> None:
        await self.outer.aclose()
