"""Start the testbed and ``searcher serve`` as separate processes on 127.0.0.1."""

from __future__ import annotations

import contextlib
import os
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import yaml

from tests.shared_data import shared_path

REPO = Path(__file__).resolve().parents[1]
STATIC_MODEL = shared_path("models/minilm-static-256")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def wait_ready(url: str, timeout: float = 30.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        with contextlib.suppress(httpx.HTTPError):
            if httpx.get(url, timeout=1.0).status_code < 500:
                return
        time.sleep(0.05)
    raise RuntimeError(f"{url} not ready after {timeout} s")


@contextlib.contextmanager
def process(
    args: list[str],
    ready_url: str,
    env: dict[str, str] | None = None,
    ready_s: float = 120.0,
    cwd: Path = REPO,
) -> Iterator[int]:
    """Run ``args`` until the block ends, once ``ready_url`` answers; yields its pid."""
    proc = subprocess.Popen(
        args, cwd=cwd, env={**os.environ, **(env or {})},
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        wait_ready(ready_url, ready_s)
        yield proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@contextlib.contextmanager
def testbed() -> Iterator[str]:
    """The testbed in its own process; yields its base URL."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with process([sys.executable, "-m", "tests.testbed", "--port", str(port)], f"{base}/_log"):
        yield base


@contextlib.contextmanager
def serving(
    config: dict, extra_args: tuple[str, ...] = (), ready_s: float = 120.0, repo: Path = REPO
) -> Iterator[tuple[str, int]]:
    """``searcher serve`` with ``config`` in its own process; yields its base URL and pid.
    ``repo`` is the checkout whose code runs (``python -m`` puts the working directory
    first)."""
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "searcher.yaml"
        path.write_text(yaml.safe_dump(config))
        args = [sys.executable, "-m", "searcher.cli", "serve", "--port", str(port),
                "--config", str(path), *extra_args]  # fmt: skip
        with process(args, f"{base}/v1/health", ready_s=ready_s, cwd=repo) as pid:
            yield base, pid


@contextlib.contextmanager
def searcher(
    config: dict, extra_args: tuple[str, ...] = (), ready_s: float = 120.0, repo: Path = REPO
) -> Iterator[str]:
    """``serving``, for callers that need only the base URL."""
    with serving(config, extra_args, ready_s, repo) as (base, _):
        yield base


def peak_memory_kb(pid: int) -> int:
    """The peak resident memory (VmHWM) of process ``pid``, in kB."""
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1])
    return 0


@contextlib.contextmanager
def checkout(rev: str) -> Iterator[Path]:
    """A temporary git worktree of ``rev``, to run an older commit beside this one."""
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "tree"
        subprocess.run(["git", "worktree", "add", "--detach", "--quiet", str(path), rev],
                       cwd=REPO, check=True)  # fmt: skip
        try:
            yield path
        finally:
            subprocess.run(["git", "worktree", "remove", "--force", str(path)], cwd=REPO,
                           check=False)  # fmt: skip


def has_result_cache(repo: Path) -> bool:
    """Whether the code in ``repo`` has the result cache (a config key older commits refuse)."""
    return "class ResultCacheSettings" in (repo / "searcher" / "config.py").read_text()


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]
