"""Ways to merge several engines' rankings of one query into one ranking.

Two implementations of the same two methods (SearXNG's merge and weighted reciprocal rank
fusion):

- here, over document ids: small and fast, used by SearXNG's stand-in server (which is
  SearXNG's behaviour, not ours) and by the weight tuning, which scores hundreds of weight
  settings;
- ``searcher.ranking.fusion`` itself, over the ``BackendAnswer``s that the servers sent over HTTP:
  the numbers the benchmark reports. ``LibraryFusion`` adapts it, and ``agreement`` checks
  that the two implementations rank alike, so that weights tuned with the fast one hold
  for the library.

Ties are broken by document id in both (the library breaks them by normalised URL, and the
URLs differ only in the id).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from searcher.backends.base import BackendAnswer

Lists = Mapping[str, Sequence[str]]  # engine -> document ids, best first (one query)
Weights = Mapping[str, float]  # engine -> weight (default 1)
Method = Callable[[Lists], list[str]]


@dataclass(frozen=True)
class Merged:
    """One document in SearXNG's merged answer."""

    docid: str
    score: float
    engines: tuple[str, ...]
    positions: tuple[int, ...]  # 1-based, paired with ``engines``


def searxng_merge(lists: Lists, weights: Weights) -> list[Merged]:
    """SearXNG's merge (``searx/results.py``): score = product of the weights of the engines
    that returned the document x their number x sum of 1/position. Best first."""
    found: dict[str, list[tuple[str, int]]] = {}
    for engine, docids in lists.items():
        for position, docid in enumerate(docids, start=1):
            found.setdefault(docid, []).append((engine, position))
    merged = [
        Merged(
            docid,
            math.prod(sorted(weights.get(e, 1.0) for e, _ in where))
            * len(where)
            * math.fsum(1 / p for _, p in where),
            tuple(e for e, _ in where),
            tuple(p for _, p in where),
        )
        for docid, where in found.items()
    ]
    merged.sort(key=lambda m: (-m.score, m.docid))
    return merged


def searxng_ranking(lists: Lists, weights: Weights) -> list[str]:
    return [m.docid for m in searxng_merge(lists, weights)]


def rrf_ranking(lists: Lists, weights: Weights, k: int) -> list[str]:
    """Weighted reciprocal rank fusion: score = sum of weight / (k + rank). Best first."""
    scores: dict[str, list[float]] = {}
    for engine, docids in lists.items():
        weight = weights.get(engine, 1.0)
        for rank, docid in enumerate(docids, start=1):
            scores.setdefault(docid, []).append(weight / (k + rank))
    totals = {docid: math.fsum(parts) for docid, parts in scores.items()}
    return sorted(totals, key=lambda d: (-totals[d], d))


# ---- searcher.ranking.fusion over the answers the servers sent -----------------------------------


class LibraryFusion:
    """``searcher.ranking.fusion``: answers are split into per-engine lists with ``ranked_lists``
    and fused. Weights are by engine name; a backend whose answer is one list (Brave) is
    weighted as the engine behind it, named in ``backend_engines``."""

    def __init__(self, docid_of: Callable[[str], str], backend_engines: Mapping[str, str]):
        from searcher.ranking import fusion

        self._fusion = fusion
        self._docid_of = docid_of
        self._backend_engines = backend_engines

    def lists(self, answers: Sequence[BackendAnswer], weights: Weights) -> list[Any]:
        lists = []
        for answer in answers:
            engine = self._backend_engines.get(answer.backend)
            backend_weight = weights.get(engine, 1.0) if engine else 1.0
            lists += self._fusion.ranked_lists(answer, backend_weight, weights)
        return lists

    def engine_lists(self, answers: Sequence[BackendAnswer]) -> dict[str, list[str]]:
        """Each engine's ranking as ``ranked_lists`` recovers it from the answers."""
        return {
            lst.engine or self._backend_engines.get(lst.backend, lst.backend): [
                self._docid_of(hit.url) for hit in lst.hits
            ]
            for lst in self.lists(answers, {})
        }

    def rrf(self, answers: Sequence[BackendAnswer], weights: Weights, k: int) -> list[str]:
        fused = self._fusion.fuse(self.lists(answers, weights), k=k)
        return [self._docid_of(f.hit.url) for f in fused]

    def searxng(self, answers: Sequence[BackendAnswer], weights: Weights) -> list[str]:
        fused = self._fusion.searxng_style(self.lists(answers, weights))
        return [self._docid_of(f.hit.url) for f in fused]


def agreement(first: Mapping[str, list[str]], second: Mapping[str, list[str]], depth: int) -> float:
    """Share of queries whose top ``depth`` documents are the same, in the same order."""
    same = sum(1 for qid in first if first[qid][:depth] == second.get(qid, [])[:depth])
    return same / len(first) if first else 1.0
