"""Crawl throughput: ``POST /v1/crawl`` through a real ``searcher serve`` on the testbed's
wide site (``/crawl/wide/``: one index linking ``--pages`` pages, each with its own
paragraphs), politeness delay 0, robots.txt read, every page fetched, extracted and
checked for near duplicates. Pages/s end to end (202 to the ``done`` event) and the p50 /
p90 gap between two ``page`` events, at crawl.concurrency 1 and 4 (per host as many).

    python -m bench.crawl [--pages 100] [--runs 3]
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import statistics
import time
from urllib.parse import urlsplit

import httpx

from bench.processes import STATIC_MODEL, searcher
from bench.processes import testbed as start_testbed


def config(testbed_base: str, concurrency: int) -> dict:
    return {
        "backends": {"duckduckgo": {"enabled": False}},
        "fetch": {"allowed_hosts": [urlsplit(testbed_base).netloc]},
        "service": {"cache": {"enabled": False}},
        "embeddings": {"model": str(STATIC_MODEL)},
        "crawl": {"politeness_delay_s": 0, "concurrency": concurrency,
                  "per_host_concurrency": concurrency},
    }  # fmt: skip


def crawl_once(base: str, root: str, pages: int) -> tuple[float, list[float], int]:
    """One crawl: its seconds end to end, the gaps between page events, pages read."""
    body = {"url": root, "max_depth": 1, "max_breadth": pages, "limit": pages + 1}
    started = time.perf_counter()
    job = httpx.post(f"{base}/v1/crawl", json=body, timeout=30).json()["id"]
    arrivals = []
    with httpx.stream("GET", f"{base}/v1/crawl/{job}/events", timeout=300) as events:
        for line in events.iter_lines():
            if line == "event: page":
                arrivals.append(time.perf_counter())
            elif line == "event: done":
                break
    elapsed = time.perf_counter() - started
    gaps = [b - a for a, b in itertools.pairwise(arrivals)]
    return elapsed, gaps, len(arrivals)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--pages", type=int, default=100)
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        tb = stack.enter_context(start_testbed())
        for concurrency in (1, 4):
            base = stack.enter_context(searcher(config(tb, concurrency)))
            rates, gaps, read = [], [], []
            for run in range(args.runs):
                # The extraction cache is off (config): every run reads every page.
                root = f"{tb}/crawl/wide/?n={args.pages}&run={run}"
                elapsed, run_gaps, pages = crawl_once(base, root, args.pages)
                rates.append(pages / elapsed)
                gaps.extend(run_gaps)
                read.append(pages)
            gaps.sort()
            p90 = gaps[int(0.9 * (len(gaps) - 1))] if gaps else 0.0
            print(f"  concurrency {concurrency}: {statistics.median(rates):6.1f} pages/s "
                  f"(median of {args.runs}), gap between pages p50 "
                  f"{1000 * statistics.median(gaps):5.1f} ms p90 {1000 * p90:5.1f} ms, "
                  f"pages read {min(read)}-{max(read)}")  # fmt: skip


if __name__ == "__main__":
    main()
