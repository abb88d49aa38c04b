"""Stage 2, retrieve: the backends searched for the query, or for its perspectives at once.

``search_once`` is one search of any text under the request's plan, deadline and budget;
the research loop and corrective re-search call it for queries of their own.
"""

from __future__ import annotations

from collections.abc import Sequence

from searcher.backends.base import BackendQuery
from searcher.backends.outcome import SearchOutcome
from searcher.backends.policy import BackendPlan
from searcher.pipeline.context import RequestContext, utc_now
from searcher.pipeline.parts import Parts
from searcher.pipeline.plan import Plan
from searcher.pipeline.routing import Route
from searcher.pipeline.searches import SearchOnce, Tagged, multi_search


def backend_query(ctx: RequestContext, route: Route, max_results: int, text: str) -> BackendQuery:
    """The query every backend receives; the routed engine group fills in the SearXNG
    engines and categories the request did not set. SearXNG asks every engine of the
    categories it is sent as well as the engines named, so what the request names comes
    alone: its engines without the group's categories, its categories without the
    group's engines."""
    request = ctx.request
    constraints = request.constraints
    if constraints.categories:
        categories = tuple(constraints.categories)
    else:
        categories = () if constraints.engines else tuple(route.categories)
    if constraints.engines:
        engines = tuple(constraints.engines)
    else:
        engines = () if constraints.categories else tuple(route.engines)
    return BackendQuery(
        text=text,
        max_results=max_results,
        lang=request.lang,
        pageno=constraints.pageno,
        time_range=constraints.time_range,
        safesearch=constraints.safesearch,
        engines=engines,
        categories=categories,
        routed=frozenset(
            name
            for name, asked in (
                ("engines", constraints.engines),
                ("categories", constraints.categories),
            )
            if not asked
        ),
    )


def searcher_for(ctx: RequestContext, parts: Parts, plan: Plan) -> SearchOnce:
    """One search of any text: routed by ``route``, on the plan's backends unless
    ``backends`` names others (then a fallback chain over those); the backend pool runs
    the degradation ladder. Raises ``AllBackendsFailed``."""

    async def search_once(text: str, route: Route, backends: Sequence[str] | None) -> SearchOutcome:
        use = plan.backends
        if backends is not None:
            barred = use.barred
            named = tuple(b for b in backends if b not in barred)
            use = BackendPlan("fallback", named, barred=barred)
        budget = ctx.budget
        return await parts.pool.search(
            use, backend_query(ctx, route, plan.wanted, text), ctx.deadline,
            budget.search_timeout_ms / 1000, budget.max_search_retries,
        )  # fmt: skip

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
            step = parts.settings.llm.steps.multi_query
            tagged, ctx.extras.perspectives = await multi_search(
                ctx.llm, search_once, parts.embedder, plan.query, plan.route, n, ctx.calls,
                (step.min_diversity, step.min_lexical_diversity),
            )  # fmt: skip
        else:
            ctx.calls.take(1)
            tagged.outcomes.append((None, await search_once(plan.query, plan.route, None)))
    ctx.retrieved_utc = utc_now()
    ctx.search_errors(tagged.merged())
    return tagged
