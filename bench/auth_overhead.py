"""What API keys, rate limiting, metrics and access logs cost on the simple path (issue 13).

``searcher serve`` processes side by side, the same backend (the testbed's
SearXNG-shaped ``/searxng/fixed/20``), the result cache off so every request is computed:

- bare: ``auth.enabled: false``, ``metrics.enabled: false``, ``logging.access: false``;
- metrics + log: Prometheus metrics and one JSON access line per request (to /dev/null,
  as a service would to a pipe);
- keys + rate: a key required (``Authorization: Bearer``, created with ``searcher keys
  create`` in the servers' SQLite state), its token bucket and usage counter written on
  every request;
- guarded (all): both.

Every round asks the testbed directly and each server, in a shuffled order; p50 of each and what
each variant adds over bare (target for all of it: <= 0.3 ms).

    python -m bench.auth_overhead [--requests 1000]
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import httpx
import yaml

from bench.overhead import QUERY, config
from bench.processes import REPO, percentile, searcher, testbed


def variant(testbed_base: str, state_dir: str, auth: bool, observe: bool) -> dict:
    """The simple-path config with keys (and their bucket) and/or metrics + access log."""
    return {
        **config(testbed_base, REPO),
        "auth": {"enabled": auth},
        "metrics": {"enabled": observe},
        "logging": {"access": observe},
        "state": {"dir": state_dir},
    }


VARIANTS = {  # name: (auth, metrics and access log)
    "bare": (False, False),
    "metrics + log": (False, True),
    "keys + rate": (True, False),
    "guarded (all)": (True, True),
}


def create_key(settings: dict) -> str:
    """A key with a rate no benchmark reaches, made by the real CLI in the server's state."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "searcher.yaml"
        path.write_text(yaml.safe_dump(settings))
        done = subprocess.run(
            [sys.executable, "-m", "searcher.cli", "keys", "create", "bench",
             "--rate", "100000/s", "--config", str(path)],
            cwd=REPO, capture_output=True, text=True, check=True,
        )  # fmt: skip
    return done.stdout.strip().splitlines()[-1]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--requests", type=int, default=1000, help="interleaved rounds")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        tb = stack.enter_context(testbed())
        state_dir = stack.enter_context(tempfile.TemporaryDirectory())
        key = create_key(variant(tb, state_dir, True, True))
        targets = [("testbed direct", f"{tb}/searxng/fixed/20/search", {})]
        for name, (auth, observe) in VARIANTS.items():
            base = stack.enter_context(searcher(variant(tb, state_dir, auth, observe)))
            headers = {"Authorization": f"Bearer {key}"} if auth else {}
            targets.append((name, f"{base}/v1/search", headers))
        times: dict[str, list[float]] = {name: [] for name, _, _ in targets}
        with httpx.Client(timeout=10) as client:

            def ask(url: str, headers: dict[str, str]) -> None:
                if "/searxng/" in url:
                    client.get(url, params={"q": QUERY, "format": "json"}).raise_for_status()
                else:
                    client.post(url, json={"query": QUERY}, headers=headers).raise_for_status()

            for _ in range(50):  # warm every path
                for _, url, headers in targets:
                    ask(url, headers)
            order = random.Random(13)
            for _ in range(args.requests):
                # A fresh order each round: no server always goes first, or right after
                # the one that warmed the CPU's caches for it.
                for name, url, headers in order.sample(targets, len(targets)):
                    t0 = time.perf_counter()
                    ask(url, headers)
                    times[name].append((time.perf_counter() - t0) * 1000)
    print(f"{args.requests} interleaved rounds, simple mode, 20 results, result cache off:")
    for name, values in times.items():
        print(f"  {name:<15} p50 {statistics.median(values):6.2f} ms   "
              f"p99 {percentile(values, 0.99):6.2f} ms")  # fmt: skip
    bare = statistics.median(times["bare"])
    for name in list(VARIANTS)[1:]:
        cost = statistics.median(times[name]) - bare
        print(
            f"  {name:<15} {cost:+.2f} ms at p50 over bare"
            + ("  (target <= 0.3 ms)" if name == "guarded (all)" else "")
        )


if __name__ == "__main__":
    main()
