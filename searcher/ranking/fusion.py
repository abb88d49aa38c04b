"""Fusion: backend answers in, one ranked list of distinct pages out, with provenance.

Every backend answer is split into ranked lists (one per SearXNG engine, one per other
backend), each with a weight. ``fuse`` merges the lists by normalised URL with weighted
reciprocal rank fusion. Weights are what make fusion work: on SciFact, textbook RRF over
engines of unequal quality scored below the best engine alone, SearXNG's formula did not
(DESIGN.md, "Facts measured"), so trust in an engine has to be a weight the benchmark can
tune. ``searxng_style`` is SearXNG's own merge, kept as the baseline to compare against.

Determinism: the output depends on the set of lists, not their order, nor on the order
of equal-score pages (ties go to the normalised URL).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, NamedTuple

from searcher.backends.base import BackendAnswer, Hit
from searcher.fetch.urls import page_key


@dataclass(frozen=True)
class RankedList:
    """One engine's (or backend's) ranking, best first, with how much it is trusted."""

    backend: str  # the instance's name ("searxng", "sx-home", "brave", ...)
    engine: str | None  # an engine inside a meta-search ("bing"), None for the backend's list
    weight: float  # backend weight x intent weight x engine weight
    hits: tuple[Hit, ...]
    perspective: str | None = None  # multi-query / corrective search: which query found it
    scored: bool = True  # False: provenance only (``fuse``'s ``provenance``)


@dataclass(frozen=True)
class Source:
    """One place a page was found: a list and its 1-based rank there."""

    backend: str
    engine: str | None
    rank: int
    perspective: str | None = None

    def sort_key(self) -> tuple[str, str, int, str]:
        return (self.backend, self.engine or "", self.rank, self.perspective or "")


@dataclass(frozen=True)
class FusedHit:
    """One distinct page after fusion."""

    hit: Hit  # representative: richest title and snippet, union of engines (representative())
    key: str  # page_key(hit.url)
    score: float
    sources: tuple[Source, ...]  # sorted by (backend, engine or "", rank)


class _Appearance(NamedTuple):
    """A page at one rank of one list (internal; a tuple because fusion makes many)."""

    hit: Hit
    source: Source
    weight: float
    scored: bool


def _order(a: _Appearance) -> tuple[Any, ...]:
    # Best-ranked first; then every field of the hit, so that when two appearances tie,
    # no input order leaks into which one stands for the page.
    s, h = a.source, a.hit
    return (
        s.rank, s.backend, s.engine or "", s.perspective or "", h.url, h.title, h.snippet,
        h.engines, h.backend, h.positions, h.published or "", h.category or "",
        -math.inf if h.score is None else h.score,
    )  # fmt: skip


def engine_count(fused: FusedHit) -> int:
    """How many distinct engines found a page: a backend's own list counts as an engine
    only when none of its engines is named (a SearXNG answer's order is not a vote)."""
    named = {(s.backend, s.perspective) for s in fused.sources if s.engine is not None}
    return len(
        {
            (s.backend, s.engine)
            for s in fused.sources
            if s.engine is not None or (s.backend, s.perspective) not in named
        }
    )


# --- splitting answers into ranked lists --------------------------------------------------


def ranked_lists(
    answer: BackendAnswer, backend_weight: float, engine_weights: Mapping[str, float]
) -> list[RankedList]:
    """Split one backend answer into ranked lists.

    A meta-search's answer (``answer.per_engine``: any SearXNG instance) becomes one list
    per engine, holding the hits that engine returned in the order of their position for
    it (``hit.engines`` paired in order with ``hit.positions``; where a position is
    missing, the answer order stands in). Hits without engines form a list with engine
    None. Any other answer is one list, engine None, in answer order. ``backend_weight``
    already includes the intent's weight; an engine's weight (default 1) multiplies it."""
    if not answer.hits:
        return []
    if not answer.per_engine:
        return [RankedList(answer.backend, None, backend_weight, tuple(answer.hits))]
    per_engine: dict[str | None, list[tuple[int, int, Hit]]] = {}
    for index, hit in enumerate(answer.hits):
        for engine, position in _engine_positions(hit, fallback=index + 1):
            per_engine.setdefault(engine, []).append((position, index, hit))
    # A hit is in an engine's list once, so (position, index) differ and decide the sort:
    # hits are never compared.
    return [
        RankedList(
            answer.backend,
            engine,
            backend_weight * (engine_weights.get(engine, 1.0) if engine else 1.0),
            tuple([hit for _, _, hit in sorted(entries)]),
        )
        for engine, entries in sorted(per_engine.items(), key=lambda item: item[0] or "")
    ]


def _engine_positions(hit: Hit, fallback: int) -> list[tuple[str | None, int]]:
    """(engine, position) pairs of one meta-search hit, each engine once."""
    if not hit.engines:
        return [(None, fallback)]
    pairs: dict[str | None, int] = {}
    for i, engine in enumerate(hit.engines):
        if engine not in pairs:
            position = hit.positions[i] if i < len(hit.positions) else 0
            pairs[engine] = position if position > 0 else fallback
    return list(pairs.items())


# --- a backend's own order ---------------------------------------------------------------

FusionMethod = Literal["answer_order", "engine_rrf", "searxng"]
# An engine none of whose results another engine also returned still counts a little:
# on its own it may be right, but its vote is the least corroborated.
AGREEMENT_FLOOR = 0.1


def answer_list(
    answer: BackendAnswer,
    backend_weight: float,
    engine_weights: Mapping[str, float],
    agreement: bool = False,
) -> RankedList:
    """A backend's answer as one ranked list (engine None): its own order, which for a
    SearXNG answer is SearXNG's merge of its engines (its ``score``).

    When a SearXNG answer's engines are weighted — by ``engine_weights`` or, with
    ``agreement``, by how often each engine's results were also returned by another —
    the answer is re-ordered by SearXNG's formula with those weights (weights x hits x
    sum of 1/position), ties kept in answer order."""
    hits = tuple(answer.hits)
    if answer.per_engine and hits:
        weights = _engine_trust(hits, engine_weights, agreement)
        if any(w != 1.0 for w in weights.values()):
            scores = [_searxng_score(hit, index + 1, weights) for index, hit in enumerate(hits)]
            order = sorted(range(len(hits)), key=lambda i: (-scores[i], i))
            hits = tuple(hits[i] for i in order)
    return RankedList(answer.backend, None, backend_weight, hits)


def engine_agreement(hits: Sequence[Hit]) -> dict[str, float]:
    """engine -> share of its results that another engine of the same answer returned too."""
    found: dict[str, int] = {}
    shared: dict[str, int] = {}
    for hit in hits:
        engines = set(hit.engines)
        for engine in engines:
            found[engine] = found.get(engine, 0) + 1
            shared[engine] = shared.get(engine, 0) + (len(engines) > 1)
    return {engine: shared[engine] / found[engine] for engine in found}


def _engine_trust(
    hits: Sequence[Hit], engine_weights: Mapping[str, float], agreement: bool
) -> dict[str, float]:
    engines = {engine for hit in hits for engine in hit.engines}
    trust = {engine: engine_weights.get(engine, 1.0) for engine in engines}
    if agreement and len(engines) > 1:
        for engine, share in engine_agreement(hits).items():
            trust[engine] *= max(AGREEMENT_FLOOR, share)
    return trust


def _searxng_score(hit: Hit, fallback: int, weights: Mapping[str, float]) -> float:
    pairs = _engine_positions(hit, fallback)
    if pairs == [(None, fallback)]:
        return 1.0 / fallback
    weight = math.prod(sorted(weights.get(engine or "", 1.0) for engine, _ in pairs))
    return weight * len(pairs) * math.fsum(1.0 / position for _, position in pairs)


def fuse_answers(
    answers: Sequence[tuple[str | None, BackendAnswer, float]],
    engine_weights: Mapping[str, float],
    k: int = 1,
    method: FusionMethod = "engine_rrf",
    agreement: bool = False,
) -> list[FusedHit]:
    """Every answer of a search (``(perspective, answer, backend weight)``) fused into one
    ranking.

    ``answer_order``: each answer is one list in its backend's own order
    (``answer_list``), lists are fused by weighted RRF, and a SearXNG answer's per-engine
    lists are kept as provenance only, so one backend alone keeps its order.
    ``engine_rrf``: weighted RRF over every engine's list (before issue 12).
    ``searxng``: SearXNG's own merge over every engine's list of every backend (each
    other backend one list): with one SearXNG backend, exactly its order; ``k`` unused."""
    per_engine = [
        dataclasses.replace(lst, perspective=perspective) if perspective else lst
        for perspective, answer, weight in answers
        for lst in ranked_lists(answer, weight, engine_weights)
    ]
    if method == "engine_rrf":
        return fuse(per_engine, k)
    if method == "searxng":
        return searxng_style(per_engine)
    own = [
        dataclasses.replace(lst, perspective=perspective) if perspective else lst
        for perspective, answer, weight in answers
        if answer.hits
        for lst in [answer_list(answer, weight, engine_weights, agreement)]
    ]
    provenance = [lst for lst in per_engine if lst.engine is not None]
    return fuse(own, k, provenance=provenance)


# --- fusing ------------------------------------------------------------------------------

Scorer = Callable[[Sequence[_Appearance]], float]


def fuse(
    lists: Sequence[RankedList], k: int = 60, provenance: Sequence[RankedList] = ()
) -> list[FusedHit]:
    """Weighted reciprocal rank fusion, merged by normalised URL.

    ``score(d) = sum over lists containing d of weight / (k + rank)``. Best first; equal
    scores ordered by the normalised URL. The order of ``lists`` does not matter.
    ``provenance`` lists add sources (where else a page was found, at which rank) but
    no score, and no page that ``lists`` do not hold."""

    def rrf(appearances: Sequence[_Appearance]) -> float:
        # fsum is exactly rounded, so the sum does not depend on the order of the lists.
        return math.fsum(a.weight / (k + a.source.rank) for a in appearances if a.scored)

    marked = [dataclasses.replace(lst, scored=False) for lst in provenance]
    return _fused([*lists, *marked], rrf)


def searxng_style(lists: Sequence[RankedList]) -> list[FusedHit]:
    """SearXNG's merge (``searx/results.py``), the baseline for the benchmark:
    ``score(d) = (product of the weights of the lists containing d) x hits x sum 1/rank``,
    where hits is the number of lists containing d."""

    def searxng(appearances: Sequence[_Appearance]) -> float:
        appearances = [a for a in appearances if a.scored]
        weight = math.prod(sorted(a.weight for a in appearances))
        return weight * len(appearances) * math.fsum(1.0 / a.source.rank for a in appearances)

    return _fused(lists, searxng)


def _fused(lists: Sequence[RankedList], score: Scorer) -> list[FusedHit]:
    fused = []
    for key, group in _group_by_page(lists).items():
        if any(a.scored for a in group):
            hit = group[0].hit
            if any(a.hit is not hit for a in group):
                # Different hits: which stands for the page, and how sources that sort
                # alike are ordered, go by rank (then by every field), never by list order.
                group = sorted(group, key=_order)
                hit = _https_spelling(representative([a.hit for a in group]), group)
            # One hit in every list (a page one list found, or a SearXNG page split into
            # its engines' lists): no sort by ``_order``. Sources sorting alike keep list
            # order, as that sort (equal on them) would have kept it; scores (fsum, sorted
            # prod) ignore order.
            sources = tuple(sorted((a.source for a in group), key=Source.sort_key))
            fused.append(FusedHit(hit, key, score(group), sources))
    fused.sort(key=lambda f: (-f.score, f.key))
    return fused


def _group_by_page(lists: Iterable[RankedList]) -> dict[str, list[_Appearance]]:
    """Appearances by page key, in the order of ``lists``. A page listed twice in
    one list (two spellings of its URL) counts once there, at its better rank."""
    groups: dict[str, dict[int, _Appearance]] = {}
    for list_index, lst in enumerate(lists):
        for rank, hit in enumerate(lst.hits, start=1):
            seen = groups.setdefault(page_key(hit.url), {})
            if list_index not in seen:
                source = Source(lst.backend, lst.engine, rank, lst.perspective)
                seen[list_index] = _Appearance(hit, source, lst.weight, lst.scored)
    return {key: list(by_list.values()) for key, by_list in groups.items()}


def _https_spelling(hit: Hit, group: Sequence[_Appearance]) -> Hit:
    """``hit`` with the best-ranked https URL of its page when it came as http: one page
    key covers both schemes, and the secure spelling is the one to show and to fetch."""
    if hit.url[:8].lower() == "https://":
        return hit
    url = next((a.hit.url for a in group if a.hit.url[:8].lower() == "https://"), hit.url)
    return hit if url == hit.url else dataclasses.replace(hit, url=url)


def representative(hits: Sequence[Hit]) -> Hit:
    """One hit standing for several hits of a page, ``hits`` best-ranked first: the
    best-ranked hit's URL and fields, the longest non-empty title and snippet (ties go to
    the better-ranked), the union of engines in rank order. A page found as one hit (in
    one list or several engines' lists) keeps that hit as it is; for merged hits
    ``positions`` is cleared, as it would no longer pair with the engines (ranks live in
    the sources)."""
    first = hits[0]
    if all(hit is first for hit in hits):  # the common case, checked without hashing
        return first
    distinct = list(dict.fromkeys(hits))
    if len(distinct) == 1:
        return first
    return dataclasses.replace(
        distinct[0],
        title=_richest(hit.title for hit in distinct),
        snippet=_richest(hit.snippet for hit in distinct),
        engines=tuple(dict.fromkeys(engine for hit in distinct for engine in hit.engines)),
        positions=(),
        published=next((h.published for h in distinct if h.published), None),
        category=next((h.category for h in distinct if h.category), None),
    )


def _richest(texts: Iterable[str]) -> str:
    """The longest text; the first of equally long ones (max keeps the first maximum)."""
    return max(texts, key=lambda text: len(text.strip()), default="")
