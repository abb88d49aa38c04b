"""One request in, one UCP-1 response out.

``SearchService.search`` reads as the numbered stages of a request; each stage is a plain
function or a small object with one job, and the service owns the deadline.
"""

from __future__ import annotations

import time
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import UTC, datetime

from searcher import __version__
from searcher.backends.base import BackendQuery, Hit
from searcher.backends.chain import BackendPool
from searcher.config import BACKEND_NAMES, BudgetDefaults, Settings
from searcher.contract import (
    Budget,
    ErrorEntry,
    FetchInfo,
    Item,
    Meta,
    Producer,
    Score,
    SearchRequest,
    SearchResponse,
    Usage,
)
from searcher.errors import InvalidRequest
from searcher.fetch.fetcher import FetchLimits
from searcher.page_reader import PageOutcome, PageReader, Progress
from searcher.render import PackItem, render_context_pack
from searcher.resilience import Deadline
from searcher.urls import domain_matches, host_of, item_id, normalise_url

PRODUCER = Producer(name="searcher", version=__version__)


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


def backend_order(
    requested: str | list[str] | None, settings: Settings, usable: Collection[str]
) -> list[str]:
    """The backends to try, in order: an explicit name alone, a list as given, or for
    ``auto``/unset the configured order without the backends that are not usable."""
    if requested is None or requested == "auto":
        return [name for name in settings.backends.order if name in usable]
    names = [requested] if isinstance(requested, str) else requested
    for name in names:
        if name not in BACKEND_NAMES:
            known = ", ".join((*BACKEND_NAMES, "auto"))
            raise InvalidRequest(
                "constraints.backend", f"unknown backend {name!r} (known: {known})"
            )
    return list(dict.fromkeys(names))


def unique_by_url(hits: Sequence[Hit]) -> list[Hit]:
    """Drop later hits whose normalised URL was already seen (backend order is kept)."""
    seen: set[str] = set()
    unique = []
    for hit in hits:
        key = normalise_url(hit.url)
        if key not in seen:
            seen.add(key)
            unique.append(hit)
    return unique


def filter_domains(
    hits: Sequence[Hit], include: Sequence[str] | None, exclude: Sequence[str] | None
) -> list[Hit]:
    """Keep hits on ``include`` domains (if given) and not on ``exclude`` domains."""
    kept = []
    for hit in hits:
        host = host_of(hit.url)
        if include and not any(domain_matches(host, d) for d in include):
            continue
        if exclude and any(domain_matches(host, d) for d in exclude):
            continue
        kept.append(hit)
    return kept


def apply_pick_ids(
    hits: Sequence[Hit], pick_ids: Sequence[int] | None
) -> tuple[list[Hit], list[int]]:
    """The hits at ``pick_ids`` (0-based), in the order given; invalid and duplicate ids are
    dropped. Returns the hits and the ids actually applied."""
    if pick_ids is None:
        return list(hits), []
    applied = [i for i in dict.fromkeys(pick_ids) if 0 <= i < len(hits)]
    return [hits[i] for i in applied], applied


def relevance_scores(hits: Sequence[Hit]) -> tuple[list[float], str]:
    """Relevance in [0, 1]: the backend's own score scaled by the best one when every hit
    has a score, else a linear decay by position."""
    scores = [hit.score for hit in hits if hit.score is not None and hit.score >= 0]
    if hits and len(scores) == len(hits) and max(scores) > 0:
        best = max(scores)
        return [round(s / best, 4) for s in scores], "score"
    n = len(hits)
    return [round((n - i) / n, 4) for i in range(n)], "rank"


def _utc_now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _fetch_info(outcome: PageOutcome | None, mode: str) -> FetchInfo:
    if outcome is None:
        if mode == "full":
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


class SearchService:
    """Composes the pipeline; one instance serves every request of an app or CLI run."""

    def __init__(self, settings: Settings, pool: BackendPool, reader: PageReader) -> None:
        self.settings = settings
        self.pool = pool
        self.reader = reader

    async def search(
        self, request: SearchRequest, progress: Progress | None = None
    ) -> SearchResponse:
        """Run one search request to a UCP-1 response. Raises ``AllBackendsFailed`` when no
        backend answered and ``InvalidRequest`` for a request the contract cannot express."""
        started = time.perf_counter()
        budget = effective_budget(request.budget, self.settings.budget)
        deadline = Deadline(budget.max_total_time_ms / 1000)
        constraints = request.constraints
        mode = constraints.search_mode
        names = backend_order(constraints.backend, self.settings, self.pool.backends)
        errors: list[ErrorEntry] = []
        timing: dict[str, int] = {}

        # 1. Search: the fallback chain, or nothing if the budget allows no tool call.
        hits: list[Hit] = []
        backend_used: str | None = None
        tried: list[str] = []
        fallback_used = False
        retrieved = _utc_now()
        if budget.max_tool_calls < 1:
            errors.append(ErrorEntry(stage="search", source="budget", reason="max_tool_calls is 0"))
        else:
            wanted = budget.max_results
            if constraints.pick_ids:
                wanted = max(wanted, max(constraints.pick_ids) + 1)
            query = BackendQuery(
                text=request.query_text,
                max_results=wanted,
                lang=request.lang,
                pageno=constraints.pageno,
                time_range=constraints.time_range,
                safesearch=constraints.safesearch,
                engines=tuple(constraints.engines or ()),
                categories=tuple(constraints.categories or ()),
            )
            t0 = time.perf_counter()
            chain = await self.pool.search_with_fallback(
                names, query, deadline, budget.search_timeout_ms / 1000, budget.max_search_retries
            )
            timing["search"] = int((time.perf_counter() - t0) * 1000)
            retrieved = _utc_now()
            hits, backend_used, tried = chain.answer.hits, chain.answer.backend, chain.tried
            fallback_used = chain.fallback_used
            errors += [
                ErrorEntry(stage="search", source=f.backend, reason=f.reason)
                for f in chain.failures
            ]
            errors += [
                ErrorEntry(stage="search", source=backend_used, reason=w)
                for w in chain.answer.warnings
            ]

        # 2. Select: one hit per page, domain filters, pick_ids, then the result cap.
        hits = unique_by_url(hits)
        hits = filter_domains(hits, constraints.include_domains, constraints.exclude_domains)
        hits, applied_ids = apply_pick_ids(hits, constraints.pick_ids)
        hits = hits[: budget.max_results]

        # 3. Full mode: read the top pages under the deadline.
        outcomes: list[PageOutcome] = []
        if mode == "full" and hits:
            t0 = time.perf_counter()
            limits = FetchLimits(
                timeout_s=budget.fetch_timeout_ms / 1000,
                max_bytes=budget.max_download_bytes_per_page,
                allowed_content_types=budget.allowed_content_types,
                max_redirects=budget.max_redirects,
            )
            urls = [hit.url for hit in hits[: budget.max_fetch_pages]]
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
        else:
            timing["fetch"] = 0

        # 4. Items, in rank order.
        relevance, basis = relevance_scores(hits)
        items = []
        for rank, hit in enumerate(hits, start=1):
            outcome = outcomes[rank - 1] if rank <= len(outcomes) else None
            items.append(
                Item(
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
                        rank=rank, relevance=relevance[rank - 1], method=f"{hit.backend}_{basis}"
                    ),
                    fetch=_fetch_info(outcome, mode),
                    content=outcome.content if outcome else None,
                )
            )

        # 5. The context pack.
        rendered = ""
        if request.want.rendered_text:
            t0 = time.perf_counter()
            rendered = render_context_pack(
                [PackItem(i.title, i.url, i.snippet, i.content) for i in items],
                query=request.query_text,
                backend=backend_used,
                mode=mode,
                max_chars=budget.max_context_chars,
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
                backend_used=backend_used,
                fallback_used=fallback_used,
                pick_applied=constraints.pick_ids is not None,
                pick_ids=applied_ids,
                mode_used=mode,
                timing_ms=timing,
                errors=errors,
                backends_tried=tried,
            ),
            usage=Usage(
                results_returned=len(items),
                context_chars=len(rendered),
                fetch_pages_used=sum(1 for o in outcomes if o.status == "fetched"),
            ),
            items=items,
            rendered_text=rendered if request.want.rendered_text else None,
        )
