"""What searcher adds in front of a backend that answers at once (issue 2's benchmark).

1. Sequential: the same SearXNG-format request asked of the testbed directly and through
   ``searcher serve`` (simple mode, no cache), interleaved; p50 of each and the difference.
2. Load: wrk with 32 connections for 15 s against ``POST /v1/search``: requests/s, p50, p99.
Both servers run as separate processes on 127.0.0.1; wrk (Debian package ``wrk``) too.
"""

from __future__ import annotations

import argparse
import json
import re
import shutil
import statistics
import subprocess
import tempfile
import time
from pathlib import Path

import httpx

from bench.processes import STATIC_MODEL, percentile, searcher, testbed

QUERY = "cloud gaming"


def config(testbed_base: str, dedup: bool = True) -> dict:
    embeddings = {"model": str(STATIC_MODEL)} if dedup else {"provider": "none"}
    return {
        "backends": {
            "order": ["searxng"],
            "searxng": {"base_url": f"{testbed_base}/searxng/fixed/20"},
            "duckduckgo": {"enabled": False},
        },
        "service": {"cache": {"enabled": False}},
        "budget": {"max_results": 20},
        # Near-duplicate removal with the offline model (a hub name cannot load here).
        "embeddings": embeddings,
    }


def sequential(testbed_base: str, searcher_base: str, n: int) -> tuple[list[float], list[float]]:
    direct_ms, via_ms = [], []
    body = {"query": QUERY}
    params = {"q": QUERY, "format": "json"}
    with httpx.Client(timeout=10) as client:
        for _ in range(50):  # warm both paths
            client.get(f"{testbed_base}/searxng/fixed/20/search", params=params)
            client.post(f"{searcher_base}/v1/search", json=body)
        for _ in range(n):
            t0 = time.perf_counter()
            client.get(f"{testbed_base}/searxng/fixed/20/search", params=params).raise_for_status()
            t1 = time.perf_counter()
            client.post(f"{searcher_base}/v1/search", json=body).raise_for_status()
            t2 = time.perf_counter()
            direct_ms.append((t1 - t0) * 1000)
            via_ms.append((t2 - t1) * 1000)
    return direct_ms, via_ms


def _wrk_ms(text: str, label: str) -> float:
    match = re.search(rf"^\s*{label}\s+([\d.]+)(us|ms|s)\s*$", text, re.M)
    if not match:
        return float("nan")
    value, unit = float(match[1]), match[2]
    return value / 1000 if unit == "us" else value * 1000 if unit == "s" else value


def load(searcher_base: str, seconds: int, connections: int) -> dict[str, float]:
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install wrk")
    body = json.dumps({"query": QUERY})
    script = (
        'wrk.method = "POST"\n'
        f"wrk.body = {json.dumps(body)}\n"
        'wrk.headers["Content-Type"] = "application/json"\n'
    )
    with tempfile.TemporaryDirectory() as tmp:
        lua = Path(tmp) / "post.lua"
        lua.write_text(script)
        out = subprocess.run(
            ["wrk", "-t1", f"-c{connections}", f"-d{seconds}s", "--latency", "-s", str(lua),
             f"{searcher_base}/v1/search"],
            capture_output=True, text=True, check=True,
        ).stdout  # fmt: skip
    rps = re.search(r"Requests/sec:\s+([\d.]+)", out)
    errors = re.search(r"Non-2xx or 3xx responses: (\d+)", out)
    return {
        "rps": float(rps[1]) if rps else float("nan"),
        "p50_ms": _wrk_ms(out, "50%"),
        "p99_ms": _wrk_ms(out, "99%"),
        "non_2xx": float(errors[1]) if errors else 0.0,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--requests", type=int, default=1000, help="sequential pairs")
    parser.add_argument("--seconds", type=int, default=15)
    parser.add_argument("--connections", type=int, default=32)
    parser.add_argument("--workers", type=int, default=1, help="searcher serve --workers")
    parser.add_argument(
        "--no-dedup", action="store_true", help="near-duplicate removal off (provider none)"
    )
    args = parser.parse_args()
    with testbed() as tb:
        extra = ("--workers", str(args.workers)) if args.workers > 1 else ()
        print(f"near-duplicate removal: {'off' if args.no_dedup else 'on (static model)'}")
        with searcher(config(tb, dedup=not args.no_dedup), extra) as base:
            direct, via = sequential(tb, base, args.requests)
            d50, v50 = statistics.median(direct), statistics.median(via)
            print(f"sequential, {args.requests} interleaved pairs (simple mode, 20 results):")
            print(f"  testbed direct   p50 {d50:7.2f} ms   p99 {percentile(direct, 0.99):7.2f} ms")
            print(f"  through searcher p50 {v50:7.2f} ms   p99 {percentile(via, 0.99):7.2f} ms")
            print(f"  overhead at p50  {v50 - d50:7.2f} ms   (target <= 3 ms)")
            result = load(base, args.seconds, args.connections)
            print(f"load: wrk, {args.connections} connections, {args.seconds} s, "
                  f"{args.workers} searcher worker(s):")  # fmt: skip
            print(f"  {result['rps']:.0f} requests/s   p50 {result['p50_ms']:.2f} ms   "
                  f"p99 {result['p99_ms']:.2f} ms   non-2xx {result['non_2xx']:.0f}"
                  "   (target >= 500 req/s)")  # fmt: skip


if __name__ == "__main__":
    main()
