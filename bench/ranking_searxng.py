"""Ranking against a REAL SearXNG (issue 12): does searcher ever rank worse than it?

For each collection (``bench/ranking_collections.py``: SciFact and Cranfield, each with a
dev and a held-out split of its queries), three engines — BM25 on title+text, stemmed
BM25 and static-embedding cosine (model2vec) — are served over HTTP as ``json_engine``s of
a real SearXNG built from ``../shared/searxng/`` (``build.sh``; default
``/work/searxng-build``); a second backend, Brave's wire format, serves all-MiniLM-L6-v2
cosine (or BM25 on titles with ``--no-minilm``). Each engine returns its top 20.

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
import math
import re
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
from searcher.config import ScoringSettings
from searcher.evaluation import Qrels, evaluate, run_from_rankings
from searcher.fusion import engine_count, fuse_answers, ranked_lists, searxng_style
from searcher.scoring import DomainLists, apply_filter, query_keywords, score_results
from tests.testbed import real_searxng
from tests.testbed.json_engines import JsonEnginesApp
from tests.testbed.server import ThreadedServer

RESULTS = Path(__file__).resolve().parent / "results"
SEARXNG_ENGINES = ("bm25", "bm25-stem", "static")
DEPTH = 20
CUT = 10
TARGET_RATIO = 1.05
NO_DOMAINS = DomainLists(frozenset(), {})
Rankings = dict[str, list[str]]

# What is tuned on dev, from the shipped defaults.
GRID: dict[str, tuple[Any, ...]] = {
    "method": ("answer_order", "engine_rrf"),
    "agreement": (False, True),
    "rrf_k": (1, 5, 10, 20, 30, 60),
    "keyword_weight": (0.0, 0.02, 0.05, 0.1, 0.2),
    "multi_engine_bonus": (0.0, 0.02, 0.05),
    "min_keyword_overlap": (0.0, 0.15),
}
BEFORE = {"method": "engine_rrf", "agreement": False, "rrf_k": 60, "keyword_weight": 0.0,
          "multi_engine_bonus": 0.05, "min_keyword_overlap": 0.15}  # fmt: skip
HYBRID_SHARES = (0.0, 0.1, 0.2, 0.3, 0.5, 0.7, 1.0)


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
    return [fused[s.index] for s in scored]


# ---- seed 004's hybrid relevance as a rerank stage ---------------------------------------

_WORD = re.compile(r"\w+")


def _tokens(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if len(w) > 1]


def _entities(text: str) -> set[str]:
    """Capitalised words not at a sentence start, numbers, and mixed letter-digit codes."""
    words = re.findall(r"[\w-]+", text)
    out = {w.lower() for i, w in enumerate(words) if i and w[:1].isupper()}
    out |= {w.lower() for w in words if any(c.isdigit() for c in w)}
    return out or {stem for stem in query_keywords(text)}


def hybrid(
    query: str, texts: Sequence[str], encode: Callable[[Sequence[str]], np.ndarray]
) -> np.ndarray:
    """0.4 BM25 (over the pool, max-normalised) + 0.4 cosine + 0.2 entity overlap."""
    docs = [_tokens(t) for t in texts]
    q = set(_tokens(query))
    n, avg = len(docs), (sum(map(len, docs)) / max(1, len(docs))) or 1.0
    df = {w: sum(1 for d in docs if w in d) for w in q}
    bm25 = np.zeros(n)
    for i, d in enumerate(docs):
        for w in q:
            tf = d.count(w)
            if tf:
                idf = math.log(1 + (n - df[w] + 0.5) / (df[w] + 0.5))
                bm25[i] += idf * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * len(d) / avg))
    bm25 = bm25 / bm25.max() if bm25.max() > 0 else bm25
    vectors = eng.normalised(encode([query, *texts]))
    cosine = np.clip(vectors[1:] @ vectors[0], 0, 1)
    wanted = _entities(query)
    entity = np.array([len(wanted & _entities(t)) / len(wanted) if wanted else 0.0 for t in texts])
    return 0.4 * bm25 + 0.4 * cosine + 0.2 * entity


def reranked(fused: Sequence[Any], query: str, share: float, encode: Any) -> list[str]:
    """The fused pool re-ordered by (1 - share) x fused rank score + share x hybrid."""
    if not fused or share == 0:
        return docids([f.hit for f in fused])
    texts = [f"{f.hit.title} {f.hit.snippet}" for f in fused]
    h = hybrid(query, texts, encode)
    position = np.array([1.0 / (1 + i / 10) for i in range(len(fused))])  # 1 .. 1/3 at 20
    total = (1 - share) * position + share * h
    order = sorted(range(len(fused)), key=lambda i: (-total[i], i))
    return [wire.docid_of(fused[i].hit.url) for i in order]


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
        encode, key = eng.minilm_encoder()
        vectors = eng.cached_vectors(RESULTS, key, texts, encode)
        second: eng.Engine = eng.DenseEngine("minilm", ids, vectors, encode)
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
    searxng = stack.enter_context(
        real_searxng.running(
            build, {e.name: app.url(engines_server.base_url, e.name) for e in searx}
        )
    )
    urls = {"searxng": searxng, "brave": brave.base_url}
    answers = asyncio.run(wire.fetch_answers(urls, queries, DEPTH))
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
    c: rc.Collection, urls: Mapping[str, str], knobs: Mapping[str, Any]
) -> dict[str, Rankings]:
    """searcher itself (service.search, shipped defaults unless tuned differ) on test."""
    out = {}
    for label, backends in (("alone", ("searxng",)), ("fused", ("searxng", "brave"))):
        config = svc.config({b: urls[b] for b in backends}, {}, 1.0, int(knobs["rrf_k"]), {
            k: knobs[k] for k in ("keyword_weight", "multi_engine_bonus", "min_keyword_overlap")
        })  # fmt: skip
        config["fusion"].update(method=knobs["method"], engine_agreement=knobs["agreement"])
        out[label] = asyncio.run(svc.rankings(config, c.texts(c.test), CUT))
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-minilm", action="store_true")
    parser.add_argument("--searxng", type=Path, default=Path("/work/searxng-build"))
    args = parser.parse_args()
    start = time.perf_counter()
    with_minilm = not args.no_minilm and not eng.minilm_missing()
    build = real_searxng.build(args.searxng)
    colls = rc.load_all()
    data: dict[str, Any] = {}
    for c in colls:
        searx, second = build_engines(c, with_minilm)
        answers, truth, urls = capture(c, searx, second, build)
        data[c.name] = (c, answers, truth, urls, second.name)
        print(f"{c.name}: {wire_check(answers, truth)}", flush=True)

    def objective(knobs: dict[str, Any]) -> float:
        """Sum of dev nDCG@10 over collections x (SearXNG alone, both backends)."""
        total = 0.0
        for c, answers, *_ in data.values():
            texts = c.texts(c.dev)
            for use in (1, 2):
                ranking = {
                    q: docids([f.hit for f in library_ranking(answers[q][:use], texts[q], knobs)])
                    for q in c.dev
                }
                total += scores(ranking, c.dev)[0]
        return total

    shipped = ScoringSettings()
    from searcher.config import FusionSettings

    fusion_defaults = FusionSettings()
    start_knobs = {"method": fusion_defaults.method, "agreement": fusion_defaults.engine_agreement,
                   "rrf_k": fusion_defaults.rrf_k, "keyword_weight": shipped.keyword_weight,
                   "multi_engine_bonus": shipped.multi_engine_bonus,
                   "min_keyword_overlap": shipped.min_keyword_overlap}  # fmt: skip
    tuned = tuning.coordinate_ascent(objective, start_knobs, GRID, max_rounds=2)  # type: ignore[arg-type]
    print(f"tuned on dev ({tuned.evaluations} settings): {tuned.values}", flush=True)
    print(f"shipped defaults: {start_knobs}", flush=True)

    static = eng.static_encoder()
    share_scores = {}
    for share in HYBRID_SHARES:
        total = 0.0
        for c, answers, *_ in data.values():
            texts = c.texts(c.dev)
            total += scores(
                {
                    q: reranked(
                        library_ranking(answers[q], texts[q], start_knobs), texts[q], share, static
                    )
                    for q in c.dev
                },
                c.dev,
            )[0]
        share_scores[share] = total
    best_share = max(HYBRID_SHARES, key=lambda s: (share_scores[s], -s))
    shares = {s: round(v, 4) for s, v in share_scores.items()}
    print(f"hybrid rerank share on dev (sum of nDCG@10): {shares} -> {best_share}")

    for c, answers, truth, urls, second in data.values():
        test, texts = c.test, c.texts(c.test)
        rows: list[tuple[str, Rankings]] = []
        for e in (*SEARXNG_ENGINES, second):
            rows.append((f"engine {e} alone", {q: truth[e][q] for q in test}))
        own = {q: docids(answers[q][0].hits) for q in test}
        brave = {q: docids(answers[q][1].hits) for q in test}
        rows.append(("SearXNG's own order (backend 1)", own))
        rows.append((f"Brave endpoint ({second}) alone (backend 2)", brave))
        merge = {
            q: docids(
                [
                    f.hit
                    for f in searxng_style(
                        [lst for a in answers[q] for lst in ranked_lists(a, 1.0, {})]
                    )
                ]
            )
            for q in test
        }
        rows.append(("SearXNG's merge formula over all engines of both", merge))
        for label, use in (("SearXNG alone", 1), ("both backends", 2)):
            before = {
                q: docids([f.hit for f in library_ranking(answers[q][:use], texts[q], BEFORE)])
                for q in test
            }
            rows.append((f"searcher before issue 12, {label}", before))
        served = service_rows(c, urls, start_knobs)
        rows.append(("searcher, SearXNG alone, defaults (service)", served["alone"]))
        rows.append(("searcher, both backends, defaults (service)", served["fused"]))
        if tuned.values != start_knobs:
            for label, use in (("SearXNG alone", 1), ("both backends", 2)):
                t = {
                    q: docids(
                        [f.hit for f in library_ranking(answers[q][:use], texts[q], tuned.values)]
                    )
                    for q in test
                }
                rows.append((f"searcher, {label}, dev-tuned knobs (library)", t))
        for label, use in (("SearXNG alone", 1), ("both backends", 2)):
            h = {
                q: reranked(
                    library_ranking(answers[q][:use], texts[q], start_knobs),
                    texts[q],
                    best_share,
                    static,
                )
                for q in test
            }
            rows.append((f"searcher + hybrid rerank {best_share:g}, {label}", h))
        table = [(name, *scores(r, test)) for name, r in rows]
        best_backend = max(table[len(SEARXNG_ENGINES) + 1][1], table[len(SEARXNG_ENGINES) + 2][1])
        print(f"\n{c.name} held-out: {len(test)} queries (dev {len(c.dev)})")
        print(f"  {'':58}nDCG@10    MRR   x best backend")
        for name, ndcg, mrr in table:
            print(f"  {name:58}{ndcg:7.4f}  {mrr:7.4f}   {ndcg / best_backend:6.3f}")
        values = {name: (n, m) for name, n, m in table}
        alone = values["searcher, SearXNG alone, defaults (service)"]
        fused = values["searcher, both backends, defaults (service)"]
        own_s = values["SearXNG's own order (backend 1)"]
        merge_s = values["SearXNG's merge formula over all engines of both"]
        print(
            f"  target alone >= SearXNG's order (nDCG and MRR): "
            f"{'met' if alone[0] >= own_s[0] - 1e-9 and alone[1] >= own_s[1] - 1e-9 else 'NOT met'}"
        )
        print(f"  target fused > merge formula: {'met' if fused[0] > merge_s[0] else 'NOT met'}; "
              f">= {TARGET_RATIO} x best backend ({TARGET_RATIO * best_backend:.4f}): "
              f"{'met' if fused[0] >= TARGET_RATIO * best_backend else 'NOT met'}")  # fmt: skip
    for stack in CAPTURED.values():
        stack.close()
    print(f"\nruntime {time.perf_counter() - start:.0f} s")


if __name__ == "__main__":
    main()
