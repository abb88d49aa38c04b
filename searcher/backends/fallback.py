"""The hedged fallback chain: instances tried in order until one gives hits; when the
current one is slower than its hedging delay, the next one starts too, and the first
good answer wins.

No failure is hidden: every failed attempt is counted by its instance's breaker and
listed in the result, also when a hedged sibling won the race meanwhile. A sibling that
lost the race while its first attempt was still in flight is not cancelled: it runs on
in the background, bounded by its own timeout (at most ``MAX_STRAGGLERS`` at once), so
that a hanging backend's timeout is still counted by its breaker; a sibling that already
failed an attempt is cancelled (its failure is on record, and a retry could no longer
help this request), and so is one still waiting for its pacing turn (it has asked
nothing: it must not call the backend after the request has answered).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections import deque
from collections.abc import Callable, Coroutine, Iterable, Sequence
from dataclasses import dataclass, field
from typing import Any

from searcher.backends.base import BackendAnswer, BackendQuery
from searcher.backends.runner import MIN_ATTEMPT_S, FailureLog, Watch
from searcher.config import BackendsSettings
from searcher.errors import AllBackendsFailed, BackendError, BackendFailure, BackendTimeout
from searcher.pipeline.resilience import Deadline

# Latencies kept per backend for the hedging delay (its observed p90).
LATENCY_WINDOW = 100
MIN_LATENCY_SAMPLES = 5
# Calls that lost a hedged race and run on until their own timeout, at most; beyond
# this they are cancelled (no verdict) so that a hanging backend cannot pile them up.
MAX_STRAGGLERS = 256

# One instance, as the pool calls it: (name, query, deadline, timeout_s, retries, watch).
InstanceCall = Callable[
    [str, BackendQuery, Deadline, float, int, Watch], Coroutine[Any, Any, BackendAnswer]
]
# A failure that is no ``BackendError`` (a bug), logged, as that instance's failure.
Unexpected = Callable[[str, Exception], BackendFailure]


@dataclass
class ChainResult:
    answer: BackendAnswer
    tried: list[str]
    failures: list[BackendFailure] = field(default_factory=list)
    hedged: dict[str, Any] | None = None

    @property
    def fallback_used(self) -> bool:
        return bool(self.tried) and self.answer.backend != self.tried[0]


def not_tried(name: str) -> BackendFailure:
    """The failure of an instance the request's deadline left no time to call."""
    return BackendTimeout(name, "not tried: request deadline reached").failure()


class FallbackChain:
    """The chain over one pool's instances: their observed latencies (the hedging delay)
    and the calls that lost a race and run on in the background."""

    def __init__(
        self,
        call: InstanceCall,
        unexpected: Unexpected,
        settings: BackendsSettings,
        names: Iterable[str],
    ) -> None:
        self._call = call
        self._unexpected = unexpected
        self._settings = settings
        self.latencies: dict[str, deque[float]] = {
            name: deque(maxlen=LATENCY_WINDOW) for name in names
        }
        self.stragglers: set[asyncio.Task[BackendAnswer]] = set()

    def record_latency(self, name: str, seconds: float) -> None:
        """One whole call of ``name`` (its further pages too): what a hedged race waits for."""
        if name in self.latencies:
            self.latencies[name].append(seconds)

    def hedge_delay(self, name: str, deadline: Deadline) -> float | None:
        """Seconds to wait for ``name`` before starting the next backend: the configured
        delay, else its observed p90 latency once there are enough samples, else half the
        time the request has left (an instance that hangs from the start must not hold
        the whole deadline: the rest of the chain gets the other half)."""
        if not self._settings.hedge:
            return None
        if self._settings.hedge_delay_ms is not None:
            return self._settings.hedge_delay_ms / 1000
        samples = sorted(self.latencies.get(name, ()))
        if len(samples) < MIN_LATENCY_SAMPLES:
            return deadline.remaining() / 2
        return samples[min(len(samples) - 1, int(0.9 * len(samples)))]

    async def search(
        self, names: Sequence[str], query: BackendQuery, deadline: Deadline, timeout_s: float,
        retries: int,
    ) -> ChainResult:  # fmt: skip
        """Try ``names`` in order until one gives hits. A backend with zero hits is passed
        over but not held against it; if all were empty, the first empty answer is
        returned. Raises ``AllBackendsFailed`` when none answered."""
        if len(names) == 1:
            return await self.only(names[0], query, deadline, timeout_s, retries)
        return await self.race(names, query, deadline, timeout_s, retries)

    async def race(
        self, names: Sequence[str], query: BackendQuery, deadline: Deadline, timeout_s: float,
        retries: int,
    ) -> ChainResult:  # fmt: skip
        """The chain as a race: each call a task, the next one started when the newest is
        slower than its hedging delay or has failed."""
        tried: list[str] = []
        failures = FailureLog()
        empties: list[BackendAnswer] = []
        running: dict[asyncio.Task[BackendAnswer], tuple[str, Watch]] = {}
        pending = list(names)
        hedged_from: list[str] = []

        def start_next() -> None:
            while pending:
                name = pending.pop(0)
                if deadline.remaining() < MIN_ATTEMPT_S:
                    failures.add(not_tried(name))
                    continue
                tried.append(name)
                watch = failures.watch()
                call = self._call(name, query, deadline, timeout_s, retries, watch)
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
                    failures.add(BackendFailure.no_results(name))
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

    async def only(
        self, name: str, query: BackendQuery, deadline: Deadline, timeout_s: float, retries: int
    ) -> ChainResult:
        """The chain over one instance: there is no race to run, so the call is awaited in
        place, without the task and the wait a race needs (a simple search pays for them
        on every request). The outcome is ``race``'s for one name."""
        failures = FailureLog()
        if deadline.remaining() < MIN_ATTEMPT_S:
            failures.add(not_tried(name))
            raise AllBackendsFailed(failures.close())
        answer = None
        try:
            answer = await self._call(name, query, deadline, timeout_s, retries, failures.watch())
        except BackendError:
            pass  # reported through its watch
        except Exception as exc:  # a bug: that backend's failure, not a 500
            failures.add(self._unexpected(name, exc))
        if answer is None:
            raise AllBackendsFailed(failures.close())
        if not answer.hits:
            failures.add(BackendFailure.no_results(name))
        return ChainResult(answer, [name], failures.close())

    def _settle_losers(
        self,
        running: dict[asyncio.Task[BackendAnswer], tuple[str, Watch]],
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
                or len(self.stragglers) >= MAX_STRAGGLERS
            ):
                cancelled.append(name)
                continue
            watch.abandoned = True  # no retry after this attempt
            del running[task]
            self.stragglers.add(task)
            task.add_done_callback(self._straggler_done)
            background.append(name)
        return {"started": list(tried), "winner": winner, "cancelled": cancelled,
                "background": background}  # fmt: skip

    def _straggler_done(self, task: asyncio.Task[BackendAnswer]) -> None:
        self.stragglers.discard(task)
        if not task.cancelled():
            task.exception()  # retrieved: a failure is on its breaker already

    async def settle(self) -> None:
        """Wait for every call that lost a hedged race to end (tests, shutdown)."""
        while self.stragglers:
            await asyncio.wait(set(self.stragglers))

    async def aclose(self) -> None:
        """Cancel calls still running in the background; the app calls this on shutdown."""
        for task in list(self.stragglers):
            task.cancel()
        for task in list(self.stragglers):
            with contextlib.suppress(asyncio.CancelledError, BackendError):
                await task
        self.stragglers.clear()
