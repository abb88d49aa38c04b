"""Ranking benchmark (issue 3): does searcher's fusion beat its best engine?

SciFact (5,183 abstracts; 809 train and 300 test queries with judgements) is served by
engines that are different retrieval functions over the same corpus: BM25 on title+text,
BM25 on titles, stemmed BM25 on the abstract and static-embedding cosine (model2vec) as
four engines inside one SearXNG answer, and all-MiniLM-L6-v2 cosine behind a Brave
endpoint. Both speak their real JSON formats over HTTP on 127.0.0.1; each engine returns
its top 20.

Reported on the TEST queries (nDCG@10 and MRR by ir-measures; every run cut at 10
results, what searcher returns with ``max_results: 10``):

- each engine alone;
- SearXNG's merge (weight x hits x sum 1/position, equal weights), textbook RRF (k=60)
  and weighted RRF, computed by ``searcher.ranking.fusion`` on the answers the servers sent;
- searcher itself: ``open_service`` with ``backends.auto: fanout``, the tuned weights and
  k, one ``service.search`` per query (fusion + heuristic scoring + near-duplicate
  removal), with the default scoring settings and with scoring settings tuned on train.

Everything tuned is tuned on the TRAIN queries only, by coordinate ascent on grids
(``ranking_parts/tuning.py``): engine weights for each k, then k, then the scoring
settings through the service itself. No test judgement is looked at before the report.
MiniLM vectors are cached in ``bench/results/`` (encoding the corpus takes about 5
minutes once). Run files land in ``bench/results/runs/``; score any of them with
``searcher eval bench/results/runs/NAME.run ../shared/data/scifact/qrels/test.tsv``.

    .venv/bin/python -m bench.ranking [--no-minilm]
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import numpy as np

from bench.ranking_parts import engines as eng
from bench.ranking_parts import methods, service, tuning, wire
from bench.ranking_parts.scifact import SciFact, load
from searcher.backends.base import BackendAnswer
from searcher.config import ScoringSettings
from searcher.ranking.evaluation import Qrels, evaluate, format_run, run_from_rankings

RESULTS = Path(__file__).resolve().parent / "results"
SEARXNG_ENGINES = ("bm25", "bm25-title", "bm25-stem", "static")
BRAVE_ENGINE = "minilm"
DEPTH = 20  # results per engine
CUT = 10  # results scored per query: what the service returns with max_results 10
TEXTBOOK_K = 60
K_GRID = (1, 5, 10, 20, 30, 60, 100)
SCORING_GRID = {"multi_engine_bonus": (0.0, 0.02, 0.05), "min_keyword_overlap": (0.0, 0.05, 0.15)}
TARGET_RATIO = 1.05

Rankings = dict[str, list[str]]  # query id -> document ids, best first
Lists = dict[str, methods.Lists]  # query id -> engine -> document ids


@dataclass(frozen=True)
class Row:
    name: str
    ndcg: float
    mrr: float
    note: str = ""


@dataclass(frozen=True)
class Scenario:
    title: str
    engines: tuple[str, ...]
    backends: tuple[str, ...]


@dataclass
class Report:
    sections: list[tuple[str, list[Row]]] = field(default_factory=list)
    best_engine: dict[str, float] = field(default_factory=dict)
    notes: list[str] = field(default_factory=list)
    clock: dict[str, float] = field(default_factory=dict)


def scores(rankings: Mapping[str, Sequence[str]], qrels: Qrels) -> tuple[float, float]:
    """(nDCG@10, MRR) of the top ``CUT`` of each ranking, over every judged query."""
    run = run_from_rankings({qid: list(docs[:CUT]) for qid, docs in rankings.items()})
    result = evaluate(run, qrels, ["nDCG@10", "MRR"])
    return result.mean("nDCG@10"), result.mean("MRR")


def save_run(name: str, rankings: Mapping[str, Sequence[str]]) -> None:
    path = RESULTS / "runs" / f"{name}.run"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(format_run({q: list(d[:CUT]) for q, d in rankings.items()}, name))


# ---- engines ---------------------------------------------------------------------------


def build_engines(data: SciFact, with_minilm: bool) -> list[eng.Engine]:
    ids = [d.id for d in data.docs]
    texts = [eng.full_text(d) for d in data.docs]
    static = eng.static_encoder()
    built: list[eng.Engine] = [
        eng.BM25Engine("bm25", data.docs, eng.full_text, stem=False),
        eng.BM25Engine("bm25-title", data.docs, lambda d: d.title, stem=False),
        eng.BM25Engine("bm25-stem", data.docs, lambda d: d.text, stem=True),
        eng.DenseEngine("static", ids, static(texts), static),
    ]
    if with_minilm:
        encode, key = eng.minilm_encoder()
        doc_vectors = eng.cached_vectors(eng.CACHE_DIR, key, texts, encode)
        query_texts = sorted(set(data.queries.values()))
        query_vectors = eng.cached_vectors(eng.CACHE_DIR, key + "-queries", query_texts, encode)
        known = dict(zip(query_texts, query_vectors, strict=True))

        def encode_query(batch: Sequence[str]) -> np.ndarray:
            return np.stack([known[t] if t in known else encode([t])[0] for t in batch])

        built.append(eng.DenseEngine(BRAVE_ENGINE, ids, doc_vectors, encode_query))
    return built


def rank_all(engines: Sequence[eng.Engine], queries: Mapping[str, str]) -> dict[str, Rankings]:
    """engine -> query id -> its top ``DEPTH`` documents."""
    qids = list(queries)
    return {
        e.name: dict(zip(qids, e.rank([queries[q] for q in qids], DEPTH), strict=True))
        for e in engines
    }


def ranker(engines: Sequence[eng.Engine], known: Mapping[str, dict[str, list[str]]]) -> wire.Ranker:
    """query text -> engine -> documents: precomputed where known, else computed now."""

    @functools.lru_cache(maxsize=1024)
    def live(text: str) -> dict[str, list[str]]:
        return {e.name: e.rank([text], DEPTH)[0] for e in engines}

    return lambda text: known.get(text) or live(text)


def per_query(
    rankings: Mapping[str, Rankings], engines: Sequence[str], qids: Sequence[str]
) -> Lists:
    return {q: {e: rankings[e][q] for e in engines} for q in qids}


# ---- tuning on train ---------------------------------------------------------------------


def rrf_objective(lists: Lists, qrels: Qrels, k: int) -> tuning.Objective:
    """nDCG@10 of weighted RRF (the benchmark's replica of searcher.ranking.fusion.fuse)."""

    def objective(weights: dict[str, float]) -> float:
        return scores({q: methods.rrf_ranking(ls, weights, k) for q, ls in lists.items()}, qrels)[0]

    return objective


def tune_weights(
    lists: Lists, qrels: Qrels, engines: Sequence[str], anchor: str
) -> dict[int, tuning.Tuned]:
    """Engine weights for every k of ``K_GRID``."""
    return {
        k: tuning.engine_weights(rrf_objective(lists, qrels, k), engines, anchor) for k in K_GRID
    }


def scoring_objective(
    urls: Mapping[str, str],
    weights: Mapping[str, float],
    k: int,
    queries: Mapping[str, str],
    qrels: Qrels,
) -> tuning.Objective:
    """nDCG@10 of the searcher service with these scoring settings."""

    def objective(scoring: dict[str, float]) -> float:
        config = service_config(urls, weights, k, scoring)
        return scores(asyncio.run(service.rankings(config, queries, CUT)), qrels)[0]

    return objective


def service_config(
    urls: Mapping[str, str], weights: Mapping[str, float], k: int, scoring: Mapping[str, float]
) -> dict:
    searxng_weights = {e: weights[e] for e in SEARXNG_ENGINES if e in weights}
    return service.config(urls, searxng_weights, weights.get(BRAVE_ENGINE, 1.0), k, scoring)


# ---- one scenario ------------------------------------------------------------------------


def fused(
    library: methods.LibraryFusion | None,
    answers: Mapping[str, list[BackendAnswer]],
    lists: Lists,
    kind: str,
    weights: Mapping[str, float],
    k: int = TEXTBOOK_K,
) -> Rankings:
    """``kind`` ("searxng" or "rrf") for every query: by searcher.ranking.fusion on the answers
    when it imports, else by the benchmark's replica on the engine lists."""
    if library is not None:
        if kind == "rrf":
            return {q: library.rrf(a, weights, k) for q, a in answers.items()}
        return {q: library.searxng(a, weights) for q, a in answers.items()}
    if kind == "rrf":
        return {q: methods.rrf_ranking(lists[q], weights, k) for q in answers}
    return {q: methods.searxng_ranking(lists[q], weights) for q in answers}


@dataclass(frozen=True)
class Choice:
    """Everything chosen on train for one scenario."""

    anchor: str
    by_k: dict[int, tuning.Tuned]  # tuned weights for every k
    k: int
    scoring_default: dict[str, float]
    scoring: tuning.Tuned | None  # None: the service could not run

    @property
    def weights(self) -> dict[str, float]:
        return self.by_k[self.k].values


def tune_on_train(
    sc: Scenario, data: SciFact, rankings: Mapping[str, Rankings], urls: Mapping[str, str]
) -> Choice:
    """Weights for each k, then k (on the replica); then the scoring settings (through the
    service). Only train judgements are used."""
    train = data.texts(data.train)
    lists = per_query(rankings, sc.engines, list(train))
    anchor = max(
        sc.engines, key=lambda e: scores({q: rankings[e][q] for q in train}, data.train)[0]
    )
    by_k = tune_weights(lists, data.train, sc.engines, anchor)
    k = max(K_GRID, key=lambda kk: by_k[kk].score)
    defaults = ScoringSettings()
    start = {name: float(getattr(defaults, name)) for name in SCORING_GRID}
    objective = scoring_objective(urls, by_k[k].values, k, train, data.train)
    try:
        scoring: tuning.Tuned | None = tuning.coordinate_ascent(
            objective, start, SCORING_GRID, max_rounds=1, min_gain=1e-3
        )
    except Exception:  # reported as "not available" by the test rows
        scoring = None
    return Choice(anchor, by_k, k, start, scoring)


def test_rows(
    sc: Scenario,
    data: SciFact,
    choice: Choice,
    lists: Lists,
    answers: Mapping[str, list[BackendAnswer]],
    urls: Mapping[str, str],
    library: methods.LibraryFusion | None,
) -> list[Row]:
    """The scenario's rows on the test queries; each run is also saved."""
    test, slug = data.texts(data.test), "-".join(sc.backends)

    def fusion_row(name: str, kind: str, weights: Mapping[str, float], k: int) -> Row:
        ranked = fused(library, answers, lists, kind, weights, k)
        save_run(f"{kind}-k{k}-{slug}" if weights else f"{kind}-equal-{slug}", ranked)
        return Row(name, *scores(ranked, data.test))

    def service_row(name: str, tag: str, scoring: Mapping[str, float] | None) -> Row:
        try:
            if scoring is None:
                raise RuntimeError("the service failed while tuning on train")
            config = service_config(urls, choice.weights, choice.k, scoring)
            served = asyncio.run(service.rankings(config, test, CUT))
        except Exception as exc:  # the report says why instead of failing
            return Row(name, float("nan"), float("nan"), f"not available: {exc!r}")
        save_run(f"searcher-{slug}-{tag}", served)
        return Row(name, *scores(served, data.test))

    tuned_scoring = choice.scoring.values if choice.scoring else None
    k60, k = TEXTBOOK_K, choice.k
    return [
        fusion_row("SearXNG-style merge, equal weights", "searxng", {}, k60),
        fusion_row(f"RRF k={k60}, equal weights", "rrf", {}, k60),
        fusion_row(
            f"weighted RRF k={k60}, weights tuned on train", "rrf", choice.by_k[k60].values, k60
        ),
        fusion_row(f"weighted RRF k={k}, k and weights tuned on train", "rrf", choice.weights, k),
        service_row("searcher service, default scoring", "default", choice.scoring_default),
        service_row("searcher service, scoring tuned on train", "tuned", tuned_scoring),
    ]


def choice_notes(sc: Scenario, choice: Choice, agree: float) -> list[str]:
    weights = ", ".join(f"{e}: {w:g}" for e, w in choice.weights.items())
    by_k = ", ".join(f"k={k} {choice.by_k[k].score:.4f}" for k in K_GRID)
    notes = [
        sc.title,
        f"  engine weights (anchor {choice.anchor} = 1): {{{weights}}}, rrf_k {choice.k}",
        f"  train nDCG@10 of weighted RRF by k (weights tuned for each): {by_k}",
        f"  searcher.ranking.fusion and the benchmark's replica agree on {agree:.0%}"
        " of test top-10s",
    ]
    if choice.scoring is None:
        return [*notes, "  scoring: the service failed; defaults kept"]
    scoring = ", ".join(f"{n}: {v:g}" for n, v in choice.scoring.values.items())
    return [
        *notes,
        f"  scoring: {{{scoring}}}, train nDCG@10 of the service {choice.scoring.score:.4f} "
        f"({choice.scoring.evaluations} settings tried through the service)",
        "  as searcher.yaml: " + as_yaml(choice.weights, choice.k, choice.scoring.values),
    ]


def run_scenario(
    sc: Scenario,
    data: SciFact,
    rankings: Mapping[str, Rankings],
    answers: Mapping[str, list[BackendAnswer]],
    urls: Mapping[str, str],
    library: methods.LibraryFusion | None,
    report: Report,
    lap: Callable[[str], None],
) -> None:
    test = data.texts(data.test)
    sc_urls = {b: urls[b] for b in sc.backends}
    choice = tune_on_train(sc, data, rankings, sc_urls)
    lap(f"{sc.title}: tuning on train")
    lists = per_query(rankings, sc.engines, list(test))
    sc_answers = {q: [a for a in answers[q] if a.backend in sc.backends] for q in test}
    report.sections.append(
        (sc.title, test_rows(sc, data, choice, lists, sc_answers, sc_urls, library))
    )
    lap(f"{sc.title}: test rows")
    report.best_engine[sc.title] = max(
        scores({q: rankings[e][q] for q in test}, data.test)[0] for e in sc.engines
    )
    weighted = fused(library, sc_answers, lists, "rrf", choice.weights, choice.k)
    replica = {q: methods.rrf_ranking(lists[q], choice.weights, choice.k) for q in test}
    report.notes += choice_notes(sc, choice, methods.agreement(weighted, replica, CUT))


def as_yaml(weights: Mapping[str, float], k: int, scoring: Mapping[str, float]) -> str:
    """The chosen settings as one line of searcher.yaml (flow style)."""
    searxng = ", ".join(f"{e}: {w:g}" for e, w in weights.items() if e in SEARXNG_ENGINES)
    backends = f"engine_weights: {{{searxng}}}"
    if BRAVE_ENGINE in weights:
        backends += f", brave: {{weight: {weights[BRAVE_ENGINE]:g}}}"
    knobs = ", ".join(f"{n}: {v:g}" for n, v in scoring.items())
    return (
        f"{{backends: {{auto: fanout, {backends}}}, fusion: {{rrf_k: {k}}}, scoring: {{{knobs}}}}}"
    )


# ---- the report --------------------------------------------------------------------------


def print_report(report: Report, queries: int, train_queries: int) -> None:
    print(f"SciFact test: {queries} queries; each engine returns its top {DEPTH}; "
          f"every run is scored on its top {CUT}")  # fmt: skip
    width = max(len(r.name) for _, rows in report.sections for r in rows) + 4
    print(f"{'':{width}}nDCG@10   MRR@10   x best engine")
    for title, rows in report.sections:
        print(title)
        best = report.best_engine.get(title)
        for r in rows:
            if r.ndcg != r.ndcg:  # nan: not available
                print(f"  {r.name:{width - 2}}{'n/a':>7}  {'n/a':>7}   {r.note}")
                continue
            ratio = f"{r.ndcg / best:.3f}" if best else ""
            print(f"  {r.name:{width - 2}}{r.ndcg:7.4f}  {r.mrr:7.4f}   {ratio:>6}")
    print()
    for title, rows in report.sections[1:]:
        ours, searx = rows[-1], rows[0]
        target = TARGET_RATIO * report.best_engine[title]
        met = ours.ndcg >= target and ours.ndcg > searx.ndcg
        verdict = "met" if met else "NOT met"
        print(f"target, {title}: searcher {ours.ndcg:.4f} >= {target:.4f} ({TARGET_RATIO} x best "
              f"engine) and > SearXNG-style {searx.ndcg:.4f}: {verdict}")  # fmt: skip
    print()
    print(f"chosen on the {train_queries} train queries, by coordinate ascent (nDCG@10):")
    print(f"  engine weights on {tuning.WEIGHT_GRID}, for each k in {K_GRID}; the best k")
    print(f"  scoring settings through the service on {SCORING_GRID}, from the defaults")
    for note in report.notes:
        print(" ", note)
    print()
    print(f"runtime {sum(report.clock.values()):.0f} s")
    for phase, seconds in report.clock.items():
        print(f"  {phase:<64}{seconds:5.0f} s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--no-minilm", action="store_true", help="Leave out the MiniLM engine.")
    args = parser.parse_args()
    report = Report()
    with_minilm = not args.no_minilm
    if with_minilm and (missing := eng.minilm_missing()):
        report.notes.append(f"MiniLM left out: {', '.join(missing)} missing ({eng.MINILM_INSTALL})")
        with_minilm = False
    mark = [time.perf_counter()]

    def lap(name: str) -> None:
        now = time.perf_counter()
        report.clock[name] = now - mark[0]
        mark[0] = now

    data = load()
    docs = {d.id: d for d in data.docs}
    test = data.texts(data.test)
    queries = {**data.texts(data.train), **test}
    engines = build_engines(data, with_minilm)
    lap("engines: index, load or encode")
    rankings = rank_all(engines, queries)
    lap("engines: rank train and test queries")
    singles = []
    for e in engines:
        singles.append(Row(e.name, *scores({q: rankings[e.name][q] for q in test}, data.test)))
        save_run(e.name, {q: rankings[e.name][q] for q in test})
    report.sections.append(("engines alone", singles))

    try:
        library: methods.LibraryFusion | None = methods.LibraryFusion(
            wire.docid_of, {"brave": BRAVE_ENGINE}
        )
        report.notes.append(
            "fusion rows: searcher.ranking.fusion on the answers the servers sent over HTTP"
        )
    except ImportError as exc:
        library = None
        report.notes.append(
            f"fusion rows: the benchmark's replica (searcher.ranking.fusion: {exc})"
        )

    scenarios = [Scenario("SearXNG: " + ", ".join(SEARXNG_ENGINES), SEARXNG_ENGINES, ("searxng",))]
    if with_minilm:
        scenarios.append(
            Scenario(
                f"SearXNG + Brave ({BRAVE_ENGINE})",
                (*SEARXNG_ENGINES, BRAVE_ENGINE),
                ("searxng", "brave"),
            )
        )
    by_text = {queries[q]: {e: rankings[e][q] for e in rankings} for q in queries}
    brave_engine = BRAVE_ENGINE if with_minilm else None
    with wire.servers(ranker(engines, by_text), docs, SEARXNG_ENGINES, brave_engine) as urls:
        answers = asyncio.run(wire.fetch_answers(urls, queries, DEPTH))
        lap("servers: every query over HTTP")
        if library is not None:
            recovered = {q: library.engine_lists(a) for q, a in answers.items()}
            wrong = sum(
                1 for q in queries for e in rankings if recovered[q].get(e) != rankings[e][q]
            )
            report.notes.append(
                f"wire round trip: {wrong} of {len(queries) * len(rankings)} engine lists changed "
                "through SearXNG/Brave JSON, searcher's parsers and ranked_lists"
            )
        for sc in scenarios:
            run_scenario(sc, data, rankings, answers, urls, library, report, lap)
    print_report(report, len(test), len(data.train))


if __name__ == "__main__":
    main()
