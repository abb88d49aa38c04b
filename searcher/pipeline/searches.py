"""The searches of one request beyond a single query: multi-query perspectives searched in
parallel (seed 002) and corrective re-search (CRAG, seed 000).

Both take a ``SearchOnce`` callable from the service (one search of one query, with the
service's backends, plan and deadline) and return what every search gave, each tagged
with the query that found it, so that fusion can keep the provenance. Every search draws
one call from the request's ``CallBudget``.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field

from searcher.backends.outcome import SearchOutcome
from searcher.contract import (
    CragAction,
    CragInfo,
    PerspectiveInfo,
    PerspectivesInfo,
)
from searcher.embedding.embedders import Embedder
from searcher.errors import AllBackendsFailed, BackendFailure, describe_failures
from searcher.llm import multi_query
from searcher.llm.crag import Evidence, Verdict, grade_evidence, heuristic_refinement
from searcher.llm.rewrite import keep_operators
from searcher.llm.runner import StepRunner
from searcher.llm.snippet_rank import Candidate
from searcher.pipeline.resilience import CallBudget
from searcher.pipeline.routing import Route

# One search of ``text`` routed by ``route``; ``backends`` overrides the request's plan
# (a chain over those names). Raises AllBackendsFailed.
SearchOnce = Callable[[str, Route, Sequence[str] | None], Awaitable[SearchOutcome]]


@dataclass
class Tagged:
    """The searches of a request: each outcome with the perspective that asked for it
    (None for the request's own query)."""

    outcomes: list[tuple[str | None, SearchOutcome]] = field(default_factory=list)
    failures: list[BackendFailure] = field(default_factory=list)  # of searches that gave none

    def merged(self) -> SearchOutcome:
        """All outcomes as one: answers, backends tried and failures, in order."""
        merged = SearchOutcome([], [], list(self.failures))
        for _, outcome in self.outcomes:
            merged.answers += outcome.answers
            merged.tried += [t for t in outcome.tried if t not in merged.tried]
            merged.failures += outcome.failures
            merged.fallback_used = merged.fallback_used or outcome.fallback_used
            merged.hedged = merged.hedged or outcome.hedged
            merged.plan_notes += [n for n in outcome.plan_notes if n not in merged.plan_notes]
        return merged


async def multi_search(
    runner: StepRunner,
    search_once: SearchOnce,
    embedder: Embedder | None,
    query: str,
    route: Route,
    n: int,
    calls: CallBudget,
    min_diversity: tuple[float, float] = (0.0, 0.0),
) -> tuple[Tagged, PerspectivesInfo]:
    """N perspectives searched at once, with the seed's degradation ladder: the LLM fails,
    or its perspectives are less diverse than ``min_diversity`` (embeddings, lexical)
    -> templates; some searches fail -> the others; all fail -> the original query alone
    (which raises ``AllBackendsFailed`` if it fails too)."""
    generated = await multi_query.generate(runner, query, n, reserve=n)
    perspectives = generated.items
    notes = [generated.note] if generated.note else []
    source = generated.source
    measured: tuple[list[str], multi_query.Diversity] | None = None
    if source == "llm" and len(perspectives) >= 2:
        spread = await multi_query.diversity(embedder, [p.query for p in perspectives])
        measured = ([p.query for p in perspectives], spread)
        if multi_query.too_alike(spread, *min_diversity):
            # Rung 2 again: near-identical searches would add calls, not evidence.
            floor = min_diversity[0 if spread.method == "embeddings" else 1]
            notes = [
                f"LLM perspectives too alike ({spread.method} diversity {spread.value} < "
                f"{floor}); templates used"
            ]
            perspectives, source = multi_query.template_perspectives(query, n), "templates"
    allowed = min(len(perspectives), calls.remaining)
    if allowed < len(perspectives):
        notes.append(f"budget: max_tool_calls allowed {allowed} of {n} searches")
        perspectives = perspectives[:allowed]
    calls.take(allowed)
    results = await asyncio.gather(
        *(search_once(p.query, route, None) for p in perspectives), return_exceptions=True
    )
    tagged = Tagged()
    infos: list[PerspectiveInfo] = []
    failures: list[BackendFailure] = []
    for p, result in zip(perspectives, results, strict=True):
        if isinstance(result, AllBackendsFailed):
            failures += result.failures
            reason = describe_failures(result.failures) or "failed"
            infos.append(PerspectiveInfo(query=p.query, type=p.type, results=0, error=reason))
        elif isinstance(result, BaseException):
            raise result
        else:
            tagged.outcomes.append((p.type, result))
            infos.append(PerspectiveInfo(query=p.query, type=p.type, results=result.result_count))
    failed = sum(1 for info in infos if info.error)
    if failed and failed < len(infos):
        notes.append(f"{failed} of {len(infos)} perspective searches failed; partial results")
    if not any(o.result_count for _, o in tagged.outcomes):
        # Rung 4: nothing from any perspective; the original query alone.
        notes.append("no perspective search gave results; searched the original query")
        source = "original"
        if not calls.take(1):
            raise AllBackendsFailed(failures)
        try:
            single = await search_once(query, route, None)
        except AllBackendsFailed as exc:
            raise AllBackendsFailed(failures + exc.failures) from exc
        tagged.outcomes.append((None, single))
    searched = [p.query for p in perspectives]
    if measured is not None and measured[0] == searched:
        spread = measured[1]
    else:
        spread = await multi_query.diversity(embedder, searched)
    info = PerspectivesInfo(
        source=source,
        diversity=spread.value,
        diversity_method=spread.method,
        queries=infos,
        degraded="; ".join(notes) or None,
    )
    tagged.failures = failures
    return tagged, info


@dataclass(frozen=True)
class Correction:
    """What corrective re-search did: the extra searches, and whether they replace the
    original evidence (INCORRECT) or add to it (AMBIGUOUS)."""

    info: CragInfo
    extra: Tagged
    replace: bool = False  # INCORRECT: the extra results stand instead of the first ones


def _crag_info(
    verdict: Verdict,
    action: CragAction,
    reason: str | None = None,
    query: str | None = None,
    target: str | None = None,
    added: int = 0,
) -> CragInfo:
    return CragInfo(
        grade=verdict.grade,
        method=verdict.method,
        action=action,
        query=query,
        target=target,
        results_added=added,
        reason=reason or verdict.reason,
    )


async def corrective_search(
    runner: StepRunner,
    search_once: SearchOnce,
    query: str,
    route: Route,
    candidates: Sequence[Candidate],
    evidence: Sequence[Evidence],
    alternatives: Callable[[], tuple[Sequence[str] | None, Route, str] | None],
    calls: CallBudget,
) -> Correction:
    """Grade the evidence, then act: CORRECT -> nothing; AMBIGUOUS -> one refined query,
    whose results are fused with the rest; INCORRECT -> the query again on another backend
    or engine group (``alternatives`` says which, or None), whose results replace the rest
    if there are any."""
    verdict = await grade_evidence(runner, query, candidates, evidence, reserve=1)
    if verdict.grade == "CORRECT":
        return Correction(_crag_info(verdict, "none"), Tagged())
    target: tuple[Sequence[str] | None, Route, str]
    action: CragAction
    if verdict.grade == "AMBIGUOUS":
        # The model's refinement keeps the user's operators, as a rewrite does.
        refined = verdict.refined_query and keep_operators(verdict.refined_query, query)
        text = refined or heuristic_refinement(query)
        action, target = "refined", (None, route, "refined query")
    else:
        text, action = query, "switched"
        found = alternatives()
        if found is None:
            why = "no other backend or engine group to try"
            return Correction(_crag_info(verdict, "skipped", why), Tagged())
        target = found
    if not calls.take(1):
        why = f"budget: max_tool_calls={calls.limit} leaves no search for the correction"
        return Correction(_crag_info(verdict, "skipped", why), Tagged())
    backends, use_route, label = target
    shown_query = text if action == "refined" else None
    try:
        outcome = await search_once(text, use_route, backends)
    except AllBackendsFailed as exc:
        why = describe_failures(exc.failures) or "search failed"
        info = _crag_info(verdict, action, f"corrective search failed: {why}", shown_query, label)
        return Correction(info, Tagged(failures=exc.failures))
    info = _crag_info(verdict, action, None, shown_query, label, outcome.result_count)
    tag = "refined" if action == "refined" else "corrective"
    return Correction(info, Tagged([(tag, outcome)]), replace=action == "switched")
