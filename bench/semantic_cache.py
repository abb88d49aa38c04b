"""The semantic result cache on Quora Question Pairs (issue 13).

``../shared/data/qqp/pairs.json``: 20,000 question pairs labelled duplicate or not. A
pair is one cached question and one new question: a *hit* on a duplicate pair is a good
answer served from cache, a hit on a non-duplicate pair is a *false hit* (a wrong answer
served). QQP's non-duplicates are hard ones (same topic, different question).

Split 50/50 at random (seed 13) into dev and held-out. For each method, the threshold is
the lowest on the dev split whose false-hit rate is <= 1 %, then both rates are reported
on the held-out split, side by side in one run:

- exact: the normalised text is equal (what the exact cache does; no threshold)
- jaccard: word-set Jaccard >= t (the strongest simple lexical baseline)
- cosine: embedding cosine >= t (``../shared/models/minilm-static-256``)
- cosine+anchors: cosine >= t and the same numbers, dates and proper nouns
- cosine+question: cosine >= t, the same anchors, the same negations and the shared words
  in the same order (``same_question``: what ships)

Then the lookup time of ``SemanticCache.find`` (embed + scan + anchors) with 10,000 and
100,000 cached queries, and the time a fresh worker takes to mirror them from SQLite.

Run: ``python -m bench.semantic_cache``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from searcher.cache.semantic import SPACE, SemanticCache, same_anchors, same_question
from searcher.config import SemanticCacheSettings
from searcher.embedding.embedders import StaticEmbedder
from searcher.state import SqliteStore
from tests.shared_data import shared_dir

SHARED = shared_dir()
PAIRS = SHARED / "data" / "qqp" / "pairs.json"
MODEL = SHARED / "models" / "minilm-static-256"
MAX_FALSE = 0.01
THRESHOLDS = [round(0.70 + 0.005 * i, 3) for i in range(61)]  # 0.700 .. 1.000
_WORDS = re.compile(r"\w+")


def normalised(text: str) -> str:
    return " ".join(_WORDS.findall(text.casefold()))


def jaccard(a: str, b: str) -> float:
    x, y = set(_WORDS.findall(a.casefold())), set(_WORDS.findall(b.casefold()))
    return len(x & y) / len(x | y) if x | y else 1.0


def same_anchors_of(pair: dict) -> bool:
    return same_anchors(pair["text_a"], pair["text_b"])


def same_question_of(pair: dict) -> bool:
    return same_question(pair["text_a"], pair["text_b"])


def rates(hit: np.ndarray, label: np.ndarray) -> tuple[float, float]:
    """(hit rate on duplicates, false-hit rate on non-duplicates)."""
    return float(hit[label == 1].mean()), float(hit[label == 0].mean())


def choose(score: np.ndarray, gate: np.ndarray, label: np.ndarray) -> float | None:
    """The lowest threshold whose false-hit rate on these pairs is <= MAX_FALSE."""
    for t in THRESHOLDS:
        if rates((score >= t) & gate, label)[1] <= MAX_FALSE:
            return t
    return None


def quality(pairs: list[dict], embedder: StaticEmbedder) -> None:
    random.Random(13).shuffle(pairs)
    half = len(pairs) // 2
    label = np.array([p["label"] for p in pairs])
    a = embedder.encode([p["text_a"] for p in pairs])
    b = embedder.encode([p["text_b"] for p in pairs])
    cosine = (a * b).sum(axis=1)
    same_anchors = np.array([same_anchors_of(p) for p in pairs])
    asks_the_same = np.array([same_question_of(p) for p in pairs])
    exact = np.array([normalised(p["text_a"]) == normalised(p["text_b"]) for p in pairs])
    lexical = np.array([jaccard(p["text_a"], p["text_b"]) for p in pairs])
    ones = np.ones(len(pairs), dtype=bool)
    dev, test = slice(0, half), slice(half, None)
    print(f"QQP pairs: {len(pairs)} (dev {half}, held-out {len(pairs) - half}); "
          f"duplicates {int(label.sum())}; model {embedder.name}")  # fmt: skip
    print(f"anchors differ on {1 - same_anchors[label == 1].mean():.1%} of duplicates and "
          f"{1 - same_anchors[label == 0].mean():.1%} of non-duplicates\n")  # fmt: skip

    print("Per threshold, dev split: hit rate on duplicates / false-hit rate on non-duplicates")
    print(f"{'t':>6} {'cosine':>17} {'cosine+anchors':>17} {'cosine+question':>17} {'jaccard':>17}")
    for t in THRESHOLDS[::4]:
        cells = []
        gates = ((cosine, ones), (cosine, same_anchors), (cosine, asks_the_same), (lexical, ones))
        for score, gate in gates:
            hit, false = rates(((score >= t) & gate)[dev], label[dev])
            cells.append(f"{hit:7.1%} / {false:6.2%}")
        print(f"{t:6.3f} " + " ".join(f"{c:>17}" for c in cells))

    print(f"\nHeld-out split, thresholds chosen on dev for <= {MAX_FALSE:.0%} false hits:")
    print(f"{'method':<16} {'threshold':>9} {'hit rate':>9} {'false hits':>11}")
    hit, false = rates(exact[test], label[test])
    print(f"{'exact':<16} {'-':>9} {hit:9.1%} {false:11.2%}")
    for name, score, gate in (
        ("jaccard", lexical, ones), ("cosine", cosine, ones),
        ("cosine+anchors", cosine, same_anchors), ("cosine+question", cosine, asks_the_same),
    ):  # fmt: skip
        t = choose(score[dev], gate[dev], label[dev])
        if t is None:
            print(f"{name:<16} {'none':>9}")
            continue
        hit, false = rates(((score >= t) & gate)[test], label[test])
        print(f"{name:<16} {t:9.3f} {hit:9.1%} {false:11.2%}")
    shipped = SemanticCacheSettings().threshold
    hit, false = rates(((cosine >= shipped) & asks_the_same)[test], label[test])
    print(f"{'shipped':<16} {shipped:9.3f} {hit:9.1%} {false:11.2%}  (cosine+question)")


async def lookup_times(pairs: list[dict], embedder: StaticEmbedder, sizes: list[int]) -> None:
    """Median time of one ``find`` (embed + scan + anchors), cache of N queries."""
    texts = list(dict.fromkeys(t for p in pairs for t in (p["text_a"], p["text_b"])))
    base = embedder.encode(texts)
    rng = np.random.default_rng(13)
    print("\nLookup: one SemanticCache.find (embed the query, scan, check anchors)")
    print(f"{'cached':>8} {'p50 ms':>8} {'p90 ms':>8} {'mirror from SQLite, s':>22}")
    for size in sizes:
        with tempfile.TemporaryDirectory() as tmp:
            store = SqliteStore(Path(tmp) / "s.sqlite3")
            # Fill the state file in one transaction (the bench, not the product, does this).
            reps = -(-size // len(texts))
            vectors = np.tile(base, (reps, 1))[:size]
            vectors = vectors + rng.normal(0, 0.01, vectors.shape).astype(np.float32)
            vectors /= np.linalg.norm(vectors, axis=1, keepdims=True)
            expires = time.time() + 3600

            def fill(db, vectors=vectors, expires=expires, size=size) -> None:
                db.execute("BEGIN")
                db.executemany(
                    "INSERT INTO vectors (space, item_id, vector, meta, expires_at) "
                    "VALUES (?, ?, ?, ?, ?)",
                    (
                        (SPACE, f"k{i}", vectors[i].tobytes(),
                         json.dumps({"q": texts[i % len(texts)], "s": "scope"}).encode(), expires)
                        for i in range(size)
                    ),
                )  # fmt: skip
                db.execute("COMMIT")

            await store._call(fill)
            cache = SemanticCache(store, embedder, threshold=0.97, max_entries=size)
            t0 = time.perf_counter()
            await cache.sync()
            mirror_s = time.perf_counter() - t0
            queries = [p["text_b"] for p in pairs[:300]]
            for q in queries[:20]:
                await cache.find(q, "scope")  # warm the tokenizer's word cache
            samples = []
            for q in queries:
                t0 = time.perf_counter()
                await cache.find(q, "scope")
                samples.append((time.perf_counter() - t0) * 1000)
            samples.sort()
            p90 = samples[int(0.9 * len(samples))]
            print(f"{size:>8} {statistics.median(samples):8.2f} {p90:8.2f} {mirror_s:22.2f}")
            await store.aclose()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--sizes", default="10000,100000")
    parser.add_argument("--model", default=str(MODEL), help="A model2vec model directory.")
    args = parser.parse_args()
    pairs = json.loads(PAIRS.read_text())
    embedder = StaticEmbedder.load(args.model)
    quality(pairs, embedder)
    asyncio.run(lookup_times(pairs, embedder, [int(s) for s in args.sizes.split(",")]))


if __name__ == "__main__":
    main()
