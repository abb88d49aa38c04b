"""Circuit breakers shared by every worker and replica through the state store.

Each process keeps its own ``CircuitBreaker`` (fast, no I/O on the hot path); the store
adds what they must agree on: the consecutive failures of an instance, counted by all, and
"open until" once any of them opened it. A process that has seen the instance fail looks
at the shared state before every call; while it sees it healthy, at most every ``SYNC_S``
(so a healthy backend's calls rarely pay a store round trip, and a failing one is left
alone by every worker within that long).

A success ends the consecutive failures for all, whichever process counted them. Beside
the count is a "failing" mark, read with "open until": a process that has seen the mark
resets the count at its next success (a store write only after failures), and one that
finds its mark gone learns that another process's call succeeded meanwhile.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable, Mapping

from searcher.errors import FailureKind
from searcher.pipeline.resilience import NO_VERDICT, CircuitBreaker
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
        # Instances whose "failing" mark we set or last read: a shared count to reset.
        self._marked: set[str] = set()

    async def sync(self, name: str, breaker: CircuitBreaker) -> None:
        """Open ``breaker`` here if another process opened it."""
        now = self._clock()
        if breaker.state == "open":
            return
        healthy = breaker.consecutive_failures == 0 and name not in self._marked
        if healthy and now - self._checked.get(name, 0.0) < self._sync_s:
            return
        self._checked[name] = now
        key = self._key(name)
        raw, failing = await asyncio.gather(
            self._store.get(f"{key}:open_until"), self._store.get(f"{key}:failing")
        )
        if failing is not None:
            self._marked.add(name)
        elif name in self._marked:  # reset by another process's success (or expired)
            self._marked.discard(name)
            breaker.succeeded_elsewhere()
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
        key = self._key(name)
        count, _ = await asyncio.gather(
            self._store.incr(f"{key}:failures", 1, recovery_s * 2),
            self._store.set(f"{key}:failing", b"1", recovery_s * 2),
        )
        self._marked.add(name)
        snapshot = breaker.snapshot()
        if snapshot.state != "open" and count >= threshold:
            breaker.force_open(recovery_s, f"{count} consecutive failures across workers")
            snapshot = breaker.snapshot()
        if snapshot.state == "open" and snapshot.retry_in_s:
            until = self._clock() + snapshot.retry_in_s
            await self._store.set(f"{key}:open_until", str(until).encode(), snapshot.retry_in_s)

    async def succeeded(self, name: str) -> None:
        """A success ends the consecutive failures, counted here or elsewhere (a store write
        only after failures)."""
        if name in self._marked:
            self._marked.discard(name)
            key = self._key(name)
            await asyncio.gather(
                self._store.delete(f"{key}:failures"), self._store.delete(f"{key}:failing")
            )

    def _key(self, name: str) -> str:
        """The store key prefix of an instance's shared breaker."""
        return NAMESPACE + self._keys.get(name, name)
