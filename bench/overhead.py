"""What searcher adds in front of a backend that answers at once (issues 2, 9 and 26).

Issue 26's setting by default: the default config with two backends configured, SearXNG
and Brave (key set), both answered by the testbed; ``auto: fallback`` asks SearXNG and
hedges to Brave when SearXNG is slow (``--one-backend``: SearXNG alone, as before).

1. Sequential: the same SearXNG-format request asked of the testbed directly and through
   ``searcher serve`` (simple mode, result cache off), interleaved; p50 of each and the
   difference (the added p50, target <= 3 ms). With ``--baseline REV`` an older commit's
   server runs beside this one and every round asks all three, in a shuffled order, so
   the figures are side by side in one run.
2. Load: wrk with 32 connections against ``POST /v1/search``, with 1 and then 2 searcher
   workers (``--workers``): requests/s against the target (>= 400 and >= 700), p50, p99,
   and the server's CPU time per request (user + system of the server and its workers,
   over the run: less noisy than requests/s on a shared machine); with a baseline the
   servers take turns (new, old, new, old) and the medians are printed.
Every server runs as a separate process on 127.0.0.1; wrk (Debian package ``wrk``) too.

By default every request asks the same query and gets the same canned answer, so what
searcher remembers across requests (the embedder's vectors of texts it has seen, its
tokens of words) is always there. ``--fresh`` asks a new query each time, written into
every snippet of the answer: the cost real traffic pays for new texts.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import random
import statistics
import time
from pathlib import Path

import httpx

from bench import wrk
from bench.processes import (
    REPO,
    STATIC_MODEL,
    checkout,
    has_result_cache,
    percentile,
    serving,
    testbed,
)

QUERY = "cloud gaming"
# Issue 26's throughput targets (wrk, 32 connections), by searcher workers.
LOAD_TARGETS = {1: 400, 2: 700}
ADDED_TARGET_MS = 3.0


def config(
    testbed_base: str,
    repo: Path,
    dedup: bool = True,
    results: int = 20,
    answers: str = "fixed",
    two_backends: bool = True,
) -> dict:
    """``searcher serve``'s config against the testbed's SearXNG ``answers`` behaviour
    (``fixed``: one canned answer; ``fresh``: the same with the query in every snippet).

    ``two_backends`` (issue 26's setting): the default config with the two backends a user
    typically configures, SearXNG and Brave (with its key), both on the testbed; the
    default ``auto: fallback`` asks SearXNG and hedges to Brave when SearXNG is slow.
    DuckDuckGo is off either way: it has no base URL to point at the testbed. Without
    ``two_backends``: SearXNG alone (the figures before issue 26)."""
    embeddings = {"model": str(STATIC_MODEL)} if dedup else {"provider": "none"}
    backends: dict = {
        "searxng": {"base_url": f"{testbed_base}/searxng/{answers}/20"},
        "duckduckgo": {"enabled": False},
    }
    if two_backends:
        backends["brave"] = {"base_url": f"{testbed_base}/brave/fixed/20", "api_key": "test-key"}
    else:
        backends["order"] = ["searxng"]
    # Every request must reach the backend: the result cache (where the commit has one) is off.
    return {
        **({"cache": {"enabled": False}} if has_result_cache(repo) else {}),
        "backends": backends,
        "service": {"cache": {"enabled": False}},
        # The backend always answers 20 results; ranking reads them all, and ``results``
        # of them become items in the response and the pack.
        "budget": {"max_results": results},
        # Near-duplicate removal with the offline model (a hub name cannot load here).
        "embeddings": embeddings,
    }


def query_of(round_no: int, answers: str) -> str:
    """The query of one round: always the same for ``fixed`` answers; for ``fresh`` ones a
    new word each round, as new queries bring (a cache of texts or words never hits)."""
    return QUERY if answers == "fixed" else f"{QUERY} r{round_no}"


def sequential(
    testbed_base: str, servers: list[str], n: int, answers: str = "fixed"
) -> list[list[float]]:
    """Latencies in ms: the testbed direct first, then each server; each round asks them all
    the round's query, in a shuffled order."""
    urls = [f"{testbed_base}/searxng/{answers}/20/search"]
    urls += [f"{base}/v1/search" for base in servers]
    times: list[list[float]] = [[] for _ in urls]

    def ask(client: httpx.Client, target: int, query: str) -> None:
        if target == 0:
            client.get(urls[0], params={"q": query, "format": "json"}).raise_for_status()
        else:
            client.post(urls[target], json={"query": query}).raise_for_status()

    with httpx.Client(timeout=10) as client:
        for warm in range(50):  # warm every path
            for target in range(len(urls)):
                ask(client, target, query_of(-1 - warm, answers))
        order = random.Random(13)
        for round_no in range(n):
            query = query_of(round_no, answers)
            # A fresh order each round: no target always goes first, or right after the
            # one that warmed the CPU's caches for it.
            for i in order.sample(range(len(urls)), len(urls)):
                t0 = time.perf_counter()
                ask(client, i, query)
                times[i].append((time.perf_counter() - t0) * 1000)
    return times


def fresh_queries(run: int) -> str:
    """wrk's requests for ``fresh`` answers: each a new query, in this run and in every
    other (one wrk thread here)."""
    return f"""
local n = 0
request = function()
  n = n + 1
  return wrk.format(nil, nil, nil, '{{"query": "{QUERY} w{run}n' .. n .. '"}}')
end
"""


def load(
    searcher_base: str, seconds: int, connections: int, answers: str = "fixed", run: int = 0
) -> dict[str, float]:
    report = wrk.run(
        f"{searcher_base}/v1/search", body={"query": QUERY}, seconds=seconds,
        connections=connections, lua=fresh_queries(run) if answers == "fresh" else "",
    )  # fmt: skip
    return {
        "rps": wrk.requests_per_s(report),
        "p50_ms": wrk.latency_ms(report, "50%"),
        "p99_ms": wrk.latency_ms(report, "99%"),
        "non_2xx": float(wrk.non_2xx(report)),
    }


def arguments() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=1000, help="sequential rounds")
    parser.add_argument("--seconds", type=int, default=15, help="each wrk run")
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument(
        "--workers", default="1,2",
        help="searcher serve --workers for the load runs, comma-separated (default 1,2: "
        "both of issue 26's targets); the sequential rounds always use the first",
    )  # fmt: skip
    parser.add_argument(
        "--no-dedup", action="store_true", help="near-duplicate removal off (provider none)"
    )
    parser.add_argument(
        "--one-backend", action="store_true",
        help="SearXNG alone (the figures before issue 26) instead of SearXNG + Brave",
    )  # fmt: skip
    parser.add_argument(
        "--results", type=int, default=20,
        help="budget.max_results (items in each response; the request default is 5)",
    )  # fmt: skip
    parser.add_argument(
        "--fresh", action="store_true",
        help="a new query each request, written into every snippet of the backend's answer: "
        "what caches of texts and words (the embedder's) see in real traffic",
    )  # fmt: skip
    parser.add_argument("--baseline", metavar="REV", help="an older commit to run beside this one")
    parser.add_argument("--skip-sequential", action="store_true", help="only the wrk load runs")
    return parser.parse_args()


def servers_for(
    stack: contextlib.ExitStack, tb: str, args: argparse.Namespace, workers: int
) -> tuple[list[str], list[str], list[int]]:
    """This tree's server and the baseline's (if any), with ``workers`` workers: names,
    base URLs and pids."""
    answers = "fresh" if args.fresh else "fixed"
    extra = ("--workers", str(workers)) if workers > 1 else ()
    repos = [("this tree", REPO)]
    if args.baseline:
        repos.append((args.baseline, stack.enter_context(checkout(args.baseline))))
    names, bases, pids = [], [], []
    for name, repo in repos:
        conf = config(tb, repo, not args.no_dedup, args.results, answers, not args.one_backend)
        base, pid = stack.enter_context(serving(conf, extra, repo=repo))
        names.append(name)
        bases.append(base)
        pids.append(pid)
    return names, bases, pids


def report_sequential(tb: str, names: list[str], bases: list[str], args) -> None:
    answers = "fresh" if args.fresh else "fixed"
    direct, *through = sequential(tb, bases, args.requests, answers)
    d50 = statistics.median(direct)
    print(f"sequential, {args.requests} interleaved rounds (simple mode, 20 results ranked, "
          f"{args.results} in the response):")  # fmt: skip
    print(f"  {'testbed direct':<22} p50 {d50:7.2f} ms   p99 {percentile(direct, 0.99):7.2f} ms")
    for name, times in zip(names, through, strict=True):
        v50 = statistics.median(times)
        print(f"  {'via ' + name:<22} p50 {v50:7.2f} ms   p99 {percentile(times, 0.99):7.2f} ms"
              f"   added p50 {v50 - d50:6.2f} ms (target <= {ADDED_TARGET_MS:g} ms)")  # fmt: skip


def cpu_seconds(pid: int) -> float:
    """User + system CPU seconds of process ``pid`` and its children that have exited or
    still run (a multi-worker server's workers are its children)."""
    total = 0.0
    tick = os.sysconf("SC_CLK_TCK")
    pids = [pid, *children(pid)]
    for one in pids:
        with contextlib.suppress(OSError):
            fields = Path(f"/proc/{one}/stat").read_text().rsplit(")", 1)[1].split()
            total += (int(fields[11]) + int(fields[12])) / tick
    return total


def children(pid: int) -> list[int]:
    found: list[int] = []
    with contextlib.suppress(OSError):
        for task in Path(f"/proc/{pid}/task").iterdir():
            kids = (task / "children").read_text().split()
            for kid in map(int, kids):
                found += [kid, *children(kid)]
    return found


def report_load(names: list[str], bases: list[str], pids: list[int], workers: int, args) -> None:
    answers = "fresh" if args.fresh else "fixed"
    rounds = 2 if args.baseline else 1
    runs: dict[str, list[dict[str, float]]] = {name: [] for name in names}
    for _ in range(rounds):
        for name, base, pid in zip(names, bases, pids, strict=True):
            run = len(runs[name])
            before = cpu_seconds(pid)
            figures = load(base, args.seconds, args.connections, answers, run + 10 * workers)
            used = cpu_seconds(pid) - before
            figures["cpu_ms"] = 1000 * used / max(1.0, figures["rps"] * args.seconds)
            runs[name].append(figures)
    target = LOAD_TARGETS.get(workers)
    print(f"load: wrk, {args.connections} connections, {workers} worker(s), {rounds} x "
          f"{args.seconds} s each, servers taking turns (medians)"
          + (f"; target >= {target} requests/s:" if target else ":"))  # fmt: skip
    for name, results in runs.items():
        med = {k: statistics.median(r[k] for r in results) for k in results[0]}
        print(f"  {name:<22} {med['rps']:6.0f} requests/s   p50 {med['p50_ms']:6.2f} ms   "
              f"p99 {med['p99_ms']:7.2f} ms   non-2xx {med['non_2xx']:.0f}   "
              f"CPU {med['cpu_ms']:.2f} ms/request")  # fmt: skip


def main() -> None:
    args = arguments()
    worker_counts = [int(w) for w in args.workers.split(",")]
    print(f"backends: {'SearXNG alone' if args.one_backend else 'SearXNG + Brave (fallback)'}; "
          f"near-duplicate removal: {'off' if args.no_dedup else 'on (static model)'}; "
          f"{'fresh' if args.fresh else 'fixed'} answers")  # fmt: skip
    with contextlib.ExitStack() as outer:
        tb = outer.enter_context(testbed())
        for i, workers in enumerate(worker_counts):
            with contextlib.ExitStack() as stack:
                names, bases, pids = servers_for(stack, tb, args, workers)
                if i == 0 and not args.skip_sequential:
                    report_sequential(tb, names, bases, args)
                report_load(names, bases, pids, workers, args)


if __name__ == "__main__":
    main()
