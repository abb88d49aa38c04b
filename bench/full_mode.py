"""Full mode's latency against its slowest page (issues 2 and 26).

Ten result pages on the testbed answer after delays spread from 50 to 400 ms, the slowest
last in rank order; searcher (a separate process, no cache) fetches and extracts all ten
per request. Each page is extracted as soon as its bytes are in, so a request should take
about the slowest page, not the sum of them: the target is 1.2 x the slowest page + 100 ms.

What is measured: the time of ``POST /v1/search`` (full mode, 10 results, 10 pages) from
this client, end to end (search, ranking, reading, passages, pack), and the server's own
``meta.timing_ms.fetch`` (reading the ten pages). With ``--baseline REV`` an older
commit's server runs beside this one and the requests alternate between them, so the
figures are side by side in one run on a noisy machine.
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time
from pathlib import Path
from urllib.parse import urlsplit

import httpx

from bench.processes import REPO, STATIC_MODEL, checkout, has_result_cache, percentile, searcher
from bench.processes import testbed as start_testbed

LOW_MS, HIGH_MS = 50, 400
BODY = {
    "query": "news",
    "constraints": {"search_mode": "full"},
    "budget": {"max_results": 10, "max_fetch_pages": 10},
}


def config(testbed_base: str, repo: Path = REPO) -> dict:
    return {
        "backends": {
            "order": ["searxng"],
            "searxng": {"base_url": f"{testbed_base}/searxng/delayed/{LOW_MS}/{HIGH_MS}"},
            "duckduckgo": {"enabled": False},
        },
        "fetch": {"allowed_hosts": [urlsplit(testbed_base).netloc]},
        "service": {"cache": {"enabled": False}},
        # No result cache: every request is computed.
        **({"cache": {"enabled": False}} if has_result_cache(repo) else {}),
        "embeddings": {"model": str(STATIC_MODEL)},
        "scoring": {"min_keyword_overlap": 0},  # every one of the ten pages is read
    }


def ask(client: httpx.Client, base: str) -> tuple[float, int, int]:
    """One request: its time in ms, the server's fetch time, the pages it read."""
    t0 = time.perf_counter()
    data = client.post(f"{base}/v1/search", json=BODY).json()
    total = (time.perf_counter() - t0) * 1000
    return total, data["meta"]["timing_ms"]["fetch"], data["usage"]["fetch_pages_used"]


def report(name: str, runs: list[tuple[float, int, int]]) -> None:
    totals = [r[0] for r in runs]
    target = 1.2 * HIGH_MS + 100
    p50 = statistics.median(totals)
    print(f"  {name:<14} end to end p50 {p50:4.0f} ms  p90 {percentile(totals, 0.9):4.0f} ms  "
          f"fetch+extract p50 {statistics.median(r[1] for r in runs):4.0f} ms  "
          f"p50/slowest {p50 / HIGH_MS:.2f}  {'meets' if p50 <= target else 'misses'} "
          f"target  pages read {min(r[2] for r in runs)}-{max(r[2] for r in runs)}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=20)
    parser.add_argument("--baseline", metavar="REV", help="an older commit to run beside this one")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        tb = stack.enter_context(start_testbed())
        servers = {"this tree": stack.enter_context(searcher(config(tb)))}
        if args.baseline:
            old = stack.enter_context(checkout(args.baseline))
            servers[args.baseline] = stack.enter_context(searcher(config(tb, old), repo=old))
        client = stack.enter_context(httpx.Client(timeout=30))
        for base in servers.values():
            for _ in range(3):  # warm the extraction workers
                ask(client, base)
        runs: dict[str, list[tuple[float, int, int]]] = {name: [] for name in servers}
        for _ in range(args.runs):  # alternating: both see the same noise
            for name, base in servers.items():
                runs[name].append(ask(client, base))
    target = 1.2 * HIGH_MS + 100
    print(f"full mode, 10 pages delayed {LOW_MS}-{HIGH_MS} ms (slowest last), {args.runs} "
          f"requests each; target <= {target:.0f} ms (1.2 x slowest + 100):")  # fmt: skip
    for name, measured in runs.items():
        report(name, measured)


if __name__ == "__main__":
    main()
