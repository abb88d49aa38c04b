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


@dataclass(slots=True, eq=False)  # (rows are told apart by identity)
class _Open:
    """One result's pairings still to make."""

    engines: list[str]
    positions: list[int]
    pairs: dict[str, int] = field(default_factory=dict)
    # False only while settling it would make no pairing: set again when it loses an
    # engine or a position, or when one of its engines is newly placed at one of its
    # positions elsewhere (``_watchers``), the only news that can change its settling.
    dirty: bool = True


_Pair = Callable[[_Open, str, int], None]
_NONE: frozenset[int] = frozenset()

# Settling rows again as their engines lose positions takes time that grows with the
# square of the results found by several engines when their positions disagree, as a
# broken instance's may: 1,000 results naming 16 engines each took 9 s, 500 engine names
# at most 70 ms (0.35 s and 3 ms since rows are watched by engine and position: sweeps
# still pass every open row). A real page names a few hundred (tens of results, a few
# engines each).
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
    rows = [_open_row(engines, positions) for engines, positions in results]
    counts: dict[str, int] = {}  # how many results name each engine
    for row in rows:
        for engine in row.engines:
            counts[engine] = counts.get(engine, 0) + 1
    taken: dict[str, set[int]] = {engine: set() for engine in counts}
    watchers = _watchers(rows)

    def take(engine: str, position: int) -> None:
        gone = taken[engine]
        if position not in gone:  # news for the rows that name both, and only for them
            gone.add(position)
            for row in watchers.get((engine, position), ()):
                row.dirty = True

    def pair(row: _Open, engine: str, position: int) -> None:
        row.pairs[engine] = position
        row.engines.remove(engine)
        row.positions.remove(position)
        row.dirty = True
        take(engine, position)

    _propagate(rows, taken, pair)
    # An engine that lost no result to the merge held positions 1..n, n being how many
    # results name it: positions beyond n are not its own, and each of 1..n is somewhere.
    whole = {e for e, count in counts.items() if all(p <= count for p in taken[e])}
    _take_beyond(rows, whole, counts, taken)
    if any(row.engines and row.positions for row in rows):  # else nothing is left to pair
        cover = _Cover.of(watchers, counts)
        while _propagate(rows, taken, pair) | cover.pair_alone(taken, pair):
            pass
    for row in rows:  # undecidable: the mean of what is left, for each engine left
        if row.engines and row.positions:
            guess = round(sum(row.positions) / len(row.positions))
            for engine in row.engines:
                row.pairs[engine] = guess
    return [row.pairs for row in rows]


def _open_row(engines: Sequence[str], positions: Sequence[int]) -> _Open:
    """A result's engines, each once, and its positions above 0, sorted."""
    named = list(engines) if len(engines) < 2 else list(dict.fromkeys(engines))
    ordered = sorted(positions)  # (those below 1 come first, if there are any)
    if ordered and ordered[0] < 1:
        ordered = [p for p in ordered if p > 0]
    return _Open(named, ordered)


def _watchers(rows: Sequence[_Open]) -> dict[tuple[str, int], list[_Open]]:
    """For each (engine, position), the rows of several engines that name both: these
    are the rows whose settling can change when that engine is placed there. A row of
    one engine needs no watching: it is paired when first settled, whatever was taken.
    (One entry per engine and position of a row: linear in the answer's size.)

    A row watched starts clean unless its positions are all one: with nothing taken yet,
    each of its engines has two positions left and each position two engines able."""
    out: dict[tuple[str, int], list[_Open]] = {}
    for row in rows:
        if len(row.engines) > 1 and row.positions:
            row.dirty = row.positions[0] == row.positions[-1]
            for engine in row.engines:
                for position in row.positions:
                    out.setdefault((engine, position), []).append(row)
    return out


def _propagate(rows: Sequence[_Open], taken: dict[str, set[int]], pair: _Pair) -> bool:
    """Settle open rows, in answer order, until a sweep makes no pairing. What settling a
    row can do depends only on its engines and positions and on which of its positions
    its engines hold elsewhere; a row that is not ``dirty`` would make no pairing, and
    is skipped (the order of the pairings made is that of settling every row)."""
    moved, changed = False, True
    open_rows = [row for row in rows if row.engines and row.positions]
    while changed:
        changed = False
        for row in open_rows:
            if row.dirty:
                changed |= _settle(row, taken, pair)
                row.dirty = False  # settled as far as it goes; its own pairings are in
        moved |= changed
        open_rows = [row for row in open_rows if row.engines and row.positions]
    return moved


def _take_beyond(
    rows: Sequence[_Open], engines: set[str], counts: dict[str, int], taken: dict[str, set[int]]
) -> None:
    """Take from each of ``engines`` the positions of its open rows beyond its count, and
    mark those rows: only they hold the positions taken. (One pass over the rows: one
    per engine was quadratic when each result names an engine of its own.)"""
    for row in rows:
        for engine in row.engines:
            if engine in engines:
                beyond = [p for p in row.positions if p > counts[engine]]
                if beyond:
                    taken[engine].update(beyond)
                    row.dirty = True


@dataclass(frozen=True)
class _Cover:
    """Each (engine, position) of 1..n with the rows that could hold it, read once: rows
    only lose engines and positions as they are paired, so the rows still able are
    among these."""

    could: list[tuple[str, int, list[_Open]]]

    @classmethod
    def of(cls, watchers: dict[tuple[str, int], list[_Open]], counts: dict[str, int]) -> _Cover:
        """The rows that can hold each, now: among those watched (``_watchers``), as a
        row of one engine is paired by the first sweep."""
        could = []
        for engine, count in counts.items():
            for position in range(1, count + 1):
                watched = dict.fromkeys(watchers.get((engine, position), ()))  # each once
                able = [r for r in watched if engine in r.engines and position in r.positions]
                if able:
                    could.append((engine, position, able))
        return cls(could)

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
    while row.engines and row.positions:
        if len(row.engines) == 1:  # one engine left: its best position is this result's
            pair(row, row.engines[0], row.positions[0])
            return True
        forced = _forced(row.engines, row.positions, taken)
        if forced is None:
            return moved
        pair(row, *forced)
        moved = True
    return moved


def _forced(
    engines: list[str], positions: list[int], taken: dict[str, set[int]]
) -> tuple[str, int] | None:
    """The first pairing that the positions taken force on a result of several engines:
    the first engine with one of the result's positions left to it, else the first
    position that one engine alone can still hold."""
    distinct = set(positions)
    one_left = len(distinct) - 1  # how many an engine with one left holds elsewhere
    placed: list[frozenset[int] | set[int]] = []  # per engine, those it holds elsewhere
    for engine in engines:
        gone = taken[engine]
        if distinct.isdisjoint(gone):  # (the usual case, without building a set)
            if not one_left:
                return engine, positions[0]
            placed.append(_NONE)
            continue
        held = distinct.intersection(gone)
        if len(held) == one_left:
            (free,) = distinct.difference(held)
            return engine, free
        placed.append(held)
    if not any(placed):  # several engines can hold every position
        return None
    # A position that all engines but one hold elsewhere is held by the first or the
    # second: only those are worth listing the engines able for.
    maybe = placed[0] | placed[1]
    for position in dict.fromkeys(positions):
        if position in maybe:
            able = [e for e, gone in zip(engines, placed, strict=True) if position not in gone]
            if len(able) == 1:
                return able[0], position
    return None
