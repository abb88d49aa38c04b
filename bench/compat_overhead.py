"""What each compatibility endpoint adds over ``POST /v1/search`` (issue 5's benchmark).

One ``searcher serve`` process in front of the testbed's SearXNG, which answers at once
with 20 results (as ``bench.overhead``); the same query asked through every contract in
turn, interleaved, so that each round sees the same machine. Printed: the p50 of each
endpoint and its difference from ``/v1/search`` (target: under 2 ms).

MCP is called as a client would over streamable HTTP: one JSON-RPC ``tools/call`` POST to
``/mcp`` (searcher runs it stateless, so no session set-up is needed per call).
"""

from __future__ import annotations

import argparse
import statistics
import time
from collections.abc import Callable

import httpx

from bench.overhead import QUERY, config
from bench.processes import percentile, searcher, testbed

MCP_HEADERS = {
    "accept": "application/json, text/event-stream",
    "mcp-protocol-version": "2025-06-18",
}


def calls(client: httpx.Client, base: str) -> dict[str, Callable[[], httpx.Response]]:
    rpc = {
        "jsonrpc": "2.0",
        "id": 1,
        "method": "tools/call",
        "params": {"name": "web_search", "arguments": {"query": QUERY, "max_results": 20}},
    }
    return {
        "POST /v1/search": lambda: client.post(f"{base}/v1/search", json={"query": QUERY}),
        "GET /search (SearXNG)": lambda: client.get(
            f"{base}/search", params={"q": QUERY, "format": "json", "max_results": 20}
        ),
        "POST /tavily/search": lambda: client.post(
            f"{base}/tavily/search", json={"query": QUERY, "max_results": 20}
        ),
        "POST /openwebui/search": lambda: client.post(
            f"{base}/openwebui/search", json={"query": QUERY, "count": 20}
        ),
        "POST /mcp web_search": lambda: client.post(f"{base}/mcp", json=rpc, headers=MCP_HEADERS),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=300)
    args = parser.parse_args()
    with (
        testbed() as tb,
        searcher(config(tb)) as base,
        httpx.Client(timeout=10) as client,
    ):
        endpoints = calls(client, base)
        answer = endpoints["POST /mcp web_search"]().json()
        if "result" not in answer or answer["result"].get("isError"):
            raise SystemExit(f"MCP web_search did not answer with results: {answer}")
        for call in endpoints.values():
            for _ in range(30):  # warm up every path
                call().raise_for_status()
        times: dict[str, list[float]] = {name: [] for name in endpoints}
        for _ in range(args.rounds):
            for name, call in endpoints.items():
                t0 = time.perf_counter()
                call().raise_for_status()
                times[name].append((time.perf_counter() - t0) * 1000)
    base_p50 = statistics.median(times["POST /v1/search"])
    print(f"endpoints over POST /v1/search, 20 results, {args.rounds} rounds interleaved:")
    for name, values in times.items():
        p50 = statistics.median(values)
        added = "" if name == "POST /v1/search" else f"   adds {p50 - base_p50:+.2f} ms"
        print(f"  {name:<24} p50 {p50:6.2f} ms   p90 {percentile(values, 0.9):6.2f} ms{added}")


if __name__ == "__main__":
    main()
