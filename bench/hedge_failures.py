"""Failures behind hedging (issue 10's probes), against ``searcher serve`` and the testbed
in their own processes on 127.0.0.1. Printed, for each scenario: requests made, calls that
reached the failing SearXNG, responses whose ``meta.errors`` name it, and its breaker as
``/v1/health`` shows it at the end.

1. SearXNG answers 500, Brave answers; hedge delay 1 ms; 11 sequential requests.
2. SearXNG hangs (timeout 2 s), Brave answers; hedge delay 1 ms; 16 concurrent clients
   for ``--seconds``: when did the breaker open, how many calls reached SearXNG.
"""

from __future__ import annotations

import argparse
import asyncio
import time

import httpx

from bench.overhead import QUERY
from bench.processes import searcher, testbed
from tests.conftest import STATIC_MODEL


def config(tb: str, searxng_behaviour: str, timeout_s: float = 8.0) -> dict:
    return {
        "backends": {
            "order": ["searxng", "brave"],
            "hedge_delay_ms": 1,
            "searxng": {"base_url": f"{tb}/searxng/{searxng_behaviour}", "timeout_s": timeout_s},
            "brave": {"base_url": f"{tb}/brave", "api_key": "test-key"},
            "duckduckgo": {"enabled": False},
        },
        "service": {"cache": {"enabled": False}},
        "cache": {"enabled": False},  # no result cache: every request is computed
        "embeddings": {"model": str(STATIC_MODEL)},
    }


def searxng_calls(tb: str, behaviour: str) -> int:
    log = httpx.get(f"{tb}/_log").json()
    return sum(1 for e in log if e["path"] == f"/searxng/{behaviour}/search")


def names_searxng(data: dict) -> bool:
    return any(e["source"] == "searxng" for e in data.get("meta", {}).get("errors", []))


def report(title: str, requests: int, calls: int, named: int, health: dict) -> None:
    sx = health["backends"]["searxng"]
    print(f"{title}")
    print(f"  requests {requests}, calls reaching SearXNG {calls}, responses naming it {named}")
    print(f"  breaker {sx['breaker']}, failures by kind {sx['failures_by_kind']}")


def failing(rounds: int) -> None:
    with testbed() as tb, searcher(config(tb, "status/500")) as base:
        httpx.post(f"{tb}/_reset")
        named = 0
        for _ in range(rounds):
            data = httpx.post(f"{base}/v1/search", json={"query": QUERY}, timeout=30).json()
            named += names_searxng(data)
        health = httpx.get(f"{base}/v1/health").json()
        report("1. SearXNG on 500, hedged", rounds, searxng_calls(tb, "status/500"), named, health)


async def hanging(seconds: float, clients: int) -> None:
    with testbed() as tb, searcher(config(tb, "hang", timeout_s=2.0)) as base:
        httpx.post(f"{tb}/_reset")
        counts = {"requests": 0, "named": 0, "errors": 0}
        opened_at: list[float] = []
        started = time.monotonic()
        async with httpx.AsyncClient(timeout=30) as client:

            async def worker() -> None:
                while time.monotonic() - started < seconds:
                    response = await client.post(f"{base}/v1/search", json={"query": QUERY})
                    counts["requests"] += 1
                    if response.status_code != 200:
                        counts["errors"] += 1
                        continue
                    counts["named"] += names_searxng(response.json())

            async def watch() -> None:
                while time.monotonic() - started < seconds and not opened_at:
                    health = (await client.get(f"{base}/v1/health")).json()
                    if health["backends"]["searxng"]["breaker"] == "open":
                        opened_at.append(time.monotonic() - started)
                    await asyncio.sleep(0.1)

            await asyncio.gather(watch(), *(worker() for _ in range(clients)))
            health = (await client.get(f"{base}/v1/health")).json()
        calls = searxng_calls(tb, "hang")
        report(f"2. SearXNG hanging (timeout 2 s), hedged, {clients} clients for {seconds:.0f} s",
               counts["requests"], calls, counts["named"], health)  # fmt: skip
        when = f"{opened_at[0]:.1f} s" if opened_at else "never"
        print(f"  breaker opened after {when}; non-200 responses {counts['errors']}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--rounds", type=int, default=11)
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--clients", type=int, default=16)
    args = parser.parse_args()
    failing(args.rounds)
    asyncio.run(hanging(args.seconds, args.clients))


if __name__ == "__main__":
    main()
