"""Circuit breakers shared by every worker and replica through the state store.

Each process keeps its own ``CircuitBreaker`` (fast, no I/O on the hot path); the store
adds what they must agree on: the consecutive failures of an instance, counted by all, and
"open until" once any of them opened it. A process that has seen the instance fail looks
at the shared state before every call; while it sees it healthy, at most every ``SYNC_S``
(so a healthy backend's calls rarely pay a store round trip, and a failing one is left
alone by every worker within that long).
"""

from __future__ import annotations

import time
from collections.abc import Callable, Mapping

from searcher.errors import FailureKind
from searcher.resilience import NO_VERDICT, CircuitBreaker
from searcher.state.base import StateStore

NAMESPACE = "breaker:"
SYNC_S = 0.5
WallClock = Callable[[], float]


class SharedBreakers:
    """The shared half of the breakers of one backend pool."""

    def __init__(
        self,
        store: StateStore,
        keys: Mapping[str, str] | None = None,
        clock: WallClock = time.time,
        sync_s: float = SYNC_S,
    ) -> None:
        self._store = store
        # Instance name -> its key in the store (``registry.upstream_key``): workers share a
        # breaker only when they name the same upstream, not merely the same name.
        self._keys = dict(keys or {})
        self._clock = clock
        self._sync_s = sync_s
        self._checked: dict[str, float] = {}  # instance -> when the store was last read
        self._counting: set[str] = set()  # instances whose shared failure count we raised

    async def sync(self, name: str, breaker: CircuitBreaker) -> None:
        """Open ``breaker`` here if another process opened it."""
        now = self._clock()
        if breaker.state == "open":
            return
        healthy = breaker.consecutive_failures == 0 and name not in self._counting
        if healthy and now - self._checked.get(name, 0.0) < self._sync_s:
            return
        self._checked[name] = now
        raw = await self._store.get(f"{NAMESPACE}{self._key(name)}:open_until")
        try:
            until = float(raw) if raw is not None else 0.0
        except ValueError:  # a corrupt entry is no verdict
            return
        if until > now:
            breaker.force_open(until - now, "opened by another worker")

    async def failed(
        self, name: str, breaker: CircuitBreaker, kind: FailureKind, threshold: int,
        recovery_s: float,
    ) -> None:  # fmt: skip
        """Count a failure for all; open the breaker everywhere at the shared threshold,
        or when this process's breaker opened on its own (a rejected key, a Retry-After)."""
        if kind in NO_VERDICT:
            return
        self._counting.add(name)
        count = await self._store.incr(f"{NAMESPACE}{self._key(name)}:failures", 1, recovery_s * 2)
        snapshot = breaker.snapshot()
        if snapshot.state != "open" and count >= threshold:
            breaker.force_open(recovery_s, f"{count} consecutive failures across workers")
            snapshot = breaker.snapshot()
        if snapshot.state == "open" and snapshot.retry_in_s:
            until = self._clock() + snapshot.retry_in_s
            await self._store.set(
                f"{NAMESPACE}{self._key(name)}:open_until", str(until).encode(), snapshot.retry_in_s
            )

    async def succeeded(self, name: str) -> None:
        """A success ends the consecutive failures (a store write only after failures)."""
        if name in self._counting:
            self._counting.discard(name)
            await self._store.delete(f"{NAMESPACE}{self._key(name)}:failures")

    def _key(self, name: str) -> str:
        return self._keys.get(name, name)
