"""What a broken or hostile SearXNG answer costs one search, and the server's memory.

Each case is a testbed SearXNG behaviour (``tests/testbed/searxng.py``) that one
``searcher serve`` (simple mode, result cache off, the static model loaded) is pointed
at; a few searches are asked one after another and the median time is printed with the
server's peak resident memory (VmHWM) after them. With ``--baseline REV`` an older
commit's server answers the same cases beside this tree's.

- 20 canned results: what a normal answer costs, for scale;
- 5,000 results on one page;
- 1,000 results each named by the same 16 engines at positions that disagree;
- 20 results, the first with a 4 MB snippet of words never seen before.

    PYTHONPATH=. .venv/bin/python -m bench.hostile_answers [--baseline REV] [--requests N]
"""

from __future__ import annotations

import argparse
import contextlib
import statistics
import time

import httpx

from bench.overhead import QUERY, config
from bench.processes import REPO, checkout, peak_memory_kb, serving, testbed

CASES = (
    ("20 canned results", "fixed/20"),
    ("5,000 results", "fixed/5000"),
    ("1,000 results x 16 engines, positions disagreeing", "crowded/1000/16"),
    ("a 4 MB snippet of new words", "long-snippet/4096"),
)


def measure(base: str, pid: int, requests: int) -> tuple[float, float, list[str]]:
    """(median seconds per search, peak RSS in MB, what meta.errors said)."""
    times, said = [], []
    with httpx.Client(timeout=600) as client:
        for round_no in range(requests):
            t0 = time.perf_counter()
            try:
                response = client.post(f"{base}/v1/search", json={"query": f"{QUERY} {round_no}"})
            except httpx.HTTPError as exc:  # what an old commit may do under such an answer
                times.append(time.perf_counter() - t0)
                said = [f"no answer: {type(exc).__name__}: {exc}"]
                continue
            times.append(time.perf_counter() - t0)
            if response.status_code == 200:
                said = [e["reason"] for e in response.json()["meta"]["errors"]]
            else:
                said = [f"HTTP {response.status_code}: {response.text[:80]}"]
    return statistics.median(times), peak_memory_kb(pid) / 1024, said


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=3, help="searches per case")
    parser.add_argument("--baseline", metavar="REV", help="an older commit to run beside this one")
    parser.add_argument(
        "--only", metavar="TEXT", default="", help="the cases whose label contains TEXT"
    )
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        tb = stack.enter_context(testbed())
        trees = [("this tree", REPO)]
        if args.baseline:
            trees.append((args.baseline, stack.enter_context(checkout(args.baseline))))
        print(f"{'case':52} {'tree':10} {'search (median)':>16} {'peak RSS':>10}")
        for label, behaviour in [c for c in CASES if args.only in c[0]]:
            for name, repo in trees:
                settings = config(tb, repo)
                settings["backends"]["searxng"]["base_url"] = f"{tb}/searxng/{behaviour}"
                with serving(settings, repo=repo) as (base, pid):
                    seconds, rss, said = measure(base, pid, args.requests)
                print(f"{label:52} {name[:10]:10} {seconds:14.3f} s {rss:7.0f} MB")
                for reason in said:
                    if not reason.startswith("engine "):  # the testbed's engines are fine
                        print(f"{'':64}meta.errors: {reason[:90]}")


if __name__ == "__main__":
    main()
