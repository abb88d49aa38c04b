"""What searching the backends produced, whichever way they were used."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from searcher.backends.base import BackendAnswer
from searcher.errors import BackendFailure


@dataclass(frozen=True)
class PlanNote:
    """A constraint an instance could not honour, so it was not sent to it; the service
    lists these in ``meta.errors`` with ``stage="plan"``."""

    backend: str
    reason: str


@dataclass
class SearchOutcome:
    """What searching produced: the answers with hits, the instances tried in order,
    every failed attempt (also those of a hedged backend that lost the race), and the
    constraints some instance could not honour."""

    answers: list[BackendAnswer]
    tried: list[str]
    failures: list[BackendFailure]
    fallback_used: bool = False
    hedged: dict[str, Any] | None = None
    plan_notes: list[PlanNote] = field(default_factory=list)

    @property
    def backend_used(self) -> str | None:
        names = list(dict.fromkeys(a.backend for a in self.answers))
        return "+".join(names) if names else None

    @property
    def result_count(self) -> int:
        return sum(len(a.hits) for a in self.answers)
