"""Which engine put a SearXNG result at which position, read from a whole answer.

A real SearXNG keeps a merged result's ``engines`` as a set (JSON order is arbitrary) and
appends to ``positions`` in the order the engines' answers arrived, so ``engines[i]`` and
``positions[i]`` need not belong together. What does hold: one engine gives each position
of its list to one result. A result found by a single engine pins that engine's position,
which rules it out for the engine's other results; repeating that settles nearly every
pairing of an answer. A pairing the answer cannot decide gets the mean of the positions
left (the best guess that favours no engine), so no engine is credited with a rank it may
not have earned.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field


@dataclass
class _Open:
    """One result's pairings still to make."""

    engines: list[str]
    positions: list[int]
    pairs: dict[str, int] = field(default_factory=dict)
    # How many engines it had and the sum of their versions when it was last settled:
    # settling it again before one of them changes would make no pairing (``_propagate``).
    settled: tuple[int, int] | None = None


_Pair = Callable[[_Open, str, int], None]
_NONE: frozenset[int] = frozenset()

# Settling rows again as their engines lose positions takes time that grows with the
# square of the results found by several engines when their positions disagree, as a
# broken instance's may: 1,000 results naming 16 engines each took 9 s, 500 engine names
# at most 70 ms. A real page names a few hundred (tens of results, a few engines each).
MAX_SHARED_NAMES = 500  # engines named by the results that name more than one
MAX_ENGINES_PER_RESULT = 64


def alignable(results: Sequence[tuple[Sequence[str], Sequence[int]]]) -> bool:
    """Whether ``align`` reads this answer in bounded time (``MAX_SHARED_NAMES``)."""
    shared = 0
    for engines, positions in results:
        if max(len(engines), len(positions)) > MAX_ENGINES_PER_RESULT:
            return False
        if len(engines) > 1:
            shared += len(engines)
    return shared <= MAX_SHARED_NAMES


def single_engine_pairs(
    results: Sequence[tuple[Sequence[str], Sequence[int]]],
) -> list[dict[str, int]]:
    """The pairings that need no reading of the whole answer: a result one engine found
    is at that engine's best position; the others are left to the caller's fallback."""
    out: list[dict[str, int]] = []
    for engines, positions in results:
        named, taken = set(engines), [p for p in positions if p > 0]
        out.append({engines[0]: min(taken)} if len(named) == 1 and taken else {})
    return out


def align(results: Sequence[tuple[Sequence[str], Sequence[int]]]) -> list[dict[str, int]]:
    """For each result's (engines, positions) of one answer, ``{engine: position}``.

    Positions below 1 are ignored; an engine with no position left is left out (the
    caller's fallback, the answer order, stands in for it)."""
    rows = [
        _Open(list(dict.fromkeys(engines)), sorted(p for p in positions if p > 0))
        for engines, positions in results
    ]
    counts: dict[str, int] = {}  # how many results name each engine
    for row in rows:
        for engine in row.engines:
            counts[engine] = counts.get(engine, 0) + 1
    taken: dict[str, set[int]] = {}
    versions = dict.fromkeys(counts, 0)  # bumped whenever an engine loses a position

    def pair(row: _Open, engine: str, position: int) -> None:
        row.pairs[engine] = position
        row.engines.remove(engine)
        row.positions.remove(position)
        taken.setdefault(engine, set()).add(position)
        versions[engine] += 1

    _propagate(rows, taken, versions, pair)
    # An engine that lost no result to the merge held positions 1..n, n being how many
    # results name it: positions beyond n are not its own, and each of 1..n is somewhere.
    for engine, count in counts.items():
        if all(p <= count for p in taken.get(engine, ())):  # else it did lose some
            taken.setdefault(engine, set()).update(_beyond(rows, engine, count))
            versions[engine] += 1
    cover = _Cover.of(rows, counts)
    while _propagate(rows, taken, versions, pair) | cover.pair_alone(taken, pair):
        pass
    for row in rows:  # undecidable: the mean of what is left, for each engine left
        if row.engines and row.positions:
            guess = round(sum(row.positions) / len(row.positions))
            for engine in row.engines:
                row.pairs[engine] = guess
    return [row.pairs for row in rows]


def _propagate(
    rows: Sequence[_Open], taken: dict[str, set[int]], versions: dict[str, int], pair: _Pair
) -> bool:
    """Settle open rows until none moves. What settling a row can do depends only on the
    row and on the positions taken from its engines. Engines only leave a row and
    versions only grow, so a row whose engine count and version sum are those of its
    last settling is unchanged, and skipped."""
    moved, changed = False, True
    open_rows = [row for row in rows if row.engines and row.positions]
    version = versions.__getitem__
    while changed:
        changed = False
        for row in open_rows:
            if row.settled == (len(row.engines), sum(map(version, row.engines))):
                continue
            changed |= _settle(row, taken, pair)
            row.settled = (len(row.engines), sum(map(version, row.engines)))
        moved |= changed
        open_rows = [row for row in open_rows if row.engines and row.positions]
    return moved


def _beyond(rows: Sequence[_Open], engine: str, count: int) -> set[int]:
    return {p for row in rows if engine in row.engines for p in row.positions if p > count}


@dataclass(frozen=True)
class _Cover:
    """Each (engine, position) of 1..n with the rows that could hold it, read once: rows
    only lose engines and positions as they are paired, so the rows still able are
    among these."""

    could: list[tuple[str, int, list[_Open]]]

    @classmethod
    def of(cls, rows: Sequence[_Open], counts: dict[str, int]) -> _Cover:
        could: dict[tuple[str, int], list[_Open]] = {}
        for row in rows:
            for engine in row.engines:
                for position in dict.fromkeys(row.positions):  # a row once, even if repeated
                    could.setdefault((engine, position), []).append(row)
        return cls(
            [
                (engine, position, could[(engine, position)])
                for engine, count in counts.items()
                for position in range(1, count + 1)
                if (engine, position) in could
            ]
        )

    def pair_alone(self, taken: dict[str, set[int]], pair: _Pair) -> bool:
        """A position of 1..n an engine has not placed, that one open result alone can
        hold."""
        moved = False
        for engine, position, rows in self.could:
            if position in taken.get(engine, ()):
                continue
            able = [r for r in rows if engine in r.engines and position in r.positions]
            if len(able) == 1:
                pair(able[0], engine, position)
                moved = True
        return moved


def _settle(row: _Open, taken: dict[str, set[int]], pair: _Pair) -> bool:
    """Make every pairing of ``row`` that the positions already taken force."""
    moved = False
    progress = True
    while progress and row.engines and row.positions:
        progress = False
        if len(row.engines) == 1:  # one engine left: its best position is this result's
            pair(row, row.engines[0], row.positions[0])
            return True
        held = [(engine, taken.get(engine, _NONE)) for engine in row.engines]
        positions = set(row.positions)
        for engine, gone in held:
            free = positions.difference(gone)
            if len(free) == 1:
                pair(row, engine, free.pop())
                moved = progress = True
                break
        if progress:
            continue
        for position in dict.fromkeys(row.positions):
            able = [engine for engine, gone in held if position not in gone]
            if len(able) == 1:
                pair(row, able[0], position)
                moved = progress = True
                break
    return moved
