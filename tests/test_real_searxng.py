"""searcher against a real SearXNG (built from ``../shared/searxng/``), whose engines are
testbed URLs: one answers, one answers HTTP 429 (SearXNG: "too many requests"). searcher
must read ``unresponsive_engines``, leave the failing engine out (asking SearXNG for the
others, learnt from its ``/config``), probe it later, and explain an instance with the
JSON format off.

The build takes about a minute the first time and is kept in
``$SEARCHER_TEST_SEARXNG_DIR`` (default: the user's cache directory); the tests are
skipped, saying why, only when it cannot be built.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import aiohttp
import httpx
import platformdirs
import pytest
import yaml

from searcher.backends.base import BackendQuery
from searcher.backends.instances import build_backends
from searcher.backends.pool import BackendPool
from searcher.config import Settings
from searcher.errors import AllBackendsFailed
from searcher.pipeline.resilience import Deadline
from tests.ports import free_port
from tests.shared_data import SEARXNG_SOURCE, require_shared
from tests.testbed import TestbedServer
from tests.testbed.real_searxng import build_lock

READY_TIMEOUT_S = 90.0


def _build_dir() -> Path:
    configured = os.environ.get("SEARCHER_TEST_SEARXNG_DIR")
    return (
        Path(configured)
        if configured
        else Path(platformdirs.user_cache_dir("searcher-tests")) / "searxng"
    )


@pytest.fixture(scope="session")
def searxng_build() -> Path:
    """A built SearXNG (src/ and venv/), built once and kept."""
    script = require_shared(f"{SEARXNG_SOURCE}/build.sh")
    target = _build_dir()
    with build_lock(target):  # another worker may be building it right now
        done = subprocess.run(
            ["bash", str(script), str(target)],
            capture_output=True, text=True, timeout=900, check=False,
        )  # fmt: skip
    if done.returncode != 0 or not (target / "venv" / "bin" / "python").exists():
        tail = (done.stderr or done.stdout).strip().splitlines()[-3:]
        pytest.skip(f"SearXNG could not be built in {target}: {' / '.join(tail)}")
    return target


def _settings(port: int, engines: list[dict], formats: list[str]) -> dict:
    example = yaml.safe_load((require_shared(SEARXNG_SOURCE) / "settings-example.yml").read_text())
    example["server"]["port"] = port
    example["search"]["formats"] = formats
    # SearXNG suspends failing engines itself (180 s for a 429); off, so that what is
    # seen here is searcher's routing, not SearXNG's.
    example["search"]["suspended_times"] = {
        "SearxEngineAccessDenied": 0, "SearxEngineCaptcha": 0, "SearxEngineTooManyRequests": 0,
        "cf_SearxEngineCaptcha": 0, "cf_SearxEngineAccessDenied": 0,
        "recaptcha_SearxEngineCaptcha": 0,
    }  # fmt: skip
    example["engines"] = engines
    return example


def _json_engine(name: str, shortcut: str, url: str) -> dict:
    return {
        "name": name, "engine": "json_engine", "shortcut": shortcut, "categories": ["general"],
        "paging": False, "search_url": url, "results_query": "results", "url_query": "url",
        "title_query": "title", "content_query": "content", "timeout": 3.0, "enable_http": True,
    }  # fmt: skip


@contextlib.contextmanager
def running_searxng(build: Path, settings: dict, tmp: Path) -> Iterator[str]:
    """A SearXNG on 127.0.0.1 with ``settings``; yields its base URL."""
    port = settings["server"]["port"]
    path = tmp / f"settings-{port}.yml"
    path.write_text(yaml.safe_dump(settings))
    env = {**os.environ, "SEARXNG_SETTINGS_PATH": str(path), "PYTHONPATH": ""}
    log = (tmp / f"searxng-{port}.log").open("w")
    process = subprocess.Popen(
        [str(build / "venv" / "bin" / "python"), "-m", "searx.webapp"],
        cwd=build / "src", env=env, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        started = time.monotonic()
        while True:
            if process.poll() is not None:
                log.flush()
                tail = (tmp / f"searxng-{port}.log").read_text().splitlines()[-5:]
                pytest.fail(f"SearXNG exited at start-up: {' / '.join(tail)}")
            with contextlib.suppress(httpx.HTTPError):
                if httpx.get(base + "/healthz", timeout=1).status_code == 200:
                    break
            if time.monotonic() - started > READY_TIMEOUT_S:
                pytest.fail(f"SearXNG not ready after {READY_TIMEOUT_S:.0f} s")
            time.sleep(0.2)  # polling a subprocess's readiness; nothing is asserted on time
        yield base
    finally:
        process.terminate()
        try:
            process.wait(timeout=10)
        except subprocess.TimeoutExpired:
            process.kill()
            process.wait()
        log.close()


@pytest.fixture(scope="module")
def real_searxng(
    searxng_build: Path, testbed: TestbedServer, tmp_path_factory: pytest.TempPathFactory
) -> Iterator[str]:
    """SearXNG with two engines: ``alpha`` answers (the testbed's corpus), ``beta``
    answers HTTP 429."""
    engines = [
        _json_engine("alpha", "ta", testbed.base_url + "/searxng/search?format=json&q={query}"),
        _json_engine("beta", "tb", testbed.base_url + "/status/429?q={query}"),
    ]
    settings = _settings(free_port(), engines, ["html", "json"])
    with running_searxng(searxng_build, settings, tmp_path_factory.mktemp("searxng")) as base:
        yield base


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


async def test_a_real_searxng_engine_answering_429_is_routed_around(real_searxng, testbed):
    clock = FakeClock()
    settings = Settings.model_validate(
        {
            "backends": {
                "instances": {"sx-real": {"adapter": "searxng", "base_url": real_searxng}},
                "order": ["sx-real"],
                "duckduckgo": {"enabled": False},
            }
        }
    )

    def beta_calls() -> int:
        return sum(1 for e in testbed.log if e.path == "/status/429")

    async with aiohttp.ClientSession() as session:
        pool = BackendPool(build_backends(settings, session, clock=clock), settings, clock)
        backend = pool.backends["sx-real"]
        # Sent with the default route's category, as a search sends it: SearXNG asks every
        # engine of a category it is sent, so leaving one out must not send it.
        query = BackendQuery("Google Stadia games", max_results=1, categories=("general",))

        async def search() -> list[str]:
            answer = await pool.call("sx-real", query, Deadline(20), 10.0, 0)
            assert answer.hits  # alpha answers every time
            return [name for name, _ in answer.unresponsive]

        testbed.reset()
        assert await search() == ["beta"]
        assert await search() == ["beta"]  # engine_health.failure_threshold: 2
        assert beta_calls() == 2
        (snap,) = backend.engines_health()
        assert (snap.name, snap.state, snap.last_kind) == ("beta", "suspended", "rate_limited")
        assert snap.last_message == "too many requests"

        # Left out: searcher names the other engines (from SearXNG's /config).
        assert await search() == []
        assert beta_calls() == 2

        # After the back-off one probe asks beta again; it still fails.
        clock.now += 60
        assert await search() == ["beta"]
        assert beta_calls() == 3
        assert await search() == []
        assert beta_calls() == 3
        (snap,) = backend.engines_health()
        assert snap.retry_in_s == 120.0


async def test_a_real_searxng_without_the_json_format_gets_a_clear_error(
    searxng_build, testbed, tmp_path
):
    engines = [
        _json_engine("alpha", "ta", testbed.base_url + "/searxng/search?format=json&q={query}")
    ]
    settings = _settings(free_port(), engines, ["html"])
    with running_searxng(searxng_build, settings, tmp_path) as base:
        config = Settings.model_validate(
            {"backends": {"searxng": {"base_url": base}, "duckduckgo": {"enabled": False}}}
        )
        async with aiohttp.ClientSession() as session:
            pool = BackendPool(build_backends(config, session), config)
            with pytest.raises(AllBackendsFailed) as info:
                await pool.search_with_fallback(
                    ["searxng"], BackendQuery("q"), Deadline(20), 10.0, 0
                )
    (failure,) = info.value.failures
    assert failure.kind == "auth" and failure.reason.startswith("HTTP 403")
    assert "search: formats: [html, json]" in failure.reason


def test_engines_a_request_names_are_the_only_ones_asked(
    real_searxng, testbed, make_settings, serve_searcher
):
    # The default route's category would have SearXNG ask every general engine as well.
    settings = make_settings(backends={"order": ["searxng"], "searxng": {"base_url": real_searxng}})
    base = serve_searcher(settings)
    testbed.reset()
    body = {"query": "Google Stadia games", "constraints": {"engines": ["alpha"]}}
    data = httpx.post(f"{base}/v1/search", json=body, timeout=30).json()
    assert data["items"] and all(i["engines"] == ["alpha"] for i in data["items"])
    assert not any(e.path == "/status/429" for e in testbed.log)  # beta was not asked
    assert not any("beta" in e["reason"] for e in data["meta"]["errors"])


async def test_no_results_beside_a_failing_engine_is_no_results_not_a_failure(
    real_searxng, testbed
):
    # alpha finds nothing, beta answers 429: SearXNG answers no results with beta
    # unresponsive. The instance works; counting it as failed opened its breaker for all.
    settings = Settings.model_validate(
        {
            "backends": {
                "instances": {
                    "sx-real": {
                        "adapter": "searxng", "base_url": real_searxng,
                        "breaker": {"failure_threshold": 2},
                    }
                },
                "order": ["sx-real"],
                "duckduckgo": {"enabled": False},
            }
        }
    )  # fmt: skip
    async with aiohttp.ClientSession() as session:
        pool = BackendPool(build_backends(settings, session), settings)
        query = BackendQuery("zzqxv nonexistentterm", max_results=1, categories=("general",))
        answer = await pool.call("sx-real", query, Deadline(20), 10.0, 0)
        assert answer.hits == [] and [n for n, _ in answer.unresponsive] == ["beta"]
        for _ in range(2):  # (beta is then left out by engine health)
            assert (await pool.call("sx-real", query, Deadline(20), 10.0, 0)).hits == []
        assert pool.breakers["sx-real"].state == "closed"
        found = await pool.call(
            "sx-real", BackendQuery("Google Stadia games"), Deadline(20), 10.0, 0
        )
        assert found.hits
