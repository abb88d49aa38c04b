"""Stage 4, correct (``constraints.crag``): grade the evidence and, when it is weak,
search again — a refined query fused with the first results, or the query on other
backends or engine groups instead of them."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from searcher.contract import CragInfo
from searcher.llm.crag import Evidence, heuristic_grade
from searcher.llm.snippet_rank import Candidate
from searcher.pipeline.context import RequestContext
from searcher.pipeline.parts import Parts
from searcher.pipeline.plan import Plan
from searcher.pipeline.rank import Ranked, Ranking, pool_cut, rank_results
from searcher.pipeline.retrieve import searcher_for
from searcher.pipeline.routing import Route
from searcher.pipeline.searches import Tagged, corrective_search


def candidates(ranked: Sequence[Ranked], top_k: int) -> list[Candidate]:
    """The first ``top_k`` results as snippet-ranking / grading candidates."""
    return [
        Candidate(i, r.fused.hit.title, r.fused.hit.snippet, r.fused.hit.url)
        for i, r in enumerate(ranked[:top_k])
    ]


def _alternatives(
    parts: Parts, plan: Plan, tried: Sequence[str]
) -> tuple[Sequence[str] | None, Route, str] | None:
    """Where to search again when the evidence was wrong: backends not tried yet, else
    the default engine group if the query was routed elsewhere."""
    usable = [
        n
        for n in parts.settings.backends.order
        if n in parts.pool.backends and n not in plan.backends.barred
    ]
    untried = [n for n in usable if n not in tried]
    if untried:
        return untried, plan.route, "backends: " + ", ".join(untried)
    default = parts.routes.default
    if plan.route.group != default.group:
        return None, default, f"engine group: {default.group}"
    return None


def _skipped(ctx: RequestContext, evidence: Sequence[Evidence]) -> None:
    """Say that CRAG was asked for but had no call to spend: the heuristic's grade, no
    action, and why (``meta.crag``, ``meta.llm``, ``meta.errors``)."""
    reason = f"budget: max_tool_calls={ctx.budget.max_tool_calls} leaves no call for CRAG"
    ctx.llm.fallback("crag", reason)
    grade = heuristic_grade(evidence)
    ctx.extras.crag = CragInfo(grade=grade, method="heuristic", action="skipped", reason=reason)


async def correct(
    ctx: RequestContext, parts: Parts, plan: Plan, tagged: Tagged, ranking: Ranking
) -> tuple[Tagged, Ranking]:
    """The searches and ranking after corrective re-search (unchanged without ``crag``)."""
    if not ctx.request.constraints.crag:
        return tagged, ranking
    ranked = ranking.results
    evidence = [Evidence(r.components.get("keyword_overlap", 0.0), r.relevance) for r in ranked]
    if ctx.budget.max_tool_calls < 1:
        _skipped(ctx, evidence)
        return tagged, ranking
    with ctx.timed("crag"):
        correction = await corrective_search(
            ctx.llm,
            searcher_for(ctx, parts, plan),
            plan.query,
            plan.route,
            candidates(ranked, parts.settings.llm.steps.rank.top_k),
            evidence,
            lambda: _alternatives(parts, plan, tagged.merged().tried),
            ctx.calls,
        )
        ctx.extras.crag = correction.info
        extra = correction.extra
        ctx.search_errors(extra.merged())
        if extra.outcomes:
            keep = tagged.outcomes
            if correction.replace:  # the first results go; what was tried stays on record
                keep = [(p, dataclasses.replace(o, answers=[])) for p, o in keep]
            more = Tagged(keep + extra.outcomes, tagged.failures)
            more_ranking = await rank_results(parts, plan, more, ctx.deadline.remaining())
            if more_ranking.results:
                tagged, ranking = more, more_ranking
                if cut := pool_cut(more_ranking):
                    ctx.error("rank", "fusion", cut)
    return tagged, ranking
