"""The backend pool: calling instances (per-instance timeout, retries, circuit breaker,
auto-paging, only the constraints each can honour), the two ways of using several (a
hedged fallback chain, or a fan-out to all at once), and ``search``, the degradation
ladder over both that a request uses.

No failure is hidden: every failed attempt is counted by its instance's breaker and
listed in the outcome, also when a hedged sibling won the race meanwhile. A sibling
that lost the race while its first attempt was still in flight is not cancelled: it
runs on in the background, bounded by its own timeout (at most ``MAX_STRAGGLERS`` at
once), so that a hanging backend's timeout is still counted by its breaker; a sibling
that already failed an attempt is cancelled (its failure is on record, and a retry
could no longer help this request), and so is one still waiting for its pacing turn (it
has asked nothing: it must not call the backend after the request has answered).

A failure the request itself caused gives the breaker no verdict: a status refusing the
request as invalid (``failures.NO_VERDICT_STATUSES``), or a timeout of an attempt the
request's deadline or short budget cut below a fair time (``_fair_timeout``).
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections import deque
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field, replace
from typing import TYPE_CHECKING, Any

from searcher.backends.base import Backend, BackendAnswer, BackendQuery, Capabilities, Hit
from searcher.backends.outcome import PlanNote, SearchOutcome
from searcher.backends.pacing import Pacer
from searcher.backends.policy import BackendPlan
from searcher.backends.shared_breakers import SharedBreakers
from searcher.config import Settings
from searcher.errors import (
    AllBackendsFailed,
    BackendBadResponse,
    BackendError,
    BackendFailure,
    BackendNotAvailable,
    BackendRateLimited,
    BackendTimeout,
    CircuitOpen,
)
from searcher.fetch.urls import page_key
from searcher.pipeline.resilience import CircuitBreaker, Clock, Deadline

# Below this many seconds left, an attempt could not finish anyway: do not start it.
MIN_ATTEMPT_S = 0.05
RETRY_BACKOFF_S = 0.05
# Latencies kept per backend for the hedging delay (its observed p90).
LATENCY_WINDOW = 100
MIN_LATENCY_SAMPLES = 5
# Calls that lost a hedged race and run on until their own timeout, at most; beyond
# this they are cancelled (no verdict) so that a hanging backend cannot pile them up.
MAX_STRAGGLERS = 256

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # prometheus_client is imported only by the apps that count
    from searcher.api.metrics import Metrics


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


@dataclass
class _Watch:
    """One call's link to the search that started it: its failed attempts go to the
    search's failures until the search has returned; ``abandoned`` stops its retries."""

    report: Callable[[BackendError], None] = lambda exc: None
    failed_attempts: int = 0  # reported, whether or not the breaker counted them
    counted: bool = False  # the breaker has had a verdict from this call
    abandoned: bool = False
    # The pacer let the call through: from now on it may reach the backend. A call still
    # waiting for its turn has asked nothing yet, so losing a race cancels it.
    in_flight: bool = False


class _Failures:
    """The failures of one search, closed when the search returns (stragglers that fail
    later count on their breaker, not in an outcome that is already out)."""

    def __init__(self) -> None:
        self.items: list[BackendFailure] = []
        self.closed = False

    def watch(self) -> _Watch:
        watch = _Watch()

        def report(exc: BackendError) -> None:
            watch.failed_attempts += 1
            if not self.closed:
                self.items.append(exc.failure())

        watch.report = report
        return watch

    def add(self, failure: BackendFailure) -> None:
        if not self.closed:
            self.items.append(failure)

    def close(self) -> list[BackendFailure]:
        self.closed = True
        return list(self.items)


# (capability, query field, constraint as the request names it)
_CONSTRAINTS: tuple[tuple[str, str, str], ...] = (
    ("language", "lang", "constraints.lang"),
    ("time_range", "time_range", "constraints.time_range"),
    ("safesearch", "safesearch", "constraints.safesearch"),
    ("engines", "engines", "constraints.engines"),
    ("categories", "categories", "constraints.categories"),
)
_CLEARED: dict[str, Any] = {
    "lang": None, "time_range": None, "safesearch": None, "engines": (), "categories": ()
}  # fmt: skip


def _failures(count: int) -> str:
    # One 403 or 429 opens a breaker at once (a key refused, a Retry-After to honour).
    return "a failure" if count <= 1 else f"{count} failures in a row"


def fit_query(query: BackendQuery, capabilities: Capabilities) -> tuple[BackendQuery, list[str]]:
    """The query with what the instance cannot honour left out, and a note for each
    constraint left out (as the request names it)."""
    cleared: dict[str, Any] = {}
    notes = []
    for capability, name, constraint in _CONSTRAINTS:
        value = getattr(query, name)
        if value not in (None, ()) and not getattr(capabilities, capability):
            cleared[name] = _CLEARED[name]
            if name in query.routed:
                continue
            shown = ", ".join(value) if isinstance(value, tuple) else value
            notes.append(f"cannot honour {constraint} ({shown}); searched without it")
    last_page = _max_pageno(capabilities)
    if query.pageno > 1 and not capabilities.paging:
        cleared["pageno"] = 1
        notes.append(f"cannot honour constraints.pageno ({query.pageno}); searched page 1")
    elif last_page is not None and query.pageno > last_page:
        cleared["pageno"] = last_page
        notes.append(
            f"cannot honour constraints.pageno ({query.pageno}): it serves pages up to "
            f"{last_page}; searched page {last_page}"
        )
    most = _limit(capabilities, "max_results")
    if most is not None and query.max_results > most:
        notes.append(
            f"cannot honour budget.max_results ({query.max_results}): it gives at most {most} "
            "results a search"
        )
    return (replace(query, **cleared) if cleared else query), notes


def _max_pageno(capabilities: Capabilities) -> int | None:
    """The last page an instance serves (Brave: 10), when its capabilities say."""
    return _limit(capabilities, "max_pageno")


def _limit(capabilities: Capabilities, name: str) -> int | None:
    """A limit an adapter's capabilities add (``max_pageno``, ``max_results``), if any."""
    value = getattr(capabilities, name, None)
    return value if isinstance(value, int) else None


def _merge_pages(pages: Sequence[list[Hit]]) -> list[Hit]:
    """Hits of consecutive result pages, without repeats (SearXNG pages overlap)."""
    seen: set[str] = set()
    merged = []
    for page in pages:
        for hit in page:
            key = page_key(hit.url)
            if key not in seen:
                seen.add(key)
                merged.append(hit)
    return merged


class BackendPool:
    """The usable backend instances with one circuit breaker each; the app owns one."""

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
        self.clock = clock
        self.shared = shared  # breakers agreed on with the other workers (state store)
        self.pacer = pacer  # each instance's allowance (backends.<instance>.rate)
        self.metrics = metrics  # backend calls by outcome, for /metrics
        self._settings = settings
        self.breakers = {
            name: CircuitBreaker(settings.backends.get(name).breaker, clock) for name in backends
        }
        self._latencies: dict[str, deque[float]] = {
            name: deque(maxlen=LATENCY_WINDOW) for name in backends
        }
        self._stragglers: set[asyncio.Task[BackendAnswer]] = set()

    # --- one backend ----------------------------------------------------------------------

    async def call(
        self,
        name: str,
        query: BackendQuery,
        deadline: Deadline,
        timeout_s: float,
        retries: int,
        watch: _Watch | None = None,
    ) -> BackendAnswer:
        """One search on one instance, behind its breaker, with only the constraints it
        can honour, retrying transient failures, and paging an instance that has no
        result count until ``max_results`` is met. Every failed attempt is counted by the
        breaker and reported to ``watch``."""
        watch = watch or _Watch()
        backend = self.backends.get(name)
        if backend is None:
            exc: BackendError = BackendNotAvailable(name, "not enabled or not configured")
            watch.report(exc)
            raise exc
        timeout_s = min(timeout_s, self._settings.backends.get(name).timeout_s)
        query, _ = fit_query(query, backend.capabilities)
        started = time.perf_counter()
        answer = await self._guarded(backend, query, deadline, timeout_s, retries, watch)
        if watch.abandoned:
            return answer  # lost a hedged race: no one waits for more pages
        if backend.capabilities.paging and not backend.capabilities.result_count:
            answer = await self._more_pages(backend, query, answer, deadline, timeout_s)
        # The whole call, its further pages too: what a hedged race waits for.
        self._latencies[name].append(time.perf_counter() - started)
        return answer

    async def _guarded(
        self, backend: Backend, query: BackendQuery, deadline: Deadline, timeout_s: float,
        retries: int, watch: _Watch,
    ) -> BackendAnswer:  # fmt: skip
        """One page from ``backend`` as every call to it goes: behind its breaker, after
        its pacing turn, its attempts judged by the breaker."""
        name = backend.name
        breaker = self.breakers[name]
        if self.shared is not None:
            await self.shared.sync(name, breaker)
        if not breaker.allow():
            snap = breaker.snapshot()
            wait = f"; next trial in {snap.retry_in_s:.0f} s" if snap.retry_in_s else ""
            after = _failures(snap.consecutive_failures)
            exc = CircuitOpen(name, f"circuit open after {after} ({snap.last_error}){wait}")
            watch.report(exc)
            self._count(name, exc.kind)
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
        self._count(name, "ok")
        if self.shared is not None:
            await self.shared.succeeded(name)
        return answer

    async def _wait_turn(self, name: str, deadline: Deadline, watch: _Watch) -> None:
        """Wait for the instance's pacing turn; one after the deadline is refused
        (``rate_limited``, never called: no verdict on the backend)."""
        if self.pacer is None:
            return
        try:
            await self.pacer.wait_turn(name, deadline)
        except BackendRateLimited as exc:
            watch.report(exc)
            self._count(name, exc.kind)
            raise

    def _count(self, name: str, outcome: str) -> None:
        if self.metrics is not None:
            self.metrics.backend_call(name, None, outcome)

    async def _attempts(
        self, backend: Backend, breaker: CircuitBreaker, query: BackendQuery, deadline: Deadline,
        timeout_s: float, retries: int, watch: _Watch,
    ) -> BackendAnswer:  # fmt: skip
        last_error: BackendError | None = None
        fair_s = self._fair_timeout(backend.name)
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
                verdict = exc.verdict and not (exc.kind == "timeout" and attempt_timeout < fair_s)
                await self._judge(backend.name, breaker, exc, verdict, watch)
                if (
                    not exc.retryable
                    or attempt == retries
                    or watch.abandoned
                    or breaker.state == "open"
                ):
                    raise
                await asyncio.sleep(deadline.cap(RETRY_BACKOFF_S * 2**attempt))
        raise last_error or BackendTimeout(backend.name, "no attempt was made")

    def _fair_timeout(self, name: str) -> float:
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
        watch: _Watch,
    ) -> None:  # fmt: skip
        """Report a failed attempt and, when it says something about the backend
        (``verdict``), count it on the breaker, here and for the other workers."""
        self._count(name, exc.kind)
        watch.report(exc)
        if not verdict:
            return  # the call releases the breaker: no verdict
        breaker.record_failure(exc.kind, exc.reason, exc.retry_after_s)
        if self.shared is not None:
            cfg = self._settings.backends.get(name).breaker
            await self.shared.failed(
                name, breaker, exc.kind, cfg.failure_threshold, cfg.recovery_timeout
            )
        watch.counted = True

    async def _more_pages(
        self, backend: Backend, query: BackendQuery, first: BackendAnswer, deadline: Deadline,
        timeout_s: float,
    ) -> BackendAnswer:  # fmt: skip
        """SearXNG has no count parameter: ask for the next pages until there are enough
        hits, a page adds nothing new, or ``max_pages`` is reached. Each page is a call
        like the first (its breaker, its pacing turn); a later page failing or finding no
        turn before the deadline keeps what the earlier ones gave, with a warning."""
        pages = [first.hits]
        hits = _merge_pages(pages)
        warnings = list(first.warnings)
        unresponsive = list(first.unresponsive)
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
                page = await self._guarded(
                    backend, replace(query, pageno=pageno), deadline, timeout_s, 0, _Watch()
                )
            except BackendError as exc:
                warnings.append(f"page {pageno} not read ({exc.kind}): {exc.reason}")
                break
            pages.append(page.hits)
            warnings += [w for w in page.warnings if w not in warnings]
            before = len(hits)
            hits = _merge_pages(pages)
            if len(hits) == before:
                break
        return replace(first, hits=hits, warnings=warnings, unresponsive=tuple(unresponsive))

    def hedge_delay(self, name: str, deadline: Deadline) -> float | None:
        """Seconds to wait for ``name`` before starting the next backend: the configured
        delay, else its observed p90 latency once there are enough samples, else half the
        time the request has left (an instance that hangs from the start must not hold
        the whole deadline: the rest of the chain gets the other half)."""
        cfg = self._settings.backends
        if not cfg.hedge:
            return None
        if cfg.hedge_delay_ms is not None:
            return cfg.hedge_delay_ms / 1000
        samples = sorted(self._latencies.get(name, ()))
        if len(samples) < MIN_LATENCY_SAMPLES:
            return deadline.remaining() / 2
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
        than its hedging delay, the next one starts too; the first good answer wins. A
        backend with zero hits is passed over but not held against it; if all were empty,
        the first empty answer is returned. Losers: see the module docstring."""
        if len(names) == 1:
            return await self._only(names[0], query, deadline, timeout_s, retries)
        return await self._race(names, query, deadline, timeout_s, retries)

    async def _race(
        self, names: Sequence[str], query: BackendQuery, deadline: Deadline, timeout_s: float,
        retries: int,
    ) -> ChainResult:  # fmt: skip
        """``search_with_fallback``'s chain: each call a task, the next one started when
        the newest is slower than its hedging delay or has failed."""
        tried: list[str] = []
        failures = _Failures()
        empties: list[BackendAnswer] = []
        running: dict[asyncio.Task[BackendAnswer], tuple[str, _Watch]] = {}
        pending = list(names)
        hedged_from: list[str] = []

        def start_next() -> None:
            while pending:
                name = pending.pop(0)
                if deadline.remaining() < MIN_ATTEMPT_S:
                    failures.add(
                        BackendFailure(name, "not tried: request deadline reached", "timeout")
                    )
                    continue
                tried.append(name)
                watch = failures.watch()
                call = self.call(name, query, deadline, timeout_s, retries, watch)
                running[asyncio.create_task(call)] = (name, watch)
                return

        start_next()
        try:
            while running:
                newest = tried[-1]
                delay = self.hedge_delay(newest, deadline) if pending else None
                done, _ = await asyncio.wait(
                    running, timeout=delay, return_when=asyncio.FIRST_COMPLETED
                )
                if not done:  # the newest backend is slow: hedge with the next one
                    hedged_from.append(newest)
                    start_next()
                    continue
                for task in sorted(done, key=lambda t: tried.index(running[t][0])):
                    name, _ = running.pop(task)
                    try:
                        answer = task.result()
                    except BackendError:
                        continue  # reported through its watch
                    except Exception as exc:  # a bug: that backend's failure, not a 500
                        failures.add(self._unexpected(name, exc))
                        continue
                    if answer.hits:
                        hedged = self._settle_losers(running, tried, name) if hedged_from else None
                        return ChainResult(answer, tried, failures.close(), hedged)
                    failures.add(BackendFailure(name, "no results", "no_results"))
                    empties.append(answer)
                if not running:
                    start_next()
        finally:
            failures.closed = True
            for task in running:
                task.cancel()
            for task in running:
                with contextlib.suppress(asyncio.CancelledError, BackendError):
                    await task
        if empties:
            return ChainResult(empties[0], tried, failures.close())
        raise AllBackendsFailed(failures.close())

    async def _only(
        self, name: str, query: BackendQuery, deadline: Deadline, timeout_s: float, retries: int
    ) -> ChainResult:
        """``search_with_fallback`` over one instance: there is no race to run, so the call
        is awaited in place, without the task and the wait a race needs (a simple search
        pays for them on every request). The outcome is ``_race``'s for one name."""
        failures = _Failures()
        if deadline.remaining() < MIN_ATTEMPT_S:
            failures.add(BackendFailure(name, "not tried: request deadline reached", "timeout"))
            raise AllBackendsFailed(failures.close())
        answer = None
        try:
            answer = await self.call(name, query, deadline, timeout_s, retries, failures.watch())
        except BackendError:
            pass  # reported through its watch
        except Exception as exc:  # a bug: that backend's failure, not a 500
            failures.add(self._unexpected(name, exc))
        if answer is None:
            raise AllBackendsFailed(failures.close())
        if not answer.hits:
            failures.add(BackendFailure(name, "no results", "no_results"))
        return ChainResult(answer, [name], failures.close())

    def _settle_losers(
        self,
        running: dict[asyncio.Task[BackendAnswer], tuple[str, _Watch]],
        tried: list[str],
        winner: str,
    ) -> dict[str, Any]:
        """Hand the still-running losers of a hedged race to the background (their first
        attempt is in flight: let it end by its own timeout, counted by its breaker) or
        leave them to be cancelled (an attempt already failed and is on record, or none
        is in flight yet: a call still waiting for its pacing turn must not reach the
        backend after the request has answered)."""
        cancelled, background = [], []
        for task, (name, watch) in list(running.items()):
            if (
                watch.failed_attempts
                or not watch.in_flight
                or len(self._stragglers) >= MAX_STRAGGLERS
            ):
                cancelled.append(name)
                continue
            watch.abandoned = True  # no retry after this attempt
            del running[task]
            self._stragglers.add(task)
            task.add_done_callback(self._straggler_done)
            background.append(name)
        return {"started": list(tried), "winner": winner, "cancelled": cancelled,
                "background": background}  # fmt: skip

    def _straggler_done(self, task: asyncio.Task[BackendAnswer]) -> None:
        self._stragglers.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a failure is on its breaker already

    async def settle(self) -> None:
        """Wait for every call that lost a hedged race to end (tests, shutdown)."""
        while self._stragglers:
            await asyncio.wait(set(self._stragglers))

    async def aclose(self) -> None:
        """Cancel calls still running in the background; the app calls this on shutdown."""
        for task in list(self._stragglers):
            task.cancel()
        for task in list(self._stragglers):
            with contextlib.suppress(asyncio.CancelledError, BackendError):
                await task
        self._stragglers.clear()

    async def fan_out(
        self,
        names: Sequence[str],
        query: BackendQuery,
        deadline: Deadline,
        timeout_s: float,
        retries: int,
    ) -> FanOutResult:
        """Query every backend in ``names`` at once; failures leave the others' answers."""
        failures = _Failures()
        tasks = [
            asyncio.create_task(
                self.call(name, query, deadline, timeout_s, retries, failures.watch())
            )
            for name in names
        ]
        results = await asyncio.gather(*tasks, return_exceptions=True)
        answers: list[BackendAnswer] = []
        for name, result in zip(names, results, strict=True):
            if isinstance(result, BackendError):
                continue  # reported through its watch
            if isinstance(result, Exception):  # a bug: that backend's failure, not a 500
                failures.add(self._unexpected(name, result))
                continue
            if isinstance(result, BaseException):
                raise result
            if result.hits:
                answers.append(result)
            else:
                failures.add(BackendFailure(name, "no results", "no_results"))
        return FanOutResult(answers, list(names), failures.close())

    def _unexpected(self, name: str, exc: Exception) -> BackendFailure:
        """An error that is not a ``BackendError`` (a bug, a state store gone), logged
        with its traceback, as that backend's failure."""
        log.error("backend %s failed unexpectedly", name, exc_info=exc)
        self._count(name, "bad_response")
        return BackendFailure(name, f"unexpected error: {exc!r}", "bad_response")

    # --- a request's search ---------------------------------------------------------------

    async def search(
        self,
        plan: BackendPlan,
        query: BackendQuery,
        deadline: Deadline,
        timeout_s: float,
        retries: int,
    ) -> SearchOutcome:
        """The instances, used as the plan says, with the degradation ladder: a fan-out
        where every instance failed falls back to the remaining usable instances one by
        one. Raises ``AllBackendsFailed`` when none answered (an empty answer is an
        answer)."""
        if plan.mode == "fanout":
            outcome = await self._fan_out_then_rest(plan, query, deadline, timeout_s, retries)
        else:
            if not plan.names:
                raise AllBackendsFailed([])
            chain = await self.search_with_fallback(plan.names, query, deadline, timeout_s, retries)
            answers = [chain.answer] if chain.answer.hits else []
            outcome = SearchOutcome(
                answers, chain.tried, chain.failures, chain.fallback_used, chain.hedged
            )
        outcome.plan_notes = self.plan_notes(outcome.tried, query)
        return outcome

    async def _fan_out_then_rest(
        self, plan: BackendPlan, query: BackendQuery, deadline: Deadline, timeout_s: float,
        retries: int,
    ) -> SearchOutcome:  # fmt: skip
        fan = await self.fan_out(plan.names, query, deadline, timeout_s, retries)
        if fan.answers:
            return SearchOutcome(fan.answers, fan.tried, fan.failures)
        rest = [
            n
            for n in self._settings.backends.fallback_order()
            if n in self.backends and n not in plan.names and not plan.exclusive
        ]
        if not rest:
            if any(f.kind != "no_results" for f in fan.failures):
                raise AllBackendsFailed(fan.failures)
            return SearchOutcome([], fan.tried, fan.failures)
        try:
            chain = await self.search_with_fallback(rest, query, deadline, timeout_s, retries)
        except AllBackendsFailed as exc:
            raise AllBackendsFailed(fan.failures + exc.failures) from exc
        answers = [chain.answer] if chain.answer.hits else []
        return SearchOutcome(
            answers, fan.tried + chain.tried, fan.failures + chain.failures, True, chain.hedged
        )

    def plan_notes(self, tried: Sequence[str], query: BackendQuery) -> list[PlanNote]:
        """What each instance in ``tried`` could not honour of ``query``."""
        return [
            PlanNote(name, note)
            for name in tried
            if name in self.backends
            for note in fit_query(query, self.backends[name].capabilities)[1]
        ]
