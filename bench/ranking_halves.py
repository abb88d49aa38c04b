"""searcher's own ranking on both halves of both ranking collections, with the shipped
defaults: the figure a change to the text library (stemmer, stop words, BM25, query terms)
must not lower.

For SciFact and Cranfield (``bench/ranking_collections.py``: a development and a held-out
split of each collection's queries), three engines — BM25 on title+text, stemmed BM25 and
static-embedding cosine (model2vec) — are served by the SearXNG stand-in of
``bench/ranking_parts/wire.py`` and BM25 on titles by its Brave endpoint, each returning
its top 20. Every query goes through ``service.search`` (fusion, keyword filter, heuristic
scores, near-duplicate removal and the hybrid stage, all with the shipped defaults), once
with SearXNG alone and once fused with Brave; nDCG@10 and MRR on each half are printed.
Nothing is tuned: use the dev rows to choose, the held-out rows to confirm.

    .venv/bin/python -m bench.ranking_halves
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping, Sequence

from bench import ranking_collections as rc
from bench.ranking_parts import engines as eng
from bench.ranking_parts import service as svc
from bench.ranking_parts import wire
from searcher.ranking.evaluation import Qrels, evaluate, run_from_rankings

DEPTH = 20  # results per engine
CUT = 10  # results scored per query
SEARXNG_ENGINES = ("bm25", "bm25-stem", "static")
BRAVE_ENGINE = "bm25-title"


def scores(rankings: Mapping[str, Sequence[str]], qrels: Qrels) -> tuple[float, float]:
    """Mean nDCG@10 and MRR of ``rankings`` (cut at ``CUT``); a missing query scores 0."""
    run = run_from_rankings({q: list(d[:CUT]) for q, d in rankings.items() if q in qrels})
    missing = {q: {} for q in qrels if q not in run}
    result = evaluate({**run, **missing}, qrels, ["nDCG@10", "MRR"])
    return result.mean("nDCG@10"), result.mean("MRR")


def build_engines(c: rc.Collection) -> list[eng.Engine]:
    ids, texts = [d.id for d in c.docs], [eng.full_text(d) for d in c.docs]
    static = eng.static_encoder()
    return [
        eng.BM25Engine("bm25", c.docs, eng.full_text, stem=False),
        eng.BM25Engine("bm25-stem", c.docs, eng.full_text, stem=True),
        eng.DenseEngine("static", ids, static(texts), static),
        eng.BM25Engine(BRAVE_ENGINE, c.docs, lambda d: d.title, stem=False),
    ]


def collection_rows(c: rc.Collection) -> list[tuple[str, str, float, float]]:
    """(backends, half, nDCG@10, MRR) of the service on ``c``."""
    engines = build_engines(c)
    queries = {**c.texts(c.dev), **c.texts(c.test)}
    texts = sorted(set(queries.values()))
    truth = {e.name: dict(zip(texts, e.rank(texts, DEPTH), strict=True)) for e in engines}

    def rank(query: str) -> dict[str, list[str]]:
        return {e.name: truth[e.name].get(query) or e.rank([query], DEPTH)[0] for e in engines}

    docs = {d.id: d for d in c.docs}
    rows = []
    with wire.servers(rank, docs, SEARXNG_ENGINES, BRAVE_ENGINE) as urls:
        for label, backends in (("SearXNG alone", ("searxng",)), ("fused", ("searxng", "brave"))):
            config = svc.config({b: urls[b] for b in backends}, {}, 1.0, 60, {})
            config["fusion"] = {}  # the shipped fusion defaults
            served = asyncio.run(svc.rankings(config, queries, CUT))
            for half, qrels in (("dev", c.dev), ("held-out", c.test)):
                rows.append((label, half, *scores(served, qrels)))
    return rows


def main() -> None:
    started = time.perf_counter()
    print(f"service.search with the shipped defaults; engines return their top {DEPTH}, "
          f"runs scored on their top {CUT}")  # fmt: skip
    print(f"  {'collection':11}{'backends':15}{'half':10}{'queries':>8}{'nDCG@10':>9}{'MRR':>8}")
    for c in rc.load_all():
        sizes = {"dev": len(c.dev), "held-out": len(c.test)}
        for label, half, ndcg, mrr in collection_rows(c):
            print(f"  {c.name:11}{label:15}{half:10}{sizes[half]:8}{ndcg:9.4f}{mrr:8.4f}",
                  flush=True)  # fmt: skip
    print(f"wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
