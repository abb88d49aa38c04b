"""The research loop (seed 004's ReAct: think, act, observe) over the pipeline's stages.

Each round plans sub-questions, searches them at once (the search pipeline's plan,
retrieve and rank stages, so routing, fan-out, fusion and caches all apply), reads the best
unread pages, and judges which sub-questions the evidence covers; what is missing is
refined or followed through its bridge entities. The loop stops when everything is
covered, when a round brings nothing new, or at the budget; then the report is written
(by the LLM, or as an evidence report) and its citations verified. Progress goes out as
typed events through ``emit``; nothing here knows how they are stored or streamed.

The job's books (errors, search trace, events) are kept by its ``RequestContext``; each
search runs in a context derived from it, and pages are read through the ``read`` stage.
"""

from __future__ import annotations

import asyncio
import math
import time
from collections.abc import Coroutine, Sequence
from dataclasses import dataclass, field
from datetime import date
from typing import Any, TypeVar

from searcher.auth.access import EVERY, CollectionAccess
from searcher.config import LlmStep
from searcher.contract import (
    Budget,
    Conflict,
    Constraints,
    EvidencePassage,
    Query,
    ReportMethod,
    ResearchRequest,
    ResearchResult,
    ResearchUsage,
    SearchRequest,
    StructuredAnswer,
    SubQuestion,
    TraceEntry,
    VerificationStatus,
)
from searcher.errors import (
    AllBackendsFailed,
    ResearchFailed,
    StructuredOutputFailed,
    describe_failures,
)
from searcher.llm.runner import StepRunner
from searcher.llm.structured import structured_output
from searcher.pipeline.budget import effective_budget
from searcher.pipeline.context import Emit, RequestContext
from searcher.pipeline.parts import Parts
from searcher.pipeline.plan import make_plan
from searcher.pipeline.rank import Ranked, pool_cut, rank_results
from searcher.pipeline.read import read_urls
from searcher.pipeline.resilience import CallBudget, Deadline
from searcher.pipeline.retrieve import retrieve
from searcher.pipeline.select import reranked
from searcher.ranking.novelty import demote_shown
from searcher.ranking.selection import filter_domains
from searcher.research.answering import answer_support
from searcher.research.bridge import lower_case_words
from searcher.research.evidence import (
    EvidencePool,
    Passage,
    ScoredPassage,
    best_in_evidence,
    choose_evidence,
    covered,
    disagreements,
)
from searcher.research.planning import (
    SubQ,
    bridge_questions,
    llm_questions,
    template_questions,
)
from searcher.research.presets import Bounded, Limits, resolve_within
from searcher.research.report import Section, evidence_report, llm_report, verify_citations
from searcher.research.sources import with_sources

__all__ = ["Emit", "Research"]
_T = TypeVar("_T")
# Below this much time left, another round could not finish: write the report instead.
MIN_ROUND_S = 0.5
# The best passages for the question whose names are followed in the next round.
BRIDGE_PASSAGES = 5
NEEDS_LLM = "output_schema: needs an LLM, and none is configured: set llm.base_url and llm.model"
ESTIMATED_TOKENS = (
    "the LLM server reported no token usage for some calls: usage.llm_tokens counts them "
    "as characters / 4, an estimate"
)


@dataclass
class _Candidate:
    title: str
    position: int  # best (lowest) 0-based position in any sub-question's results
    # (round, sub-question's place in it) of the first search that found it: breaks ties
    # the same way whichever search answers first.
    order: tuple[int, int]


@dataclass
class _State:
    """What the job has learnt so far (its books are in its context)."""

    pool: EvidencePool = field(default_factory=EvidencePool)
    asked: list[SubQ] = field(default_factory=list)
    unread: dict[str, _Candidate] = field(default_factory=dict)
    read: set[str] = field(default_factory=set)
    pages_read: int = 0


@dataclass(frozen=True)
class _Chosen:
    """The evidence the report is written from: passages numbered in ``order``."""

    order: list[int]  # indexes into the pool, in citation order
    sections: list[Section]
    passages: list[Passage]
    scores: dict[int, float]


@dataclass(frozen=True)
class _Written:
    """The report and what checking its citations found."""

    text: str
    method: ReportMethod
    claims: int = 0
    supported: int = 0
    unsupported: list[int] = field(default_factory=list)


class Research:
    """One research job's run: ``await Research(...).run()`` gives the result."""

    def __init__(
        self,
        request: ResearchRequest,
        parts: Parts,
        emit: Emit,
        bounded: Bounded | None = None,
        client: str | None = None,
        access: CollectionAccess = EVERY,
        shown: frozenset[str] = frozenset(),
    ) -> None:
        """``bounded``: the job's limits if already resolved (else resolved here, within
        the server's ``limits.*``); ``client``: who started the job, whose share of the
        extraction workers its page reads count against (``None``: a local caller);
        ``access``: the collections of own documents its searches may reach; ``shown``:
        page keys shown before (its session's, its conversation's), moved below the
        pages not shown in each search unless ranked first (session novelty), so they
        are read last."""
        self.request = request
        self.client = client
        self.shown = shown
        self.parts = parts
        if bounded is None:
            bounded = resolve_within(
                request.preset,
                request.budget,
                parts.settings.research,
                parts.settings.limits.strict,
            )
        self.limits: Limits = bounded.limits
        self.deadline = Deadline(self.limits.max_total_time_ms / 1000)
        self.calls = CallBudget(self.limits.max_tool_calls)
        self.llm = StepRunner(
            parts.llm, parts.settings.llm, self.deadline, self.calls, date.today()
        )
        self.state = _State()
        # Reads use the server's default page budget; searches derive their own.
        self.ctx = RequestContext(
            self.search_request(request.query_text),
            effective_budget(Budget(), parts.settings.budget),
            self.deadline, self.calls, self.llm,
            errors=list(bounded.notes),  # the limits this server lowered
            client=client, access=access, emit=emit, unique_errors=True,
        )  # fmt: skip
        self.started = time.perf_counter()
        # One LLM call stays back for the report when there is a model to write it, and
        # with an output_schema those of the structured answer, its repairs included (a
        # repair the budget cannot pay for would fail a job that had calls to spare).
        self.shaped = request.output_schema is not None and parts.llm is not None
        repairs = parts.settings.llm.steps.output_schema.repairs
        self.shape_calls = 1 + repairs if self.shaped else 0
        self.reserve = 1 + self.shape_calls if parts.llm is not None else 0

    # --- budget ---------------------------------------------------------------------

    def tokens_used(self) -> int:
        """LLM tokens so far: as the server reported them, else estimated from characters
        (a server that leaves ``usage`` out must not slip past ``max_llm_tokens``)."""
        return self.llm.tokens_used()

    def llm_allowed(self, step: LlmStep) -> bool:
        """Whether an LLM step may run: a model, and tokens left in ``max_llm_tokens``."""
        if self.parts.llm is None:
            return False
        if self.tokens_used() >= self.limits.max_llm_tokens:
            self.llm.fallback(step, f"budget: max_llm_tokens={self.limits.max_llm_tokens} spent")
            return False
        return True

    def out_of_budget(self) -> str | None:
        """Why no further round can run, if so."""
        if self.deadline.remaining() < MIN_ROUND_S:
            return "deadline"
        if self.calls.remaining <= self.reserve:
            return "tool_calls"
        return None

    # --- the loop -------------------------------------------------------------------

    async def run(self) -> ResearchResult:
        if self.request.output_schema is not None and self.parts.llm is None:
            # No fallback is honest (docs/structured-output.md): fail before searching.
            raise ResearchFailed(NEEDS_LLM, "llm_required")
        question = self.request.query_text
        pending = await self.first_plan(question)
        stopped = "max_iterations"
        rounds = 0
        for round_no in range(1, self.limits.max_iterations + 1):
            why = self.out_of_budget()
            if why:
                stopped = why
                break
            rounds = round_no
            new_passages = await self.search_round(round_no, pending)
            new_passages += await self.read_round(round_no)
            coverage = self.coverage()
            await self.ctx.event(
                "evidence",
                {
                    "round": round_no,
                    "new_passages": new_passages,
                    "passages": len(self.state.pool.passages),
                    "coverage": [
                        {
                            "sub_question": q.question,
                            "covered": covered(best),
                            "best": round(max((s.coverage for s in best), default=0.0), 3),
                        }
                        for q, best in coverage
                    ],
                },
            )
            if round_no == 1 and not self.state.pool.passages and self.all_failed():
                raise ResearchFailed(self.failure_reason(), "all_backends_failed")
            if all(covered(best) for _, best in coverage):
                stopped = "covered"
                break
            if new_passages == 0:
                stopped = "no_progress"
                break
            if round_no == self.limits.max_iterations:
                break
            pending = await self.refine(round_no + 1, question, coverage)
            if not pending and not self.state.unread:
                stopped = "no_progress"
                break
        return await self.finish(question, rounds, stopped)

    async def first_plan(self, question: str) -> list[SubQ]:
        n = self.limits.max_sub_questions
        planned = template_questions(question, n)
        source = "templates" if len(planned) > 1 else "question"
        if self.llm_allowed("research_plan"):
            found = await llm_questions(self.llm, question, n - 1, [question], self.reserve + 1)
            if found:
                planned = [planned[0], *[q for q in found if q.question != planned[0].question]]
                planned, source = planned[:n], "llm"
        await self.ctx.event(
            "plan",
            {
                "round": 1,
                "source": source,
                "sub_questions": [q.question for q in planned],
            },
        )
        return planned

    async def refine(
        self, round_no: int, question: str, coverage: Sequence[tuple[SubQ, list[ScoredPassage]]]
    ) -> list[SubQ]:
        """New sub-questions for what is not covered: the model's, else the bridge
        entities of the evidence so far."""
        room = self.limits.max_sub_questions + round_no - 1 - len(self.state.asked)
        room = max(1, min(room, self.limits.max_sub_questions))
        missing = [q.question for q, best in coverage if not covered(best)]
        asked = [q.question for q in self.state.asked]
        found: list[SubQ] | None = None
        source = "entities"
        if (
            missing
            and self.llm_allowed("research_plan")
            and self.calls.remaining > 1 + self.reserve
        ):
            found = await llm_questions(self.llm, question, room, asked, self.reserve + 1)
            source = "refined"
        if not found:
            pool = self.state.pool
            best = [pool.passages[s.index] for s in pool.best(question, BRIDGE_PASSAGES)]
            lower = lower_case_words(pool.passages)
            found = bridge_questions(question, best, asked, room, lower)
            source = "entities"
        found = [q for q in found if q.question.lower() not in {a.lower() for a in asked}]
        if found:
            await self.ctx.event(
                "plan",
                {
                    "round": round_no,
                    "source": source,
                    "sub_questions": [q.question for q in found],
                },
            )
        return found

    # --- acting -------------------------------------------------------------------

    def search_request(self, text: str) -> SearchRequest:
        constraints: Constraints = self.request.constraints.model_copy(
            update={
                "search_mode": "simple",
                "multi_query": None,
                "crag": False,
                "rank": "heuristic",
                "rewrite": False,
                "pick_ids": None,
                "chunks_per_source": None,
            }
        )
        return SearchRequest(
            query=Query(text=text, lang=self.request.query.lang),
            constraints=constraints,
            budget=Budget(max_results=self.limits.results_per_search),
        )

    async def search_one(self, round_no: int, place: int, sub: SubQ) -> list[Ranked]:
        """One sub-question's search (``place``: its place in the round): its pages are
        noted as candidates to read at once, and its results returned."""
        request = self.search_request(sub.question)
        budget = effective_budget(request.budget, self.parts.settings.budget)
        ctx = self.ctx.derived(request, budget)
        try:
            plan = await make_plan(ctx, self.parts)
            tagged = await retrieve(ctx, self.parts, plan)
            ranking = await rank_results(self.parts, plan, tagged, self.deadline.remaining())
        except AllBackendsFailed as exc:
            reason = describe_failures(exc.failures) or "no backend is enabled"
            ctx.error("search", "backends", reason)
            failed = TraceEntry(
                round=round_no, sub_question=sub.question, query=sub.question,
                results=0, new_urls=0, error=reason,
            )  # fmt: skip
            await ctx.event("search", _search_event(failed), failed)
            return []
        if cut := pool_cut(ranking):
            ctx.error("rank", "fusion", cut)
        # The reranking model and the domains asked for hold here as in the select stage
        # of a search: pages are read in the model's order, none of an excluded (or not
        # included) site is read or cited.
        results = await reranked(ctx, self.parts, plan.question, ranking.results)
        wanted = filter_domains(
            results, lambda r: r.url,
            request.constraints.include_domains, request.constraints.exclude_domains,
        )  # fmt: skip
        ranked = demote_shown(wanted, lambda r: r.fused.hit.url, self.shown)
        done = TraceEntry(
            round=round_no, sub_question=sub.question, query=sub.question,
            results=len(ranked), new_urls=self.note_pages(ranked, (round_no, place)),
        )  # fmt: skip
        await ctx.event("search", _search_event(done), done)
        return ranked

    def note_pages(self, ranked: Sequence[Ranked], order: tuple[int, int]) -> int:
        """Take the results' pages as candidates to read; returns how many are new."""
        new_urls = 0
        for position, result in enumerate(ranked):
            hit = result.fused.hit
            if hit.url in self.state.read:
                continue
            known = self.state.unread.get(hit.url)
            if known is None:
                new_urls += 1
                self.state.unread[hit.url] = _Candidate(hit.title, position, order)
            else:
                known.position = min(known.position, position)
                known.order = min(known.order, order)
        return new_urls

    def note_snippets(self, ranked: Sequence[Ranked]) -> None:
        """Take the results' snippets as evidence."""
        for result in ranked:
            hit = result.fused.hit
            if hit.snippet:
                self.state.pool.add(Passage(hit.url, hit.title, hit.snippet, "snippet"))

    async def search_round(self, round_no: int, subs: Sequence[SubQ]) -> int:
        """Search the sub-questions at once (as many as the tool calls allow); returns the
        number of new snippet passages."""
        allowed = max(0, self.calls.remaining - self.reserve)
        subs = list(subs)[:allowed]
        self.state.asked += subs
        before = len(self.state.pool.passages)
        found = await _all_or_none(
            [self.search_one(round_no, place, sub) for place, sub in enumerate(subs)]
        )
        # Snippets join the evidence in the sub-questions' order, not as searches answer:
        # the same evidence, numbered the same, on every run.
        for ranked in found:
            self.note_snippets(ranked)
        return len(self.state.pool.passages) - before

    async def read_round(self, round_no: int) -> int:
        """Read this round's share of the page budget, best-placed results first; returns
        the number of new page passages."""
        left = self.limits.max_pages - self.state.pages_read
        rounds_left = self.limits.max_iterations - round_no + 1
        quota = min(left, max(math.ceil(left / rounds_left), len(self.state.asked)))
        if quota <= 0 or not self.state.unread:
            return 0
        chosen = sorted(self.state.unread.items(), key=lambda kv: (kv[1].position, kv[1].order))
        chosen = chosen[:quota]
        for url, _ in chosen:
            del self.state.unread[url]
            self.state.read.add(url)
        pages = await read_urls(self.ctx, self.parts, [url for url, _ in chosen], stage="read")
        new = 0
        for (url, candidate), page in zip(chosen, pages, strict=True):
            self.state.pages_read += 1
            added = 0
            if page.status == "fetched" and page.content:
                added = self.state.pool.add_page(url, candidate.title, page.content)
                new += added
            await self.ctx.event(
                "read",
                {
                    "round": round_no,
                    "url": url,
                    "status": page.status,
                    "chars": page.extracted_chars,
                    "passages": added,
                },
            )
        return new

    # --- judging and writing ------------------------------------------------------

    def coverage(self) -> list[tuple[SubQ, list[ScoredPassage]]]:
        k = self.limits.passages_per_question
        return [(q, self.state.pool.best(q.question, k)) for q in self.state.asked]

    def all_failed(self) -> bool:
        return bool(self.ctx.trace) and all(t.error for t in self.ctx.trace)

    def failure_reason(self) -> str:
        reasons = list(dict.fromkeys(t.error for t in self.ctx.trace if t.error))
        return "every search failed: " + "; ".join(reasons)

    async def finish(self, question: str, rounds: int, stopped: str) -> ResearchResult:
        coverage = self.coverage()
        chosen = self.choose(question, coverage)
        conflicts = [
            Conflict(sub_question=q.question, what=d.what, values=d.values)
            for q, best in coverage
            for d in disagreements(q.question, [self.state.pool.passages[s.index] for s in best])
        ]
        written = await self.write(question, chosen)
        structured = await self.shape(question, chosen) if self.shaped else None
        status = _verification(
            written.method, chosen.sections, conflicts, written.claims, written.supported
        )
        await self.ctx.event(
            "verify",
            {
                "status": status,
                "claims": written.claims,
                "supported": written.supported,
                "unsupported": written.unsupported,
                "conflicts": len(conflicts),
            },
        )
        await self.ctx.event("draft", {"method": written.method, "chars": len(written.text)})
        if self.llm.estimated_tokens:
            self.ctx.error("llm", "usage", ESTIMATED_TOKENS)
        return self.result(
            question, coverage, chosen, written, conflicts,
            status=status, stopped=stopped, rounds=rounds, structured=structured,
        )  # fmt: skip

    async def shape(self, question: str, chosen: _Chosen) -> StructuredAnswer:
        """The answer shaped by the request's ``output_schema``; ``ResearchFailed`` with
        the validation errors when the model cannot give one within its repairs."""
        schema = self.request.output_schema or {}  # set: ``shaped`` says so
        try:
            if not self.llm_allowed("output_schema"):
                raise StructuredOutputFailed(
                    f"budget: max_llm_tokens={self.limits.max_llm_tokens} spent before it"
                )
            shaped = await structured_output(
                self.llm, question, chosen.passages, schema,
                repairs=self.parts.settings.llm.steps.output_schema.repairs,
                max_source_chars=max(2000, self.limits.max_evidence_chars),
            )  # fmt: skip
        except StructuredOutputFailed as exc:
            raise ResearchFailed(str(exc), "structured_output_failed") from exc
        urls = {
            pointer: [chosen.passages[n - 1].url for n in numbers]
            for pointer, numbers in shaped.citations.items()
        }
        return StructuredAnswer(
            data=shaped.data, citations=shaped.citations, citation_urls=urls,
            unsupported_citations=shaped.unsupported, repairs=shaped.repairs,
        )  # fmt: skip

    def choose(
        self, question: str, coverage: Sequence[tuple[SubQ, list[ScoredPassage]]]
    ) -> _Chosen:
        """The passages that fit ``max_evidence_chars``, numbered, and each sub-question's
        section citing its own."""
        pool = self.state.pool
        order = choose_evidence(
            pool, [question, *(q.question for q, _ in coverage)], self.limits.max_evidence_chars
        )
        numbers = {index: n for n, index in enumerate(order, start=1)}
        k = self.limits.passages_per_question
        sections = [
            Section(q.question, covered(best), best_in_evidence(pool, q.question, best, numbers, k))
            for q, best in coverage
        ]
        scores = {s.index: s.score for _, best in coverage for s in best}
        return _Chosen(order, sections, [pool.passages[i] for i in order], scores)

    async def write(self, question: str, chosen: _Chosen) -> _Written:
        """The report: the model's, its citations checked, else the evidence report."""
        limits = self.limits
        if chosen.passages and self.llm_allowed("research_report"):
            written = await llm_report(
                self.llm, question, chosen.passages, limits.max_report_chars, self.shape_calls
            )
            if written.text is not None:
                checked = verify_citations(written.text, chosen.passages, limits.verify_claims)
                report = with_sources(checked.text, chosen.passages, limits.max_report_chars)
                return _Written(
                    report, "llm", checked.claims, checked.supported, checked.unsupported
                )
        report = evidence_report(
            question, chosen.sections, chosen.passages, limits.max_report_chars
        )
        return _Written(report, "evidence")

    def result(
        self,
        question: str,
        coverage: Sequence[tuple[SubQ, list[ScoredPassage]]],
        chosen: _Chosen,
        written: _Written,
        conflicts: list[Conflict],
        *,
        status: VerificationStatus,
        stopped: str,
        rounds: int,
        structured: StructuredAnswer | None = None,
    ) -> ResearchResult:
        """The job's result as the caller wants it (``want``)."""
        want = self.request.want
        # How well the best sentence answers the question, not how many sub-questions
        # matched all their words: a bridge query rarely does.
        confidence = answer_support(question, chosen.passages)
        confidence *= 0.5 if conflicts else 1.0
        if written.method == "llm" and written.claims:
            confidence *= written.supported / written.claims
        return ResearchResult(
            question=question,
            preset=self.request.preset,
            report=written.text if want.report else None,
            report_method=written.method,
            confidence=round(confidence, 3),
            verification_status=status,
            sub_questions=[
                SubQuestion(
                    question=q.question,
                    source=q.source,
                    covered=covered(best),
                    coverage=round(max((s.coverage for s in best), default=0.0), 3),
                    evidence=section.evidence,
                )
                for (q, best), section in zip(coverage, chosen.sections, strict=True)
            ],
            evidence=[
                EvidencePassage(
                    n=n,
                    url=p.url,
                    title=p.title,
                    text=p.text,
                    kind=p.kind,
                    score=round(chosen.scores.get(i, 0.0), 4),
                )
                for n, (i, p) in enumerate(zip(chosen.order, chosen.passages, strict=True), 1)
            ]
            if want.evidence
            else None,
            conflicts=conflicts,
            unsupported_citations=written.unsupported,
            search_trace=self.ctx.trace if want.trace else None,
            stopped=stopped,
            errors=self.ctx.reported_errors(),
            usage=ResearchUsage(
                rounds=rounds,
                tool_calls=self.calls.used,
                pages_read=self.state.pages_read,
                llm_tokens=self.tokens_used(),
                elapsed_ms=int((time.perf_counter() - self.started) * 1000),
                llm_prompt_tokens=sum(r.prompt_tokens or 0 for r in self.llm.records),
                llm_completion_tokens=sum(r.completion_tokens or 0 for r in self.llm.records),
            ),
            structured=structured,
        )


async def _all_or_none(steps: Sequence[Coroutine[Any, Any, _T]]) -> list[_T]:
    """Run ``steps`` at once; their results in the steps' order. The first to fail
    cancels the others (none may go on, and emit events, after its job ended) and its
    exception is raised as it is, not wrapped in an ``ExceptionGroup``, so the job's own
    handlers see it."""
    try:
        async with asyncio.TaskGroup() as group:
            tasks = [group.create_task(step) for step in steps]
    except BaseExceptionGroup as failed:
        raise failed.exceptions[0] from None
    return [task.result() for task in tasks]


def _search_event(trace: TraceEntry) -> dict[str, Any]:
    """The ``search`` event of one search: its trace entry, said as an event."""
    data: dict[str, Any] = {
        "round": trace.round,
        "sub_question": trace.sub_question,
        "results": trace.results,
    }
    return data | ({"error": trace.error} if trace.error else {"new_urls": trace.new_urls})


def _verification(
    method: ReportMethod,
    sections: Sequence[Section],
    conflicts: Sequence[Conflict],
    claims: int,
    supported: int,
) -> VerificationStatus:
    if conflicts:
        return "conflicting"
    if method == "llm":
        if claims and supported == claims:
            return "verified"
        return "partially_verified" if supported else "unverified"
    answered = sum(s.covered for s in sections)
    if sections and answered == len(sections):
        return "verified"
    return "partially_verified" if answered else "unverified"
