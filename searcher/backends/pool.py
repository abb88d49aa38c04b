"""The backend pool: the usable instances, called through one ``BackendRunner`` (breaker,
pacing, retries, failure kinds), and ``search``, the degradation ladder a request uses
over the strategies: the hedged fallback chain (``fallback``), the fan-out (``fanout``),
auto-paging (``paging``)."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import TYPE_CHECKING

from searcher.backends.base import Backend, BackendAnswer, BackendQuery
from searcher.backends.fallback import ChainResult, FallbackChain
from searcher.backends.fanout import FanOutResult, fan_out
from searcher.backends.fit import fit_query
from searcher.backends.outcome import PlanNote, SearchOutcome
from searcher.backends.pacing import Pacer
from searcher.backends.paging import more_pages
from searcher.backends.policy import BackendPlan
from searcher.backends.runner import BackendRunner, Watch
from searcher.backends.shared_breakers import SharedBreakers
from searcher.config import Settings
from searcher.errors import AllBackendsFailed
from searcher.pipeline.resilience import Clock, Deadline

if TYPE_CHECKING:  # prometheus_client is imported only by the apps that count
    from searcher.api.metrics import Metrics


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
        self._settings = settings
        self.runner = BackendRunner(backends, settings, clock, shared, pacer, metrics)
        self.breakers = self.runner.breakers
        self.chain = FallbackChain(self.call, self.runner.unexpected, settings.backends, backends)

    async def call(
        self, name: str, query: BackendQuery, deadline: Deadline, timeout_s: float,
        retries: int, watch: Watch | None = None,
    ) -> BackendAnswer:  # fmt: skip
        """One search on one instance, behind its breaker, with only the constraints it
        can honour, retrying transient failures, and paging an instance that has no
        result count until ``max_results`` is met. Every failed attempt is counted by the
        breaker and reported to ``watch``."""
        watch = watch or Watch()
        backend = self.runner.backend(name, watch)
        timeout_s = min(timeout_s, self._settings.backends.get(name).timeout_s)
        query, _ = fit_query(query, backend.capabilities)
        started = time.perf_counter()
        answer = await self.runner.page(backend, query, deadline, timeout_s, retries, watch)
        if watch.abandoned:
            return answer  # lost a hedged race: no one waits for more pages
        if backend.capabilities.paging and not backend.capabilities.result_count:
            max_pages = self._settings.backends.max_pages
            answer = await more_pages(
                self.runner, backend, query, answer, deadline, timeout_s, max_pages
            )
        self.chain.record_latency(name, time.perf_counter() - started)
        return answer

    def hedge_delay(self, name: str, deadline: Deadline) -> float | None:
        """See ``FallbackChain.hedge_delay``."""
        return self.chain.hedge_delay(name, deadline)

    async def search_with_fallback(
        self, names: Sequence[str], query: BackendQuery, deadline: Deadline, timeout_s: float,
        retries: int,
    ) -> ChainResult:  # fmt: skip
        """The hedged fallback chain over ``names`` (``fallback``)."""
        return await self.chain.search(names, query, deadline, timeout_s, retries)

    async def fan_out(
        self, names: Sequence[str], query: BackendQuery, deadline: Deadline, timeout_s: float,
        retries: int,
    ) -> FanOutResult:  # fmt: skip
        """Query every backend in ``names`` at once; failures leave the others' answers."""
        return await fan_out(
            self.call, self.runner.unexpected, names, query, deadline, timeout_s, retries
        )

    async def settle(self) -> None:
        """Wait for every call that lost a hedged race to end (tests, shutdown)."""
        await self.chain.settle()

    async def aclose(self) -> None:
        """Cancel calls still running in the background; the app calls this on shutdown."""
        await self.chain.aclose()

    async def search(
        self, plan: BackendPlan, query: BackendQuery, deadline: Deadline, timeout_s: float,
        retries: int,
    ) -> SearchOutcome:  # fmt: skip
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
            if n in self.backends
            and n not in plan.names
            and n not in plan.barred
            and not plan.exclusive
        ]
        if not rest:
            if any(not f.empty for f in fan.failures):
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
