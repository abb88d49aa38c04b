"""One request in, one UCP-1 response out.

``SearchService.search`` reads as the numbered stages of a request; each stage is a plain
function or a small object with one job, and the service owns the deadline.
"""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from searcher import __version__
from searcher.backends.base import BackendAnswer, BackendQuery
from searcher.backends.chain import BackendPool
from searcher.backends.policy import BackendPlan, plan_backends
from searcher.config import BudgetDefaults, Settings
from searcher.contract import (
    Budget,
    ErrorEntry,
    FetchInfo,
    Item,
    Meta,
    Producer,
    Provenance,
    Score,
    SearchRequest,
    SearchResponse,
    Usage,
)
from searcher.dedup import drop_near_duplicates
from searcher.embeddings import Embedder
from searcher.errors import AllBackendsFailed, BackendFailure
from searcher.fetch.fetcher import FetchLimits
from searcher.fusion import FusedHit, fuse, ranked_lists
from searcher.page_reader import PageOutcome, PageReader, Progress
from searcher.passages import select_passages, top_chunks
from searcher.render import PackItem, render_context_pack
from searcher.resilience import Deadline
from searcher.routing import CompiledRoutes, Route, compile_routes, route_query
from searcher.scoring import DomainLists, apply_filter, load_domain_lists, score_results
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


@dataclass
class SearchOutcome:
    """What the search stage produced, whichever way the backends were used."""

    answers: list[BackendAnswer]
    tried: list[str]
    failures: list[BackendFailure]
    fallback_used: bool = False
    hedged: dict[str, Any] | None = None

    @property
    def backend_used(self) -> str | None:
        names = [a.backend for a in self.answers]
        return "+".join(names) if names else None


@dataclass(frozen=True)
class Ranked:
    """One result after fusion, dedup and scoring."""

    fused: FusedHit
    relevance: float
    components: dict[str, float] = field(default_factory=dict)


def backend_query(request: SearchRequest, route: Route, max_results: int) -> BackendQuery:
    """The query every backend receives; the routed engine group fills in SearXNG
    engines and categories the request did not set."""
    constraints = request.constraints
    return BackendQuery(
        text=request.query_text,
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
    inputs = [(f.hit, f.score, len({(s.backend, s.engine) for s in f.sources})) for f in fused]
    scored = apply_filter(score_results(inputs, query, route.group, domains, settings.scoring))
    return [Ranked(fused[s.index], s.relevance, s.components) for s in scored]


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
            Provenance(backend=s.backend, engine=s.engine, rank=s.rank)
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
    ) -> None:
        self.settings = settings
        self.pool = pool
        self.reader = reader
        self.embedder = embedder
        self.embedder_problem = embedder_problem
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
        constraints = request.constraints
        mode = constraints.search_mode
        errors: list[ErrorEntry] = []
        timing: dict[str, int] = {}

        # 1. Route the query to an engine group; plan which backends to use and how.
        route = route_query(request.query_text, self.routes)
        plan = plan_backends(constraints.backend, request.intent, settings, self.pool.backends)

        # 2. Search.
        outcome = SearchOutcome([], [], [])
        retrieved = _utc_now()
        if budget.max_tool_calls < 1:
            errors.append(ErrorEntry(stage="search", source="budget", reason="max_tool_calls is 0"))
        else:
            wanted = budget.max_results
            if constraints.pick_ids:
                wanted = max(wanted, max(constraints.pick_ids) + 1)
            t0 = time.perf_counter()
            query = backend_query(request, route, wanted)
            outcome = await self._search(plan, query, deadline, budget)
            timing["search"] = int((time.perf_counter() - t0) * 1000)
            retrieved = _utc_now()
            errors += [
                ErrorEntry(stage="search", source=f.backend, reason=f.reason)
                for f in outcome.failures
            ]
            for answer in outcome.answers:
                errors += [
                    ErrorEntry(stage="search", source=answer.backend, reason=w)
                    for w in answer.warnings
                ]

        # 3. Fuse every ranked list, drop near-duplicates, score with the heuristics.
        t0 = time.perf_counter()
        lists = [
            ranked
            for answer in outcome.answers
            for ranked in ranked_lists(
                answer, plan.weight(answer.backend), settings.backends.engine_weights
            )
        ]
        fused = fuse(lists, settings.fusion.rrf_k)
        fused, notes = await drop_near_duplicates(
            fused, self.embedder, settings.fusion.near_duplicate_threshold
        )
        if self.embedder is None:
            # Off by choice (provider "none") is no error; off because loading failed is.
            notes = [self.embedder_problem] if self.embedder_problem and len(fused) > 1 else []
        errors += [ErrorEntry(stage="dedup", source="embedder", reason=n) for n in notes]
        ranked = rank(fused, request.query_text, route, self.domains, settings)
        timing["rank"] = int((time.perf_counter() - t0) * 1000)

        # 4. Select: domain filters, pick_ids, then the result cap.
        ranked = filter_domains(
            ranked,
            lambda r: r.fused.hit.url,
            constraints.include_domains,
            constraints.exclude_domains,
        )
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
            timing["fetch"] = int((time.perf_counter() - t0) * 1000)
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
                chunks = top_chunks(
                    request.query_text, page.content, constraints.chunks_per_source, CHUNK_CHARS
                )
            item = _item(rank_no, result, page, reading, retrieved, chunks)
            if mode == "simple":
                item.content = None  # simple mode reads pages only for their chunks
            items.append(item)

        # 7. The context pack: in full mode each page contributes the passages that
        # answer the query, within its fair share of the budget.
        rendered = ""
        if request.want.rendered_text:
            t0 = time.perf_counter()
            select = self._passage_selector(request.query_text) if mode == "full" else None
            rendered = render_context_pack(
                [PackItem(i.title, i.url, i.snippet, _pack_content(i)) for i in items],
                query=request.query_text,
                backend=outcome.backend_used,
                mode=mode,
                max_chars=budget.max_context_chars,
                select=select,
            )
            timing["render"] = int((time.perf_counter() - t0) * 1000)
            if not rendered:
                errors.append(
                    ErrorEntry(
                        stage="render",
                        source="budget",
                        reason=f"max_context_chars={budget.max_context_chars} cannot hold the pack",
                    )
                )
        timing["total"] = int((time.perf_counter() - started) * 1000)

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
                route={"group": route.group, "pattern": route.pattern},
                hedged=outcome.hedged,
            ),
            usage=Usage(
                results_returned=len(items),
                context_chars=len(rendered),
                fetch_pages_used=sum(1 for o in outcomes if o.status == "fetched"),
            ),
            items=items,
            rendered_text=rendered if request.want.rendered_text else None,
        )

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
