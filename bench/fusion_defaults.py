"""Defaults that never lose to the simple answer (issue 28, point 1), in ONE run.

For SciFact and Cranfield (``bench/ranking_collections.py``: a development and a held-out
split of each collection's queries), three engines — BM25 on title+text, stemmed BM25 and
static-embedding cosine — are served by the SearXNG stand-in of
``bench/ranking_parts/wire.py`` (it merges them with SearXNG's formula, as
``searx/results.py`` does), and a second backend in Brave's wire format serves either a
strong engine (all-MiniLM-L6-v2 cosine) or a weak one (BM25 on titles only). Every engine
returns its top 20; runs are scored on their top 10.

The simple answers, per half: each engine's own order; each backend's own order (the best
of them is "best single backend"); SearXNG's merge formula (hits x sum of 1/position,
equal weights) over every engine of both backends. Against them, searcher's ranking
(fusion, heuristic scores, hybrid stage, computed with the library as the service's rank
step runs it, near-duplicate removal aside) for a grid of fusion settings, with SearXNG
alone, each second backend alone, and SearXNG fused with each second backend.

A setting's margin is its worst difference on the dev halves of both collections:
fused - max(SearXNG's formula, best single backend) with each second backend, and
alone - the backend's own order for each single backend. The setting with the best
worst margin is chosen on dev and confirmed on the held-out halves; the shipped defaults
(config.py) are then run through ``service.search`` itself (dedup included).

    .venv/bin/python -m bench.fusion_defaults [--limit N] [--no-service] [--no-minilm]
                                              [--collections cranfield]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import itertools
import time
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from bench import ranking_collections as rc
from bench.ranking_parts import engines as eng
from bench.ranking_parts import service as svc
from bench.ranking_parts import wire
from bench.ranking_searxng import docids, library_ranking, scores, shipped_knobs
from searcher.backends.base import BackendAnswer
from searcher.ranking.fusion import ranked_lists, searxng_style
from tests.testbed.server import ThreadedServer

DEPTH = 20
CUT = 10
SEARXNG_ENGINES = ("bm25", "bm25-stem", "static")
Rankings = dict[str, list[str]]
Knobs = dict[str, Any]

# The grid searched on dev (every combination); the rest of the knobs keep their values.
GRID: dict[str, tuple[Any, ...]] = {
    "method": ("searxng", "answer_order", "engine_rrf"),
    "hybrid_share": (0.0, 0.1, 0.2, 0.3, 0.5),
    "heuristics": ((0.02, 0.05), (0.0, 0.0)),  # (keyword_weight, multi_engine_bonus)
}
# The configuration before issue 28, kept reachable by config (docs/ranking.md).
BEFORE: Knobs = {"method": "engine_rrf", "agreement": False, "rrf_k": 1,
                 "keyword_weight": 0.02, "multi_engine_bonus": 0.05,
                 "min_keyword_overlap": 0.0, "hybrid_share": 0.5}  # fmt: skip


@dataclass
class Captured:
    """One collection's answers: per query, SearXNG's and each second backend's."""

    collection: rc.Collection
    searxng: dict[str, BackendAnswer]
    second: dict[str, dict[str, BackendAnswer]]  # "strong"/"weak" -> qid -> answer
    truth: dict[str, Rankings]  # engine -> qid -> its list
    urls: dict[str, str]


def grid() -> Iterator[Knobs]:
    for method, share, (keyword, bonus) in itertools.product(*GRID.values()):
        yield {**BEFORE, "method": method, "hybrid_share": share, "keyword_weight": keyword,
               "multi_engine_bonus": bonus}  # fmt: skip


def label(knobs: Mapping[str, Any]) -> str:
    return (f"{knobs['method']} k={knobs['rrf_k']} hybrid={knobs['hybrid_share']} "
            f"kw={knobs['keyword_weight']} bonus={knobs['multi_engine_bonus']}")  # fmt: skip


# ---- the engines and the servers ----------------------------------------------------------


def build_engines(c: rc.Collection, with_minilm: bool) -> dict[str, eng.Engine]:
    ids, texts = [d.id for d in c.docs], [eng.full_text(d) for d in c.docs]
    static = eng.static_encoder()
    engines: list[eng.Engine] = [
        eng.BM25Engine("bm25", c.docs, eng.full_text, stem=False),
        eng.BM25Engine("bm25-stem", c.docs, eng.full_text, stem=True),
        eng.DenseEngine("static", ids, static(texts), static),
        eng.BM25Engine("bm25-title", c.docs, lambda d: d.title, stem=False),
    ]
    if with_minilm:
        engines.append(eng.minilm_engine("minilm", c.docs))
    return {e.name: e for e in engines}


def capture(
    c: rc.Collection, engines: Mapping[str, eng.Engine], seconds: Mapping[str, str],
    queries: Mapping[str, str], stack: contextlib.ExitStack,
) -> Captured:  # fmt: skip
    """Every query's answers through searcher's own backend code over HTTP; the servers
    stay up in ``stack`` (the service rows search them again)."""
    texts = sorted(set(queries.values()))
    lists = {
        name: dict(zip(texts, e.rank(texts, DEPTH), strict=True)) for name, e in engines.items()
    }

    def rank(query: str) -> dict[str, list[str]]:
        return {name: lists[name].get(query) or e.rank([query], DEPTH)[0]
                for name, e in engines.items()}  # fmt: skip

    docs = {d.id: d for d in c.docs}
    sx = stack.enter_context(ThreadedServer(wire.searxng_app(rank, docs, SEARXNG_ENGINES)))
    urls = {"searxng": sx.base_url}
    second: dict[str, dict[str, BackendAnswer]] = {}
    searxng: dict[str, BackendAnswer] = {}
    for kind, engine in seconds.items():
        server = stack.enter_context(ThreadedServer(wire.brave_app(rank, docs, engine)))
        urls[kind] = server.base_url
        answers = asyncio.run(
            wire.fetch_answers({"searxng": sx.base_url, "brave": server.base_url}, queries, DEPTH)
        )
        searxng = {q: a[0] for q, a in answers.items()}
        second[kind] = {q: a[1] for q, a in answers.items()}
    truth = {name: {q: by_text[t] for q, t in queries.items()} for name, by_text in lists.items()}
    return Captured(c, searxng, second, truth, urls)


# ---- the rankings ----------------------------------------------------------------------------


def setups(cap: Captured) -> dict[str, dict[str, list[BackendAnswer]]]:
    """setup name -> qid -> the answers searcher fuses."""
    out = {"alone: searxng": {q: [a] for q, a in cap.searxng.items()}}
    for kind, answers in cap.second.items():
        out[f"alone: {kind}"] = {q: [a] for q, a in answers.items()}
        out[f"fused: {kind}"] = {q: [cap.searxng[q], answers[q]] for q in answers}
    return out


def simple_answers(cap: Captured) -> dict[str, Rankings]:
    """The rankings a user gets without searcher: each backend's order, SearXNG's formula."""
    out: dict[str, Rankings] = {
        "order: searxng": {q: docids(a.hits) for q, a in cap.searxng.items()}
    }
    for kind, answers in cap.second.items():
        out[f"order: {kind}"] = {q: docids(a.hits) for q, a in answers.items()}
        out[f"formula: {kind}"] = {
            q: docids([f.hit for f in searxng_style(
                [lst for a in (cap.searxng[q], answers[q]) for lst in ranked_lists(a, 1.0, {})])])
            for q in answers
        }  # fmt: skip
    return out


def searcher_rankings(cap: Captured, knobs: Knobs, qids: Sequence[str]) -> dict[str, Rankings]:
    queries = cap.collection.queries
    return {
        name: {
            q: docids([f.hit for f in library_ranking(by_q[q], queries[q], knobs)]) for q in qids
        }
        for name, by_q in setups(cap).items()
    }


def margins(ndcg: Mapping[str, float]) -> dict[str, float]:
    """Each setup's nDCG@10 less the simple answer it must not lose to."""
    out = {}
    for name, value in ndcg.items():
        kind = name.split(": ")[1]
        if name.startswith("alone"):
            out[name] = value - ndcg[f"order: {kind}"]
        elif name.startswith("fused"):
            simple = max(ndcg[f"formula: {kind}"], ndcg["order: searxng"], ndcg[f"order: {kind}"])
            out[name] = value - simple
    return out


def half_scores(rankings: Mapping[str, Rankings], qrels: rc.Qrels) -> dict[str, float]:
    return {name: scores(r, qrels)[0] for name, r in rankings.items()}


# ---- the report ----------------------------------------------------------------------------


def half_qrels(cap: Captured, half: str, limit: int | None) -> rc.Qrels:
    qrels = cap.collection.dev if half == "dev" else cap.collection.test
    return dict(list(qrels.items())[:limit]) if limit else qrels


def print_half(
    cap: Captured, half: str, qrels: rc.Qrels, rows: Mapping[str, Mapping[str, Rankings]]
) -> None:
    simple = half_scores(simple_answers(cap), qrels)
    print(f"\n{cap.collection.name} {half} ({len(qrels)} queries), nDCG@10")
    engines = "  ".join(f"{e} {scores(r, qrels)[0]:.4f}" for e, r in cap.truth.items())
    print(f"  engines alone: {engines}")
    print("  simple answers: " + "  ".join(f"{n} {v:.4f}" for n, v in simple.items()))
    for row, rankings in rows.items():
        ndcg = {**simple, **half_scores(rankings, qrels)}
        gaps = margins(ndcg)
        cells = "  ".join(f"{n} {ndcg[n]:.4f} ({gaps[n]:+.4f})" for n in gaps)
        print(f"  {row:32} {cells}; worst {min(gaps.values()):+.4f}", flush=True)


def choose(caps: Sequence[Captured], limit: int | None) -> tuple[Knobs, list[str]]:
    """The grid setting with the best worst dev margin (ties: the better mean margin)."""
    best: tuple[float, float] = (-1.0, -1.0)
    chosen: Knobs = BEFORE
    lines = []
    for knobs in grid():
        gaps = []
        for cap in caps:
            qrels = half_qrels(cap, "dev", limit)
            ndcg = {**half_scores(simple_answers(cap), qrels),
                    **half_scores(searcher_rankings(cap, knobs, list(qrels)), qrels)}  # fmt: skip
            gaps += list(margins(ndcg).values())
        worst, mean = min(gaps), sum(gaps) / len(gaps)
        lines.append(f"  {label(knobs):58} worst {worst:+.4f}  mean {mean:+.4f}")
        if (worst, mean) > best:
            best, chosen = (worst, mean), knobs
    return chosen, lines


def service_rankings(cap: Captured, qids: Sequence[str]) -> dict[str, Rankings]:
    """searcher itself (``service.search``, the shipped defaults of config.py)."""
    queries = {q: cap.collection.queries[q] for q in qids}
    out = {}
    for name, urls in [("alone: searxng", {"searxng": cap.urls["searxng"]})] + [
        (f"fused: {kind}", {"searxng": cap.urls["searxng"], "brave": cap.urls[kind]})
        for kind in cap.second
    ]:
        config = svc.config(urls, {}, 1.0, 1, {})
        config["fusion"], config["scoring"] = {}, {}  # the shipped defaults
        out[name] = asyncio.run(svc.rankings(config, queries, CUT))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--limit", type=int, default=None, help="Queries per half (first N).")
    parser.add_argument("--no-service", action="store_true", help="Skip service.search rows.")
    parser.add_argument("--no-minilm", action="store_true", help="No strong second backend.")
    parser.add_argument(
        "--collections", default="scifact,cranfield", help="Comma-separated (default: both)."
    )
    args = parser.parse_args()
    started = time.perf_counter()
    with_minilm = not args.no_minilm and not eng.minilm_missing()
    seconds = {"weak": "bm25-title", **({"strong": "minilm"} if with_minilm else {})}
    caps = []
    with contextlib.ExitStack() as stack:
        for c in rc.load_all():
            if c.name not in args.collections.split(","):
                continue
            qrels = {
                **dict(list(c.dev.items())[: args.limit]),
                **dict(list(c.test.items())[: args.limit]),
            }
            queries = {q: c.queries[q] for q in qrels}
            caps.append(capture(c, build_engines(c, with_minilm), seconds, queries, stack))
            print(f"{c.name}: answers captured ({time.perf_counter() - started:.0f} s)", flush=True)
        print(f"\nsecond backends: {seconds}; margins are nDCG@10 less the simple answer")
        chosen, lines = choose(caps, args.limit)
        print("dev grid (both collections; worst and mean margin):")
        print("\n".join(lines))
        shipped = shipped_knobs()
        print(f"\nchosen on dev: {label(chosen)}\nshipped (config.py): {label(shipped)}")
        for cap in caps:
            for half in ("dev", "held-out"):
                qrels = half_qrels(cap, half, args.limit)
                rows = {
                    f"before issue 28 ({BEFORE['method']})": searcher_rankings(
                        cap, BEFORE, list(qrels)
                    ),
                    "chosen on dev (library)": searcher_rankings(cap, chosen, list(qrels)),
                }
                if not args.no_service:
                    rows["shipped (service.search)"] = service_rankings(cap, list(qrels))
                print_half(cap, half, qrels, rows)
    print(f"\nwall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
