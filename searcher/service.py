"""One request in, one UCP-1 response out.

``SearchService.search`` reads as the numbered stages of a request; each stage is a plain
function or a small object with one job, and the service owns the deadline.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, date, datetime
from typing import Any

from searcher import __version__
from searcher.backends.base import BackendQuery
from searcher.backends.chain import BackendPool
from searcher.backends.policy import BackendPlan, plan_backends
from searcher.config import BudgetDefaults, Settings
from searcher.contract import (
    AnswerCheck,
    Budget,
    Citation,
    Constraints,
    ErrorEntry,
    FetchInfo,
    Item,
    LlmCall,
    Meta,
    Producer,
    Provenance,
    RankInfo,
    Score,
    SearchRequest,
    SearchResponse,
    Usage,
)
from searcher.dedup import drop_near_duplicates
from searcher.embeddings import Embedder
from searcher.errors import AllBackendsFailed
from searcher.fetch.fetcher import FetchLimits
from searcher.fusion import FusedHit, engine_count, fuse_answers
from searcher.hybrid import hybrid_stage
from searcher.llm.answer import check_citations, write_answer
from searcher.llm.answer_check import check_answer
from searcher.llm.client import LlmClient
from searcher.llm.crag import Evidence
from searcher.llm.rewrite import rewrite_query
from searcher.llm.route import classify_group
from searcher.llm.runner import StepRunner
from searcher.llm.snippet_rank import Candidate, rank_candidates
from searcher.page_reader import PageOutcome, PageReader, Progress
from searcher.passages import select_passages, top_chunks
from searcher.render import PackItem, render_context_pack
from searcher.rerank import document_text, rerank_stage
from searcher.resilience import CallBudget, Deadline
from searcher.routing import CompiledRoutes, Route, compile_routes, route_query, route_to_group
from searcher.scoring import DomainLists, apply_filter, load_domain_lists, score_results
from searcher.searches import SearchOutcome, Tagged, corrective_search, multi_search
from searcher.selection import apply_pick_ids, filter_domains
from searcher.urls import item_id

PRODUCER = Producer(name="searcher", version=__version__)
CHUNK_CHARS = 500


@dataclass(frozen=True)
class EffectiveBudget:
    """The request's budget with every unset field filled from the configured defaults."""

    max_tool_calls: int
    max_search_retries: int
    max_results: int
    max_fetch_pages: int
    max_download_bytes_per_page: int
    max_extract_chars_per_page: int
    allowed_content_types: tuple[str, ...]
    max_redirects: int
    max_context_chars: int
    max_total_time_ms: int
    search_timeout_ms: int
    fetch_timeout_ms: int


def effective_budget(budget: Budget, defaults: BudgetDefaults) -> EffectiveBudget:
    """Fill the request's unset budget fields from the configured defaults."""

    def pick(value: int | None, default: int) -> int:
        return default if value is None else value

    timeouts = budget.per_request_timeout_ms
    return EffectiveBudget(
        max_tool_calls=pick(budget.max_tool_calls, defaults.max_tool_calls),
        max_search_retries=pick(budget.max_search_retries, defaults.max_search_retries),
        max_results=pick(budget.max_results, defaults.max_results),
        max_fetch_pages=pick(budget.max_fetch_pages, defaults.max_fetch_pages),
        max_download_bytes_per_page=pick(
            budget.max_download_bytes_per_page, defaults.max_download_bytes_per_page
        ),
        max_extract_chars_per_page=pick(
            budget.max_extract_chars_per_page, defaults.max_extract_chars_per_page
        ),
        allowed_content_types=tuple(
            t.lower() for t in (budget.allowed_content_types or defaults.allowed_content_types)
        ),
        max_redirects=pick(budget.max_redirects, defaults.max_redirects),
        max_context_chars=pick(budget.max_context_chars, defaults.max_context_chars),
        max_total_time_ms=pick(budget.max_total_time_ms, defaults.max_total_time_ms),
        search_timeout_ms=pick(timeouts.search if timeouts else None, defaults.search_timeout_ms),
        fetch_timeout_ms=pick(timeouts.fetch if timeouts else None, defaults.fetch_timeout_ms),
    )


@dataclass(frozen=True)
class Ranked:
    """One result after fusion, dedup and scoring."""

    fused: FusedHit
    relevance: float
    components: dict[str, float] = field(default_factory=dict)


def backend_query(
    request: SearchRequest, route: Route, max_results: int, text: str | None = None
) -> BackendQuery:
    """The query every backend receives (``text``, default the request's query); the
    routed engine group fills in SearXNG engines and categories the request did not set."""
    constraints = request.constraints
    return BackendQuery(
        text=text or request.query_text,
        max_results=max_results,
        lang=request.lang,
        pageno=constraints.pageno,
        time_range=constraints.time_range,
        safesearch=constraints.safesearch,
        engines=tuple(constraints.engines or route.engines),
        categories=tuple(constraints.categories or route.categories),
    )


def rank(
    fused: Sequence[FusedHit], query: str, route: Route, domains: DomainLists, settings: Settings
) -> list[Ranked]:
    """Heuristic relevance on top of fusion; results below the keyword-overlap floor go,
    unless that would leave nothing."""
    inputs = [(f.hit, f.score, engine_count(f)) for f in fused]
    scored = apply_filter(score_results(inputs, query, route.group, domains, settings.scoring))
    return [Ranked(fused[s.index], s.relevance, s.components) for s in scored]


def _rerank_text(ranked: Ranked) -> str:
    return document_text(ranked.fused.hit.title, ranked.fused.hit.snippet)


def _with_hybrid_score(ranked: Ranked, score: float, blended: float) -> Ranked:
    components = {**ranked.components, "hybrid": score}
    return dataclasses.replace(ranked, relevance=blended, components=components)


def _with_rerank_score(ranked: Ranked, score: float, relevance: float) -> Ranked:
    components = {**ranked.components, "rerank": score}
    return dataclasses.replace(ranked, relevance=relevance, components=components)


def _non_increasing(ranked: Sequence[Ranked]) -> list[Ranked]:
    """Relevance never rises down the list (a reranked head above an unsent tail)."""
    out: list[Ranked] = []
    for r in ranked:
        if out and r.relevance > out[-1].relevance:
            r = dataclasses.replace(r, relevance=out[-1].relevance)
        out.append(r)
    return out


def _ms(since: float) -> int:
    return int((time.perf_counter() - since) * 1000)


def _candidates(ranked: Sequence[Ranked], top_k: int) -> list[Candidate]:
    """The first ``top_k`` results as snippet-ranking / grading candidates."""
    return [
        Candidate(i, r.fused.hit.title, r.fused.hit.snippet, r.fused.hit.url)
        for i, r in enumerate(ranked[:top_k])
    ]


def _evidence(ranked: Ranked) -> Evidence:
    return Evidence(ranked.components.get("keyword_overlap", 0.0), ranked.relevance)


def _search_errors(outcome: SearchOutcome) -> list[ErrorEntry]:
    errors = [
        ErrorEntry(stage="search", source=f.backend, reason=f.reason) for f in outcome.failures
    ]
    for answer in outcome.answers:
        errors += [
            ErrorEntry(stage="search", source=answer.backend, reason=w) for w in answer.warnings
        ]
    return errors


async def _cited_answer(
    llm: StepRunner, question: str, pack: str, items: Sequence[Item]
) -> tuple[str | None, list[Citation] | None, list[ErrorEntry]]:
    """The answer with its citations checked against ``items``; a citation of a missing
    item is removed and reported."""
    written = await write_answer(llm, question, pack, len(items))
    if written.value is None:
        return None, None, []
    checked = check_citations(written.value, len(items))
    errors = [
        ErrorEntry(
            stage="answer",
            source="llm",
            reason=f"citation [{n}] refers to no item (there are {len(items)}); removed",
        )
        for n in checked.removed
    ]
    if not checked.refs:
        errors.append(ErrorEntry(stage="answer", source="llm", reason="the answer cites no item"))
    citations = [
        Citation(ref=n, id=items[n - 1].id, url=items[n - 1].url, title=items[n - 1].title)
        for n in checked.refs
    ]
    return checked.text, citations, errors


def _utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _fetch_info(outcome: PageOutcome | None, reading: bool) -> FetchInfo:
    if outcome is None:
        if reading:
            return FetchInfo(status="skipped", skip_reason="budget", error="beyond max_fetch_pages")
        return FetchInfo()
    return FetchInfo(
        status=outcome.status,  # type: ignore[arg-type]
        skip_reason=outcome.skip_reason,  # type: ignore[arg-type]
        error=outcome.error,
        http_status=outcome.http_status,
        content_type=outcome.content_type,
        downloaded_bytes=outcome.downloaded_bytes,
        truncated=outcome.truncated,
        extracted_chars=outcome.extracted_chars,
        cached=outcome.cached,
    )


def _item(
    rank_no: int, ranked: Ranked, outcome: PageOutcome | None, reading: bool, retrieved: str,
    chunks: list[str] | None,
) -> Item:  # fmt: skip
    hit = ranked.fused.hit
    return Item(
        id=item_id(hit.url),
        title=hit.title,
        url=hit.url,
        retrieved_utc=retrieved,
        engine=hit.backend,
        engines=list(hit.engines),
        snippet=hit.snippet,
        published_utc=hit.published,
        category=hit.category,
        score=Score(
            rank=rank_no,
            relevance=ranked.relevance,
            method="rrf+heuristics",
            components=ranked.components,
        ),
        provenance=[
            Provenance(backend=s.backend, engine=s.engine, rank=s.rank, perspective=s.perspective)
            for s in ranked.fused.sources
        ],
        fetch=_fetch_info(outcome, reading),
        content=outcome.content if outcome else None,
        chunks=chunks,
    )


class SearchService:
    """Composes the pipeline; one instance serves every request of an app or CLI run."""

    def __init__(
        self,
        settings: Settings,
        pool: BackendPool,
        reader: PageReader,
        embedder: Embedder | None = None,
        embedder_problem: str | None = None,
        llm: LlmClient | None = None,
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.reader = reader
        self.embedder = embedder
        self.embedder_problem = embedder_problem
        self.llm = llm
        self.routes: CompiledRoutes = compile_routes(settings.routing)
        self.domains: DomainLists = load_domain_lists(settings.scoring)

    async def _search(
        self, plan: BackendPlan, query: BackendQuery, deadline: Deadline, budget: EffectiveBudget
    ) -> SearchOutcome:
        """The backends, used as the plan says; a fan-out where every backend failed falls
        back to the remaining usable backends one by one (the degradation ladder)."""
        timeout_s, retries = budget.search_timeout_ms / 1000, budget.max_search_retries
        if plan.mode == "fanout":
            fan = await self.pool.fan_out(plan.names, query, deadline, timeout_s, retries)
            if fan.answers:
                return SearchOutcome(fan.answers, fan.tried, fan.failures)
            rest = [
                n
                for n in self.settings.backends.order
                if n in self.pool.backends and n not in plan.names
            ]
            if not rest:
                if any(f.reason != "no results" for f in fan.failures):
                    raise AllBackendsFailed(fan.failures)
                return SearchOutcome([], fan.tried, fan.failures)
            try:
                chain = await self.pool.search_with_fallback(
                    rest, query, deadline, timeout_s, retries
                )
            except AllBackendsFailed as exc:
                raise AllBackendsFailed(fan.failures + exc.failures) from exc
            answers = [chain.answer] if chain.answer.hits else []
            return SearchOutcome(
                answers, fan.tried + chain.tried, fan.failures + chain.failures, True, chain.hedged
            )
        if not plan.names:
            raise AllBackendsFailed([])
        chain = await self.pool.search_with_fallback(
            plan.names, query, deadline, timeout_s, retries
        )
        answers = [chain.answer] if chain.answer.hits else []
        return SearchOutcome(
            answers, chain.tried, chain.failures, chain.fallback_used, chain.hedged
        )

    async def search(
        self, request: SearchRequest, progress: Progress | None = None
    ) -> SearchResponse:
        """Run one search request to a UCP-1 response. Raises ``AllBackendsFailed`` when no
        backend answered and ``InvalidRequest`` for a request the contract cannot express."""
        started = time.perf_counter()
        settings = self.settings
        budget = effective_budget(request.budget, settings.budget)
        deadline = Deadline(budget.max_total_time_ms / 1000)
        calls = CallBudget(budget.max_tool_calls)
        llm = StepRunner(self.llm, settings.llm, deadline, calls, date.today())
        constraints = request.constraints
        mode = constraints.search_mode
        errors: list[ErrorEntry] = []
        timing: dict[str, int] = {}
        extra_meta: dict[str, Any] = {}
        question = request.query_text  # what the user asked: ranking and answers use it
        searches = constraints.multi_query or 1  # calls kept back from the LLM steps before

        # 1. Optionally rewrite the query; route it to an engine group; plan the backends.
        query = question
        if constraints.rewrite:
            t0 = time.perf_counter()
            rewritten = await rewrite_query(llm, question, reserve=searches)
            timing["rewrite"] = _ms(t0)
            if rewritten.value is not None:
                query = extra_meta["rewritten_query"] = rewritten.value
        route, route_by = route_query(query, self.routes), "pattern"
        if route.pattern is None:
            route_by = "default"
            if constraints.route == "llm":
                t0 = time.perf_counter()
                groups = list(settings.routing.groups)
                chosen = await classify_group(llm, query, groups, reserve=searches)
                timing["route"] = _ms(t0)
                if chosen.value is not None:
                    route, route_by = route_to_group(self.routes, chosen.value, "llm"), "llm"
        plan = plan_backends(constraints.backend, request.intent, settings, self.pool.backends)
        wanted = budget.max_results
        if constraints.pick_ids:
            wanted = max(wanted, max(constraints.pick_ids) + 1)
        if constraints.rank == "llm":
            wanted = max(wanted, settings.llm.steps.rank.top_k)

        async def search_once(
            text: str, where: Route, backends: Sequence[str] | None
        ) -> SearchOutcome:
            use = plan if backends is None else BackendPlan("fallback", tuple(backends), {})
            return await self._search(
                use, backend_query(request, where, wanted, text), deadline, budget
            )

        # 2. Search: the query, or its perspectives in parallel.
        tagged = Tagged()
        retrieved = _utc_now()
        if budget.max_tool_calls < 1:
            errors.append(ErrorEntry(stage="search", source="budget", reason="max_tool_calls is 0"))
        else:
            t0 = time.perf_counter()
            if constraints.multi_query:
                tagged, perspectives = await multi_search(
                    llm, search_once, self.embedder, query, route, constraints.multi_query, calls
                )
                extra_meta["perspectives"] = perspectives
            else:
                calls.take(1)
                tagged.outcomes.append((None, await search_once(query, route, None)))
            timing["search"] = _ms(t0)
            retrieved = _utc_now()

        # 3. Fuse every ranked list, drop near-duplicates, score with the heuristics.
        t0 = time.perf_counter()
        ranked, notes = await self._fuse_and_rank(tagged, plan, query, route)
        timing["rank"] = _ms(t0)

        # 3b. Corrective re-search: grade the evidence, re-search if it is weak.
        if constraints.crag and budget.max_tool_calls >= 1:
            t0 = time.perf_counter()
            correction = await corrective_search(
                llm,
                search_once,
                query,
                route,
                _candidates(ranked, settings.llm.steps.rank.top_k),
                [_evidence(r) for r in ranked],
                lambda: self._alternatives(plan, tagged.merged().tried, route),
                calls,
            )
            extra_meta["crag"] = correction.info
            if correction.extra.outcomes:
                keep = tagged.outcomes
                if correction.replace:  # the first results go; what was tried stays on record
                    keep = [(p, dataclasses.replace(o, answers=[])) for p, o in keep]
                more = Tagged(keep + correction.extra.outcomes, tagged.failures)
                more_ranked, more_notes = await self._fuse_and_rank(more, plan, query, route)
                if more_ranked:
                    tagged, ranked, notes = more, more_ranked, more_notes
            tagged.failures += correction.extra.failures
            timing["crag"] = _ms(t0)
        outcome = tagged.merged()
        errors += _search_errors(outcome)
        errors += [ErrorEntry(stage="dedup", source="embedder", reason=n) for n in notes]

        # 3c. Optional reranking model (searcher/rerank.py); its failure keeps the order.
        if settings.rerank.enabled if constraints.rerank is None else constraints.rerank:
            t0 = time.perf_counter()
            ranked, rerank_error = await rerank_stage(
                ranked, question, settings.rerank, deadline.cap(settings.rerank.timeout_s),
                _rerank_text, _with_rerank_score,
            )  # fmt: skip
            ranked = _non_increasing(ranked)
            if rerank_error:
                errors.append(ErrorEntry(stage="rerank", source="reranker", reason=rerank_error))
            timing["rerank"] = _ms(t0)

        # 4. Select: domain filters, LLM snippet ranking, pick_ids, then the result cap.
        ranked = filter_domains(
            ranked,
            lambda r: r.fused.hit.url,
            constraints.include_domains,
            constraints.exclude_domains,
        )
        if constraints.rank == "llm":
            t0 = time.perf_counter()
            ranked, extra_meta["rank"] = await self._llm_rank(llm, question, ranked, constraints)
            timing["llm_rank"] = _ms(t0)
        ranked, applied_ids = apply_pick_ids(ranked, constraints.pick_ids)
        ranked = ranked[: budget.max_results]

        # 5. Read the top pages (full mode, or chunks_per_source) under the deadline.
        reading = mode == "full" or constraints.chunks_per_source is not None
        outcomes: list[PageOutcome] = []
        timing["fetch"] = 0
        if reading and ranked:
            t0 = time.perf_counter()
            limits = FetchLimits(
                timeout_s=budget.fetch_timeout_ms / 1000,
                max_bytes=budget.max_download_bytes_per_page,
                allowed_content_types=budget.allowed_content_types,
                max_redirects=budget.max_redirects,
            )
            urls = [r.fused.hit.url for r in ranked[: budget.max_fetch_pages]]
            outcomes = await self.reader.read_all(
                urls, limits, budget.max_extract_chars_per_page, deadline, progress
            )
            timing["fetch"] = _ms(t0)
            errors += [
                ErrorEntry(
                    stage="fetch", source=url, reason=f"{o.skip_reason or o.status}: {o.error}"
                )
                for url, o in zip(urls, outcomes, strict=True)
                if o.status != "fetched"
            ]

        # 6. Items, in rank order.
        items = []
        for rank_no, result in enumerate(ranked, start=1):
            page = outcomes[rank_no - 1] if rank_no <= len(outcomes) else None
            chunks = None
            if constraints.chunks_per_source and page is not None and page.content:
                chunks = top_chunks(query, page.content, constraints.chunks_per_source, CHUNK_CHARS)
            item = _item(rank_no, result, page, reading, retrieved, chunks)
            if mode == "simple":
                item.content = None  # simple mode reads pages only for their chunks
            items.append(item)

        # 7. The context pack: in full mode each page contributes the passages that
        # answer the query, within its fair share of the budget.
        rendered = ""
        want = request.want
        if want.rendered_text or want.answer:
            t0 = time.perf_counter()
            select = self._passage_selector(query) if mode == "full" else None
            rendered = render_context_pack(
                [PackItem(i.title, i.url, i.snippet, _pack_content(i)) for i in items],
                query=query,
                backend=outcome.backend_used,
                mode=mode,
                max_chars=budget.max_context_chars,
                select=select,
            )
            timing["render"] = _ms(t0)
            if not rendered:
                errors.append(
                    ErrorEntry(
                        stage="render",
                        source="budget",
                        reason=f"max_context_chars={budget.max_context_chars} cannot hold the pack",
                    )
                )

        # 8. The cited answer, and its self-check.
        answer: str | None = None
        citations: list[Citation] | None = None
        if want.answer:
            t0 = time.perf_counter()
            answer, citations, answer_errors = await _cited_answer(llm, question, rendered, items)
            errors += answer_errors
            timing["answer"] = _ms(t0)
        if want.answer_check:
            if answer is None:
                errors.append(
                    ErrorEntry(stage="answer_check", source="answer", reason="no answer to check")
                )
            else:
                t0 = time.perf_counter()
                refs = [c.ref for c in citations or []]
                grades = await check_answer(llm, question, rendered, answer, refs)
                extra_meta["answer_check"] = AnswerCheck(**dataclasses.asdict(grades))
                timing["answer_check"] = _ms(t0)
        errors += [
            ErrorEntry(stage=r.step, source="llm", reason=f"fallback: {r.reason}")
            for r in llm.records
            if r.fallback_used
        ]
        timing["total"] = _ms(started)

        return SearchResponse(
            created_utc=_utc_now(),
            producer=PRODUCER,
            request=request.model_dump(mode="json", exclude_unset=True),
            meta=Meta(
                backend_used=outcome.backend_used,
                fallback_used=outcome.fallback_used,
                pick_applied=constraints.pick_ids is not None,
                pick_ids=applied_ids,
                mode_used=mode,
                timing_ms=timing,
                errors=errors,
                backends_tried=outcome.tried,
                route={"group": route.group, "pattern": route.pattern, "by": route_by},
                hedged=outcome.hedged,
                llm=[LlmCall(**dataclasses.asdict(r)) for r in llm.records],
                **extra_meta,
            ),
            usage=Usage(
                results_returned=len(items),
                context_chars=len(rendered) if want.rendered_text else 0,
                fetch_pages_used=sum(1 for o in outcomes if o.status == "fetched"),
            ),
            items=items,
            rendered_text=rendered if want.rendered_text else None,
            answer=answer,
            answer_citations=citations,
        )

    async def _fuse_and_rank(
        self, tagged: Tagged, plan: BackendPlan, query: str, route: Route
    ) -> tuple[list[Ranked], list[str]]:
        """Fusion of every list of every search, near-duplicate removal, heuristic scores.
        Returns the ranking and the dedup notes for ``meta.errors``."""
        settings = self.settings
        answers = [
            (perspective, answer, plan.weight(answer.backend))
            for perspective, outcome in tagged.outcomes
            for answer in outcome.answers
        ]
        fused = fuse_answers(
            answers,
            settings.backends.engine_weights,
            settings.fusion.rrf_k,
            settings.fusion.method,
            settings.fusion.engine_agreement,
        )
        fused, notes = await drop_near_duplicates(
            fused, self.embedder, settings.fusion.near_duplicate_threshold
        )
        if self.embedder is None:
            # Off by choice (provider "none") is no error; off because loading failed is.
            notes = [self.embedder_problem] if self.embedder_problem and len(fused) > 1 else []
        ranked = rank(fused, query, route, self.domains, settings)
        ranked = await hybrid_stage(
            ranked, query, settings.scoring.hybrid_share, self.embedder,
            _rerank_text, _with_hybrid_score,
        )  # fmt: skip
        return ranked, notes

    def _alternatives(
        self, plan: BackendPlan, tried: Sequence[str], route: Route
    ) -> tuple[Sequence[str] | None, Route, str] | None:
        """Where to search again when the evidence was wrong: backends not tried yet, else
        the default engine group if the query was routed elsewhere."""
        rest = [n for n in self.settings.backends.order if n in self.pool.backends]
        untried = [n for n in rest if n not in tried]
        if untried:
            return untried, route, "backends: " + ", ".join(untried)
        default = self.routes.default
        if route.group != default.group:
            return None, default, f"engine group: {default.group}"
        return None

    async def _llm_rank(
        self, llm: StepRunner, question: str, ranked: list[Ranked], constraints: Constraints
    ) -> tuple[list[Ranked], RankInfo]:
        """Snippet ranking: the model's picks among the top candidates, in its order."""
        step = self.settings.llm.steps.rank
        want_n = constraints.want_n or step.want_n
        candidates = _candidates(ranked, step.top_k)
        result = await rank_candidates(llm, question, candidates, want_n)
        chosen = [ranked[i] for i in result.picks]
        info = RankInfo(
            candidates=len(candidates),
            want_n=want_n,
            picks=result.picks,
            urls=[r.fused.hit.url for r in chosen],
            fallback_used=result.fallback_used,
            reason=result.reason,
        )
        return chosen, info

    async def read_pages(
        self, urls: Sequence[str], max_chars: int | None = None, progress: Progress | None = None
    ) -> list[PageOutcome]:
        """Read pages by URL (cache, guarded fetch, extraction) under the configured budget
        defaults: the one path for fetch_page, extract and loader endpoints."""
        defaults = self.settings.budget
        limits = FetchLimits(
            timeout_s=defaults.fetch_timeout_ms / 1000,
            max_bytes=defaults.max_download_bytes_per_page,
            allowed_content_types=tuple(t.lower() for t in defaults.allowed_content_types),
            max_redirects=defaults.max_redirects,
        )
        chars = defaults.max_extract_chars_per_page if max_chars is None else max_chars
        deadline = Deadline(defaults.max_total_time_ms / 1000)
        return await self.reader.read_all(list(urls), limits, chars, deadline, progress)

    @staticmethod
    def _passage_selector(query: str) -> Callable[[str, int], str]:
        def select(text: str, budget: int) -> str:
            return select_passages(query, text, budget)

        return select


def _pack_content(item: Item) -> str | None:
    if item.content:
        return item.content
    if item.chunks:
        return "\n\n".join(item.chunks)
    return None
