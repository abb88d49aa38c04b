"""The corpus stores: query latency at 100,000 chunks, the first query after a write,
memory, indexing speed, each printed beside issue 27's target (point 5: query p50 <= 25 ms
at 100,000 chunks in the embedded store, one worker, static embedder; indexing >= 150
files/s of typical Markdown; the memory of ``serve`` not growing with the corpus beyond
what the store maps). On the shared machine wall times carry the load; CPU times (of the
query's thread, of the server process, of the CLI) are what an idle machine's wall time
comes near, so both are printed.

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
3. ``http --dir D``: what a user feels. ``searcher serve`` (one worker, the static model,
   no result cache) with a ``local`` instance ``bench`` on D's collection, searched through
   ``POST /v1/search`` with ``constraints.backend: "bench"``: wall time per request
   (p50/p95), the server's CPU time per request, and the server's resident memory before
   the collection is opened and after ``--runs`` searches, anonymous (what the process
   holds) apart from file-backed (the mapped snapshot, the page cache's).
4. ``index --files N``: N typical Markdown files (headings, ~2 KB) indexed by ``searcher
   index add`` as a subprocess with the static model: files/s of the whole run (start-up
   included) and steady-state (from the progress lines, between the 10th and the 90th
   percent of the files: wall, and CPU read from the process meanwhile). ``--store
   qdrant`` indexes into qdrant-client's local mode instead.
5. ``qdrant --chunks N``: query p50/p95, wall and CPU, on the Qdrant store (qdrant-client's
   local mode unless ``--qdrant URL`` names a server; local mode is a brute-force Python
   scan, not a measure of a Qdrant server).

    .venv/bin/python -m bench.corpus build --dir /tmp/c100k --chunks 100000
    .venv/bin/python -m bench.corpus query --dir /tmp/c100k
    .venv/bin/python -m bench.corpus http --dir /tmp/c100k
    .venv/bin/python -m bench.corpus index --files 500 [--store qdrant]
    .venv/bin/python -m bench.corpus qdrant --chunks 3000
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import resource
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import numpy as np
import yaml

from bench.processes import REPO, STATIC_MODEL, percentile, serving
from searcher.corpus.base import CorpusStore, NewDocument
from searcher.corpus.chunking import Chunk
from searcher.corpus.qdrant_store import QdrantStore
from searcher.corpus.serving import CorpusReader
from searcher.corpus.store import SqliteStore
from searcher.embedding.embedders import StaticEmbedder

# Issue 27, point 5.
QUERY_TARGET_MS = 25
INDEX_TARGET_FILES_S = 150
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
        f"sqlite, {chunks} chunks, in process (CorpusReader.search, the query embedded, one "
        f"thread; hybrid, 10 documents): first query {first:.0f} ms; wall p50 "
        f"{statistics.median(timings):.1f} ms, p95 {percentile(timings, 0.95):.1f} ms; CPU "
        f"p50 {statistics.median(cpu):.1f} ms, p95 {percentile(cpu, 0.95):.1f} ms "
        f"(target p50 <= {QUERY_TARGET_MS} ms; load {os.getloadavg()[0]:.1f})"
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


def markdown_folder(folder: Path, files: int) -> None:
    """``files`` typical Markdown notes (a title, two sections, ~2 KB) in ``folder``."""
    rng = random.Random(29)
    words = vocabulary(5_000, rng)
    weights = [1 / (rank + 1) for rank in range(len(words))]
    folder.mkdir()
    for n in range(files):
        paragraphs = {f"p{i}": sentence(words, weights, rng, 80) for i in range(1, 5)}
        (folder / f"note{n:05}.md").write_text(MARKDOWN.format(title=f"Note {n}", **paragraphs))


def process_cpu(pid: int) -> float:
    """CPU seconds (user and system) process ``pid`` has used so far (Linux)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def index(args: argparse.Namespace) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp) / "notes"
        markdown_folder(folder, args.files)
        corpus: dict = {"roots": [str(folder)]}
        if args.store == "qdrant":
            corpus["qdrant_url"] = str(Path(tmp) / "qdrant")
        config = Path(tmp) / "searcher.yaml"
        config.write_text(yaml.safe_dump({
            "state": {"dir": str(Path(tmp) / "state")},
            "embeddings": {"model": str(STATIC_MODEL)},
            "corpus": corpus,
        }))  # fmt: skip
        command = [sys.executable, "-m", "searcher.cli", "index", "add", str(folder),
                   "--collection", "notes", "--config", str(config), "--progress"]  # fmt: skip
        started, cpu = time.perf_counter(), children_cpu()
        steady = indexed_with_progress(command, args.files, args.repo)
        elapsed, used = time.perf_counter() - started, children_cpu() - cpu
    wall_s, cpu_s = steady
    middle = args.files - 2 * (args.files // 10)
    print(
        f"index add (CLI, {args.store}), {args.files} Markdown files (~2 KB): whole run "
        f"{args.files / elapsed:.0f} files/s ({elapsed:.1f} s, start-up included), "
        f"{args.files / used:.0f} files per CPU second; steady state {middle / wall_s:.0f} "
        f"files/s, {middle / max(cpu_s, 1e-9):.0f} files per CPU second "
        f"(target >= {INDEX_TARGET_FILES_S} files/s; load {os.getloadavg()[0]:.1f})"
    )


def indexed_with_progress(command: list[str], files: int, repo: Path) -> tuple[float, float]:
    """Run ``command`` (``index add --progress``: one line a file on stderr); the wall
    and CPU seconds it took from the 10th to the 90th percent of ``files``."""
    low, high = files // 10, files - files // 10
    marks: dict[int, tuple[float, float]] = {}
    proc = subprocess.Popen(command, cwd=repo, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True)  # fmt: skip
    assert proc.stderr is not None
    done = 0
    for line in proc.stderr:
        if not line.startswith("["):
            continue
        done += 1
        if done in (low, high):
            marks[done] = (time.perf_counter(), process_cpu(proc.pid))
    if proc.wait() != 0 or len(marks) < 2:
        raise SystemExit(f"index add failed ({proc.returncode})")
    return marks[high][0] - marks[low][0], marks[high][1] - marks[low][1]


def serve_config(folder: Path, state: Path) -> dict:
    """``serve`` with one ``local`` instance on the collection ``bench`` of ``folder``."""
    return {
        "backends": {
            "order": ["bench"],
            "duckduckgo": {"enabled": False},
            "instances": {"bench": {"adapter": "local", "collection": "bench"}},
        },
        "state": {"dir": str(state)},
        "corpus": {"dir": str(folder)},
        "embeddings": {"model": str(STATIC_MODEL)},
        "cache": {"enabled": False},
    }


def process_memory(pid: int) -> dict[str, int]:
    """Resident memory of process ``pid`` by kind, in MB (Linux)."""
    found = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "RssAnon", "RssFile"):
            found[key] = int(value.split()[0]) >> 10
    return found


def wait_for_embedder(client: httpx.Client, base: str) -> None:
    """Until the server's embedder is loaded (a search before searches keywords only)."""
    deadline = time.monotonic() + 120
    while client.get(f"{base}/v1/health").json()["embedder"]["state"] == "loading":
        if time.monotonic() > deadline:
            raise SystemExit("the embedder did not load in 120 s")
        time.sleep(0.2)


def http(args: argparse.Namespace) -> None:
    words = bench_words(random.Random(27))[0][:2000]
    rng = random.Random(28)
    with contextlib.ExitStack() as stack:
        state = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        config = serve_config(Path(args.dir), state)
        base, pid = stack.enter_context(serving(config, repo=args.repo))
        client = stack.enter_context(httpx.Client(timeout=60))
        wait_for_embedder(client, base)

        def search(text: str) -> float:
            body = {"query": text, "constraints": {"backend": "bench"}}
            started = time.perf_counter()
            answer = client.post(f"{base}/v1/search", json=body)
            answer.raise_for_status()
            assert answer.json()["items"], text
            return (time.perf_counter() - started) * 1000

        idle = process_memory(pid)
        first = search(words[0])
        for _ in range(5):  # the request path's own first calls
            search(" ".join(rng.sample(words, 4)))
        cpu, timings = process_cpu(pid), []
        for _ in range(args.runs):
            timings.append(search(" ".join(rng.sample(words, 4))))
        cpu_ms = (process_cpu(pid) - cpu) * 1000 / args.runs
        served = process_memory(pid)
    print(
        f"sqlite, HTTP (POST /v1/search, constraints.backend: bench; serve, one worker, "
        f"static model, no result cache): first search {first:.0f} ms; wall p50 "
        f"{statistics.median(timings):.1f} ms, p95 {percentile(timings, 0.95):.1f} ms; server "
        f"CPU {cpu_ms:.1f} ms a request (target p50 <= {QUERY_TARGET_MS} ms; load "
        f"{os.getloadavg()[0]:.1f})"
    )
    print(
        f"sqlite, serve's RSS before the collection is opened -> after {args.runs} searches: "
        f"anonymous {idle['RssAnon']} -> {served['RssAnon']} MB "
        f"(+{served['RssAnon'] - idle['RssAnon']}), file-backed (the mapped snapshot) "
        f"{idle['RssFile']} -> {served['RssFile']} MB "
        f"(+{served['RssFile'] - idle['RssFile']}) (target: anonymous does not grow with "
        f"the corpus)"
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
    CPU_TIMES.clear()
    timings = [
        timed_query(reader, embedder, " ".join(rng.sample(sample, 4)))[0] for _ in range(args.runs)
    ]
    print(
        f"qdrant ({args.qdrant}), {args.chunks} chunks, in process: wall p50 "
        f"{statistics.median(timings):.0f} ms, p95 {percentile(timings, 0.95):.0f} ms; CPU p50 "
        f"{statistics.median(CPU_TIMES):.0f} ms, p95 {percentile(CPU_TIMES, 0.95):.0f} ms "
        f"(target p50 <= {QUERY_TARGET_MS} ms at 100,000 chunks; load {os.getloadavg()[0]:.1f})"
    )
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
    over_http = steps.add_parser("http")
    over_http.add_argument("--dir", required=True)
    over_http.add_argument("--runs", type=int, default=200)
    over_http.add_argument("--repo", type=Path, default=REPO, help="the tree served (before/after)")
    indexed = steps.add_parser("index")
    indexed.add_argument("--files", type=int, default=500)
    indexed.add_argument("--store", choices=["sqlite", "qdrant"], default="sqlite")
    indexed.add_argument("--repo", type=Path, default=REPO, help="the tree run (before/after)")
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
    elif args.step == "http":
        http(args)
    elif args.step == "index":
        index(args)
    else:
        qdrant(args)


if __name__ == "__main__":
    main()
