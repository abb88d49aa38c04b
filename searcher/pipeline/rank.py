"""Stage 3, rank: every ranked list of every search fused into one list of distinct pages,
near-duplicates merged, heuristic relevance on top."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass, field

from searcher.dedup import drop_near_duplicates
from searcher.fusion import FusedHit, fuse, ranked_lists
from searcher.pipeline.context import RequestContext
from searcher.pipeline.parts import Parts
from searcher.pipeline.plan import Plan
from searcher.scoring import apply_filter, score_results
from searcher.searches import Tagged


@dataclass(frozen=True)
class Ranked:
    """One result after fusion, dedup and scoring."""

    fused: FusedHit
    relevance: float
    components: dict[str, float] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.fused.hit.url


@dataclass(frozen=True)
class Ranking:
    """The ranked results, and why near-duplicate removal did not run (if it did not)."""

    results: list[Ranked]
    notes: list[str]


def heuristic_order(
    fused: Sequence[FusedHit], query: str, plan: Plan, parts: Parts
) -> list[Ranked]:
    """Heuristic relevance on top of fusion; results below the keyword-overlap floor go,
    unless that would leave nothing."""
    inputs = [(f.hit, f.score, len({(s.backend, s.engine) for s in f.sources})) for f in fused]
    scores = score_results(inputs, query, plan.route.group, parts.domains, parts.settings.scoring)
    return [Ranked(fused[s.index], s.relevance, s.components) for s in apply_filter(scores)]


async def rank_results(
    parts: Parts, plan: Plan, tagged: Tagged, time_left_s: float | None = None
) -> Ranking:
    """Fusion of every list of every search, near-duplicate removal (its embedder call
    within ``time_left_s``), heuristic scores."""
    settings = parts.settings
    lists = [
        dataclasses.replace(ranked, perspective=perspective) if perspective else ranked
        for perspective, outcome in tagged.outcomes
        for answer in outcome.answers
        for ranked in ranked_lists(
            answer, plan.backends.weight(answer.backend), settings.backends.engine_weights
        )
    ]
    fused = fuse(lists, settings.fusion.rrf_k)
    fused, notes = await drop_near_duplicates(
        fused, parts.embedder, settings.fusion.near_duplicate_threshold, time_left_s
    )
    if parts.embedder is None:
        # Off by choice (provider "none") is no error; off because loading failed is.
        problem = parts.embedder_problem
        notes = [problem] if problem and len(fused) > 1 else []
    return Ranking(heuristic_order(fused, plan.query, plan, parts), notes)


async def rank(ctx: RequestContext, parts: Parts, plan: Plan, tagged: Tagged) -> Ranking:
    """The ``rank`` stage: ``rank_results``, timed, its notes in ``meta.errors``."""
    with ctx.timed("rank"):
        ranking = await rank_results(parts, plan, tagged, ctx.deadline.remaining())
    for note in ranking.notes:
        ctx.error("dedup", "embedder", note)
    return ranking
