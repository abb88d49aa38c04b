"""Uploads over HTTP (``POST /v1/collections/{name}/documents``): files per second through
a real ``searcher serve`` (auth on, the static embedder), and what a search costs while an
upload is being indexed (reading and chunking run off the event loop).

1. ``--batches`` requests of ``--files`` typical Markdown files (~2 KB, headings) each,
   every file new: indexed files/s, end to end (multipart, write, read, chunk, embed,
   SQLite).
2. The same batches sent again: ``unchanged`` files/s (content hash only).
3. Search p50 over a ``local`` collection alone, idle and while batches are uploaded.

    python -m bench.uploads [--files 50] [--batches 6]
"""

from __future__ import annotations

import argparse
import contextlib
import random
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import httpx
import yaml

from bench.processes import REPO, STATIC_MODEL, searcher

WORDS = [
    "tide",
    "kelp",
    "harbour",
    "lantern",
    "orchard",
    "basalt",
    "meadow",
    "falcon",
    "copper",
    "glacier",
]


def markdown(rng: random.Random, n: int) -> bytes:
    sections = [
        f"## Part {s}\n\n" + " ".join(rng.choice(WORDS) for _ in range(110)) + ".\n"
        for s in range(3)
    ]
    return (f"# Note {n}\n\n" + "\n".join(sections)).encode()


def settings(state_dir: str) -> dict:
    return {
        "backends": {
            "order": ["notes"],
            "duckduckgo": {"enabled": False},
            "instances": {"notes": {"adapter": "local", "collection": "notes"}},
        },
        "state": {"dir": state_dir},
        "embeddings": {"model": str(STATIC_MODEL)},
        "auth": {"enabled": True},
        "corpus": {"uploads": {"enabled": True}},
        "cache": {"enabled": False},
    }


def create_key(config: dict) -> str:
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "searcher.yaml"
        path.write_text(yaml.safe_dump(config))
        done = subprocess.run(
            [sys.executable, "-m", "searcher.cli", "keys", "create", "bench",
             "--rate", "100000/s", "--collections", "notes", "--config", str(path)],
            cwd=REPO, capture_output=True, text=True, check=True,
        )  # fmt: skip
    return done.stdout.strip().splitlines()[0]


def search_p50(client: httpx.Client, base: str, rounds: int) -> float:
    times = []
    body = {"query": "kelp harbour lantern", "constraints": {"backend": "notes"}}
    for _ in range(rounds):
        t0 = time.perf_counter()
        client.post(f"{base}/v1/search", json=body).raise_for_status()
        times.append((time.perf_counter() - t0) * 1000)
    return statistics.median(times)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--files", type=int, default=50, help="files per upload request")
    parser.add_argument("--batches", type=int, default=6, help="upload requests")
    parser.add_argument("--repo", type=Path, default=REPO, help="the tree to serve (before/after)")
    args = parser.parse_args()
    rng = random.Random(7)
    batches = [
        [(f"b{b}/note{n}.md", markdown(rng, n)) for n in range(args.files)]
        for b in range(args.batches)
    ]
    with contextlib.ExitStack() as stack:
        state_dir = stack.enter_context(tempfile.TemporaryDirectory())
        config = settings(state_dir)
        key = create_key(config)
        base = stack.enter_context(searcher(config, repo=args.repo))
        headers = {"Authorization": f"Bearer {key}"}
        client = stack.enter_context(httpx.Client(timeout=120, headers=headers))
        url = f"{base}/v1/collections/notes/documents"

        def send(batch: list[tuple[str, bytes]]) -> list[str]:
            parts = [("files", (name, body, "text/markdown")) for name, body in batch]
            answer = client.post(url, files=parts)
            answer.raise_for_status()
            return [f["status"] for f in answer.json()["files"]]

        for label in ("new (indexed)", "again (unchanged)"):
            t0 = time.perf_counter()
            statuses = [s for batch in batches for s in send(batch)]
            spent = time.perf_counter() - t0
            print(f"{label:<18} {len(statuses) / spent:7.1f} files/s  {set(statuses)}")
        idle = search_p50(client, base, 40)
        uploading = threading.Event()

        def keep_uploading() -> None:
            with httpx.Client(timeout=120, headers=headers) as other:
                for b, batch in enumerate(batches * 3):
                    fresh = [(f"busy{b}/{name}", body + b"\nbusy\n") for name, body in batch]
                    parts = [("files", (n, body, "text/markdown")) for n, body in fresh]
                    other.post(url, files=parts).raise_for_status()
                    uploading.set()

        worker = threading.Thread(target=keep_uploading)
        worker.start()
        uploading.wait()
        busy = search_p50(client, base, 40)
        worker.join()
        print(f"search p50 idle {idle:.1f} ms, while uploading {busy:.1f} ms")


if __name__ == "__main__":
    main()
