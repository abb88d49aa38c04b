"""One call to one backend instance, as every call goes: behind the instance's circuit
breaker, after its pacing turn, each attempt within the request's deadline, transient
failures retried, and every failed attempt judged (as SearXNG's per-engine processors
do for its search). The strategies (``fallback``, ``fanout``, ``paging``) decide which
instances to call and when; this module decides nothing of that.

A failure the request itself caused gives the breaker no verdict: a status refusing the
request as invalid (``failures.NO_VERDICT_STATUSES``), or a timeout of an attempt the
request's deadline or short budget cut below a fair time (``fair_timeout``).
"""

from __future__ import annotations

import asyncio
import logging
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

from searcher.backends.base import Backend, BackendAnswer, BackendQuery
from searcher.backends.pacing import Pacer
from searcher.backends.shared_breakers import SharedBreakers
from searcher.config import Settings
from searcher.errors import (
    BackendBadResponse,
    BackendError,
    BackendFailure,
    BackendNotAvailable,
    BackendRateLimited,
    BackendTimeout,
    CircuitOpen,
)
from searcher.pipeline.resilience import CircuitBreaker, Clock, Deadline
from searcher.recording.breaker_tape import record_refusal, replayed_refusal
from searcher.recording.tape import replaying

if TYPE_CHECKING:  # prometheus_client is imported only by the apps that count
    from searcher.api.metrics import Metrics

# Below this many seconds left, an attempt could not finish anyway: do not start it.
MIN_ATTEMPT_S = 0.05
RETRY_BACKOFF_S = 0.05

log = logging.getLogger(__name__)


@dataclass
class Watch:
    """One call's link to the search that started it: its failed attempts go to the
    search's failures until the search has returned; ``abandoned`` stops its retries."""

    report: Callable[[BackendError], None] = lambda exc: None
    failed_attempts: int = 0  # reported, whether or not the breaker counted them
    counted: bool = False  # the breaker has had a verdict from this call
    abandoned: bool = False
    # The pacer let the call through: from now on it may reach the backend. A call still
    # waiting for its turn has asked nothing yet, so losing a race cancels it.
    in_flight: bool = False


class FailureLog:
    """The failures of one search, closed when the search returns (stragglers that fail
    later count on their breaker, not in an outcome that is already out)."""

    def __init__(self) -> None:
        self.items: list[BackendFailure] = []
        self.closed = False

    def watch(self) -> Watch:
        """A watch whose reported failures land in this log while it is open."""
        watch = Watch()

        def report(exc: BackendError) -> None:
            watch.failed_attempts += 1
            if not self.closed:
                self.items.append(exc.failure())

        watch.report = report
        return watch

    def add(self, failure: BackendFailure) -> None:
        """Add a failure no call reported (an instance not tried, an empty answer)."""
        if not self.closed:
            self.items.append(failure)

    def close(self) -> list[BackendFailure]:
        """Close the log; the failures recorded so far."""
        self.closed = True
        return list(self.items)


def _failures(count: int) -> str:
    # One 403 or 429 opens a breaker at once (a key refused, a Retry-After to honour).
    return "a failure" if count <= 1 else f"{count} failures in a row"


class BackendRunner:
    """Calls to the usable instances, one circuit breaker each; the pool owns one."""

    def __init__(
        self,
        backends: dict[str, Backend],
        settings: Settings,
        clock: Clock = time.monotonic,
        shared: SharedBreakers | None = None,
        pacer: Pacer | None = None,
        metrics: Metrics | None = None,
    ) -> None:
        self.backends = backends
        self.shared = shared  # breakers agreed on with the other workers (state store)
        self.pacer = pacer  # each instance's allowance (backends.<instance>.rate)
        self.metrics = metrics  # backend calls by outcome, for /metrics
        self._settings = settings
        self._clock = clock
        self.breakers = {
            name: CircuitBreaker(settings.backends.get(name).breaker, clock) for name in backends
        }

    def backend(self, name: str, watch: Watch) -> Backend:
        """The instance ``name``; ``BackendNotAvailable`` (reported) when it is not usable."""
        backend = self.backends.get(name)
        if backend is None:
            exc = BackendNotAvailable(name, "not enabled or not configured")
            watch.report(exc)
            raise exc
        return backend

    async def page(
        self, backend: Backend, query: BackendQuery, deadline: Deadline, timeout_s: float,
        retries: int, watch: Watch,
    ) -> BackendAnswer:  # fmt: skip
        """One page from ``backend`` as every call to it goes: behind its breaker, after
        its pacing turn, its attempts judged by the breaker."""
        name = backend.name
        if replaying():
            refused = replayed_refusal(name)
            if refused is not None:
                exc = CircuitOpen(name, refused)
                watch.report(exc)
                raise exc
            return await self._replayed_page(backend, query, deadline, timeout_s, retries, watch)
        breaker = self.breakers[name]
        if self.shared is not None:
            await self.shared.sync(name, breaker)
        if not breaker.allow():
            snap = breaker.snapshot()
            wait = f"; next trial in {snap.retry_in_s:.0f} s" if snap.retry_in_s else ""
            after = _failures(snap.consecutive_failures)
            exc = CircuitOpen(name, f"circuit open after {after} ({snap.last_error}){wait}")
            record_refusal(name, exc.reason)
            watch.report(exc)
            self.count(name, exc.kind)
            raise exc
        try:
            await self._wait_turn(name, deadline, watch)
            watch.in_flight = True
            answer = await self._attempts(
                backend, breaker, query, deadline, timeout_s, retries, watch
            )
        except BaseException:
            if not watch.counted:
                breaker.release()  # ended before any verdict (paced, deadline, hedge lost)
            raise
        breaker.record_success()
        self.count(name, "ok")
        if self.shared is not None:
            await self.shared.succeeded(name)
        return answer

    async def _replayed_page(
        self, backend: Backend, query: BackendQuery, deadline: Deadline, timeout_s: float,
        retries: int, watch: Watch,
    ) -> BackendAnswer:  # fmt: skip
        """A page of a replayed search: its answers and failures come from the recording,
        so the live breaker, pacing and the other workers' breakers are neither asked
        (an instance down now still replays) nor told (a recorded timeout must not open
        a breaker of the live backend). A breaker of this call alone still stops its
        retries as one would have."""
        breaker = CircuitBreaker(self._settings.backends.get(backend.name).breaker, self._clock)
        watch.in_flight = True
        return await self._attempts(
            backend, breaker, query, deadline, timeout_s, retries, watch, live=False
        )

    async def _wait_turn(self, name: str, deadline: Deadline, watch: Watch) -> None:
        """Wait for the instance's pacing turn; one after the deadline is refused
        (``rate_limited``, never called: no verdict on the backend)."""
        if self.pacer is None:
            return
        try:
            await self.pacer.wait_turn(name, deadline)
        except BackendRateLimited as exc:
            watch.report(exc)
            self.count(name, exc.kind)
            raise

    def count(self, name: str, outcome: str) -> None:
        """Count one call of ``name`` by outcome (a failure kind, or ``ok``) for /metrics."""
        if self.metrics is not None:
            self.metrics.backend_call(name, None, outcome)

    async def _attempts(
        self, backend: Backend, breaker: CircuitBreaker, query: BackendQuery, deadline: Deadline,
        timeout_s: float, retries: int, watch: Watch, live: bool = True,
    ) -> BackendAnswer:  # fmt: skip
        last_error: BackendError | None = None
        fair_s = self.fair_timeout(backend.name)
        for attempt in range(retries + 1):
            attempt_timeout = deadline.cap(timeout_s)
            if attempt_timeout < MIN_ATTEMPT_S:
                if last_error is not None:
                    raise last_error
                exc = BackendTimeout(backend.name, "not tried: request deadline reached")
                watch.report(exc)  # no verdict on the backend: the request ran out
                raise exc
            try:
                return await self._search(backend, query, attempt_timeout)
            except BackendError as exc:
                last_error = exc
                # A timeout of an attempt the request gave less than a fair time (its
                # deadline or its own short search timeout) says nothing about the backend.
                cut_short = isinstance(exc, BackendTimeout) and attempt_timeout < fair_s
                verdict = exc.verdict and not cut_short
                await self._judge(backend.name, breaker, exc, verdict, watch, live)
                if (
                    not exc.retryable
                    or attempt == retries
                    or watch.abandoned
                    or breaker.state == "open"
                ):
                    raise
                await asyncio.sleep(deadline.cap(RETRY_BACKOFF_S * 2**attempt))
        raise last_error or BackendTimeout(backend.name, "no attempt was made")

    def fair_timeout(self, name: str) -> float:
        """The time an attempt must have had for its timeout to count against the
        backend: its own ``timeout_s``, or the configured default search timeout when
        that is shorter. A client's shorter budget must not open a breaker for all."""
        default_s = self._settings.budget.search_timeout_ms / 1000
        return min(self._settings.backends.get(name).timeout_s, default_s)

    async def _search(
        self, backend: Backend, query: BackendQuery, timeout_s: float
    ) -> BackendAnswer:
        """``backend.search``; anything else than a ``BackendError`` it raises (a plugin's
        bug) is a bad answer of that backend, logged with its traceback."""
        try:
            return await backend.search(query, timeout_s)
        except BackendError:
            raise
        except Exception as exc:
            log.exception("backend %s raised an unexpected error", backend.name)
            raise BackendBadResponse(backend.name, f"unexpected error: {exc!r}") from exc

    async def _judge(
        self, name: str, breaker: CircuitBreaker, exc: BackendError, verdict: bool,
        watch: Watch, live: bool = True,
    ) -> None:  # fmt: skip
        """Report a failed attempt and, when it says something about the backend
        (``verdict``), count it on the breaker, here and (``live``: not a replay's) for
        the other workers."""
        if live:
            self.count(name, exc.kind)
        watch.report(exc)
        if not verdict:
            return  # the call releases the breaker: no verdict
        breaker.record_failure(exc.kind, exc.reason, exc.retry_after_s)
        if self.shared is not None and live:
            cfg = self._settings.backends.get(name).breaker
            await self.shared.failed(
                name, breaker, exc.kind, cfg.failure_threshold, cfg.recovery_timeout
            )
        watch.counted = True

    def unexpected(self, name: str, exc: Exception) -> BackendFailure:
        """An error that is not a ``BackendError`` (a bug, a state store gone), logged
        with its traceback, as that backend's failure."""
        log.error("backend %s failed unexpectedly", name, exc_info=exc)
        failure = BackendBadResponse(name, f"unexpected error: {exc!r}").failure()
        self.count(name, failure.kind)
        return failure
