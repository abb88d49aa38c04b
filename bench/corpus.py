"""The corpus stores: query latency at 100,000 chunks, indexing speed, memory.

1. Query p50/p95: a collection of ``--chunks`` chunks (synthetic text, Zipf-distributed
   words, vectors from the static model) searched hybrid (BM25 + cosine, RRF) the way
   the ``local`` backend does: the query embedded, then ``CorpusReader.search`` for 10
   documents, one worker, warm in-memory index. The first query after a write (the
   index read again) is printed apart. The process's RSS after the queries is printed
   beside the size of the collection's in-memory index.
2. Indexing: ``--files`` typical Markdown files (headings, ~2 KB) written to a temporary
   folder and indexed with ``searcher index add``'s indexer and the static embedder.
3. The same for the Qdrant store (``--qdrant-chunks`` chunks, in qdrant-client's local
   mode unless ``--qdrant URL`` names a server; local mode is a brute-force Python scan,
   not a measure of a Qdrant server).

    .venv/bin/python -m bench.corpus [--chunks 100000] [--files 500] [--qdrant-chunks 5000]
"""

from __future__ import annotations

import argparse
import asyncio
import random
import resource
import statistics
import tempfile
import time
from pathlib import Path

import numpy as np

from bench.processes import STATIC_MODEL, percentile
from searcher.corpus.base import CorpusStore, NewDocument
from searcher.corpus.chunking import Chunk
from searcher.corpus.indexer import IndexOptions, index_paths
from searcher.corpus.qdrant_store import QdrantStore
from searcher.corpus.serving import CorpusReader
from searcher.corpus.store import SqliteStore
from searcher.embedding.embedders import StaticEmbedder

CHUNKS_PER_DOCUMENT = 10
WORDS_PER_CHUNK = 60


def vocabulary(size: int, rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(size)]


def sentence(words: list[str], weights: list[float], rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(words, weights, k=n))


def build_collection(
    corpus: CorpusStore, embedder: StaticEmbedder, chunks: int, rng: random.Random
) -> list[str]:
    """Writes the collection ``bench``; returns a sample of its chunks' words."""
    words = vocabulary(20_000, rng)
    weights = [1 / (rank + 1) for rank in range(len(words))]
    corpus.ensure_collection("bench", embedder.name)
    sample: list[str] = []
    for doc in range(chunks // CHUNKS_PER_DOCUMENT):
        texts = [sentence(words, weights, rng, WORDS_PER_CHUNK) for _ in range(CHUNKS_PER_DOCUMENT)]
        if len(sample) < 20_000:
            sample.extend(texts[0].split())
        new = NewDocument(
            "bench", f"/bench/doc{doc:06}.md", "markdown", f"Document {doc}", 4000, 0, "x",
            [Chunk(i, t) for i, t in enumerate(texts)], embedder.encode(texts),
        )  # fmt: skip
        corpus.replace_document(new)
    return sample


def query_latency(
    reader: CorpusReader, embedder: StaticEmbedder, words: list[str], runs: int, rng: random.Random
) -> tuple[float, list[float]]:
    """(ms of the first query, which reads the index; ms of each of ``runs`` after it)."""
    started = time.perf_counter()
    reader.search(["bench"], words[0], {"bench": embedder.encode([words[0]])[0]}, 10)
    first = (time.perf_counter() - started) * 1000
    timings = []
    for _ in range(runs):
        query = " ".join(rng.sample(words, 4))
        started = time.perf_counter()
        vector = embedder.encode([query])[0]
        found = reader.search(["bench"], query, {"bench": np.asarray(vector)}, 10)
        timings.append((time.perf_counter() - started) * 1000)
        assert found
    return first, timings


MARKDOWN = """# {title}

{p1}

## Background

{p2}

{p3}

## Details

{p4}
"""


def indexing_rate(
    folder: Path, corpus: CorpusStore, embedder: StaticEmbedder, files: int, rng: random.Random
) -> float:
    words = vocabulary(5_000, rng)
    weights = [1 / (rank + 1) for rank in range(len(words))]
    folder.mkdir()
    for n in range(files):
        paragraphs = {f"p{i}": sentence(words, weights, rng, 80) for i in range(1, 5)}
        (folder / f"note{n:05}.md").write_text(MARKDOWN.format(title=f"Note {n}", **paragraphs))
    options = IndexOptions("files", 20 * 1024 * 1024, 1200)
    started = time.perf_counter()
    report = asyncio.run(index_paths(corpus, [folder], options, embedder))
    elapsed = time.perf_counter() - started
    assert report.indexed == files
    return files / elapsed


def rss_mb() -> float:
    """The process's peak resident memory (Linux reports KB)."""
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


def measure(
    label: str, corpus: CorpusStore, chunks: int, files: int, folder: Path, args: argparse.Namespace
) -> None:
    rng = random.Random(27)
    embedder = StaticEmbedder.load(str(STATIC_MODEL))
    started = time.perf_counter()
    words = build_collection(corpus, embedder, chunks, rng)
    print(f"{label}: built {chunks} chunks in {time.perf_counter() - started:.1f} s")
    reader = CorpusReader(corpus)
    first, timings = query_latency(reader, embedder, words, args.runs, rng)
    index = corpus.index("bench") if isinstance(corpus, SqliteStore) else None
    held = f", in-memory index {index.nbytes >> 20} MB" if index is not None else ""
    print(
        f"{label}: query over {chunks} chunks, hybrid, 10 documents: "
        f"p50 {statistics.median(timings):.1f} ms, p95 {percentile(timings, 0.95):.1f} ms "
        f"(first, reading the index: {first:.0f} ms); peak RSS {rss_mb():.0f} MB{held}"
    )
    rate = indexing_rate(folder, corpus, embedder, files, rng)
    print(f"{label}: indexing {files} Markdown files (~2 KB): {rate:.0f} files/s")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--chunks", type=int, default=100_000)
    parser.add_argument("--files", type=int, default=500)
    parser.add_argument("--runs", type=int, default=200)
    parser.add_argument("--qdrant-chunks", type=int, default=5_000)
    parser.add_argument("--qdrant", default=":memory:", help="a Qdrant server, or local mode")
    args = parser.parse_args()
    if not STATIC_MODEL.exists():
        raise SystemExit(f"needs the static model at {STATIC_MODEL}")
    with tempfile.TemporaryDirectory() as tmp:
        embedded = SqliteStore(Path(tmp) / "corpus.sqlite3")
        measure("sqlite", embedded, args.chunks, args.files, Path(tmp) / "notes", args)
        embedded.close()
        if args.qdrant_chunks:
            qdrant = QdrantStore.open(args.qdrant)
            for name in qdrant.collections():  # a server may hold an earlier run's
                qdrant.remove_collection(name)
            measure("qdrant", qdrant, args.qdrant_chunks, args.files // 5, Path(tmp) / "q", args)
            qdrant.close()


if __name__ == "__main__":
    main()
