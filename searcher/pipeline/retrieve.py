"""Stage 2, retrieve: the backends searched for the query, or for its perspectives at once.

``search_once`` is one search of any text under the request's plan, deadline and budget;
the research loop and corrective re-search call it for queries of their own.
"""

from __future__ import annotations

from collections.abc import Sequence

from searcher.backends.base import BackendQuery
from searcher.backends.policy import BackendPlan
from searcher.errors import AllBackendsFailed
from searcher.pipeline.context import RequestContext, utc_now
from searcher.pipeline.parts import Parts
from searcher.pipeline.plan import Plan
from searcher.routing import Route
from searcher.searches import SearchOnce, SearchOutcome, Tagged, multi_search


def backend_query(ctx: RequestContext, route: Route, max_results: int, text: str) -> BackendQuery:
    """The query every backend receives; the routed engine group fills in the SearXNG
    engines and categories the request did not set."""
    request = ctx.request
    constraints = request.constraints
    return BackendQuery(
        text=text,
        max_results=max_results,
        lang=request.lang,
        pageno=constraints.pageno,
        time_range=constraints.time_range,
        safesearch=constraints.safesearch,
        engines=tuple(constraints.engines or route.engines),
        categories=tuple(constraints.categories or route.categories),
    )


async def _search(
    ctx: RequestContext, parts: Parts, plan: BackendPlan, query: BackendQuery
) -> SearchOutcome:
    """The backends, used as the plan says; a fan-out where every backend failed falls
    back to the remaining usable backends one by one (the degradation ladder)."""
    pool, budget, deadline = parts.pool, ctx.budget, ctx.deadline
    timeout_s, retries = budget.search_timeout_ms / 1000, budget.max_search_retries
    if plan.mode == "fanout":
        fan = await pool.fan_out(plan.names, query, deadline, timeout_s, retries)
        if fan.answers:
            return SearchOutcome(fan.answers, fan.tried, fan.failures)
        rest = [
            n for n in parts.settings.backends.order if n in pool.backends and n not in plan.names
        ]
        if not rest:
            if any(f.reason != "no results" for f in fan.failures):
                raise AllBackendsFailed(fan.failures)
            return SearchOutcome([], fan.tried, fan.failures)
        try:
            chain = await pool.search_with_fallback(rest, query, deadline, timeout_s, retries)
        except AllBackendsFailed as exc:
            raise AllBackendsFailed(fan.failures + exc.failures) from exc
        answers = [chain.answer] if chain.answer.hits else []
        return SearchOutcome(
            answers, fan.tried + chain.tried, fan.failures + chain.failures, True, chain.hedged
        )
    if not plan.names:
        raise AllBackendsFailed([])
    chain = await pool.search_with_fallback(plan.names, query, deadline, timeout_s, retries)
    answers = [chain.answer] if chain.answer.hits else []
    return SearchOutcome(answers, chain.tried, chain.failures, chain.fallback_used, chain.hedged)


def searcher_for(ctx: RequestContext, parts: Parts, plan: Plan) -> SearchOnce:
    """One search of any text: routed by ``route``, on the plan's backends unless
    ``backends`` names others (then a fallback chain over those). Raises
    ``AllBackendsFailed``."""

    async def search_once(text: str, route: Route, backends: Sequence[str] | None) -> SearchOutcome:
        use = plan.backends if backends is None else BackendPlan("fallback", tuple(backends))
        return await _search(ctx, parts, use, backend_query(ctx, route, plan.wanted, text))

    return search_once


async def retrieve(ctx: RequestContext, parts: Parts, plan: Plan) -> Tagged:
    """Search the query, or its ``multi_query`` perspectives in parallel; every backend
    failure and warning goes to ``meta.errors``."""
    tagged = Tagged()
    if ctx.budget.max_tool_calls < 1:
        ctx.error("search", "budget", "max_tool_calls is 0")
        return tagged
    search_once = searcher_for(ctx, parts, plan)
    n = ctx.request.constraints.multi_query
    with ctx.timed("search"):
        if n:
            tagged, ctx.extras.perspectives = await multi_search(
                ctx.llm, search_once, parts.embedder, plan.query, plan.route, n, ctx.calls
            )
        else:
            ctx.calls.take(1)
            tagged.outcomes.append((None, await search_once(plan.query, plan.route, None)))
    ctx.retrieved_utc = utc_now()
    ctx.search_errors(tagged.merged())
    return tagged
