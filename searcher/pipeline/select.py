"""Stage 5, select: which ranked results the response carries — domain filters, the
optional LLM snippet ranking, ``pick_ids``, then the result cap."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from searcher.contract import RankInfo
from searcher.llm.snippet_rank import rank_candidates
from searcher.pipeline.context import RequestContext
from searcher.pipeline.correct import candidates
from searcher.pipeline.parts import Parts
from searcher.pipeline.plan import Plan
from searcher.pipeline.rank import Ranked, result_text
from searcher.ranking.novelty import demote_shown
from searcher.ranking.rerank import rerank_stage
from searcher.ranking.selection import apply_pick_ids, filter_domains


@dataclass(frozen=True)
class Selection:
    """The results the response carries, best first, and the ``pick_ids`` applied."""

    results: list[Ranked]
    pick_ids: list[int]


async def _llm_rank(
    ctx: RequestContext, parts: Parts, question: str, ranked: list[Ranked]
) -> list[Ranked]:
    """Snippet ranking: the model's picks among the top candidates, in its order."""
    step = parts.settings.llm.steps.rank
    want_n = ctx.request.constraints.want_n or step.want_n
    shown = candidates(ranked, step.top_k)
    result = await rank_candidates(ctx.llm, question, shown, want_n)
    chosen = [ranked[i] for i in result.picks]
    ctx.extras.rank = RankInfo(
        candidates=len(shown),
        want_n=want_n,
        picks=result.picks,
        urls=[r.url for r in chosen],
        fallback_used=result.fallback_used,
        reason=result.reason,
    )
    return chosen


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


async def reranked(
    ctx: RequestContext, parts: Parts, question: str, ranked: list[Ranked]
) -> list[Ranked]:
    """The results in the configured reranking model's order when the request wants it
    (``constraints.rerank``, else ``rerank.enabled``); a failed call keeps the order and
    says why in the errors."""
    rerank = ctx.request.constraints.rerank
    settings = parts.settings.rerank
    if not (settings.enabled if rerank is None else rerank):
        return ranked
    with ctx.timed("rerank"):
        ranked, error = await rerank_stage(
            ranked, question, settings, ctx.deadline.cap(settings.timeout_s), result_text,
            _with_rerank_score,
        )  # fmt: skip
    if error:
        ctx.error("rerank", "reranker", error)
    return _non_increasing(ranked)


async def select(ctx: RequestContext, parts: Parts, plan: Plan, ranked: list[Ranked]) -> Selection:
    """Filter, optionally rerank and LLM-rank, pick and cap the ranked results."""
    constraints = ctx.request.constraints
    ranked = await reranked(ctx, parts, plan.question, ranked)
    ranked = filter_domains(
        ranked, lambda r: r.url, constraints.include_domains, constraints.exclude_domains
    )
    if constraints.rank == "llm":
        with ctx.timed("llm_rank"):
            ranked = await _llm_rank(ctx, parts, plan.question, ranked)
    if ctx.shown:  # session novelty: what the caller saw steps aside, its relevance too
        ranked = _non_increasing(demote_shown(ranked, lambda r: r.url, ctx.shown))
    # The ids index the results the response would carry without them (its first
    # max_results), so an id keeps naming the item an earlier response showed at it.
    ranked, applied = apply_pick_ids(ranked[: ctx.budget.max_results], constraints.pick_ids)
    return Selection(ranked, applied)
