"""Settings by coordinate ascent on grids, against any objective (the benchmark's: nDCG@10
on the SciFact *train* queries).

Each setting in turn takes the grid value that scores best with the others held, until a
full round changes nothing. A move must gain more than ``min_gain``, so that ties and
noise keep the starting (simpler, or default) value.

For engine weights in weighted RRF: the ranking is the same when every weight is
multiplied by one number, so one engine (the anchor) keeps weight 1 and has no grid.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

WEIGHT_GRID: tuple[float, ...] = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0, 1.5, 2.0, 3.0, 5.0)
Objective = Callable[[dict[str, float]], float]


@dataclass(frozen=True)
class Tuned:
    values: dict[str, float]
    score: float  # the objective at ``values``
    evaluations: int  # distinct settings scored


def coordinate_ascent(
    objective: Objective,
    start: Mapping[str, float],
    grids: Mapping[str, Sequence[float]],
    max_rounds: int = 5,
    min_gain: float = 1e-4,
) -> Tuned:
    """Values for the keys of ``start`` that maximise ``objective``; keys without a grid
    keep their start value."""
    names = list(start)
    memo: dict[tuple[float, ...], float] = {}

    def score(values: dict[str, float]) -> float:
        key = tuple(values[n] for n in names)
        if key not in memo:
            memo[key] = objective(dict(values))
        return memo[key]

    values = dict(start)
    best = score(values)
    for _ in range(max_rounds):
        moved = False
        for name in names:
            for value in grids.get(name, ()):
                trial = {**values, name: value}
                trial_score = score(trial)
                if trial_score > best + min_gain:
                    values, best, moved = trial, trial_score, True
        if not moved:
            break
    return Tuned(values, best, len(memo))


def engine_weights(
    objective: Objective, engines: Sequence[str], anchor: str, grid: Sequence[float] = WEIGHT_GRID
) -> Tuned:
    """Weights for ``engines``, from all 1, with ``anchor`` fixed at 1."""
    grids = {engine: grid for engine in engines if engine != anchor}
    return coordinate_ascent(objective, {engine: 1.0 for engine in engines}, grids)
