"""Nothing can hang: a model hub that accepts connections and never answers holds up
neither `searcher serve` (readiness, SIGTERM, Ctrl-C) nor `searcher search`; the embedder
loads in the background, under a time limit, and /v1/health says why dedup is off."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
import yaml

from searcher.config import EmbeddingSettings
from searcher.embedding.embedders import Embedder
from searcher.embedding.loading import EmbedderLoad, needs_network
from tests.conftest import STATIC_MODEL
from tests.ports import free_port
from tests.testbed.silent import SilentServer

REPO = Path(__file__).resolve().parent.parent
# Bounds, not timings: each is far above what the step takes, and far below "for ever".
READY_WITHIN_S = 60
EXIT_WITHIN_S = 20


class _Vectors:
    name = "fake"

    async def embed(self, texts):  # pragma: no cover - never called here
        return np.zeros((len(texts), 2), dtype=np.float32)


# --- the loader, with an injected build ----------------------------------------------------


async def test_a_load_that_never_ends_times_out_and_names_the_keys() -> None:
    release = threading.Event()
    settings = EmbeddingSettings(model="some/hub-model", load_timeout_s=0.05)
    ready: list[Embedder] = []

    def build(_: EmbeddingSettings) -> Embedder:
        release.wait(30)  # a hub that never answers
        return _Vectors()

    load = EmbedderLoad(settings, on_ready=ready.append, build=build)
    assert load.state == "loading"
    load.start()
    assert "loads" in (load.problem or "")
    await load.wait()
    release.set()
    assert load.state == "failed" and load.embedder is None and not ready
    problem = load.problem or ""
    assert "embeddings.model" in problem and "embeddings.load_timeout_s" in problem
    assert "HF_HUB_OFFLINE=1" in problem and "embeddings.provider" in problem


async def test_a_finished_load_hands_the_embedder_over() -> None:
    vectors = _Vectors()
    ready: list[Embedder] = []
    load = EmbedderLoad(
        EmbeddingSettings(model="x"), on_ready=ready.append, build=lambda _: vectors
    )
    load.start()
    await load.wait()
    assert (load.state, load.embedder, load.problem, ready) == ("ready", vectors, None, [vectors])


async def test_provider_none_is_off_without_a_problem() -> None:
    load = EmbedderLoad(EmbeddingSettings(provider="none"))
    load.start()
    await load.wait()
    assert (load.state, load.problem) == ("off", None)


def test_only_hub_names_need_the_network() -> None:
    assert needs_network(EmbeddingSettings(model="minishlab/potion-base-8M"))
    assert not needs_network(EmbeddingSettings(model=str(STATIC_MODEL)))
    assert not needs_network(EmbeddingSettings(provider="none"))


# --- the real commands, with a silent hub ------------------------------------------------


@pytest.fixture
def silent_hub() -> Iterator[SilentServer]:
    with SilentServer() as hub:
        yield hub


def _hub_env(hub: SilentServer, home: Path) -> dict[str, str]:
    env = dict(os.environ, PYTHONPATH=str(REPO), HF_ENDPOINT=hub.base_url, HF_HOME=str(home))
    env.pop("HF_HUB_OFFLINE", None)
    env.pop("SEARCHER_CONFIG", None)
    return env


def _config(testbed, tmp_path: Path, load_timeout_s: float) -> str:
    config = {
        "backends": {
            "order": ["searxng"],
            "searxng": {"base_url": testbed.searxng_url()},
            "duckduckgo": {"enabled": False},
            "brave": {"enabled": False},
        },
        "service": {"cache": {"dir": str(tmp_path / "cache")}},
        "state": {"dir": str(tmp_path / "state")},
        # The default: a model2vec model by hub name, which is not in the (empty) cache.
        "embeddings": {"model": "minishlab/potion-base-8M", "load_timeout_s": load_timeout_s},
    }
    path = tmp_path / "searcher.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _until(condition, within_s: float) -> bool:
    deadline = time.monotonic() + within_s
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.1)  # polling a subprocess, bounded by the deadline
    return False


@pytest.mark.parametrize("stop", [signal.SIGTERM, signal.SIGINT], ids=["SIGTERM", "Ctrl-C"])
def test_serve_is_ready_and_stops_while_the_hub_never_answers(
    testbed, tmp_path, silent_hub, matching_query, stop
):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "searcher", "serve", "--port", str(port),
         "--config", _config(testbed, tmp_path, load_timeout_s=600)],
        env=_hub_env(silent_hub, tmp_path / "hf"),
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    try:
        health: dict = {}

        def ready() -> bool:
            try:
                health.update(httpx.get(f"{base}/v1/health", timeout=2).json())
            except httpx.TransportError:
                return False
            return True

        assert _until(ready, READY_WITHIN_S), "serve did not become ready"
        # The loader is stuck on the hub, and the service answers meanwhile.
        assert _until(lambda: silent_hub.accepted > 0, READY_WITHIN_S)
        health.update(httpx.get(f"{base}/v1/health", timeout=5).json())
        assert health["embedder"]["state"] == "loading"
        assert "embeddings.load_timeout_s" in health["embedder"]["problem"]
        found = httpx.post(f"{base}/v1/search", json={"query": matching_query}, timeout=30)
        assert found.status_code == 200 and found.json()["items"]
        # Said in /v1/health, not in every response.
        assert not [e for e in found.json()["meta"]["errors"] if e["stage"] == "dedup"]

        proc.send_signal(stop)
        proc.wait(timeout=EXIT_WITHIN_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
            pytest.fail(f"serve ignored {stop!r}")


def test_search_returns_when_the_hub_never_answers(testbed, tmp_path, silent_hub, matching_query):
    result = subprocess.run(
        [sys.executable, "-m", "searcher", "search", matching_query, "--json",
         "--config", _config(testbed, tmp_path, load_timeout_s=2)],
        env=_hub_env(silent_hub, tmp_path / "hf"),
        capture_output=True, text=True, timeout=READY_WITHIN_S,
    )  # fmt: skip
    assert result.returncode == 0, result.stderr
    assert silent_hub.accepted > 0  # it did ask the hub, and gave up on it
    assert json.loads(result.stdout)["items"]
    assert "embeddings.load_timeout_s" in result.stderr and "HF_HUB_OFFLINE=1" in result.stderr


def test_an_embedder_that_never_answers_gets_only_what_the_deadline_leaves(
    make_settings, serve_searcher, testbed, matching_query
):
    embeddings = {"provider": "openai", "model": "m", "timeout_s": 600,
                  "base_url": testbed.url("/openai/hang/v1")}  # fmt: skip
    base = serve_searcher(make_settings(embeddings=embeddings))
    body = {"query": matching_query, "budget": {"max_total_time_ms": 2000}}
    response = httpx.post(f"{base}/v1/search", json=body, timeout=READY_WITHIN_S)
    assert response.status_code == 200 and response.json()["items"]
    notes = [e["reason"] for e in response.json()["meta"]["errors"] if e["stage"] == "dedup"]
    assert notes and "deadline came first" in notes[0]
