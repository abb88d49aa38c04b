"""Load while the primary backend fails (issue 10, part 5).

``searcher serve`` with SearXNG first and Brave as the fallback, both on the testbed; the
SearXNG answers HTTP 500 to 30 % of calls and never answers 10 % of them
(``/searxng/unreliable/30/10``). wrk drives ``POST /v1/search``:

1. simple mode, 64 connections, 60 s;
2. full mode (3 pages read a request), 16 connections, 60 s.

Printed for each: requests/s, p50/p99, every status wrk saw with its count (only 200, and
the documented 502 when every backend failed, may appear), the server's RSS at start and
end (after a warm-up; growth should stay under 10 %), and in full mode the extraction
worker processes before and after. The machine is shared and noisy: compare within a run.
"""

from __future__ import annotations

import argparse
import contextlib
import re
from pathlib import Path

import httpx

from bench import wrk
from bench.processes import STATIC_MODEL, serving, testbed

QUERY = "cloud gaming"


def config(testbed_base: str) -> dict:
    return {
        "backends": {
            "order": ["searxng", "brave"],
            "searxng": {"base_url": f"{testbed_base}/searxng/unreliable/30/10"},
            "brave": {"base_url": f"{testbed_base}/brave", "api_key": "test-key"},
            "duckduckgo": {"enabled": False},
        },
        "fetch": {"allowed_hosts": [testbed_base.removeprefix("http://")]},
        # No caches: every request goes to the backends (the failing one included).
        "service": {"cache": {"enabled": False}},
        "cache": {"enabled": False},
        "embeddings": {"model": str(STATIC_MODEL)},
    }


def children(pid: int) -> list[int]:
    """Direct child processes of ``pid`` (the extraction workers)."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            with contextlib.suppress(OSError):
                stat = (entry / "stat").read_text()
                if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
                    found.append(int(entry.name))
    return found


def rss_mb(pids: list[int]) -> float:
    total = 0
    for pid in pids:
        with contextlib.suppress(OSError):
            status = Path(f"/proc/{pid}/status").read_text()
            match = re.search(r"^VmRSS:\s+(\d+) kB", status, re.M)
            total += int(match[1]) if match else 0
    return total / 1024


def load(base: str, body: dict, connections: int, seconds: int) -> dict:
    report = wrk.run(
        f"{base}/v1/search", body=body, seconds=seconds, connections=connections,
        lua=wrk.COUNT_STATUSES, timeout_s=30,
    )  # fmt: skip
    return {
        "rps": wrk.requests_per_s(report),
        "p50_ms": wrk.latency_ms(report, "50%"),
        "p99_ms": wrk.latency_ms(report, "99%"),
        "statuses": wrk.statuses(report),
        "socket_errors": wrk.socket_errors(report),
    }


def run(tb: str, label: str, body: dict, connections: int, seconds: int) -> None:
    with serving(config(tb), ready_s=60) as (base, pid):
        for _ in range(20):  # warm-up: models, pools, the extraction workers
            httpx.post(f"{base}/v1/search", json=body, timeout=60)
        workers_before = children(pid)
        rss_before = rss_mb([pid])
        tree_before = rss_mb([pid, *workers_before])
        result = load(base, body, connections, seconds)
        workers_after = children(pid)
        rss_after = rss_mb([pid])
        tree_after = rss_mb([pid, *workers_after])
        health = httpx.get(f"{base}/v1/health", timeout=10).json()
    print(f"{label}: wrk, {connections} connections, {seconds} s")
    print(f"  {result['rps']:.0f} requests/s   p50 {result['p50_ms']:.1f} ms   "
          f"p99 {result['p99_ms']:.1f} ms   socket errors: {result['socket_errors']}")  # fmt: skip
    statuses = "  ".join(f"{code}: {n}" for code, n in sorted(result["statuses"].items()))
    print(f"  statuses: {statuses}")
    print(f"  server RSS {rss_before:.1f} -> {rss_after:.1f} MB "
          f"({(rss_after / rss_before - 1) * 100:+.1f} %)")  # fmt: skip
    print(f"  process tree RSS {tree_before:.1f} -> {tree_after:.1f} MB "
          f"({(tree_after / tree_before - 1) * 100:+.1f} %)")  # fmt: skip
    print(f"  child processes (extraction workers) {len(workers_before)} -> {len(workers_after)}")
    searxng = health["backends"].get("searxng", {})
    print(f"  searxng breaker after the run: {searxng.get('breaker')}, "
          f"last error: {searxng.get('last_error')}")  # fmt: skip


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--seconds", type=int, default=60)
    parser.add_argument("--connections", type=int, default=64)
    parser.add_argument("--full-connections", type=int, default=16)
    args = parser.parse_args()
    print("primary SearXNG: 30 % HTTP 500, 10 % hang; fallback: Brave (testbed)")
    with testbed() as tb:
        run(tb, "simple mode", {"query": QUERY}, args.connections, args.seconds)
        full = {
            "query": QUERY,
            "constraints": {"search_mode": "full"},
            "budget": {"max_fetch_pages": 3},
        }
        run(tb, "full mode", full, args.full_connections, args.seconds)


if __name__ == "__main__":
    main()
