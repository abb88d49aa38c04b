"""Calling backends: per-backend timeout, retries, circuit breaker and auto-paging; then
the two ways of using several: a hedged fallback chain, or a fan-out to all at once."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Any

from searcher.backends.base import Backend, BackendAnswer, BackendQuery, Hit
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
from searcher.urls import normalise_url

# Below this many seconds left, an attempt could not finish anyway: do not start it.
MIN_ATTEMPT_S = 0.05
RETRY_BACKOFF_S = 0.05
# Latencies kept per backend for the hedging delay (its observed p90).
LATENCY_WINDOW = 100
MIN_LATENCY_SAMPLES = 5


@dataclass
class ChainResult:
    answer: BackendAnswer
    tried: list[str]
    failures: list[BackendFailure] = field(default_factory=list)
    hedged: dict[str, Any] | None = None

    @property
    def fallback_used(self) -> bool:
        return bool(self.tried) and self.answer.backend != self.tried[0]


@dataclass
class FanOutResult:
    answers: list[BackendAnswer]
    tried: list[str]
    failures: list[BackendFailure] = field(default_factory=list)


def _merge_pages(pages: Sequence[list[Hit]]) -> list[Hit]:
    """Hits of consecutive result pages, without repeats (SearXNG pages overlap)."""
    seen: set[str] = set()
    merged = []
    for page in pages:
        for hit in page:
            key = normalise_url(hit.url)
            if key not in seen:
                seen.add(key)
                merged.append(hit)
    return merged


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
        self._latencies: dict[str, deque[float]] = {
            name: deque(maxlen=LATENCY_WINDOW) for name in backends
        }

    # --- one backend ----------------------------------------------------------------------

    async def call(
        self, name: str, query: BackendQuery, deadline: Deadline, timeout_s: float, retries: int
    ) -> BackendAnswer:
        """One search on one backend, behind its breaker, retrying transient failures, and
        paging a backend that has no result count until ``max_results`` is met."""
        backend = self.backends.get(name)
        if backend is None:
            raise BackendNotAvailable(name, "not enabled or not configured")
        breaker = self.breakers[name]
        timeout_s = min(timeout_s, self._settings.backends.get(name).timeout_s)
        if not breaker.allow():
            raise CircuitOpen(name, f"circuit open after repeated failures ({breaker.last_error})")
        started = time.perf_counter()
        try:
            answer = await self._attempts(backend, query, deadline, timeout_s, retries)
        except BackendError as exc:
            breaker.record_failure(exc.reason)
            raise
        except BaseException:
            breaker.release()  # cancelled mid-call (deadline, hedge lost): no verdict
            raise
        breaker.record_success()
        self._latencies[name].append(time.perf_counter() - started)
        if backend.capabilities.paging and not backend.capabilities.result_count:
            answer = await self._more_pages(backend, query, answer, deadline, timeout_s)
        return answer

    async def _attempts(
        self, backend: Backend, query: BackendQuery, deadline: Deadline, timeout_s: float,
        retries: int,
    ) -> BackendAnswer:  # fmt: skip
        last_error: BackendError | None = None
        for attempt in range(retries + 1):
            attempt_timeout = deadline.cap(timeout_s)
            if attempt_timeout < MIN_ATTEMPT_S:
                raise last_error or BackendTimeout(backend.name, "request deadline reached")
            try:
                return await backend.search(query, attempt_timeout)
            except BackendError as exc:
                last_error = exc
                if not exc.retryable or attempt == retries:
                    raise
                await asyncio.sleep(deadline.cap(RETRY_BACKOFF_S * 2**attempt))
        raise last_error or BackendTimeout(backend.name, "no attempt was made")

    async def _more_pages(
        self, backend: Backend, query: BackendQuery, first: BackendAnswer, deadline: Deadline,
        timeout_s: float,
    ) -> BackendAnswer:  # fmt: skip
        """SearXNG has no count parameter: ask for the next pages until there are enough
        hits, a page adds nothing new, or ``max_pages`` is reached. A later page failing
        keeps what the earlier ones gave."""
        pages = [first.hits]
        hits = _merge_pages(pages)
        warnings = list(first.warnings)
        pageno = query.pageno
        for _ in range(self._settings.backends.max_pages - 1):
            if (
                len(hits) >= query.max_results
                or not pages[-1]
                or deadline.cap(timeout_s) < MIN_ATTEMPT_S
            ):
                break
            pageno += 1
            try:
                page = await backend.search(replace(query, pageno=pageno), deadline.cap(timeout_s))
            except BackendError as exc:
                warnings.append(f"page {pageno} failed: {exc.reason}")
                break
            pages.append(page.hits)
            before = len(hits)
            hits = _merge_pages(pages)
            if len(hits) == before:
                break
        return BackendAnswer(first.backend, hits, first.elapsed_ms, warnings)

    def hedge_delay(self, name: str) -> float | None:
        """Seconds to wait for ``name`` before starting the next backend: the configured
        delay, else its observed p90 latency once there are enough samples."""
        cfg = self._settings.backends
        if not cfg.hedge:
            return None
        if cfg.hedge_delay_ms is not None:
            return cfg.hedge_delay_ms / 1000
        samples = sorted(self._latencies.get(name, ()))
        if len(samples) < MIN_LATENCY_SAMPLES:
            return None
        return samples[min(len(samples) - 1, int(0.9 * len(samples)))]

    # --- several backends ------------------------------------------------------------------

    async def search_with_fallback(
        self,
        names: Sequence[str],
        query: BackendQuery,
        deadline: Deadline,
        timeout_s: float,
        retries: int,
    ) -> ChainResult:
        """Try ``names`` in order until one gives hits. When the current backend is slower
        than its hedging delay, the next one starts too; the first good answer wins and the
        rest are cancelled. A backend with zero hits is passed over but not held against
        it; if all were empty, the first empty answer is returned."""
        tried: list[str] = []
        failures: list[BackendFailure] = []
        empties: list[BackendAnswer] = []
        running: dict[asyncio.Task[BackendAnswer], str] = {}
        pending = list(names)
        hedged_from: list[str] = []

        def start_next() -> None:
            while pending:
                name = pending.pop(0)
                if deadline.remaining() < MIN_ATTEMPT_S:
                    failures.append(BackendFailure(name, "not tried: request deadline reached"))
                    continue
                tried.append(name)
                task = asyncio.create_task(self.call(name, query, deadline, timeout_s, retries))
                running[task] = name
                return

        start_next()
        try:
            while running:
                newest = tried[-1]
                delay = self.hedge_delay(newest) if pending else None
                done, _ = await asyncio.wait(
                    running, timeout=delay, return_when=asyncio.FIRST_COMPLETED
                )
                if not done:  # the newest backend is slow: hedge with the next one
                    hedged_from.append(newest)
                    start_next()
                    continue
                for task in sorted(done, key=lambda t: tried.index(running[t])):
                    name = running.pop(task)
                    try:
                        answer = task.result()
                    except BackendError as exc:
                        failures.append(BackendFailure(name, exc.reason))
                        continue
                    if answer.hits:
                        hedged = None
                        if hedged_from:
                            hedged = {
                                "started": list(tried),
                                "winner": name,
                                "cancelled": [running[t] for t in running],
                            }
                        return ChainResult(answer, tried, failures, hedged)
                    failures.append(BackendFailure(name, "no results"))
                    empties.append(answer)
                if not running:
                    start_next()
        finally:
            for task in running:
                task.cancel()
            for task in running:
                with contextlib.suppress(asyncio.CancelledError, BackendError):
                    await task
        if empties:
            return ChainResult(empties[0], tried, failures)
        raise AllBackendsFailed(failures)

    async def fan_out(
        self,
        names: Sequence[str],
        query: BackendQuery,
        deadline: Deadline,
        timeout_s: float,
        retries: int,
    ) -> FanOutResult:
        """Query every backend in ``names`` at once; failures leave the others' answers."""
        tasks = [
            asyncio.create_task(self.call(name, query, deadline, timeout_s, retries))
            for name in names
        ]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        answers: list[BackendAnswer] = []
        failures: list[BackendFailure] = []
        for name, result in zip(names, results, strict=True):
            if isinstance(result, BackendError):
                failures.append(BackendFailure(name, result.reason))
            elif isinstance(result, BaseException):
                raise result
            elif result.hits:
                answers.append(result)
            else:
                failures.append(BackendFailure(name, "no results"))
        return FanOutResult(answers, list(names), failures)
