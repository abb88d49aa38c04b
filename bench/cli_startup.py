"""How long one ``searcher search`` takes from the shell, start-up included.

A CLI call pays for its imports and its start-up every time: this runs the command
against the testbed (SearXNG only, simple mode, a new query each run so the result
cache never answers) and prints the median wall time of whole runs. With ``--baseline
REV`` an older commit runs the same commands, the two taking turns, so the figures are
side by side in one run. Near-duplicate removal loads the shared static model from disk
(as a local model directory, no hub), so what is measured is ours, not a download.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import yaml

from bench.processes import REPO, STATIC_MODEL, checkout, percentile, testbed


def config(tb: str, cache_dir: Path) -> dict:
    embeddings = (
        {"provider": "model2vec", "model": str(STATIC_MODEL)}
        if STATIC_MODEL.is_dir()
        else {"provider": "none"}
    )
    return {
        "backends": {
            "order": ["searxng"],
            "searxng": {"base_url": f"{tb}/searxng"},
            "duckduckgo": {"enabled": False},
        },
        "embeddings": embeddings,
        "service": {"cache": {"dir": str(cache_dir / "extract")}},
        "state": {"dir": str(cache_dir / "state")},
    }


def one_run(repo: Path, config_path: Path, query: str) -> float:
    """Seconds for one whole ``searcher search`` process; raises if it fails."""
    args = [sys.executable, "-m", "searcher.cli", "search", query, "--config", str(config_path)]
    env = {**os.environ, "HF_HUB_OFFLINE": "1"}
    started = time.perf_counter()
    done = subprocess.run(args, cwd=repo, env=env, capture_output=True, text=True, timeout=120)
    elapsed = time.perf_counter() - started
    if done.returncode != 0 or "[CONTEXT_PACK" not in done.stdout:
        raise RuntimeError(f"searcher search failed ({done.returncode}): {done.stderr[-500:]}")
    return elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=15, help="runs of each tree")
    parser.add_argument("--baseline", metavar="REV", help="an older commit to run beside this one")
    args = parser.parse_args()
    with contextlib.ExitStack() as stack:
        tb = stack.enter_context(testbed())
        tmp = Path(stack.enter_context(tempfile.TemporaryDirectory()))
        trees = {"this tree": REPO}
        if args.baseline:
            trees[args.baseline] = stack.enter_context(checkout(args.baseline))
        paths = {}
        for number, name in enumerate(trees):
            paths[name] = tmp / f"{number}.yaml"
            paths[name].write_text(yaml.safe_dump(config(tb, tmp / f"cache{number}")))
        times: dict[str, list[float]] = {name: [] for name in trees}
        for run in range(args.runs + 1):
            for name, repo in trees.items():
                elapsed = one_run(repo, paths[name], f"google stadia run {run}")
                if run:  # the first run of each warms the disk cache and .pyc files
                    times[name].append(elapsed)
        print(f"searcher search, simple mode, SearXNG on the testbed, {args.runs} runs each "
              "(trees taking turns):")  # fmt: skip
        for name, values in times.items():
            print(f"  {name:<22} median {statistics.median(values):5.2f} s   "
                  f"p90 {percentile(values, 0.9):5.2f} s")  # fmt: skip
        if args.baseline:
            new, old = (statistics.median(v) for v in times.values())
            print(f"  ratio this tree / {args.baseline}: {new / old:.2f}")


if __name__ == "__main__":
    main()
