"""Calling backends: per-backend timeout, retries and circuit breaker, and the fallback chain."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Sequence
from dataclasses import dataclass, field

from searcher.backends.base import Backend, BackendAnswer, BackendQuery
from searcher.config import Settings
from searcher.errors import (
    AllBackendsFailed,
    BackendError,
    BackendFailure,
    BackendNotAvailable,
    BackendTimeout,
    CircuitOpen,
)
from searcher.resilience import CircuitBreaker, Clock, Deadline

# Below this many seconds left, an attempt could not finish anyway: do not start it.
MIN_ATTEMPT_S = 0.05
RETRY_BACKOFF_S = 0.05


@dataclass
class ChainResult:
    answer: BackendAnswer
    tried: list[str]
    failures: list[BackendFailure] = field(default_factory=list)

    @property
    def fallback_used(self) -> bool:
        return bool(self.tried) and self.answer.backend != self.tried[0]


class BackendPool:
    """The usable backends with one circuit breaker each; the app owns one pool."""

    def __init__(
        self, backends: dict[str, Backend], settings: Settings, clock: Clock = time.monotonic
    ) -> None:
        self.backends = backends
        self._settings = settings
        self.breakers = {
            name: CircuitBreaker(settings.backends.get(name).breaker, clock) for name in backends
        }

    async def call(
        self, name: str, query: BackendQuery, deadline: Deadline, timeout_s: float, retries: int
    ) -> BackendAnswer:
        """One search on one backend, behind its breaker, retrying transient failures."""
        backend = self.backends.get(name)
        if backend is None:
            raise BackendNotAvailable(name, "not enabled or not configured")
        breaker = self.breakers[name]
        timeout_s = min(timeout_s, self._settings.backends.get(name).timeout_s)
        if not breaker.allow():
            raise CircuitOpen(name, f"circuit open after repeated failures ({breaker.last_error})")
        last_error: BackendError | None = None
        try:
            for attempt in range(retries + 1):
                attempt_timeout = deadline.cap(timeout_s)
                if attempt_timeout < MIN_ATTEMPT_S:
                    last_error = last_error or BackendTimeout(name, "request deadline reached")
                    break
                try:
                    answer = await backend.search(query, attempt_timeout)
                except BackendError as exc:
                    last_error = exc
                    if not exc.retryable or attempt == retries:
                        break
                    await asyncio.sleep(deadline.cap(RETRY_BACKOFF_S * 2**attempt))
                    continue
                breaker.record_success()
                return answer
        except BaseException:
            breaker.release()  # cancelled mid-call: no verdict on the backend
            raise
        assert last_error is not None
        breaker.record_failure(last_error.reason)
        raise last_error

    async def search_with_fallback(
        self,
        names: Sequence[str],
        query: BackendQuery,
        deadline: Deadline,
        timeout_s: float,
        retries: int,
    ) -> ChainResult:
        """Try ``names`` in order until one gives hits. A backend with zero hits is passed
        over but not held against it; if all were empty, the first empty answer is returned."""
        tried: list[str] = []
        failures: list[BackendFailure] = []
        first_empty: BackendAnswer | None = None
        for name in names:
            if deadline.remaining() < MIN_ATTEMPT_S:
                failures.append(BackendFailure(name, "not tried: request deadline reached"))
                continue
            tried.append(name)
            try:
                answer = await self.call(name, query, deadline, timeout_s, retries)
            except BackendError as exc:
                failures.append(BackendFailure(name, exc.reason))
                continue
            if answer.hits:
                return ChainResult(answer, tried, failures)
            failures.append(BackendFailure(name, "no results"))
            first_empty = first_empty or answer
        if first_empty is not None:
            return ChainResult(first_empty, tried, failures)
        raise AllBackendsFailed(failures)
