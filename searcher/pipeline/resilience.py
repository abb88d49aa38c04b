"""Deadlines and circuit breakers.

Both take an injectable clock so that tests can move time instead of sleeping.
"""

from __future__ import annotations

import time
from collections import Counter, deque
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

from searcher.config_sections import BreakerSettings
from searcher.errors import FailureKind

Clock = Callable[[], float]
BreakerState = Literal["closed", "open", "half_open"]


class Deadline:
    """A point in time after which a request must return what it has."""

    def __init__(self, budget_s: float, clock: Clock = time.monotonic) -> None:
        self._clock = clock
        self.started = clock()
        self.at = self.started + budget_s

    def remaining(self) -> float:
        """Seconds left, never negative."""
        return max(0.0, self.at - self._clock())

    @property
    def expired(self) -> bool:
        return self._clock() >= self.at

    def cap(self, timeout_s: float) -> float:
        """``timeout_s``, shortened so that it ends no later than the deadline."""
        return max(0.0, min(timeout_s, self.remaining()))

    def elapsed_ms(self) -> int:
        return int((self._clock() - self.started) * 1000)


# Failure kinds that say nothing about the backend's health: an empty answer, a call
# refused by the breaker itself, an instance that is not configured.
NO_VERDICT: frozenset[FailureKind] = frozenset({"no_results", "circuit_open", "unavailable"})
RECENT_FAILURES = 10  # kept per breaker for /v1/health


@dataclass(frozen=True)
class FailureRecord:
    kind: FailureKind
    reason: str
    at: float  # on the breaker's clock


@dataclass(frozen=True)
class BreakerSnapshot:
    state: BreakerState
    consecutive_failures: int
    last_error: str | None
    opened_for_s: float | None
    retry_in_s: float | None = None  # open: seconds until a trial call is let through
    failures_by_kind: dict[str, int] = field(default_factory=dict)  # since start
    recent: tuple[FailureRecord, ...] = ()  # newest last


class CircuitBreaker:
    """Closed -> open after ``failure_threshold`` consecutive failures (calls then fail fast)
    -> half-open after ``recovery_timeout`` seconds, letting up to ``half_open_max_calls``
    trial calls through -> closed after that many successes, or open again on a failure.

    It reacts by kind: ``auth`` (a rejected key) opens it at once; ``rate_limited`` with a
    Retry-After opens it for that long; ``no_results`` and the other ``NO_VERDICT`` kinds
    are no failure.
    """

    def __init__(self, settings: BreakerSettings, clock: Clock = time.monotonic) -> None:
        self._settings = settings
        self._clock = clock
        self._state: BreakerState = "closed"
        self._failures = 0
        self._opened_at = 0.0
        self._open_for = settings.recovery_timeout
        self._trial_in_flight = 0
        self._trial_successes = 0
        self.last_error: str | None = None
        self._by_kind: Counter[str] = Counter()
        self._recent: deque[FailureRecord] = deque(maxlen=RECENT_FAILURES)

    @property
    def state(self) -> BreakerState:
        if self._state == "open" and self._clock() - self._opened_at >= self._open_for:
            self._state = "half_open"
            self._trial_in_flight = 0
            self._trial_successes = 0
        return self._state

    @property
    def consecutive_failures(self) -> int:
        """Failures since the last success (``snapshot``'s count, without the snapshot)."""
        return self._failures

    def allow(self) -> bool:
        """Whether a call may go ahead now; a half-open breaker admits a bounded few."""
        state = self.state
        if state == "closed":
            return True
        if state == "open":
            return False
        if self._trial_in_flight + self._trial_successes >= self._settings.half_open_max_calls:
            return False
        self._trial_in_flight += 1
        return True

    def record_success(self) -> None:
        self._failures = 0
        if self._state == "half_open":
            self._trial_in_flight = max(0, self._trial_in_flight - 1)
            self._trial_successes += 1
            if self._trial_successes >= self._settings.half_open_max_calls:
                self._state = "closed"

    def succeeded_elsewhere(self) -> None:
        """Another process's call succeeded (``SharedBreakers``): a closed breaker's
        consecutive failures end; an open one keeps its own time to recover."""
        if self._state == "closed":
            self._failures = 0

    def record_failure(
        self, kind: FailureKind, reason: str, retry_after_s: float | None = None
    ) -> None:
        """One failed call, by kind (see the class docstring)."""
        if kind in NO_VERDICT:
            self.release()
            return
        now = self._clock()
        self.last_error = reason
        self._by_kind[kind] += 1
        self._recent.append(FailureRecord(kind, reason, now))
        self._failures += 1
        if kind == "rate_limited" and retry_after_s is not None:
            self._open(now, max(retry_after_s, 0.0))
        elif (
            kind == "auth"
            or self._state == "half_open"
            or self._failures >= self._settings.failure_threshold
        ):
            self._open(now, self._settings.recovery_timeout)

    def force_open(self, for_s: float, reason: str) -> None:
        """Open now for ``for_s`` seconds without a failure of our own (another worker saw
        them: ``SharedBreakers``)."""
        self.last_error = reason
        self._open(self._clock(), for_s)

    def _open(self, now: float, for_s: float) -> None:
        self._state = "open"
        self._opened_at = now
        self._open_for = for_s

    def release(self) -> None:
        """A call admitted by ``allow`` ended without a verdict (e.g. it was cancelled)."""
        if self._state == "half_open":
            self._trial_in_flight = max(0, self._trial_in_flight - 1)

    def snapshot(self) -> BreakerSnapshot:
        state = self.state
        now = self._clock()
        opened_for = now - self._opened_at if state == "open" else None
        retry_in = max(0.0, self._opened_at + self._open_for - now) if state == "open" else None
        return BreakerSnapshot(
            state,
            self._failures,
            self.last_error,
            opened_for,
            retry_in,
            dict(self._by_kind),
            tuple(self._recent),
        )


class CallBudget:
    """``budget.max_tool_calls``: searches and LLM calls draw on one allowance.

    ``reserve`` keeps calls back for later stages (the searches a request cannot do
    without), so an optional LLM step never spends them."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.used = 0

    @property
    def remaining(self) -> int:
        return max(0, self.limit - self.used)

    def take(self, calls: int = 1, reserve: int = 0) -> bool:
        """Spend ``calls`` if that leaves at least ``reserve``; False (nothing spent) if not."""
        if self.used + calls + reserve > self.limit:
            return False
        self.used += calls
        return True
