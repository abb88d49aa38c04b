"""What fusion + near-duplicate removal + heuristic scoring add to a request (issue 3).

Each trial is a fresh "query": 60 results from three backends (SearXNG 20, split into
its engines; Brave 20; DuckDuckGo 20), overlapping as real answers do, some URLs spelled
differently, two reprints under other URLs. Titles and snippets are SciFact abstracts
(``../shared/data/scifact/corpus.jsonl``), a different window of the corpus per trial, so
the static embedder keeps meeting words it has not seen. Measured in one process, one
core, side by side:

- ``ranked_lists`` + ``fuse``
- ``drop_near_duplicates`` with the static model (``../shared/models/minilm-static-256``):
  steady state (a server that has answered other queries) and a first query after start
- ``score_results`` + ``apply_filter`` (``searcher/ranking/relevance.py``), if it is there
- for comparison: model2vec's own ``StaticModel.encode`` on the same texts

Target: <= 10 ms at p50 for the whole step. Run: ``python -m bench.fusion_overhead``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import time
from collections.abc import Callable
from typing import Any

from bench.processes import percentile
from searcher.backends.base import BackendAnswer, Hit
from searcher.embedding.embedders import StaticEmbedder
from searcher.ranking.dedup import drop_near_duplicates
from searcher.ranking.fusion import FusedHit, fuse, ranked_lists
from searcher.text import document_text
from tests.shared_data import shared_dir

SHARED = shared_dir()
CORPUS = SHARED / "data" / "scifact" / "corpus.jsonl"
MODEL = SHARED / "models" / "minilm-static-256"
DOMAINS = [
    "pubmed.ncbi.nlm.nih.gov", "www.nature.com", "journals.plos.org", "www.bmj.com",
    "www.sciencedirect.com", "en.wikipedia.org", "www.nih.gov", "academic.oup.com",
]  # fmt: skip
ENGINES = ["google", "bing", "wikipedia", "duckduckgo", "qwant"]
DOCS_PER_TRIAL = 36
THRESHOLD = 0.88
TARGET_MS = 10.0


def load_docs() -> list[dict[str, str]]:
    with CORPUS.open(encoding="utf-8") as f:
        return [json.loads(line) for line in f]


def snippet(text: str, chars: int) -> str:
    cut = text[:chars]
    return cut.rsplit(" ", 1)[0] + " …" if len(text) > chars else cut


def url_of(doc: dict[str, str], spelling: int = 0) -> str:
    domain = DOMAINS[int(doc["_id"]) % len(DOMAINS)]
    base = f"https://{domain}/article/{doc['_id']}"
    variants = [
        base,
        base + "/",
        base + "?utm_source=ddg",
        base.replace("https://www.", "https://"),
    ]
    return variants[spelling % len(variants)]


def answers_for(docs: list[dict[str, str]], rnd: random.Random) -> list[BackendAnswer]:
    """Three backends' answers over one window of documents, overlapping in the middle."""
    searxng_hits = []
    for i, doc in enumerate(docs[:20]):
        engines = tuple(rnd.sample(ENGINES, rnd.randint(1, 3)))
        positions = tuple(max(1, i + 1 + rnd.randint(-2, 2)) for _ in engines)
        searxng_hits.append(
            Hit(url_of(doc), doc["title"], snippet(doc["text"], 220), "searxng", engines, positions)
        )
    brave_hits = [
        Hit(url_of(doc, i), doc["title"], snippet(doc["text"], 180), "brave", ("brave",))
        for i, doc in enumerate(docs[8:28])
    ]
    ddg_hits = [
        Hit(url_of(doc, i + 1), doc["title"], snippet(doc["text"], 150), "duckduckgo", ("ddg",))
        for i, doc in enumerate(docs[16:34])
    ]
    for doc in docs[:2]:  # reprints of the top two under another site's URL
        mirror = f"https://mirror.example/{doc['_id']}"
        text = snippet(doc["text"], 150)
        ddg_hits.append(Hit(mirror, doc["title"] + " | Mirror", text, "duckduckgo", ("ddg",)))
    return [
        BackendAnswer("searxng", searxng_hits, per_engine=True),
        BackendAnswer("brave", brave_hits),
        BackendAnswer("duckduckgo", ddg_hits),
    ]


def scorer() -> tuple[Callable[[list[FusedHit], str], Any] | None, str]:
    """The heuristic scoring step if ``searcher/ranking/relevance.py`` offers it, and what it is."""
    try:
        from searcher.config import ScoringSettings
        from searcher.ranking.relevance import apply_filter, load_domain_lists, score_results
    except ImportError as exc:
        return None, f"not measured (searcher.ranking.relevance: {exc})"
    settings = ScoringSettings()
    domains = load_domain_lists(settings)

    def score(fused: list[FusedHit], query: str) -> Any:
        items = [(f.hit, f.score, len({(s.backend, s.engine) for s in f.sources})) for f in fused]
        return apply_filter(score_results(items, query, "general", domains, settings))

    return score, "score_results + apply_filter (searcher/ranking/relevance.py)"


class Clock:
    """Wall and CPU (this process) milliseconds per step. CPU time is quoted beside wall
    time because these machines are shared: a step waiting for a core shows in the wall
    time only."""

    def __init__(self) -> None:
        self.wall: dict[str, list[float]] = {}
        self.cpu: dict[str, list[float]] = {}
        self._marks: tuple[int, int] = (0, 0)

    def start(self) -> None:
        self._marks = (time.perf_counter_ns(), time.process_time_ns())

    def lap(self, step: str, record: bool = True) -> None:
        """Time since ``start`` or the last lap goes to ``step``."""
        wall, cpu = time.perf_counter_ns(), time.process_time_ns()
        if record:
            self.wall.setdefault(step, []).append((wall - self._marks[0]) / 1e6)
            self.cpu.setdefault(step, []).append((cpu - self._marks[1]) / 1e6)
        self._marks = (wall, cpu)

    def row(self, label: str, step: str) -> str:
        wall, cpu = self.wall.get(step), self.cpu.get(step)
        if not wall or not cpu:
            return f"{label:58} {'-':>8} {'-':>8} {'-':>8}"
        p50, p90 = percentile(wall, 0.5), percentile(wall, 0.9)
        return f"{label:58} {p50:8.2f} {p90:8.2f} {percentile(cpu, 0.5):8.2f}"


async def run(trials: int, warmup: int) -> None:
    docs = load_docs()
    embedder = StaticEmbedder.load(str(MODEL))
    score, score_label = scorer()
    rnd = random.Random(3)
    clock = Clock()
    counts = {"lists": 0, "fused": 0, "kept": 0}

    for trial in range(warmup + trials):
        start = (trial * DOCS_PER_TRIAL) % (len(docs) - DOCS_PER_TRIAL)
        window = docs[start : start + DOCS_PER_TRIAL]
        answers = answers_for(window, rnd)
        query = " ".join(window[0]["title"].split()[:6])
        record = trial >= warmup

        clock.start()
        lists = [lst for a in answers for lst in ranked_lists(a, 1.0, {"wikipedia": 1.2})]
        fused = fuse(lists)
        clock.lap("fusion", record)
        kept, notes = await drop_near_duplicates(fused, embedder, THRESHOLD)
        clock.lap("dedup", record)
        if score is not None:
            score(kept, query)
            clock.lap("score", record)
        assert not notes, notes
        if not record:
            continue
        total_wall = sum(
            clock.wall[step][-1] for step in ("fusion", "dedup", "score") if step in clock.wall
        )
        total_cpu = sum(
            clock.cpu[step][-1] for step in ("fusion", "dedup", "score") if step in clock.cpu
        )
        clock.wall.setdefault("total", []).append(total_wall)
        clock.cpu.setdefault("total", []).append(total_cpu)
        counts["lists"] += len(lists)
        counts["fused"] += len(fused)
        counts["kept"] += len(kept)

        # Side by side on the same texts: model2vec's own encode, and no known words.
        texts = [document_text(f.hit.title, f.hit.snippet) for f in fused]
        clock.start()
        embedder.model.encode(texts)
        clock.lap("model2vec")
        if trial % 10 == 0:  # now and then, as the first query after a start
            fresh = StaticEmbedder(embedder.model, "fresh")  # the model, no known words
            clock.start()
            await drop_near_duplicates(fused, fresh, THRESHOLD)
            clock.lap("cold")

    n = trials
    print(
        f"fusion_overhead: {n} trials, each 60 results from 3 backends (SearXNG split into "
        f"engines: {counts['lists'] / n:.1f} ranked lists), {counts['fused'] / n:.1f} distinct "
        f"URLs after fusion, {counts['kept'] / n:.1f} after near-duplicate removal"
    )
    print(f"{'step':58} {'p50 ms':>8} {'p90 ms':>8} {'p50 cpu':>8}")
    print(clock.row("ranked_lists + fuse", "fusion"))
    print(clock.row("drop_near_duplicates, static model (steady state)", "dedup"))
    print(clock.row(score_label, "score"))
    print(clock.row("total: fusion + dedup + scoring", "total"))
    print(clock.row("  for comparison: dedup, first query after start", "cold"))
    print(clock.row("  for comparison: model2vec StaticModel.encode, same texts", "model2vec"))
    p50 = percentile(clock.wall["total"], 0.5)
    verdict = "within" if p50 <= TARGET_MS else "OVER"
    print(f"total p50 {p50:.2f} ms wall: {verdict} the {TARGET_MS:.0f} ms target")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--trials", type=int, default=400)
    parser.add_argument("--warmup", type=int, default=40)
    args = parser.parse_args()
    asyncio.run(run(args.trials, args.warmup))


if __name__ == "__main__":
    main()
