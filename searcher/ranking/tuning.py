"""Fusion fitted to judgements (``searcher tune``): which settings to try, how to search
them, and how to tell a fit that generalises from one that learnt the judged queries.

A setting is a ``Knob``: a config key (its path in searcher.yaml) and the grid of values
tried. ``cross_validate`` splits the judged queries into k folds (a fixed seed), fits on
k-1 by coordinate ascent (from the configured values and from each other fusion method)
and scores the fold left out, so every query is scored once by settings that never saw
it; the fragment written is the fit on every query. A query's
score under a setting is computed once (``ScoreTable``) and shared by every fold.
"""

from __future__ import annotations

import math
import random
import statistics
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

Value = float | int | str
Values = dict[str, Value]  # knob name -> value
PerQuery = Callable[[Values], Awaitable[dict[str, float]]]  # setting -> qid -> score

WEIGHT_GRID: tuple[Value, ...] = (0.0, 0.25, 0.5, 0.75, 1.0, 1.5, 2.0, 3.0)
RRF_K_GRID: tuple[Value, ...] = (1, 3, 5, 10, 30, 60)
METHOD_GRID: tuple[Value, ...] = ("answer_order", "engine_rrf", "searxng")
SHARE_GRID: tuple[Value, ...] = (0.0, 0.25, 0.5, 0.75, 1.0)
# Times the configured value. Up to 10x: with a strong second backend the keyword score
# (0.02 by default) fitted best at 0.2 on SciFact and Cranfield (docs/ranking.md).
HEURISTIC_FACTORS = (0.0, 0.5, 2.0, 4.0, 10.0)
HEURISTICS = ("keyword_weight", "multi_engine_bonus", "category_boost")
MIN_GAIN = 1e-4  # a move must gain more: ties keep the configured value
# ... and by more than this many standard errors of its per-query gains: a gain a few
# queries carry is noise on the next queries. Chosen among fixed margins and half a
# standard error on Cranfield's development half, confirmed on SciFact's (cross-validated,
# docs/ranking.md).
STANDARD_ERRORS = 1.0


@dataclass(frozen=True)
class Knob:
    """One setting tuned: its config key path, the values tried and the configured one."""

    path: tuple[str, ...]
    grid: tuple[Value, ...]
    start: Value

    @property
    def name(self) -> str:
        return ".".join(self.path)


def backend_weight_path(name: str, instances: Mapping[str, Any]) -> tuple[str, ...]:
    """Where an instance's weight is written: under ``backends.instances`` when it is a
    named instance there, else the built-in's own section (``backends.brave``)."""
    return (
        ("backends", "instances", name, "weight")
        if name in instances
        else ("backends", name, "weight")
    )


def knobs_for(
    tree_start: Mapping[str, Value], backends: Sequence[str], engines: Sequence[str],
    instances: Mapping[str, Any],
) -> list[Knob]:  # fmt: skip
    """The knobs for a deployment whose searches used ``backends`` (the first one is the
    anchor: scaling every weight at once changes no order) and whose SearXNG answers
    named ``engines``. ``tree_start`` holds the configured values by knob name."""
    knobs = [
        Knob(path, WEIGHT_GRID, tree_start.get(".".join(path), 1.0))
        for path in (backend_weight_path(b, instances) for b in backends[1:])
    ]
    knobs += [
        Knob(("backends", "engine_weights", e), WEIGHT_GRID,
             tree_start.get(f"backends.engine_weights.{e}", 1.0))
        for e in engines
    ]  # fmt: skip
    knobs += [
        Knob(("fusion", "rrf_k"), RRF_K_GRID, tree_start["fusion.rrf_k"]),
        Knob(("fusion", "method"), METHOD_GRID, tree_start["fusion.method"]),
        Knob(("scoring", "hybrid_share"), SHARE_GRID, tree_start["scoring.hybrid_share"]),
    ]
    for name in HEURISTICS:
        start = float(tree_start[f"scoring.{name}"])
        grid = tuple(round(start * f, 6) for f in HEURISTIC_FACTORS) if start else (0.0,)
        knobs.append(Knob(("scoring", name), grid, start))
    return knobs


def fragment(knobs: Sequence[Knob], values: Mapping[str, Value]) -> dict[str, Any]:
    """The config fragment that sets every knob to its value, with the config's keys."""
    tree: dict[str, Any] = {}
    for knob in knobs:
        node = tree
        for key in knob.path[:-1]:
            node = node.setdefault(key, {})
        node[knob.path[-1]] = values[knob.name]
    return tree


class ScoreTable:
    """Per-query scores of each setting tried, each setting computed once."""

    def __init__(self, per_query: PerQuery, knobs: Sequence[Knob]) -> None:
        self._per_query = per_query
        self._names = [k.name for k in knobs]
        self._table: dict[tuple[Value, ...], dict[str, float]] = {}

    @property
    def settings_scored(self) -> int:
        return len(self._table)

    async def scores(self, values: Values) -> dict[str, float]:
        key = tuple(values[n] for n in self._names)
        if key not in self._table:
            self._table[key] = await self._per_query(dict(values))
        return self._table[key]

    async def mean(self, values: Values, qids: Sequence[str]) -> float:
        scores = await self.scores(values)
        return sum(scores[q] for q in qids) / len(qids) if qids else 0.0


def gain_and_error(
    trial: Mapping[str, float], current: Mapping[str, float], qids: Sequence[str]
) -> tuple[float, float]:
    """The mean of ``trial``'s per-query gains over ``current`` on ``qids`` and its
    standard error."""
    diffs = [trial[q] - current[q] for q in qids]
    mean = sum(diffs) / len(diffs)
    return mean, statistics.pstdev(diffs) / math.sqrt(len(diffs))


def gains(trial: Mapping[str, float], current: Mapping[str, float], qids: Sequence[str]) -> bool:
    """Whether ``trial``'s per-query scores beat ``current``'s on ``qids`` by more than
    ``MIN_GAIN`` on average and by more than ``STANDARD_ERRORS`` standard errors."""
    if not qids:
        return False
    mean, error = gain_and_error(trial, current, qids)
    return mean > MIN_GAIN and mean - STANDARD_ERRORS * error > 0


async def coordinate_ascent(
    table: ScoreTable,
    knobs: Sequence[Knob],
    qids: Sequence[str],
    max_rounds: int = 3,
    start: Values | None = None,
) -> tuple[Values, float]:
    """From ``start`` (default: the configured values), each knob in turn takes the grid
    value that ``gains`` on ``qids`` with the others held, until a round changes nothing;
    (values, mean score)."""
    values: Values = dict(start) if start else {k.name: k.start for k in knobs}
    best = await table.scores(values)
    for _ in range(max_rounds):
        moved = False
        for knob in knobs:
            for value in knob.grid:
                if value == values[knob.name]:
                    continue
                trial = {**values, knob.name: value}
                scores = await table.scores(trial)
                if gains(scores, best, qids):
                    values, best, moved = trial, scores, True
        if not moved:
            break
    return values, await table.mean(values, qids)


def starting_points(knobs: Sequence[Knob]) -> list[Values]:
    """The configured values, then the same with each other fusion method. Why: a method
    needs its own ``rrf_k`` and heuristics' weights, so switching the method alone (one
    coordinate move) can lose where that method, fitted, wins — with a strong second
    backend ``answer_order`` at k 5 beat the default ``engine_rrf`` at k 1 only so."""
    configured: Values = {k.name: k.start for k in knobs}
    starts = [configured]
    for knob in knobs:
        if knob.path == ("fusion", "method"):
            starts += [{**configured, knob.name: v} for v in knob.grid if v != knob.start]
    return starts


async def fit(
    table: ScoreTable, knobs: Sequence[Knob], qids: Sequence[str]
) -> tuple[Values, float]:
    """The best coordinate ascent on ``qids`` over ``starting_points``; another start's
    fit replaces the one kept only when it ``gains`` over it."""
    starts = starting_points(knobs)
    values, best = await coordinate_ascent(table, knobs, qids, start=starts[0])
    for start in starts[1:]:
        trial, score = await coordinate_ascent(table, knobs, qids, start=start)
        if gains(await table.scores(trial), await table.scores(values), qids):
            values, best = trial, score
    return values, best


@dataclass(frozen=True)
class Fold:
    """One fold: fitted on the others, scored on its own queries (``held``)."""

    number: int
    held: tuple[str, ...]
    values: Values
    train_default: float
    train_tuned: float
    held_default: float
    held_tuned: float


@dataclass(frozen=True)
class CrossValidation:
    folds: list[Fold]
    held_default: float  # every query scored by the configured settings
    held_tuned: float  # every query scored by the fit of the folds that left it out
    values: Values  # the fit on every query: what the fragment holds
    all_default: float
    all_tuned: float
    settings_scored: int
    held_gain_error: float  # the standard error of the held-out per-query gains

    @property
    def refused(self) -> bool:
        """Whether the fit is not written: on the held-out folds it does not beat the
        configured settings by the margin a move needs (``gains``). A smaller gain is
        as likely noise as the fit's; the configured settings are the safer bet."""
        gain = self.held_tuned - self.held_default
        return not (gain > MIN_GAIN and gain - STANDARD_ERRORS * self.held_gain_error > 0)


def split_folds(qids: Sequence[str], k: int, seed: int) -> list[list[str]]:
    """``qids`` shuffled with ``seed`` and dealt into ``k`` folds (fewer if fewer queries)."""
    order = sorted(qids)
    random.Random(seed).shuffle(order)
    k = max(2, min(k, len(order)))
    return [order[i::k] for i in range(k)]


async def cross_validate(
    per_query: PerQuery, knobs: Sequence[Knob], qids: Sequence[str], k: int = 5, seed: int = 0
) -> CrossValidation:
    """k-fold cross-validation of the coordinate ascent, then the fit on every query."""
    table = ScoreTable(per_query, knobs)
    default: Values = {knob.name: knob.start for knob in knobs}
    folds: list[Fold] = []
    held_scores: dict[str, float] = {}
    for number, held in enumerate(split_folds(qids, k, seed), start=1):
        train = [q for q in qids if q not in set(held)]
        values, train_tuned = await fit(table, knobs, train)
        tuned_scores = await table.scores(values)
        held_scores.update({q: tuned_scores[q] for q in held})
        folds.append(Fold(
            number, tuple(held), values, await table.mean(default, train), train_tuned,
            await table.mean(default, held), await table.mean(values, held),
        ))  # fmt: skip
    values, all_tuned = await fit(table, knobs, qids)
    all_default = await table.mean(default, qids)
    _, error = gain_and_error(held_scores, await table.scores(default), qids)
    return CrossValidation(
        folds, all_default, sum(held_scores.values()) / len(held_scores), values,
        all_default, all_tuned, table.settings_scored, error,
    )  # fmt: skip
