"""Per-engine health of one meta-search instance (SearXNG): engines that keep failing
(CAPTCHA, too many requests, suspended, timeouts) are left out of the engines searcher
asks for, with a growing back-off, and let back in by one probe when it has passed.

SearXNG reports its failing engines in ``unresponsive_engines`` but keeps asking them
(until it suspends them itself, for its own reasons); its users' first complaint is
engines answering CAPTCHAs and 429s. The state machine per engine:

    healthy --(failure_threshold consecutive failures)--> suspended for backoff_s
    suspended --(back-off over)--> probe: the next request asks the engine once
    probe answered --> healthy (back-off reset); probe failed --> suspended, back-off x2

The clock is injected so that tests move time instead of sleeping.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable, Sequence
from dataclasses import dataclass
from typing import Literal, Protocol, runtime_checkable

from pydantic import Field

from searcher.backends.failures import engine_failure_kind
from searcher.config_sections import ConfigSection
from searcher.errors import FailureKind

EngineStateName = Literal["healthy", "suspended", "probing"]


class EngineHealthSettings(ConfigSection):
    enabled: bool = Field(
        default=True,
        description=(
            "SearXNG: leave out engines that keep failing (CAPTCHA, too many requests, "
            "suspended, timeout)"
        ),
    )
    failure_threshold: int = Field(
        default=2, ge=1, description="SearXNG: consecutive failures of an engine that suspend it"
    )
    backoff_s: float = Field(
        default=60.0,
        gt=0,
        description=(
            "SearXNG: first suspension of an engine, doubled after each failed probe up "
            "to the maximum"
        ),
    )
    max_backoff_s: float = Field(
        default=3600.0,
        gt=0,
        description=(
            "SearXNG: first suspension of an engine, doubled after each failed probe up "
            "to the maximum"
        ),
    )
    config_ttl_s: float = Field(
        default=3600.0,
        gt=0,
        description="SearXNG: how long the instance's engine list (its `/config`) is kept",
    )


@dataclass
class _Engine:
    failures: int = 0  # consecutive
    suspensions: int = 0  # in a row; the back-off doubles with each
    suspended_until: float | None = None
    probe_started: float | None = None
    last_kind: FailureKind | None = None
    last_message: str | None = None


@dataclass(frozen=True)
class EngineSnapshot:
    """One engine's health, as ``/v1/health`` shows it."""

    name: str
    state: EngineStateName
    consecutive_failures: int
    last_kind: FailureKind | None
    last_message: str | None
    retry_in_s: float | None  # suspended: seconds until the probe


@runtime_checkable
class ReportsEngineHealth(Protocol):
    """A backend that keeps per-engine health (a meta-search instance)."""

    def engines_health(self) -> list[EngineSnapshot]: ...


class EngineHealth:
    """The engines of one instance and which of them to leave out."""

    def __init__(
        self, settings: EngineHealthSettings, clock: Callable[[], float] = time.monotonic
    ) -> None:
        self.settings = settings
        self._clock = clock
        self._engines: dict[str, _Engine] = {}

    def _backoff(self, suspensions: int) -> float:
        return min(
            self.settings.backoff_s * 2 ** max(0, suspensions - 1), self.settings.max_backoff_s
        )

    def _state(self, engine: _Engine) -> EngineStateName:
        if engine.suspended_until is None:
            return "healthy"
        if engine.probe_started is not None:
            return "probing"
        return "suspended"

    def observe(self, asked: Iterable[str], unresponsive: Sequence[tuple[str, str]]) -> None:
        """Record one answer: the engines in ``unresponsive`` failed, the other engines
        that were ``asked`` (or that gave hits) answered."""
        failed = {name: message for name, message in unresponsive}
        for name, message in failed.items():
            self._failure(name, message)
        for name in set(asked) - failed.keys():
            self._success(name)

    def _failure(self, name: str, message: str) -> None:
        engine = self._engines.setdefault(name, _Engine())
        engine.failures += 1
        engine.last_kind = engine_failure_kind(message)
        engine.last_message = message
        probing = engine.probe_started is not None
        if probing or engine.failures >= self.settings.failure_threshold:
            engine.suspensions += 1
            engine.suspended_until = self._clock() + self._backoff(engine.suspensions)
            engine.probe_started = None

    def _success(self, name: str) -> None:
        engine = self._engines.get(name)
        if engine is not None:
            self._engines[name] = _Engine(
                last_kind=engine.last_kind, last_message=engine.last_message
            )

    def left_out(self) -> set[str]:
        """Engines to leave out now. An engine whose back-off is over is let in once, as
        the probe (until its answer is observed, or for one more back-off if none comes)."""
        if not self.settings.enabled:
            return set()
        now = self._clock()
        out = set()
        for name, engine in self._engines.items():
            if engine.suspended_until is None:
                continue
            if engine.probe_started is not None:
                if now - engine.probe_started < self._backoff(engine.suspensions):
                    out.add(name)  # its probe is in flight: the others wait for it
                    continue
                engine.probe_started = None  # the probe never reported: probe again
            if now < engine.suspended_until:
                out.add(name)
            else:
                engine.probe_started = now
        return out

    def notes(self, left_out: Iterable[str]) -> list[str]:
        """Why each of ``left_out`` was left out, for the answer's warnings."""
        now = self._clock()
        notes = []
        for name in sorted(left_out):
            engine = self._engines[name]
            wait = max(0.0, (engine.suspended_until or now) - now)
            notes.append(
                f"engine {name} left out: failed {engine.failures} times in a row "
                f"({engine.last_kind}: {engine.last_message}); next probe in {wait:.0f} s"
            )
        return notes

    def snapshot(self) -> list[EngineSnapshot]:
        """Every engine seen failing, by name."""
        now = self._clock()
        return [
            EngineSnapshot(
                name,
                self._state(engine),
                engine.failures,
                engine.last_kind,
                engine.last_message,
                max(0.0, engine.suspended_until - now) if engine.suspended_until else None,
            )
            for name, engine in sorted(self._engines.items())
        ]


def engines_to_ask(
    wanted: Sequence[str],
    categories: Sequence[str],
    known: Sequence[tuple[str, tuple[str, ...]]],
    left_out: set[str],
) -> tuple[str, ...]:
    """The engines to name in the request so that ``left_out`` are not asked: the
    request's own ``wanted`` engines without them, else (none wanted, or none left) the
    instance's ``known`` (name, categories) engines in the request's categories (default
    "general") without them. Empty: ask the instance's defaults (nothing better known)."""
    kept = tuple(e for e in wanted if e not in left_out)
    if kept:
        return kept
    cats = set(categories) or {"general"}
    return tuple(
        name
        for name, engine_cats in known
        if name not in left_out and (not engine_cats or cats & set(engine_cats))
    )
