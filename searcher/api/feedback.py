"""``POST /v1/feedback`` and ``GET /v1/stats/routes``: what callers did with the results,
and per route and preset how often results were used. Both behind the API keys (the auth
middleware guards every path not listed open)."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request

from searcher.api.auth import key_of
from searcher.contract import (
    ErrorResponse,
    FeedbackOutcome,
    FeedbackRecorded,
    FeedbackRequest,
    RouteStatsResponse,
    RouteUse,
    SearchRequest,
    SearchResponse,
)
from searcher.errors import UnknownRequest
from searcher.feedback.book import RESEARCH_ROUTE, FeedbackBook, RouteStats, SearchRecord
from searcher.runtime import Runtime

router = APIRouter()
FEEDBACK_PATH = "/v1/feedback"
# A preset is recommended for a route only on this many searches given feedback.
MIN_FEEDBACK_FOR_ADVICE = 5

_ERRORS: dict[int | str, dict[str, Any]] = {
    404: {"model": ErrorResponse, "description": "No search with that request id is kept."},
    422: {"model": ErrorResponse, "description": "Invalid body; `error.field` names the field."},
    503: {"model": ErrorResponse, "description": "The state store is unavailable."},
}


def feedback_book(runtime: Runtime, strict: bool = False) -> FeedbackBook | None:
    """The book when feedback is on and a state store is open; ``strict``: on the store
    itself, whose failures are errors (503), not the fail-soft wrapper's misses."""
    if not runtime.settings.feedback.enabled or runtime.state is None:
        return None
    store = runtime.state.inner if strict else runtime.state
    return FeedbackBook(store, runtime.settings.feedback)


async def record_search(
    runtime: Runtime,
    request_id: str,
    body: SearchRequest,
    response: SearchResponse,
    key: str | None = None,
) -> None:
    """Keep the search's record (feedback on), as ``key``'s, and the items its cited
    answer cited: the answer step reports them on its own."""
    book = feedback_book(runtime)
    if book is None:
        return
    route = (response.meta.route or {}).get("group") or "general"
    items = {item.id: item.url for item in response.items or ()}
    kept = await book.record_search(
        SearchRecord(request_id, body.query_text, route, response.meta.mode_used, items, key)
    )
    response.meta.request_id = request_id
    # Only the items kept (``feedback.max_items``) can be reported on: a citation of one
    # beyond them failed the whole search with a 422 naming an item the caller never sent.
    cited = {
        c.id: FeedbackOutcome.cited for c in response.answer_citations or () if c.id in kept.items
    }
    if cited:
        await book.give(request_id, cited, key)


@router.post(
    FEEDBACK_PATH,
    response_model=FeedbackRecorded,
    responses=_ERRORS,
    summary="Report which results of a search were used, cited or not relevant",
)
async def give_feedback(body: FeedbackRequest, request: Request) -> FeedbackRecorded:
    book = feedback_book(request.app.state.runtime, strict=True)
    if book is None:
        raise UnknownRequest(body.request_id)
    given = await book.give(body.request_id, body.items, key_of(request.scope))
    return FeedbackRecorded(request_id=body.request_id, items=given)


@router.get(
    "/v1/stats/routes",
    response_model=RouteStatsResponse,
    summary="Per route and preset, how often results were used",
)
async def route_stats(request: Request) -> RouteStatsResponse:
    runtime: Runtime = request.app.state.runtime
    book = feedback_book(runtime, strict=True)
    if book is None:
        return RouteStatsResponse(routes=[], recommended={})
    routes = sorted({*runtime.settings.routing.groups, "general", RESEARCH_ROUTE})
    presets = ["simple", "full", *_research_presets()]
    rows = await book.route_stats(routes, presets, key_of(request.scope))
    return RouteStatsResponse(routes=[_route_use(r) for r in rows], recommended=recommended(rows))


def _research_presets() -> list[str]:
    from searcher.research.presets import PRESETS

    return [f"research:{name}" for name in PRESETS]


def _route_use(row: RouteStats) -> RouteUse:
    return RouteUse(
        route=row.route, preset=row.preset, searches=row.searches,
        with_feedback=row.with_feedback, used_searches=row.used_searches,
        used_rate=round(row.used_rate, 4), used=row.used, cited=row.cited,
        not_relevant=row.not_relevant,
    )  # fmt: skip


def recommended(rows: list[RouteStats]) -> dict[str, str]:
    """Per route, the preset with the highest used rate among those given enough feedback
    (ties go to the preset named first: the cheaper search)."""
    best: dict[str, RouteStats] = {}
    for row in rows:
        if row.with_feedback < MIN_FEEDBACK_FOR_ADVICE:
            continue
        if row.route not in best or row.used_rate > best[row.route].used_rate:
            best[row.route] = row
    return {route: row.preset for route, row in sorted(best.items())}
