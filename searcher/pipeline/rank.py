"""Stage 3, rank: every ranked list of every search fused into one list of distinct pages,
near-duplicates merged, heuristic relevance on top."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

from searcher.embedding.embedders import RequestVectors
from searcher.pipeline.context import RequestContext
from searcher.pipeline.parts import Parts
from searcher.pipeline.plan import Plan
from searcher.pipeline.searches import Tagged
from searcher.ranking.dedup import drop_near_duplicates
from searcher.ranking.fusion import FusedHit, engine_count, fuse_answers
from searcher.ranking.hybrid import hybrid_stage
from searcher.ranking.relevance import apply_filter, score_results
from searcher.ranking.tokens import RequestTexts
from searcher.text import document_text


@dataclass(frozen=True)
class Ranked:
    """One result after fusion, dedup and scoring."""

    fused: FusedHit
    relevance: float
    components: dict[str, float] = field(default_factory=dict)

    @property
    def url(self) -> str:
        return self.fused.hit.url


# Distinct results ranked at most: the best by fusion. Near-duplicate removal compares
# every pair, so its time and memory grow with the square of the pool (5,000 results took
# 1.6 s and 350 MB); a real search fuses tens to a few hundred.
MAX_POOL = 500


@dataclass(frozen=True)
class Ranking:
    """The ranked results, why near-duplicate removal did not run (if it did not), and
    how many distinct results fusion gave beyond ``MAX_POOL`` (left out)."""

    results: list[Ranked]
    notes: list[str]
    beyond_pool: int = 0


def heuristic_order(
    fused: Sequence[FusedHit],
    query: str,
    plan: Plan,
    parts: Parts,
    texts: RequestTexts | None = None,
) -> list[Ranked]:
    """Heuristic relevance on top of fusion; results below the keyword-overlap floor go,
    unless that would leave nothing. ``texts``: the results' texts as read so far."""
    inputs = [(f.hit, f.score, engine_count(f)) for f in fused]
    scoring = parts.settings.scoring
    scores = score_results(inputs, query, plan.route.group, parts.domains, scoring, texts)
    return [Ranked(fused[s.index], s.relevance, s.components) for s in apply_filter(scores)]


async def rank_results(
    parts: Parts, plan: Plan, tagged: Tagged, time_left_s: float | None = None
) -> Ranking:
    """Fusion of every list of every search, near-duplicate removal (its embedder call
    within ``time_left_s``), heuristic scores."""
    settings = parts.settings
    answers = [
        (perspective, answer, plan.backends.weight(answer.backend))
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
    beyond_pool = max(0, len(fused) - MAX_POOL)
    fused = fused[:MAX_POOL]
    # Near-duplicate removal and the hybrid stage embed the same title + snippet texts:
    # one table of this request's vectors asks the embedder for each text once.
    vectors = RequestVectors(parts.embedder) if parts.embedder is not None else None
    # The three stages also read the same texts: each is tokenised once, here.
    texts = RequestTexts(plan.query)
    fused, notes = await drop_near_duplicates(
        fused, vectors, settings.fusion.near_duplicate_threshold, time_left_s, texts
    )
    if parts.embedder is None:
        # Off by choice (provider "none") is no error; off because loading failed is.
        problem = parts.embedder_problem
        notes = [problem] if problem and len(fused) > 1 else []
    ranked = heuristic_order(fused, plan.query, plan, parts, texts)
    ranked = await hybrid_stage(
        ranked, plan.query, settings.scoring.hybrid_share, vectors,
        result_text, _with_hybrid_score, time_left_s, texts,
    )  # fmt: skip
    return Ranking(ranked, notes, beyond_pool)


def result_text(ranked: Ranked) -> str:
    """What the hybrid relevance and a reranking model read of a result."""
    return document_text(ranked.fused.hit.title, ranked.fused.hit.snippet)


def _with_hybrid_score(ranked: Ranked, score: float, blended: float) -> Ranked:
    return Ranked(ranked.fused, blended, {**ranked.components, "hybrid": score})


async def rank(ctx: RequestContext, parts: Parts, plan: Plan, tagged: Tagged) -> Ranking:
    """The ``rank`` stage: ``rank_results``, timed, its notes in ``meta.errors``."""
    with ctx.timed("rank"):
        ranking = await rank_results(parts, plan, tagged, ctx.deadline.remaining())
    for note in ranking.notes:
        ctx.error("dedup", "embedder", note)
    if cut := pool_cut(ranking):
        ctx.error("rank", "fusion", cut)
    return ranking


def pool_cut(ranking: Ranking) -> str | None:
    """What ``meta.errors`` says when results beyond ``MAX_POOL`` were left out."""
    if not ranking.beyond_pool:
        return None
    return (
        f"{MAX_POOL + ranking.beyond_pool} distinct results; the {MAX_POOL} best by fusion "
        f"were ranked, {ranking.beyond_pool} left out"
    )
