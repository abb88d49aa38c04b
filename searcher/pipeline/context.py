"""One request's cross-cutting state, carried through every stage.

The stages take data and return data; what every stage shares — the request, its effective
budget, deadline and tool-call allowance, the LLM step runner, the timings, the errors and
the optional parts of ``meta`` — lives here, so that no stage keeps books by hand and the
response is built in one place (as SearXNG's per-request ``Search``/``ResultContainer``).

A research job keeps its books here too: its context carries the job's event stream
(``emit``) and search trace, and each search it runs works in a context ``derived`` from
it, sharing its deadline, tool calls, LLM runner, errors, trace and events.
"""

from __future__ import annotations

import contextlib
import dataclasses
import time
from collections.abc import Awaitable, Callable, Iterator
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from searcher import __version__
from searcher.auth.access import EVERY, CollectionAccess
from searcher.backends.outcome import SearchOutcome
from searcher.contract import (
    AnswerCheck,
    Citation,
    CragInfo,
    ErrorEntry,
    ErrorKind,
    EventType,
    Item,
    LlmCall,
    Meta,
    PagePassages,
    PerspectivesInfo,
    Producer,
    RankInfo,
    SearchRequest,
    SearchResponse,
    TraceEntry,
    Usage,
)
from searcher.fetch.page_reader import PageOutcome
from searcher.llm.runner import StepRunner
from searcher.pipeline.budget import EffectiveBudget, LimitedBudget, limited_budget
from searcher.pipeline.parts import Parts
from searcher.pipeline.resilience import CallBudget, Deadline
from searcher.recording.tape import current_tape

PRODUCER = Producer(name="searcher", version=__version__)
# Where a job's typed events go (stored and streamed, or printed): the job's business.
Emit = Callable[[EventType, dict[str, Any]], Awaitable[None]]


def utc_now() -> str:
    """Now, as the contract writes times; in a replay, when its recording was made."""
    tape = current_tape()
    if tape is not None and tape.clock_utc is not None:
        return tape.clock_utc
    # isoformat starts with exactly ``strftime("%Y-%m-%dT%H:%M:%SZ")`` (years from 1000 on):
    # strftime costs several times as much (glibc looks up the time zone each call).
    return datetime.now(UTC).isoformat()[:19] + "Z"


@dataclass
class MetaExtras:
    """The optional parts of ``meta`` that stages fill in."""

    rewritten_query: str | None = None
    route: dict[str, str | None] | None = None
    rank: RankInfo | None = None
    perspectives: PerspectivesInfo | None = None
    crag: CragInfo | None = None
    answer_check: AnswerCheck | None = None
    passages: list[PagePassages] | None = None


@dataclass
class RequestContext:
    """The cross-cutting part of one search request."""

    request: SearchRequest
    budget: EffectiveBudget
    deadline: Deadline
    calls: CallBudget
    llm: StepRunner
    started: float = field(default_factory=time.perf_counter)
    timing: dict[str, int] = field(default_factory=dict)
    errors: list[ErrorEntry] = field(default_factory=list)
    extras: MetaExtras = field(default_factory=MetaExtras)
    client: str | None = None  # who asks: its share of the extraction workers
    access: CollectionAccess = EVERY  # the collections of own documents it may search
    retrieved_utc: str = field(default_factory=utc_now)
    emit: Emit | None = None  # a job's event stream; a search has none
    trace: list[TraceEntry] = field(default_factory=list)  # a job's searches
    unique_errors: bool = False  # a job says each problem once, however often it met it
    shown: frozenset[str] = frozenset()  # page keys the caller saw before: demoted

    @classmethod
    def start(
        cls,
        request: SearchRequest,
        parts: Parts,
        client: str | None = None,
        limited: LimitedBudget | None = None,
        access: CollectionAccess = EVERY,
        shown: frozenset[str] = frozenset(),
    ) -> RequestContext:
        """A context whose deadline starts now, its budget within the server's limits
        (``limited``, when the caller held it to them already); ``access``: the
        collections the caller may search; ``shown``: the page keys it saw before."""
        settings = parts.settings
        # limits.*: the server's ceilings over what the request asked (422 if strict).
        limited = limited or limited_budget(request.budget, settings)
        budget = limited.budget
        deadline = Deadline(budget.max_total_time_ms / 1000)
        calls = CallBudget(budget.max_tool_calls)
        llm = StepRunner(parts.llm, settings.llm, deadline, calls, date.today())
        errors = list(limited.lowered)
        return cls(
            request, budget, deadline, calls, llm, errors=errors, client=client, access=access,
            shown=shown,
        )  # fmt: skip

    @contextlib.contextmanager
    def timed(self, stage: str) -> Iterator[None]:
        """Add the time spent in the block to ``meta.timing_ms[stage]``."""
        t0 = time.perf_counter()
        try:
            yield
        finally:
            spent = int((time.perf_counter() - t0) * 1000)
            self.timing[stage] = self.timing.get(stage, 0) + spent

    def derived(self, request: SearchRequest, budget: EffectiveBudget) -> RequestContext:
        """A context for one search of a job: its own request, budget and ``meta`` parts;
        the job's deadline, tool calls, LLM runner, client, errors, trace and events."""
        return dataclasses.replace(
            self, request=request, budget=budget, started=time.perf_counter(),
            extras=MetaExtras(), retrieved_utc=utc_now(),
        )  # fmt: skip

    def error(self, stage: str, source: str, reason: str, kind: ErrorKind | None = None) -> None:
        """Record one entry of ``meta.errors``, with its kind when it has one."""
        entry = ErrorEntry(stage=stage, source=source, reason=reason, kind=kind)
        if not (self.unique_errors and entry in self.errors):
            self.errors.append(entry)

    async def event(
        self, kind: EventType, data: dict[str, Any], trace: TraceEntry | None = None
    ) -> None:
        """Record one step of a job: its trace entry, if it has one, and its event."""
        if trace is not None:
            self.trace.append(trace)
        if self.emit is not None:
            await self.emit(kind, data)

    def reported_errors(self) -> list[ErrorEntry]:
        """What went wrong, as the response says it: the errors recorded, then every LLM
        step that fell back."""
        return self.errors + [
            ErrorEntry(stage=r.step, source="llm", reason=f"fallback: {r.reason}", kind="fallback")
            for r in self.llm.records
            if r.fallback_used
        ]

    def search_errors(self, outcome: SearchOutcome) -> None:
        """Record what a search could not do: constraints an instance cannot honour
        (stage ``plan``), then every backend failure and warning."""
        for note in outcome.plan_notes:
            self.error("plan", note.backend, note.reason)
        for failure in outcome.failures:
            self.error("search", failure.backend, failure.reason, failure.kind)
        for answer in outcome.answers:
            for warning in answer.warnings:
                self.error("search", answer.backend, warning)

    def response(
        self,
        outcome: SearchOutcome,
        items: list[Item],
        rendered: str,
        pages: list[PageOutcome],
        pick_ids: list[int],
        answer: str | None = None,
        citations: list[Citation] | None = None,
    ) -> SearchResponse:
        """The UCP-1 response: what the stages produced, with this context's books."""
        request, want, extras = self.request, self.request.want, self.extras
        errors = self.reported_errors()
        self.timing["total"] = int((time.perf_counter() - self.started) * 1000)
        return SearchResponse(
            created_utc=utc_now(),
            producer=PRODUCER,
            request=request.model_dump(mode="json", exclude_unset=True),
            meta=Meta(
                backend_used=outcome.backend_used,
                fallback_used=outcome.fallback_used,
                pick_applied=request.constraints.pick_ids is not None,
                pick_ids=pick_ids,
                mode_used=request.constraints.search_mode,
                timing_ms=self.timing,
                errors=errors,
                backends_tried=outcome.tried,
                route=extras.route,
                hedged=outcome.hedged,
                rewritten_query=extras.rewritten_query,
                rank=extras.rank,
                perspectives=extras.perspectives,
                crag=extras.crag,
                answer_check=extras.answer_check,
                passages=extras.passages,
                llm=[LlmCall(**dataclasses.asdict(r)) for r in self.llm.records],
            ),
            usage=Usage(
                results_returned=len(items),
                context_chars=len(rendered) if want.rendered_text else 0,
                fetch_pages_used=sum(1 for p in pages if p.status == "fetched"),
            ),
            items=items,
            rendered_text=rendered if want.rendered_text else None,
            answer=answer,
            answer_citations=citations,
        )
