"""Pathological pages against everyone else's reads (issue 11, part 1), before and after.

16 clients run full-mode searches (three pages read per request) against ``searcher serve``
while 4 attackers read pathological pages through ``POST /v1/fetch`` again and again (a
150,000-cell table row, 100,000 attributes on one element, 60,000 paragraphs, a
100,000-cell row). Reported for each version: the 16 clients' success rate (HTTP 200 and
every page read) and end-to-end p50/p99, first with no attack, then under attack.

"before" is the code at ``--base`` (default: the merge base with main), exported with
``git archive`` into a temporary directory and served side by side with this worktree's
code ("after"), against the same testbed process. Each server runs in its own process
group, killed as a whole at the end, so no extraction outlives its run.

    PYTHONPATH=$PWD python -m bench.hostile_pages [--quiet-s 10] [--attack-s 30]
        [--with-kill-only]   # also the new code with the pre-scan off
"""

from __future__ import annotations

import argparse
import contextlib
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path
from urllib.parse import urlsplit

import httpx
import yaml

from bench.processes import (
    REPO,
    STATIC_MODEL,
    free_port,
    has_result_cache,
    percentile,
    testbed,
    wait_ready,
)

CLIENTS = 16
HOSTILE = [
    "/hostile/row?n=150000",
    "/hostile/attributes?n=100000",
    "/hostile/paragraphs?n=60000",
    "/hostile/row?n=100000",
]
SEARCH = {
    "query": "news",
    "constraints": {"search_mode": "full"},
    "budget": {"max_results": 3, "max_fetch_pages": 3},
}


def config(testbed_base: str, code_dir: Path = REPO) -> dict:
    # The clients' pages must really be read: the result cache (where the code has one) is off.
    return {
        **({"cache": {"enabled": False}} if has_result_cache(code_dir) else {}),
        "backends": {
            "order": ["searxng"],
            "searxng": {"base_url": f"{testbed_base}/searxng/delayed/10/50"},
            "duckduckgo": {"enabled": False},
        },
        "fetch": {"allowed_hosts": [urlsplit(testbed_base).netloc], "extract_workers": 2},
        "service": {"cache": {"enabled": False}},
        "embeddings": {"model": str(STATIC_MODEL)},
        "scoring": {"min_keyword_overlap": 0},
    }


def no_prescan(testbed_base: str) -> dict:
    """The new code with the pre-scan's limits out of reach: only the time limit acts."""
    cfg = config(testbed_base, REPO)
    lax = {"max_page_elements": 10**7, "max_element_attributes": 10**7,
           "max_table_row_cells": 10**7, "max_page_depth": 10**7}  # fmt: skip
    cfg["fetch"].update(lax)
    return cfg


@contextlib.contextmanager
def serve(code_dir: Path, cfg: dict) -> Iterator[str]:
    """``searcher serve`` from ``code_dir`` in a new process group; yields its base URL."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "searcher.yaml"
        path.write_text(yaml.safe_dump(cfg))
        env = {**os.environ, "PYTHONPATH": str(code_dir)}
        args = [sys.executable, "-m", "searcher.cli", "serve", "--port", str(port),
                "--config", str(path)]  # fmt: skip
        proc = subprocess.Popen(
            args, cwd=code_dir, env=env, start_new_session=True,
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        try:
            wait_ready(f"{base}/v1/health", timeout=60)
            yield base
        finally:
            # The server, its fork server and every extraction worker share this group.
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, signal.SIGKILL)
            proc.wait(timeout=20)


def searches(
    base: str, seconds: float, results: list[tuple[bool, float]], failures: list[str]
) -> None:
    stop = time.monotonic() + seconds
    with httpx.Client(timeout=60) as client:
        while time.monotonic() < stop:
            t0 = time.perf_counter()
            try:
                response = client.post(f"{base}/v1/search", json=SEARCH)
                items = response.json().get("items") or [] if response.status_code == 200 else []
                missed = [i["fetch"] for i in items if i["fetch"]["status"] != "fetched"]
                ok = bool(items) and not missed
                if not ok:
                    failures.append(
                        f"{missed[0]['status']}: {missed[0]['error']}"
                        if missed else f"HTTP {response.status_code}, {len(items)} items"
                    )  # fmt: skip
            except httpx.HTTPError as exc:
                ok = False
                failures.append(type(exc).__name__)
            results.append((ok, (time.perf_counter() - t0) * 1000))


def attack(base: str, url: str, stop: threading.Event, outcomes: list[str]) -> None:
    with httpx.Client(timeout=120) as client:
        while not stop.is_set():
            try:
                data = client.post(f"{base}/v1/fetch", json={"url": url}).json()
                outcomes.append(f"{data['status']}: {data['fetch']['error']}")
            except (httpx.HTTPError, ValueError, KeyError) as exc:
                outcomes.append(f"error: {type(exc).__name__}")


def phase(base: str, tb: str, seconds: float, attacked: bool) -> tuple[list, list[str], list[str]]:
    results: list[tuple[bool, float]] = []
    outcomes: list[str] = []
    failures: list[str] = []
    stop = threading.Event()
    attackers = [
        threading.Thread(target=attack, args=(base, f"{tb}{path}", stop, outcomes))
        for path in (HOSTILE if attacked else [])
    ]
    for thread in attackers:
        thread.start()
    if attacked:
        time.sleep(1.0)  # the attack is under way before the clients start
    clients = [
        threading.Thread(target=searches, args=(base, seconds, results, failures))
        for _ in range(CLIENTS)
    ]
    for thread in clients:
        thread.start()
    for thread in clients:
        thread.join()
    stop.set()
    for thread in attackers:
        thread.join(timeout=130)
    return results, outcomes, failures


def summary(results: list[tuple[bool, float]], failures: list[str]) -> str:
    if not results:
        return "no requests finished"
    ok = sum(1 for good, _ in results if good)
    latencies = [ms for _, ms in results]
    common = sorted(set(failures), key=failures.count, reverse=True)[:2]
    return (
        f"{len(results):4d} requests  success {ok / len(results):6.1%}  "
        f"p50 {statistics.median(latencies):6.0f} ms  p99 {percentile(latencies, 0.99):6.0f} ms"
        + (f"  failures: {common}" if common else "")
    )


def export(commit: str, into: Path) -> None:
    archive = subprocess.run(
        ["git", "-C", str(REPO), "archive", commit], check=True, capture_output=True
    ).stdout
    subprocess.run(["tar", "-x", "-C", str(into)], input=archive, check=True)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--quiet-s", type=float, default=10.0)
    parser.add_argument("--attack-s", type=float, default=30.0)
    parser.add_argument("--base", default=None, help="commit for 'before' (default: merge base)")
    parser.add_argument(
        "--with-kill-only", action="store_true", help="also run with the pre-scan off"
    )
    parser.add_argument(
        "--reverse",
        action="store_true",
        help="run 'before' first (order effects on a busy machine)",
    )
    args = parser.parse_args()
    base_commit = args.base or subprocess.run(
        ["git", "-C", str(REPO), "merge-base", "HEAD", "main"],
        check=True, capture_output=True, text=True,
    ).stdout.strip()  # fmt: skip
    print(f"{CLIENTS} clients, full mode, 3 pages each; 4 attackers on /v1/fetch: {HOSTILE}")
    with tempfile.TemporaryDirectory() as old_dir, testbed() as tb:
        export(base_commit, Path(old_dir))
        # After first: the old code's runaway extractions would slow the new run down.
        runs = [
            ("after", REPO, config(tb, REPO)),
            ("after, pre-scan off (only the time limit stops them)", REPO, no_prescan(tb)),
            (f"before ({base_commit[:8]})", Path(old_dir), config(tb, Path(old_dir))),
        ]
        if not args.with_kill_only:
            del runs[1]
        if args.reverse:
            runs.reverse()
        for label, code, cfg in runs:
            with serve(code, cfg) as base:
                with httpx.Client(timeout=60) as warm:
                    for _ in range(3):
                        warm.post(f"{base}/v1/search", json=SEARCH)
                quiet, _, quiet_failures = phase(base, tb, args.quiet_s, attacked=False)
                loud, outcomes, loud_failures = [], [], []
                if args.attack_s > 0:
                    loud, outcomes, loud_failures = phase(base, tb, args.attack_s, attacked=True)
            print(f"{label}")
            print(f"  no attack    {summary(quiet, quiet_failures)}")
            if args.attack_s > 0:
                print(f"  under attack {summary(loud, loud_failures)}")
            common = sorted(set(outcomes), key=outcomes.count, reverse=True)[:3]
            print(f"  attacker reads: {len(outcomes)}; most common outcomes: {common}")


if __name__ == "__main__":
    main()
