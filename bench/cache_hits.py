"""What a result-cache hit costs, against the same request computed (issue 13).

``searcher serve --workers 2`` in its own process, SearXNG-shaped backend in the testbed
(``/searxng/fixed/20``: 20 results at once), state embedded (SQLite) and in a real
``redis-server``. For each engine, side by side in one run:

- inside the service: 1,000 hits of ``serve_cached`` in-process on the same state
  (lookup, JSON decoding, validation, the response's meta; no HTTP), p50 and p90
- wrk, 2 workers: requests/s and p50 of the same request as a hit, and with
  ``constraints.cache: "off"`` (computed every time)

Targets (issue 13): a hit <= 1 ms p50 inside the service, >= 1,500 hits/s with 2 workers.
Run: ``python -m bench.cache_hits [--seconds 10 --connections 16]``.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import shutil
import statistics
import tempfile
import time
from collections.abc import Iterator

import httpx

from bench import wrk
from bench.processes import STATIC_MODEL, percentile, searcher, testbed
from searcher.cache.results import ResultCache, serve_cached
from searcher.config import ResultCacheSettings, StateSettings
from searcher.contract import SearchRequest, SearchResponse
from searcher.state import build_store
from tests.redis_server import RedisServer

QUERY = "cloud gaming"
HIT = {"query": QUERY, "budget": {"max_results": 20}}
COMPUTED = {**HIT, "constraints": {"cache": "off"}}


def config(testbed_base: str, state: dict) -> dict:
    return {
        "backends": {
            "order": ["searxng"],
            "searxng": {"base_url": f"{testbed_base}/searxng/fixed/20"},
            "duckduckgo": {"enabled": False},
        },
        "service": {"cache": {"enabled": False}},
        "embeddings": {"model": str(STATIC_MODEL)},
        "state": state,
    }


def load(base: str, body: dict, seconds: int, connections: int) -> tuple[float, float]:
    """(requests/s, p50 ms) of wrk posting ``body``."""
    report = wrk.run(
        f"{base}/v1/search", body=body, seconds=seconds, connections=connections, threads=2
    )
    if wrk.non_2xx(report):
        raise SystemExit(f"wrk saw errors:\n{report}")
    return wrk.requests_per_s(report), wrk.latency_ms(report, "50%")


def inside(base: str, state: dict, n: int = 1000) -> list[float]:
    """Milliseconds of ``n`` hits of ``serve_cached`` in this process (lookup, decoding,
    the response's own meta), on the same state the server uses, without HTTP."""
    with httpx.Client(timeout=10) as client:
        data = client.post(f"{base}/v1/search", json=HIT).json()
    request = SearchRequest.model_validate(HIT)
    response = SearchResponse.model_validate(data)

    async def compute() -> SearchResponse:
        raise AssertionError("a hit must not compute")

    async def run() -> list[float]:
        store = build_store(StateSettings.model_validate(state))
        cache = ResultCache(store, ResultCacheSettings(), "bench")
        await cache.store(request, response, complete=True)
        times = []
        for _ in range(n):
            t0 = time.perf_counter()
            await serve_cached(cache, request, compute)
            times.append((time.perf_counter() - t0) * 1000)
        await store.aclose()
        return times

    return asyncio.run(run())


@contextlib.contextmanager
def engine(name: str) -> Iterator[dict]:
    if name == "redis":
        with RedisServer() as server:
            yield {"redis_url": server.url}
    else:
        with tempfile.TemporaryDirectory() as tmp:
            yield {"dir": tmp}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--seconds", type=int, default=10)
    parser.add_argument("--connections", type=int, default=16)
    args = parser.parse_args()
    if shutil.which("wrk") is None:
        raise SystemExit("wrk is not installed: apt-get install wrk")
    print(f"wrk: 2 threads, {args.connections} connections, {args.seconds} s; "
          "searcher serve --workers 2")  # fmt: skip
    print(f"{'state':<9} {'inside p50/p90 ms':>18} {'hit req/s':>10} {'hit p50':>8} "
          f"{'computed req/s':>15} {'computed p50':>13} {'ratio':>6}")  # fmt: skip
    with testbed() as tb:
        for name in ("sqlite", "redis"):
            with (
                engine(name) as state,
                searcher(config(tb, state), ("--workers", "2"), 180) as base,
            ):
                times = inside(base, state)
                hit_rps, hit_p50 = load(base, HIT, args.seconds, args.connections)
                cold_rps, cold_p50 = load(base, COMPUTED, args.seconds, args.connections)
                print(
                    f"{name:<9} {statistics.median(times):8.2f} / {percentile(times, 0.9):5.2f}"
                    f" {hit_rps:10.0f} {hit_p50:6.2f}ms {cold_rps:15.0f} {cold_p50:11.2f}ms"
                    f" {hit_rps / cold_rps:5.1f}x"
                )


if __name__ == "__main__":
    main()
