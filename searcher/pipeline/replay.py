"""Searches kept and ranked again: the backends' answers to a set of queries, captured once
(stages 1-2), then fused and scored (stage 3) under any number of settings without asking
the backends again. ``searcher tune`` fits fusion on these; ``searcher judge`` pools them.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from pydantic import ValidationError

from searcher.backends.base import Hit
from searcher.config import Settings
from searcher.contract import SearchRequest
from searcher.embedding.embedders import CachedEmbedder
from searcher.errors import InvalidRequest, SearcherError
from searcher.fetch.urls import page_key
from searcher.pipeline.context import RequestContext
from searcher.pipeline.parts import Parts
from searcher.pipeline.plan import Plan, make_plan
from searcher.pipeline.rank import rank_results
from searcher.pipeline.retrieve import retrieve
from searcher.pipeline.searches import Tagged
from searcher.recording.book import Recording, recorded_request
from searcher.recording.tape import replay_tape, taping

# Results asked of each backend per query: deeper than the 10 nDCG@10 reads, so that a
# re-weighting can lift a page from further down into the top 10.
CAPTURE_DEPTH = 20


@dataclass(frozen=True)
class Captured:
    """One query's plan and every backend answer it got (``tagged``)."""

    qid: str
    plan: Plan
    tagged: Tagged


@dataclass(frozen=True)
class Capture:
    """The captured queries, and those no backend answered (qid -> why)."""

    queries: list[Captured]
    failed: dict[str, str]


async def capture(
    parts: Parts,
    queries: Mapping[str, str],
    depth: int = CAPTURE_DEPTH,
    recorded: Mapping[str, Recording] | None = None,
) -> Capture:
    """Plan and search each query once, as a search request without options would; a
    query with a recording in ``recorded`` (a frozen set's) is searched as it was
    recorded, its backends answered from the recording (offline)."""
    captured: list[Captured] = []
    failed: dict[str, str] = {}
    for qid, text in queries.items():
        recording = (recorded or {}).get(qid)
        if recording is not None:
            request = recorded_request(recording)
        else:
            body = {
                "query": text,
                "budget": {"max_results": depth},
                "want": {"rendered_text": False},
            }
            try:
                request = SearchRequest.model_validate(body)
            except ValidationError as exc:  # a query a search refuses (too long): that one only
                failed[qid] = str(InvalidRequest.from_validation(exc.errors()))
                continue
        ctx = RequestContext.start(request, parts)
        tape = None if recording is None else replay_tape(recording.exchanges)
        try:
            with taping(tape):
                plan = await make_plan(ctx, parts)
                tagged = await retrieve(ctx, parts, plan)
        except SearcherError as exc:  # all backends failed, a bad query: that query only
            failed[qid] = str(exc)
            continue
        if not any(outcome.answers for _, outcome in tagged.outcomes):
            failed[qid] = "; ".join(f"{e.source}: {e.reason}" for e in ctx.errors) or "no answer"
            continue
        captured.append(Captured(qid, plan, tagged))
    return Capture(captured, failed)


def remembering_every_text(parts: Parts, captured: Sequence[Captured]) -> Parts:
    """``parts`` with an embedder that remembers the vectors of every captured text:
    ranking them again under hundreds of settings then embeds each once (a bounded
    serving cache, smaller than a tuning set's texts, forgot them between settings and
    embedded them all again: a quarter of ``searcher tune``'s time)."""
    embedder = parts.embedder
    if embedder is None:
        return parts
    inner = embedder.inner if isinstance(embedder, CachedEmbedder) else embedder
    hits = sum(
        len(answer.hits)
        for query in captured
        for _, outcome in query.tagged.outcomes
        for answer in outcome.answers
    )
    # Title + snippet, and the text a result is compared by, per hit; the query.
    size = 2 * hits + len(captured)
    return dataclasses.replace(parts, embedder=CachedEmbedder(inner, size))


def _replanned(plan: Plan, settings: Settings) -> Plan:
    """``plan`` with the backend weights of ``settings`` (what a tuned fragment changes)."""
    cfg = settings.backends
    weights = {name: cfg.get(name).weight for name in plan.backends.weights}
    return dataclasses.replace(plan, backends=dataclasses.replace(plan.backends, weights=weights))


async def rerank(
    parts: Parts, captured: Sequence[Captured], settings: Settings, cut: int = 10
) -> dict[str, list[Hit]]:
    """qid -> the best ``cut`` results under ``settings``: fusion, dedup and scores run
    over the captured answers exactly as a search runs them."""
    tuned = dataclasses.replace(parts, settings=settings)
    out: dict[str, list[Hit]] = {}
    for query in captured:
        ranking = await rank_results(tuned, _replanned(query.plan, settings), query.tagged)
        out[query.qid] = [r.fused.hit for r in ranking.results[:cut]]
    return out


def pooled(captured: Captured, depth: int) -> list[Hit]:
    """The top ``depth`` hits of every backend answer of one query (a judging pool), each
    page once (the first spelling of its URL seen)."""
    seen: dict[str, Hit] = {}
    for _, outcome in captured.tagged.outcomes:
        for answer in outcome.answers:
            for hit in answer.hits[:depth]:
                seen.setdefault(page_key(hit.url), hit)
    return list(seen.values())
