"""Ranking against a REAL SearXNG (issue 12): does searcher ever rank worse than it?

For each collection (``bench/ranking_collections.py``: SciFact and Cranfield, each with a
dev and a held-out split of its queries), three engines — BM25 on title+text, stemmed
BM25 and static-embedding cosine (model2vec) — are served over HTTP as ``json_engine``s of
a real SearXNG built from ``../shared/searxng/`` (``build.sh``; by default into the
tests' build directory, ``real_searxng.DEFAULT_CACHE``); a second backend, Brave's wire
format, serves all-MiniLM-L6-v2 cosine (or BM25 on titles with ``--no-minilm``). Each
engine returns its top 20.

Rows, on the held-out queries (nDCG@10, MRR; runs cut at 10):

- SearXNG's own order; the second backend alone; SearXNG's merge formula over every engine
  of both backends (hits x sum 1/position, equal weights);
- searcher before issue 12 (RRF over per-engine lists, keyword floor 0.15, multi-engine
  bonus 0.05 — computed with the library on the same answers);
- searcher with the shipped defaults, through ``service.search`` against the real
  SearXNG (alone, then fused with the second backend);
- seed 004's hybrid relevance (BM25 over title+snippet 40 %, static-embedding cosine
  40 %, entity overlap 20 %) as a rerank stage of the fused pool, mixed with the fused
  order at a share tuned on dev.

Everything chosen is chosen on the dev splits of both collections together (one set of
defaults), by coordinate ascent; the held-out splits are only scored.

    PYTHONPATH=. .venv/bin/python -m bench.ranking_searxng [--no-minilm] [--searxng DIR]
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import functools
import json
import time
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from bench import ranking_collections as rc
from bench.ranking_parts import engines as eng
from bench.ranking_parts import service as svc
from bench.ranking_parts import tuning, wire
from searcher.backends.base import BackendAnswer
from searcher.config import FusionSettings, ScoringSettings
from searcher.ranking.evaluation import Qrels, evaluate, run_from_rankings
from searcher.ranking.fusion import engine_count, fuse_answers, ranked_lists, searxng_style
from searcher.ranking.hybrid import blended_order, cosines, hybrid_scores
from searcher.ranking.relevance import DomainLists, apply_filter, score_results
from searcher.text import document_text
from tests.testbed import real_searxng
from tests.testbed.json_engines import JsonEnginesApp
from tests.testbed.server import ThreadedServer

SEARXNG_ENGINES = ("bm25", "bm25-stem", "static")
DEPTH = 20
CUT = 10
TARGET_RATIO = 1.05
ENGINE_TIMEOUT_S = 25.0
NO_DOMAINS = DomainLists(frozenset(), {})
_VECTORS: dict[str, np.ndarray] = {}


def STATIC() -> Callable[[Sequence[str]], np.ndarray]:
    """The static model, each text encoded once per run (tuning re-scores the same pools)."""
    model = _static_model()

    def encode(texts: Sequence[str]) -> np.ndarray:
        missing = [t for t in dict.fromkeys(texts) if t not in _VECTORS]
        if missing:
            _VECTORS.update(zip(missing, model(missing), strict=True))
        return np.stack([_VECTORS[t] for t in texts])

    return encode


_static_model = functools.cache(eng.static_encoder)
Rankings = dict[str, list[str]]

# What is tuned on dev, from the shipped defaults.
GRID: dict[str, tuple[Any, ...]] = {
    "method": ("answer_order", "engine_rrf"),
    "agreement": (False, True),
    "rrf_k": (1, 5, 10, 20, 30, 60),
    "keyword_weight": (0.0, 0.02, 0.05, 0.1, 0.2),
    "multi_engine_bonus": (0.0, 0.02, 0.05),
    "min_keyword_overlap": (0.0, 0.15),
    "hybrid_share": (0.0, 0.3, 0.5, 0.7, 0.85),
}
BEFORE = {"method": "engine_rrf", "agreement": False, "rrf_k": 60, "keyword_weight": 0.0,
          "multi_engine_bonus": 0.05, "min_keyword_overlap": 0.15, "hybrid_share": 0.0}  # fmt: skip


def scores(rankings: Mapping[str, Sequence[str]], qrels: Qrels) -> tuple[float, float]:
    run = run_from_rankings({q: list(d[:CUT]) for q, d in rankings.items() if q in qrels})
    missing = {q: {} for q in qrels if q not in run}
    result = evaluate({**run, **missing}, qrels, ["nDCG@10", "MRR"])
    return result.mean("nDCG@10"), result.mean("MRR")


def docids(hits: Sequence[Any]) -> list[str]:
    return [wire.docid_of(h.url) for h in hits]


# ---- searcher's ranking computed with the library (for tuning and "before") ------------


def library_ranking(answers: Sequence[BackendAnswer], query: str, knobs: Mapping[str, Any]) -> list:
    """fuse_answers + heuristic scoring, as the service's rank step runs them."""
    fused = fuse_answers(
        [(None, a, 1.0) for a in answers], {}, int(knobs["rrf_k"]), knobs["method"],
        bool(knobs["agreement"]),
    )  # fmt: skip
    settings = ScoringSettings(
        keyword_weight=knobs["keyword_weight"],
        multi_engine_bonus=knobs["multi_engine_bonus"],
        min_keyword_overlap=knobs["min_keyword_overlap"],
    )
    inputs = [(f.hit, f.score, engine_count(f)) for f in fused]
    scored = apply_filter(score_results(inputs, query, "general", NO_DOMAINS, settings))
    ordered = [fused[s.index] for s in scored]
    return reranked(ordered, query, float(knobs.get("hybrid_share", 0.0)), STATIC())


# ---- seed 004's hybrid relevance (searcher.ranking.hybrid) as a rerank stage --------------------


def reranked(fused: Sequence[Any], query: str, share: float, encode: Any) -> list[Any]:
    """The pool re-ordered as ``hybrid_stage`` does, with the static model's cosines."""
    if not fused or share == 0:
        return list(fused)
    texts = [document_text(f.hit.title, f.hit.snippet) for f in fused]
    sims = cosines(eng.normalised(encode([query, *texts])))
    order = blended_order(hybrid_scores(query, texts, sims), share)
    return [fused[i] for i in order]


# ---- one collection ----------------------------------------------------------------------


def build_engines(c: rc.Collection, with_minilm: bool) -> tuple[list[eng.Engine], eng.Engine]:
    ids, texts = [d.id for d in c.docs], [eng.full_text(d) for d in c.docs]
    static = eng.static_encoder()
    searx = [
        eng.BM25Engine("bm25", c.docs, eng.full_text, stem=False),
        eng.BM25Engine("bm25-stem", c.docs, eng.full_text, stem=True),
        eng.DenseEngine("static", ids, static(texts), static),
    ]
    if with_minilm:
        second: eng.Engine = eng.minilm_engine("minilm", c.docs)
    else:
        second = eng.BM25Engine("bm25-title", c.docs, lambda d: d.title, stem=False)
    return searx, second


def capture(
    c: rc.Collection, searx: Sequence[eng.Engine], second: eng.Engine, build: Path
) -> tuple[dict[str, list[BackendAnswer]], dict[str, Rankings], dict[str, str]]:
    """Every query's answers from the real SearXNG and the Brave endpoint; also each
    engine's true list (to check the wire read) and the servers' URLs (kept running by
    the caller's ExitStack)."""
    queries = {**c.texts(c.dev), **c.texts(c.test)}
    texts = sorted(set(queries.values()))
    truth = {e.name: dict(zip(texts, e.rank(texts, DEPTH), strict=True)) for e in [*searx, second]}
    docs = {d.id: d for d in c.docs}

    def search(engine: str, query: str) -> list[dict[str, str]]:
        found = truth[engine].get(query)
        if found is None:
            found = next(e for e in searx if e.name == engine).rank([query], DEPTH)[0]
        return [{"url": wire.doc_url(d), "title": docs[d].title,
                 "content": wire.snippet(docs[d], query)} for d in found]  # fmt: skip

    def rank(query: str) -> dict[str, list[str]]:
        return {second.name: truth[second.name].get(query) or second.rank([query], DEPTH)[0]}

    app = JsonEnginesApp(search, [e.name for e in searx])
    stack = contextlib.ExitStack()
    engines_server = stack.enter_context(ThreadedServer(app))
    brave = stack.enter_context(ThreadedServer(wire.brave_app(rank, docs, second.name)))
    # A loaded machine answers slowly: SearXNG's engine timeout (5 s in the tests) and
    # the number of queries in flight are set so that no engine times out.
    searxng = stack.enter_context(
        real_searxng.running(
            build, {e.name: app.url(engines_server.base_url, e.name) for e in searx},
            timeout_s=ENGINE_TIMEOUT_S,
        )
    )  # fmt: skip
    urls = {"searxng": searxng, "brave": brave.base_url}
    answers = asyncio.run(wire.fetch_answers(urls, queries, DEPTH, concurrency=2))
    CAPTURED[c.name] = stack
    by_qid = {e: {q: truth[e][t] for q, t in queries.items()} for e in truth}
    return answers, by_qid, urls


CAPTURED: dict[str, contextlib.ExitStack] = {}


def wire_check(answers: Mapping[str, list[BackendAnswer]], truth: Mapping[str, Rankings]) -> str:
    """How many per-engine lists ``ranked_lists`` rebuilt exactly from the real answers."""
    same = total = 0
    for qid, [searx, _] in answers.items():
        lists = {lst.engine: docids(lst.hits) for lst in ranked_lists(searx, 1.0, {})}
        for engine in SEARXNG_ENGINES:
            total += 1
            same += lists.get(engine, []) == truth[engine][qid]
    return f"{same} of {total} engine lists rebuilt exactly from the real SearXNG JSON"


def service_rows(
    c: rc.Collection, urls: Mapping[str, str], knobs: Mapping[str, Any], qrels: Qrels
) -> dict[str, Rankings]:
    """searcher itself (service.search, shipped defaults unless tuned differ) on the
    queries of ``qrels``."""
    out = {}
    for label, backends in (("alone", ("searxng",)), ("fused", ("searxng", "brave"))):
        config = svc.config({b: urls[b] for b in backends}, {}, 1.0, int(knobs["rrf_k"]), {
            k: knobs[k]
            for k in ("keyword_weight", "multi_engine_bonus", "min_keyword_overlap", "hybrid_share")
        })  # fmt: skip
        config["fusion"].update(method=knobs["method"], engine_agreement=knobs["agreement"])
        out[label] = asyncio.run(svc.rankings(config, c.texts(qrels), CUT))
    return out


def shipped_knobs() -> dict[str, Any]:
    """The defaults searcher ships (config.py), as the benchmark's knobs."""
    scoring, fusion = ScoringSettings(), FusionSettings()
    return {"method": fusion.method, "agreement": fusion.engine_agreement,
            "rrf_k": fusion.rrf_k, "keyword_weight": scoring.keyword_weight,
            "multi_engine_bonus": scoring.multi_engine_bonus,
            "min_keyword_overlap": scoring.min_keyword_overlap,
            "hybrid_share": scoring.hybrid_share}  # fmt: skip


def library_rows(
    answers: Mapping[str, list[BackendAnswer]], texts: Mapping[str, str], knobs: Mapping[str, Any]
) -> tuple[Rankings, Rankings]:
    """(SearXNG alone, both backends) rankings by the library with ``knobs``."""
    return tuple(  # type: ignore[return-value]
        {q: docids([f.hit for f in library_ranking(answers[q][:use], t, knobs)])
         for q, t in texts.items()}
        for use in (1, 2)
    )  # fmt: skip


def dev_report(
    c: rc.Collection, answers: Mapping[str, list[BackendAnswer]], served: Mapping[str, Rankings]
) -> None:
    """The shipped defaults through ``service.search`` on the dev queries, beside the
    simple answers (the held-out table below has every row)."""
    own = scores({q: docids(answers[q][0].hits) for q in c.dev}, c.dev)
    second = scores({q: docids(answers[q][1].hits) for q in c.dev}, c.dev)
    merge = scores(
        {q: docids([f.hit for f in searxng_style(
            [lst for a in answers[q] for lst in ranked_lists(a, 1.0, {})])]) for q in c.dev},
        c.dev,
    )  # fmt: skip
    alone, fused = scores(served["alone"], c.dev), scores(served["fused"], c.dev)
    print(f"\n{c.name} dev ({len(c.dev)} queries), nDCG@10 (MRR): SearXNG's own order "
          f"{own[0]:.4f} ({own[1]:.4f}); searcher alone (service) {alone[0]:.4f} "
          f"({alone[1]:.4f}) {alone[0] - own[0]:+.4f}; second backend {second[0]:.4f}; "
          f"merge formula {merge[0]:.4f}; searcher fused (service) {fused[0]:.4f} "
          f"({fused[0] / max(own[0], second[0]):.3f} x best backend)", flush=True)  # fmt: skip


def report(name: str, test: Qrels, dev_size: int, rows: list[tuple[str, Rankings]]) -> None:
    table = [(label, *scores(r, test)) for label, r in rows]
    values = {label: (n, m) for label, n, m in table}
    own = values["SearXNG's own order (backend 1)"]
    best_backend = max(own[0], values["second backend alone (backend 2)"][0])
    print(f"\n{name} held-out: {len(test)} queries (dev: {dev_size})")
    print(f"  {'':60}nDCG@10     MRR   x best backend")
    for label, ndcg, mrr in table:
        print(f"  {label:60}{ndcg:7.4f}  {mrr:7.4f}   {ndcg / best_backend:6.3f}")
    alone = values["searcher, SearXNG alone, shipped defaults (service)"]
    fused = values["searcher, both backends, shipped defaults (service)"]
    merge = values["SearXNG's merge formula over every engine of both"]
    met = "met" if alone[0] >= own[0] - 1e-9 and alone[1] >= own[1] - 1e-9 else "NOT met"
    print(f"  target: searcher alone >= SearXNG's own order (nDCG@10 and MRR): {met}")
    print(f"  target: searcher fused > merge formula {merge[0]:.4f}: "
          f"{'met' if fused[0] > merge[0] else 'NOT met'}; >= {TARGET_RATIO} x best backend "
          f"({TARGET_RATIO * best_backend:.4f}): "
          f"{'met' if fused[0] >= TARGET_RATIO * best_backend else 'NOT met'}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-minilm", action="store_true")
    parser.add_argument("--searxng", type=Path, default=real_searxng.DEFAULT_CACHE)
    parser.add_argument("--no-tuning", action="store_true", help="Skip the dev search.")
    parser.add_argument(
        "--knobs", type=json.loads, default=None, help="Also report these knobs (JSON)."
    )
    args = parser.parse_args()
    start = time.perf_counter()
    with_minilm = not args.no_minilm and not eng.minilm_missing()
    build = real_searxng.build(args.searxng)
    data = []
    for c in rc.load_all():
        searx, second = build_engines(c, with_minilm)
        answers, truth, urls = capture(c, searx, second, build)
        data.append((c, answers, truth, urls, second.name))
        print(f"{c.name}: {wire_check(answers, truth)}", flush=True)
    print(f"second backend (Brave's wire format): {data[0][4]}")

    def objective(knobs: dict[str, Any]) -> float:
        """Sum of dev nDCG@10 over collections x (SearXNG alone, both backends)."""
        return sum(
            scores(r, c.dev)[0]
            for c, answers, *_ in data
            for r in library_rows(answers, c.texts(c.dev), knobs)
        )

    shipped = shipped_knobs()
    print(f"shipped defaults: {shipped}; dev objective {objective(shipped):.4f}")
    print(f"before issue 12:  {BEFORE}; dev objective {objective(BEFORE):.4f}", flush=True)
    for c, answers, *_ in data:
        for label, knobs in (
            ("before", BEFORE),
            ("shipped", shipped),
            ("given", args.knobs and {**shipped, **args.knobs}),
        ):
            if knobs is None:
                continue
            alone, both = library_rows(answers, c.texts(c.dev), knobs)
            own = {q: docids(answers[q][0].hits) for q in c.dev}
            print(f"  dev {c.name:10} {label:8} nDCG@10 alone {scores(alone, c.dev)[0]:.4f} "
                  f"(SearXNG's order {scores(own, c.dev)[0]:.4f}), "
                  f"both {scores(both, c.dev)[0]:.4f}", flush=True)  # fmt: skip
    tuned = None
    if not args.no_tuning:
        tuned = tuning.coordinate_ascent(objective, shipped, GRID, max_rounds=1)  # type: ignore[arg-type]
        print(
            f"coordinate ascent on dev from the shipped defaults ({tuned.evaluations} "
            f"settings): {tuned.values}; dev objective {tuned.score:.4f}",
            flush=True,
        )

    for c, answers, truth, urls, second in data:
        test, texts = c.test, c.texts(c.test)
        rows: list[tuple[str, Rankings]] = [
            (f"engine {e} alone", {q: truth[e][q] for q in test})
            for e in (*SEARXNG_ENGINES, second)
        ]
        rows.append(
            ("SearXNG's own order (backend 1)", {q: docids(answers[q][0].hits) for q in test})
        )
        rows.append(
            ("second backend alone (backend 2)", {q: docids(answers[q][1].hits) for q in test})
        )
        merge = {
            q: docids([f.hit for f in searxng_style(
                [lst for a in answers[q] for lst in ranked_lists(a, 1.0, {})])])
            for q in test
        }  # fmt: skip
        rows.append(("SearXNG's merge formula over every engine of both", merge))
        before = library_rows(answers, texts, BEFORE)
        rows.append(("searcher before issue 12, SearXNG alone (library)", before[0]))
        rows.append(("searcher before issue 12, both backends (library)", before[1]))
        no_hybrid = library_rows(answers, texts, {**shipped, "hybrid_share": 0.0})
        rows.append(("searcher, SearXNG alone, hybrid off (library)", no_hybrid[0]))
        rows.append(("searcher, both backends, hybrid off (library)", no_hybrid[1]))
        dev_report(c, answers, service_rows(c, urls, shipped, c.dev))
        served = service_rows(c, urls, shipped, test)
        rows.append(("searcher, SearXNG alone, shipped defaults (service)", served["alone"]))
        rows.append(("searcher, both backends, shipped defaults (service)", served["fused"]))
        if args.knobs:
            given = library_rows(answers, texts, {**shipped, **args.knobs})
            rows.append(("searcher, SearXNG alone, --knobs (library)", given[0]))
            rows.append(("searcher, both backends, --knobs (library)", given[1]))
        if tuned is not None and tuned.values != shipped:
            tuned_rows = library_rows(answers, texts, tuned.values)
            rows.append(("searcher, SearXNG alone, dev ascent (library)", tuned_rows[0]))
            rows.append(("searcher, both backends, dev ascent (library)", tuned_rows[1]))
        report(c.name, test, len(c.dev), rows)
    for stack in CAPTURED.values():
        stack.close()
    print(f"\nruntime {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
