"""The embedded corpus index: query latency at 100,000 chunks and indexing speed.

1. Query p50/p95: a collection of ``--chunks`` chunks (synthetic text, Zipf-distributed
   words, vectors from the static model) searched hybrid (BM25 + cosine, RRF) the way
   the ``local`` backend does: the query embedded, then ``CorpusReader.search`` for 10
   documents, one worker, warm vector matrix.
2. Indexing: ``--files`` typical Markdown files (headings, ~2 KB) written to a temporary
   folder and indexed with ``searcher index add``'s indexer and the static embedder.

    .venv/bin/python -m bench.corpus [--chunks 100000] [--files 500]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.processes import STATIC_MODEL, percentile
from searcher.corpus import store
from searcher.corpus.chunking import Chunk
from searcher.corpus.indexer import IndexOptions, index_paths
from searcher.corpus.serving import CorpusReader
from searcher.embedding.embedders import StaticEmbedder

CHUNKS_PER_DOCUMENT = 10
WORDS_PER_CHUNK = 60


def vocabulary(size: int, rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(size)]


def sentence(words: list[str], weights: list[float], rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(words, weights, k=n))


def build_collection(path: Path, embedder: StaticEmbedder, chunks: int, rng: random.Random) -> None:
    words = vocabulary(20_000, rng)
    weights = [1 / (rank + 1) for rank in range(len(words))]
    conn = store.connect(path)
    store.ensure_collection(conn, "bench", embedder.name)
    for doc in range(chunks // CHUNKS_PER_DOCUMENT):
        texts = [sentence(words, weights, rng, WORDS_PER_CHUNK) for _ in range(CHUNKS_PER_DOCUMENT)]
        new = store.NewDocument(
            "bench", f"/bench/doc{doc:06}.md", "markdown", f"Document {doc}", 4000, 0, "x",
            [Chunk(i, t) for i, t in enumerate(texts)], embedder.encode(texts),
        )  # fmt: skip
        store.replace_document(conn, new)
    conn.close()


def query_latency(
    path: Path, embedder: StaticEmbedder, runs: int, rng: random.Random
) -> list[float]:
    reader = CorpusReader(path)
    conn = store.connect(path)
    sample = [r[0] for r in conn.execute("SELECT text FROM chunks ORDER BY random() LIMIT 200")]
    conn.close()
    words = [w for text in sample for w in text.split()]
    reader.search(["bench"], words[0], {"bench": embedder.encode([words[0]])[0]}, 10)  # warm
    timings = []
    for _ in range(runs):
        query = " ".join(rng.sample(words, 4))
        started = time.perf_counter()
        vector = embedder.encode([query])[0]
        found = reader.search(["bench"], query, {"bench": np.asarray(vector)}, 10)
        timings.append((time.perf_counter() - started) * 1000)
        assert found
    reader.close()
    return timings


MARKDOWN = """# {title}

{p1}

## Background

{p2}

{p3}

## Details

{p4}
"""


def indexing_rate(
    folder: Path, db: Path, embedder: StaticEmbedder, files: int, rng: random.Random
) -> float:
    words = vocabulary(5_000, rng)
    weights = [1 / (rank + 1) for rank in range(len(words))]
    for n in range(files):
        paragraphs = {f"p{i}": sentence(words, weights, rng, 80) for i in range(1, 5)}
        (folder / f"note{n:05}.md").write_text(MARKDOWN.format(title=f"Note {n}", **paragraphs))
    conn = store.connect(db)
    options = IndexOptions("files", 20 * 1024 * 1024, 1200)
    started = time.perf_counter()
    report = asyncio.run(index_paths(conn, [folder], options, embedder))
    elapsed = time.perf_counter() - started
    conn.close()
    assert report.indexed == files
    return files / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--runs", type=int, default=200)
    args = parser.parse_args()
    if not STATIC_MODEL.exists():
        raise SystemExit(f"needs the static model at {STATIC_MODEL}")
    rng = random.Random(27)
    embedder = StaticEmbedder.load(str(STATIC_MODEL))
    with tempfile.TemporaryDirectory() as tmp:
        db = Path(tmp) / "corpus.sqlite3"
        started = time.perf_counter()
        build_collection(db, embedder, args.chunks, rng)
        built_s = time.perf_counter() - started
        print(f"built {args.chunks} chunks in {built_s:.1f} s ({db.stat().st_size >> 20} MB)")
        timings = query_latency(db, embedder, args.runs, rng)
        print(
            f"query over {args.chunks} chunks, hybrid, 10 documents: "
            f"p50 {statistics.median(timings):.1f} ms, p95 {percentile(timings, 0.95):.1f} ms"
        )
        folder = Path(tmp) / "notes"
        folder.mkdir()
        rate = indexing_rate(folder, Path(tmp) / "files.sqlite3", embedder, args.files, rng)
        print(f"indexing {args.files} Markdown files (~2 KB): {rate:.0f} files/s")


if __name__ == "__main__":
    main()
