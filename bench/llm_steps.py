"""What each LLM step adds to a request (issue 4's benchmark).

searcher runs as its own process against the testbed: SearXNG answers after
``--search-ms`` (default 300 ms) and the scripted chat API after ``--llm-ms`` (default
200 ms), with valid replies for every step. Requests alternate, side by side in one run,
between simple mode and simple mode plus one step: rewrite, snippet ranking, multi-query
(N = 3) and the cited answer. Printed: the median of each and what the step adds. The
multi-query row also shows whether its three searches ran at once: one LLM call plus one
search's time, not one plus three.

With ``--real``: the steps' quality with a real small model instead (SmolLM2-135M served
by llama-cpp-python; ``bench/llm_real.py``, issue 31's figures).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import statistics
import time
from typing import Any

import httpx

from bench import llm_real
from bench.processes import STATIC_MODEL, searcher, testbed
from tests.testbed.chat import script

QUERY = "Google Stadia Microsoft xCloud Apple Arcade games"
PERSPECTIVES = {
    "perspectives": [
        {"type": "technical", "query": "cloud gaming streaming latency", "confidence": 0.9},
        {"type": "user", "query": "which game subscription to buy", "confidence": 0.8},
        {"type": "conceptual", "query": "game streaming business model", "confidence": 0.7},
    ]
}
STEPS: dict[str, tuple[dict[str, Any], str]] = {
    "rewrite": ({"constraints": {"rewrite": True}}, "stadia xcloud arcade comparison"),
    "rank": ({"constraints": {"rank": "llm"}}, '{"pick":[2,0,1]}'),
    "multi-query N=3": ({"constraints": {"multi_query": 3}}, json.dumps(PERSPECTIVES)),
    "answer": ({"want": {"answer": True}}, "Stadia and xCloud stream games [1][2]."),
}
STEP_NAMES = {"rewrite": "rewrite", "rank": "rank", "multi-query N=3": "multi_query"}


def config(testbed_base: str, search_ms: int, llm_ms: int) -> dict[str, Any]:
    steps = {
        STEP_NAMES.get(label, "answer"): {"model": script(reply=reply, delay_ms=llm_ms)}
        for label, (_, reply) in STEPS.items()
    }
    return {
        "backends": {
            "order": ["searxng"],
            "max_pages": 1,  # one backend call per search: auto-paging would blur the steps
            "searxng": {"base_url": f"{testbed_base}/searxng/slow/{search_ms}"},
            "duckduckgo": {"enabled": False},
        },
        "service": {"cache": {"enabled": False}},
        "cache": {"enabled": False},  # no result cache: every request is computed
        "embeddings": {"model": str(STATIC_MODEL)},
        "llm": {"base_url": f"{testbed_base}/llm/v1", "model": script(status=503), "steps": steps},
    }


def timed(client: httpx.Client, base: str, body: dict[str, Any]) -> float:
    t0 = time.perf_counter()
    response = client.post(f"{base}/v1/search", json=body)
    elapsed = (time.perf_counter() - t0) * 1000
    response.raise_for_status()
    meta = response.json()["meta"]
    failed = [c for c in meta["llm"] if c["fallback_used"]]
    if failed:
        raise SystemExit(f"a step took its fallback, the figures would be wrong: {failed}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15)
    parser.add_argument("--search-ms", type=int, default=300)
    parser.add_argument("--llm-ms", type=int, default=200)
    parser.add_argument("--real", action="store_true", help="bench.llm_real: SmolLM2-135M")
    parser.add_argument("--questions", type=int, default=6, help="with --real: HotpotQA")
    args = parser.parse_args()
    if args.real:
        asyncio.run(llm_real.main_async(args))
        return
    simple = {"query": QUERY}
    bodies = {label: {"query": QUERY, **extra} for label, (extra, _) in STEPS.items()}
    times: dict[str, list[float]] = {"simple": [], **{label: [] for label in bodies}}
    with (
        testbed() as tb,
        searcher(config(tb, args.search_ms, args.llm_ms)) as base,
        httpx.Client(timeout=30) as client,
    ):
        for body in (simple, *bodies.values()):  # warm up
            timed(client, base, body)
        for _ in range(args.runs):
            times["simple"].append(timed(client, base, simple))
            for label, body in bodies.items():
                times[label].append(timed(client, base, body))
    base_ms = statistics.median(times["simple"])
    print(
        f"LLM steps over simple mode; search {args.search_ms} ms, LLM {args.llm_ms} ms, "
        f"{args.runs} requests each, medians:"
    )
    print(f"  {'simple mode':<18} {base_ms:7.0f} ms")
    for label in bodies:
        p50 = statistics.median(times[label])
        print(f"  {label:<18} {p50:7.0f} ms   adds {p50 - base_ms:+5.0f} ms")
    multi = statistics.median(times["multi-query N=3"])
    one_by_one = base_ms + args.llm_ms + 2 * args.search_ms
    verdict = (
        "concurrent" if multi < base_ms + args.llm_ms + args.search_ms / 2 else "NOT concurrent"
    )
    print(
        f"  multi-query: {multi:.0f} ms against {base_ms + args.llm_ms:.0f} ms for one LLM call "
        f"plus one search, {one_by_one:.0f} ms if the three searches ran one after another "
        f"-> {verdict}"
    )


if __name__ == "__main__":
    main()
