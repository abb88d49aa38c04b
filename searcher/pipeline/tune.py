"""``searcher tune``: the judged queries searched once through the configured backends,
fusion fitted on those answers by nDCG@10 with cross-validation, and the config fragment
that holds the fit.

Judgements name results by URL; both sides are compared by normalised URL
(``page_key``), so ``https://www.x.org/a/`` judged matches ``http://x.org/a`` found.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from searcher.config import Settings, deep_merge, settings_from_tree
from searcher.fetch.urls import page_key
from searcher.pipeline.parts import Parts
from searcher.pipeline.replay import (
    Capture,
    Captured,
    capture,
    remembering_every_text,
    rerank,
)
from searcher.ranking.evaluation import EvalError, Qrels, per_query
from searcher.ranking.tuning import (
    CrossValidation,
    Knob,
    PerQuery,
    Values,
    cross_validate,
    fragment,
    knobs_for,
)
from searcher.recording.book import Recording

METRIC = "nDCG@10"
# Judged queries cross-validation needs: two folds of one query each, at the least.
MIN_JUDGED = 2


@dataclass(frozen=True)
class TuneReport:
    judged: int  # queries with judgements and text
    failed: dict[str, str]  # qid -> why no backend answered (scored 0 throughout)
    knobs: list[Knob]
    result: CrossValidation

    def fragment(self) -> dict[str, Any]:
        return fragment(self.knobs, self.result.values)


def by_page(qrels: Qrels) -> Qrels:
    """Judgements keyed by normalised URL (the better grade where two spellings meet)."""
    out: Qrels = {}
    for qid, docs in qrels.items():
        judged = out.setdefault(qid, {})
        for url, grade in docs.items():
            key = _judged_key(url)
            judged[key] = max(grade, judged.get(key, grade))
    return out


def _judged_key(docid: str) -> str:
    """A judged document's ``page_key``, or the id as written when it is no URL that
    can be read (``http://[x/``): it then matches no result, as a judged page no search
    found, rather than ending the run with a traceback."""
    try:
        return page_key(docid)
    except ValueError:
        return docid


def _used(captured: Sequence[Captured]) -> tuple[list[str], list[str]]:
    """The backends that answered (in plan order) and the SearXNG engines they named."""
    planned: dict[str, None] = {}
    answered: set[str] = set()
    engines: set[str] = set()
    for query in captured:
        planned.update(dict.fromkeys(query.plan.backends.names))
        for _, outcome in query.tagged.outcomes:
            for answer in outcome.answers:
                answered.add(answer.backend)
                if answer.per_engine:
                    engines.update(e for hit in answer.hits for e in hit.engines)
    backends = [b for b in planned if b in answered] + sorted(answered - planned.keys())
    return backends, sorted(engines)


def configured_values(settings: Settings, backends: Sequence[str]) -> dict[str, Any]:
    """What the configuration says for every knob that can exist, by knob name."""
    values: dict[str, Any] = {
        "fusion.rrf_k": settings.fusion.rrf_k,
        "fusion.method": settings.fusion.method,
        **{f"scoring.{k}": v for k, v in settings.scoring.model_dump().items()},
        **{f"backends.engine_weights.{e}": w for e, w in settings.backends.engine_weights.items()},
    }
    for name in backends:
        weight = settings.backends.get(name).weight
        values[f"backends.instances.{name}.weight"] = values[f"backends.{name}.weight"] = weight
    return values


def scorer(
    parts: Parts,
    tree: Mapping[str, Any],
    captured: Sequence[Captured],
    judged: Qrels,
    knobs: Sequence[Knob],
) -> PerQuery:
    """A setting -> each judged query's nDCG@10 when the captured answers are ranked with
    ``tree`` and the knobs' values laid over it (``judged`` keyed by ``by_page``)."""
    parts = remembering_every_text(parts, captured)

    async def scores(values: Values) -> dict[str, float]:
        settings = settings_from_tree(deep_merge(tree, fragment(knobs, values)))
        hits = await rerank(parts, captured, settings)
        run = {
            qid: {page_key(h.url): float(len(ranked) - i) for i, h in enumerate(ranked)}
            for qid, ranked in hits.items()
        }
        return per_query(run, judged, METRIC)

    return scores


def tuning_knobs(parts: Parts, captured: Sequence[Captured]) -> list[Knob]:
    """The knobs for the backends and engines that answered ``captured``."""
    backends, engines = _used(captured)
    return knobs_for(
        configured_values(parts.settings, backends), backends, engines,
        parts.settings.backends.instances,
    )  # fmt: skip


async def tune(
    parts: Parts,
    tree: Mapping[str, Any],
    queries: Mapping[str, str],
    qrels: Qrels,
    folds: int = 5,
    seed: int = 0,
    recorded: Mapping[str, Recording] | None = None,
) -> TuneReport:
    """Search the judged queries once, then fit by cross-validation (see the module).
    ``tree`` is the configuration ``parts.settings`` was validated from; ``recorded``: a
    frozen set's recordings, whose queries are searched offline from them. Raises
    ``EvalError`` when fewer than ``MIN_JUDGED`` judged queries have a text or a relevant
    result, or no query was answered."""
    judged = by_page({q: d for q, d in qrels.items() if q in queries})
    if not judged:
        raise EvalError("no judged query is in the queries file (query ids must match)")
    if len(judged) < MIN_JUDGED:  # a fold would hold nothing: no held-out check of the fit
        raise EvalError(
            f"{len(judged)} judged query in the queries file: cross-validation needs at "
            f"least {MIN_JUDGED} (judge more queries)"
        )
    relevant = [q for q, docs in judged.items() if any(grade > 0 for grade in docs.values())]
    if len(relevant) < MIN_JUDGED:  # every setting scores 0 on the others: nothing to fit
        raise EvalError(
            f"{len(relevant)} judged query has a relevant result (a grade above 0): fitting "
            f"needs at least {MIN_JUDGED} (judge more queries, or deeper)"
        )
    found: Capture = await capture(parts, {q: queries[q] for q in judged}, recorded=recorded)
    if not found.queries:
        reasons = "; ".join(sorted(set(found.failed.values())))[:300]
        raise EvalError(f"no query got an answer from the configured backends ({reasons})")
    knobs = tuning_knobs(parts, found.queries)
    scores = scorer(parts, tree, found.queries, judged, knobs)
    result = await cross_validate(scores, knobs, sorted(judged), folds, seed)
    return TuneReport(len(judged), found.failed, knobs, result)


def report_lines(report: TuneReport) -> list[str]:
    """Before/after per fold and overall, as ``searcher tune`` prints them."""
    r = report.result
    lines = [
        f"{report.judged} judged queries ({len(report.failed)} without an answer, scored 0), "
        f"{len(r.folds)} folds, {len(report.knobs)} settings tuned, "
        f"{r.settings_scored} combinations scored; {METRIC}:",
        f"  {'fold':>4}  {'queries':>7}  {'train default':>13}  {'train tuned':>11}  "
        f"{'held-out default':>16}  {'held-out tuned':>14}",
    ]
    for f in r.folds:
        lines.append(
            f"  {f.number:>4}  {len(f.held):>7}  {f.train_default:>13.4f}  {f.train_tuned:>11.4f}"
            f"  {f.held_default:>16.4f}  {f.held_tuned:>14.4f}"
        )
    lines.append(
        f"  held-out, all folds: default {r.held_default:.4f}, tuned {r.held_tuned:.4f} "
        f"(gain {r.held_tuned - r.held_default:+.4f}, standard error {r.held_gain_error:.4f}); "
        f"fit on every query: default {r.all_default:.4f}, tuned {r.all_tuned:.4f}"
    )
    return lines
