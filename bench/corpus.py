"""The corpus stores: query latency at 100,000 chunks, the first query after a write,
memory, indexing speed.

Each step is its own command, so that memory is measured in a process that only serves
(building a collection leaves its own allocations behind), and so that an older checkout
can be measured on the same collection beside this one (``PYTHONPATH=OLD_TREE``).

1. ``build --dir D --chunks N``: a collection ``bench`` of N chunks (synthetic text,
   Zipf-distributed words, vectors from the static model) in ``D/corpus.sqlite3``.
2. ``query --dir D``: searched hybrid the way the ``local`` backend does (the query
   embedded, then ``CorpusReader.search`` for 10 documents, one worker): the first query
   (the index loaded or mapped), p50/p95 of ``--runs`` after it, the first query after
   each of ``--writes`` writes of one document (10 chunks) by another store object (as
   ``index add`` beside ``serve``), and the process's memory: resident anonymous (what
   the process holds) and file-backed (what it maps), before and after.
3. ``index --files N``: N typical Markdown files (headings, ~2 KB) indexed by ``searcher
   index add`` as a subprocess (the CLI, start-up included) with the static model.
4. ``qdrant --chunks N``: query p50 on the Qdrant store (qdrant-client's local mode unless
   ``--qdrant URL`` names a server; local mode is a brute-force Python scan, not a
   measure of a Qdrant server).

    .venv/bin/python -m bench.corpus build --dir /tmp/c100k --chunks 100000
    .venv/bin/python -m bench.corpus query --dir /tmp/c100k
    .venv/bin/python -m bench.corpus index --files 500
"""

from __future__ import annotations

import argparse
import os
import random
import resource
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np
import yaml

from bench.processes import REPO, STATIC_MODEL, percentile
from searcher.corpus.base import CorpusStore, NewDocument
from searcher.corpus.chunking import Chunk
from searcher.corpus.qdrant_store import QdrantStore
from searcher.corpus.serving import CorpusReader
from searcher.corpus.store import SqliteStore
from searcher.embedding.embedders import StaticEmbedder

CHUNKS_PER_DOCUMENT = 10
WORDS_PER_CHUNK = 60
DATABASE = "corpus.sqlite3"


def vocabulary(size: int, rng: random.Random) -> list[str]:
    letters = "abcdefghijklmnopqrstuvwxyz"
    return ["".join(rng.choice(letters) for _ in range(rng.randint(3, 9))) for _ in range(size)]


def sentence(words: list[str], weights: list[float], rng: random.Random, n: int) -> str:
    return " ".join(rng.choices(words, weights, k=n))


def bench_words(rng: random.Random) -> tuple[list[str], list[float]]:
    words = vocabulary(20_000, rng)
    return words, [1 / (rank + 1) for rank in range(len(words))]


def document(
    embedder: StaticEmbedder, words: list[str], weights: list[float], rng: random.Random, n: int
) -> NewDocument:
    texts = [sentence(words, weights, rng, WORDS_PER_CHUNK) for _ in range(CHUNKS_PER_DOCUMENT)]
    return NewDocument(
        "bench", f"/bench/doc{n:06}.md", "markdown", f"Document {n}", 4000, 0, str(rng.random()),
        [Chunk(i, t) for i, t in enumerate(texts)], embedder.encode(texts),
    )  # fmt: skip


def publish(corpus: CorpusStore) -> None:
    """What ``index add`` does at the end of a run (a checkout before snapshots has none)."""
    done = getattr(corpus, "publish", None)
    if done is not None:
        done("bench")


def build(corpus: CorpusStore, embedder: StaticEmbedder, chunks: int) -> None:
    rng = random.Random(27)
    words, weights = bench_words(rng)
    corpus.ensure_collection("bench", embedder.name)
    for n in range(chunks // CHUNKS_PER_DOCUMENT):
        corpus.replace_document(document(embedder, words, weights, rng, n))
    publish(corpus)


def memory() -> dict[str, int]:
    """This process's resident memory by kind, in MB (Linux)."""
    found = {}
    for line in Path("/proc/self/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            found[key] = int(value.split()[0]) >> 10
    return found


CPU_TIMES: list[float] = []  # each timed query's CPU time, ms: what load does not inflate


def timed_query(reader: CorpusReader, embedder: StaticEmbedder, query: str) -> tuple[float, int]:
    started, cpu = time.perf_counter(), time.thread_time()
    vector = np.asarray(embedder.encode([query])[0])
    found = reader.search(["bench"], query, {"bench": vector}, 10)
    CPU_TIMES.append((time.thread_time() - cpu) * 1000)
    return (time.perf_counter() - started) * 1000, len(found)


def query(args: argparse.Namespace) -> None:
    embedder = StaticEmbedder.load(str(STATIC_MODEL))
    rng = random.Random(28)
    words, weights = bench_words(random.Random(27))
    sample = words[:2000]
    embedder.encode([" ".join(sample)])  # the model's own start-up, not the index's
    idle = memory()
    corpus = SqliteStore(Path(args.dir) / DATABASE)
    reader = CorpusReader(corpus)
    first, _ = timed_query(reader, embedder, sample[0])
    timings = []
    CPU_TIMES.clear()
    for _ in range(args.runs):
        ms, found = timed_query(reader, embedder, " ".join(rng.sample(sample, 4)))
        timings.append(ms)
        assert found
    cpu = list(CPU_TIMES)
    served = memory()
    writer = SqliteStore(Path(args.dir) / DATABASE)
    after_write = []
    for n in range(args.writes):
        writer.replace_document(document(embedder, words, weights, rng, 1_000_000 + n))
        ms, _ = timed_query(reader, embedder, " ".join(rng.sample(sample, 4)))
        after_write.append(ms)
    writer.close()
    chunks = sum(d.chunks for d in corpus.documents("bench"))
    print(
        f"sqlite, {chunks} chunks: first query {first:.0f} ms; hybrid, 10 documents: "
        f"p50 {statistics.median(timings):.1f} ms, p95 {percentile(timings, 0.95):.1f} ms; "
        f"CPU time p50 {statistics.median(cpu):.1f} ms (load {os.getloadavg()[0]:.1f})"
    )
    print(
        f"sqlite, {chunks} chunks: first query after a write of 10 chunks: median "
        f"{statistics.median(after_write):.0f} ms, max {max(after_write):.0f} ms "
        f"({args.writes} writes)"
    )
    print(
        f"sqlite, {chunks} chunks: RSS {idle['VmRSS']} -> {served['VmRSS']} MB; "
        f"anonymous {idle['RssAnon']} -> {served['RssAnon']} MB "
        f"(+{served['RssAnon'] - idle['RssAnon']}), file-backed (mapped) "
        f"{idle['RssFile']} -> {served['RssFile']} MB"
    )
    corpus.close()


MARKDOWN = """# {title}

{p1}

## Background

{p2}

{p3}

## Details

{p4}
"""


def index(args: argparse.Namespace) -> None:
    rng = random.Random(29)
    words = vocabulary(5_000, rng)
    weights = [1 / (rank + 1) for rank in range(len(words))]
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "notes"
        folder.mkdir()
        for n in range(args.files):
            paragraphs = {f"p{i}": sentence(words, weights, rng, 80) for i in range(1, 5)}
            (folder / f"note{n:05}.md").write_text(MARKDOWN.format(title=f"Note {n}", **paragraphs))
        config = Path(tmp) / "searcher.yaml"
        config.write_text(yaml.safe_dump({
            "state": {"dir": str(Path(tmp) / "state")},
            "embeddings": {"model": str(STATIC_MODEL)},
            "corpus": {"roots": [str(folder)]},
        }))  # fmt: skip
        command = [sys.executable, "-m", "searcher.cli", "index", "add", str(folder),
                   "--collection", "notes", "--config", str(config)]  # fmt: skip
        started, cpu = time.perf_counter(), children_cpu()
        subprocess.run(command, cwd=REPO, check=True, capture_output=True)
        elapsed, used = time.perf_counter() - started, children_cpu() - cpu
        shutil.rmtree(Path(tmp) / "state")
        started_run, cpu = time.perf_counter(), children_cpu()
        done = subprocess.run(
            [*command[:3], "--help"], cwd=REPO, check=True, capture_output=True
        )  # the CLI's start-up alone, to tell it apart
        startup, startup_cpu = time.perf_counter() - started_run, children_cpu() - cpu
        assert done.returncode == 0
    print(
        f"index add (CLI), {args.files} Markdown files (~2 KB): {args.files / elapsed:.0f} "
        f"files/s end to end ({elapsed:.1f} s, of which ~{startup:.1f} s CLI start-up; "
        f"{args.files / max(elapsed - startup, 1e-9):.0f} files/s without it); "
        f"CPU {used:.1f} s: {args.files / used:.0f} files per CPU second "
        f"({args.files / max(used - startup_cpu, 1e-9):.0f} without start-up; "
        f"load {os.getloadavg()[0]:.1f})"
    )


def children_cpu() -> float:
    """CPU seconds (user and system) of this process's finished children."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def qdrant(args: argparse.Namespace) -> None:
    embedder = StaticEmbedder.load(str(STATIC_MODEL))
    corpus = QdrantStore.open(args.qdrant)
    for name in corpus.collections():  # a server may hold an earlier run's
        corpus.remove_collection(name)
    build(corpus, embedder, args.chunks)
    reader = CorpusReader(corpus)
    rng = random.Random(28)
    sample = bench_words(random.Random(27))[0][:2000]
    timings = [
        timed_query(reader, embedder, " ".join(rng.sample(sample, 4)))[0] for _ in range(args.runs)
    ]
    print(f"qdrant ({args.qdrant}), {args.chunks} chunks: p50 {statistics.median(timings):.0f} ms")
    corpus.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    steps = parser.add_subparsers(dest="step", required=True)
    built = steps.add_parser("build")
    built.add_argument("--dir", required=True)
    built.add_argument("--chunks", type=int, default=100_000)
    queried = steps.add_parser("query")
    queried.add_argument("--dir", required=True)
    queried.add_argument("--runs", type=int, default=200)
    queried.add_argument("--writes", type=int, default=5)
    indexed = steps.add_parser("index")
    indexed.add_argument("--files", type=int, default=500)
    on_qdrant = steps.add_parser("qdrant")
    on_qdrant.add_argument("--chunks", type=int, default=3_000)
    on_qdrant.add_argument("--runs", type=int, default=20)
    on_qdrant.add_argument("--qdrant", default=":memory:", help="a Qdrant server, or local mode")
    args = parser.parse_args()
    if not STATIC_MODEL.exists():
        raise SystemExit(f"needs the static model at {STATIC_MODEL}")
    if args.step == "build":
        started = time.perf_counter()
        Path(args.dir).mkdir(parents=True, exist_ok=True)
        corpus = SqliteStore(Path(args.dir) / DATABASE)
        build(corpus, StaticEmbedder.load(str(STATIC_MODEL)), args.chunks)
        corpus.close()
        print(f"built {args.chunks} chunks in {time.perf_counter() - started:.0f} s")
    elif args.step == "query":
        query(args)
    elif args.step == "index":
        index(args)
    else:
        qdrant(args)


if __name__ == "__main__":
    main()
