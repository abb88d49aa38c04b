"""The start-up block of ``searcher serve``: the config file read (here ./searcher.yaml,
found in the current directory), each backend and whether its address answered, the
embedder, the LLM endpoint, a variable that looks like ours but is ignored and a key's old
name still read."""

from __future__ import annotations

import os
import select
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import yaml

from tests.ports import free_port

REPO = Path(__file__).resolve().parents[1]


def _stderr_until(proc: subprocess.Popen[bytes], marker: str, within_s: float) -> str:
    """What the process wrote to stderr until a line holding ``marker`` (or it exited, or
    ``within_s`` passed)."""
    assert proc.stderr is not None
    seen = b""
    deadline = time.monotonic() + within_s
    while marker.encode() not in seen and time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stderr], [], [], max(0.0, deadline - time.monotonic()))
        if not ready:
            break
        chunk = os.read(proc.stderr.fileno(), 4096)
        if not chunk:
            break
        seen += chunk
    return seen.decode()


def test_serve_says_what_it_read_and_what_it_can_reach(tmp_path):
    listening = socket.create_server(("127.0.0.1", 0))  # answers a TCP connection
    port = listening.getsockname()[1]
    closed = free_port()  # nothing listens here
    config = {
        "backends": {
            "order": ["searxng", "brave"],
            "searxng": {"base_url": f"http://127.0.0.1:{port}"},
            "duckduckgo": {"enabled": False},
            "brave": {"base_url": f"http://127.0.0.1:{closed}", "api_key": "k"},
        },
        "embeddings": {"provider": "none"},
        "browser": {"executable": "no-such-chromium"},
        "service": {"cache": {"dir": str(tmp_path / "cache")}},
        "state": {"dir": str(tmp_path / "state")},
        "llm": {"steps": {"structured_output": {"repairs": 1}}},  # the step's old name
    }
    (tmp_path / "searcher.yaml").write_text(yaml.safe_dump(config))
    env = {**os.environ, "PYTHONPATH": str(REPO), "SEARXNG_URL": "http://typo"}
    env.pop("SEARCHER_CONFIG", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "searcher", "serve", "--port", str(free_port())],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE,
    )  # fmt: skip
    try:
        stderr = _stderr_until(proc, "Uvicorn running", within_s=60)
        proc.send_signal(signal.SIGINT)
        proc.wait(timeout=30)
    finally:
        listening.close()
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=20)
        proc.stderr.close()  # type: ignore[union-attr]
    block = stderr.split("INFO:")[0].splitlines()
    assert block[0].endswith(f"config: {tmp_path / 'searcher.yaml'} (from ./searcher.yaml)")
    assert block[1:] == [
        "  backends:",
        f"    searxng: reachable at 127.0.0.1:{port}",
        "    duckduckgo: off, disabled",
        f"    brave: cannot connect to 127.0.0.1:{closed}: connection refused",
        "  embedder: none (embeddings.provider: none; near-duplicate removal off)",
        "  llm: none (llm.base_url and llm.model unset: LLM steps use their fallbacks)",
        "  browser: none (browser.executable 'no-such-chromium' was not found; pages only "
        "JavaScript fills stay unread)",
        "  warning: $SEARXNG_URL is not a setting searcher reads; it is ignored "
        "(did you mean SEARXNG_BASE_URL?)",
        "  warning: llm.steps.structured_output is deprecated: it is now "
        "llm.steps.output_schema (read as that for now)",
    ]
