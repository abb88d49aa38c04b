"""Stage 1, plan: what to search for, where, and how many results to ask for.

The optional LLM rewrite of the query, the engine-group route (patterns, then optionally
the LLM), and the backend plan (one backend, a fallback chain or a fan-out).
"""

from __future__ import annotations

from dataclasses import dataclass

from searcher.backends.policy import BackendPlan, plan_backends, within_access
from searcher.llm.rewrite import rewrite_query
from searcher.llm.route import classify_group
from searcher.pipeline.context import RequestContext
from searcher.pipeline.parts import Parts
from searcher.pipeline.routing import Route, route_query, route_to_group


@dataclass(frozen=True)
class Plan:
    """What the later stages search for and where."""

    question: str  # what the user asked: ranking and answers use it
    query: str  # what is sent to the backends (the rewrite, if any)
    route: Route
    backends: BackendPlan
    wanted: int  # results to ask each backend for


async def make_plan(ctx: RequestContext, parts: Parts) -> Plan:
    """Rewrite (optional), route and plan the backends of the request."""
    request, settings = ctx.request, parts.settings
    constraints = request.constraints
    question = query = request.query_text
    searches = constraints.multi_query or 1  # calls kept back from the LLM steps
    if constraints.rewrite:
        with ctx.timed("rewrite"):
            rewritten = await rewrite_query(ctx.llm, question, reserve=searches)
        if rewritten.value is not None:
            query = ctx.extras.rewritten_query = rewritten.value
    route, route_by = route_query(query, parts.routes), "pattern"
    if route.pattern is None:
        route_by = "default"
        if constraints.route == "llm":
            with ctx.timed("route"):
                groups = list(settings.routing.groups)
                chosen = await classify_group(ctx.llm, query, groups, reserve=searches)
            if chosen.value is not None:
                route, route_by = route_to_group(parts.routes, chosen.value), "llm"
    ctx.extras.route = {"group": route.group, "pattern": route.pattern, "by": route_by}
    backends = plan_backends(constraints.backend, request.intent, settings, parts.pool.backends)
    for name in backends.unavailable:
        ctx.error("plan", name, f"not enabled or not configured ({backends.reason})")
    backends, barred = within_access(backends, ctx.access, settings)
    for name in barred:
        ctx.error("plan", name, "left out: this API key may not search its collections", "auth")
    # pick_ids index what the same request without them returns: they ask for no more.
    wanted = ctx.budget.max_results
    if constraints.rank == "llm":
        wanted = max(wanted, settings.llm.steps.rank.top_k)
    return Plan(question, query, route, backends, wanted)
