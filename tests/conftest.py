"""Shared fixtures: the local web (``tests/testbed``) and its data."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import settings as hypothesis_settings

from searcher.api.app import create_app
from searcher.config import Settings
from tests.ddgs_fake import FakeDDGS
from tests.shared_data import MISSING_PREFIX, REQUIRE_VARIABLE, shared_required
from tests.testbed import TestbedServer
from tests.testbed import aeb_ids as _aeb_ids
from tests.testbed import ground_truth as _ground_truth
from tests.testbed.server import ThreadedServer
from tests.tiny_model import tiny_model_dir

# Property tests check what holds, not how fast: a loaded machine must not fail them
# (hypothesis's default 200 ms deadline per example is a timed assertion).
hypothesis_settings.register_profile("searcher", deadline=None)
hypothesis_settings.load_profile("searcher")


# --- shared data: skipped when missing, failed when CI requires it ----------------------


def _missing_shared_data(report: pytest.TestReport | pytest.CollectReport) -> bool:
    if not report.skipped or not isinstance(report.longrepr, tuple):
        return False
    return str(report.longrepr[2]).removeprefix("Skipped: ").startswith(MISSING_PREFIX)


def _fail_when_required(report: pytest.TestReport | pytest.CollectReport) -> None:
    """A skip for missing shared data turns into a failure under SEARCHER_REQUIRE_SHARED=1
    (``.ci/run``): CI must run the quality gates, never skip them unnoticed."""
    if shared_required() and _missing_shared_data(report):
        reason = str(report.longrepr[2]).removeprefix("Skipped: ")  # type: ignore[index]
        report.outcome = "failed"
        report.longrepr = f"{reason} [{REQUIRE_VARIABLE} is set: this must not be skipped]"


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item: pytest.Item, call: pytest.CallInfo[None]) -> Iterator[None]:
    outcome = yield
    _fail_when_required(outcome.get_result())


@pytest.hookimpl(hookwrapper=True)
def pytest_make_collect_report(collector: pytest.Collector) -> Iterator[None]:
    outcome = yield
    _fail_when_required(outcome.get_result())


@pytest.fixture(scope="session")
def testbed() -> Iterator[TestbedServer]:
    """The testbed server on 127.0.0.1 (one per session; see tests/testbed/). It serves
    the AEB pages from the shared folder, or the pages shipped in the repository when
    those are absent (tests/testbed/shipped_pages.py)."""
    with TestbedServer() as server:
        yield server


@pytest.fixture
def testbed_clean(testbed: TestbedServer) -> TestbedServer:
    """The session testbed with an empty request log and fresh flaky counters."""
    testbed.reset()
    return testbed


@pytest.fixture(scope="session")
def aeb_ids() -> list[str]:
    """Sorted testbed page ids (the AEB pages, or the shipped ones without them)."""
    return _aeb_ids()


@pytest.fixture(scope="session")
def aeb_titles() -> dict[str, str]:
    """``{id: <title> of the page}``."""
    from tests.testbed.corpus import corpus

    return {pid: page.title for pid, page in corpus().load().pages.items()}


@pytest.fixture(scope="session")
def aeb_ground_truth() -> dict[str, dict[str, str]]:
    """``{id: {"url": ..., "articleBody": ...}}`` (do not mutate: shared)."""
    return _ground_truth()


# --- searcher itself, pointed at the testbed ------------------------------------------

# The plumbing tests' embedding model, built by the suite (tests/tiny_model.py); tests
# never load from a hub. Quality tests use the real one (tests/shared_data.py).
STATIC_MODEL = tiny_model_dir()


def serve_until_it_exits(config_path: str) -> subprocess.CompletedProcess[str]:
    """``searcher serve`` with ``config_path`` in a fresh process, for configurations it
    must refuse at start (it exits instead of serving)."""
    return subprocess.run(
        [sys.executable, "-m", "searcher", "serve", "--config", config_path, "--port", "0"],
        capture_output=True, text=True, timeout=60,
        env={"PYTHONPATH": str(Path(__file__).resolve().parents[1]), "PATH": "/usr/bin:/bin"},
    )  # fmt: skip


def _merge(base: dict[str, Any], extra: dict[str, Any]) -> dict[str, Any]:
    merged = dict(base)
    for key, value in extra.items():
        if isinstance(value, dict) and isinstance(merged.get(key), dict):
            merged[key] = _merge(merged[key], value)
        else:
            merged[key] = value
    return merged


def settings_on_testbed(testbed: TestbedServer, home: Path, **overrides: Any) -> Settings:
    """Settings with every backend pointed at the testbed (DuckDuckGo off unless a test
    turns it on with a fake), the testbed allow-listed for fetching, cache and state in
    ``home``; ``overrides`` merged in."""
    base: dict[str, Any] = {
        "backends": {
            "order": ["searxng", "duckduckgo", "brave"],
            "searxng": {"base_url": testbed.searxng_url()},
            "duckduckgo": {"enabled": False},
            "brave": {"base_url": testbed.brave_url(), "api_key": "test-key"},
        },
        "fetch": {"allowed_hosts": [f"127.0.0.1:{testbed.port}"], "extract_workers": 1},
        "service": {"cache": {"dir": str(home / "cache")}},
        "state": {"dir": str(home / "state")},
        "embeddings": {"provider": "model2vec", "model": str(STATIC_MODEL)},
        # The hybrid rerank (on by default since issue 12) reorders a backend's results
        # by their snippets; tests of other features rely on the backend's order.
        "scoring": {"hybrid_share": 0.0},
    }
    return Settings.model_validate(_merge(base, overrides))


@pytest.fixture
def make_settings(testbed: TestbedServer, tmp_path: Path) -> Callable[..., Settings]:
    """``settings_on_testbed`` with a private cache and state for this test."""

    def build(**overrides: Any) -> Settings:
        return settings_on_testbed(testbed, tmp_path, **overrides)

    return build


@pytest.fixture
def serve_searcher() -> Iterator[Callable[..., str]]:
    """Start searcher's own app under uvicorn on 127.0.0.1; returns its base URL."""
    servers: list[ThreadedServer] = []

    def start(settings: Settings, ddgs: FakeDDGS | None = None) -> str:
        app = create_app(settings, ddgs_factory=ddgs.factory if ddgs else None)
        server = ThreadedServer(app, lifespan="on").start()
        servers.append(server)
        return server.base_url

    yield start
    for server in servers:
        server.stop()


@pytest.fixture(scope="session")
def matching_query(aeb_ids: list[str]) -> str:
    """A query with several matching testbed pages (about twenty)."""
    from tests.testbed.corpus import corpus

    return corpus().matching_query


@pytest.fixture(scope="session")
def broad_query(aeb_ids: list[str]) -> str:
    """A query that more than twenty testbed pages match (for paging)."""
    from tests.testbed.corpus import corpus

    return corpus().broad_query


@pytest.fixture
def config_file(testbed: TestbedServer, tmp_path: Path) -> Callable[..., str]:
    """Writes a searcher.yaml with the backends on the testbed (``backends`` overrides
    merged in); returns its path."""

    def write(**backends: Any) -> str:
        config = {
            "backends": {
                "order": ["searxng", "brave"],
                "searxng": {"base_url": testbed.searxng_url()},
                "duckduckgo": {"enabled": False},
                "brave": {"base_url": testbed.brave_url(), "api_key": "test-key"},
                **backends,
            },
            "fetch": {"allowed_hosts": [f"127.0.0.1:{testbed.port}"]},
            "service": {"cache": {"dir": str(tmp_path / "cache")}},
            "state": {"dir": str(tmp_path / "state")},
            "embeddings": {"model": str(STATIC_MODEL)},
            "scoring": {"hybrid_share": 0.0},  # as make_settings: keep the backend's order
        }
        path = tmp_path / "searcher.yaml"
        path.write_text(yaml.safe_dump(config))
        return str(path)

    return write


# --- a real Redis (tests/redis_server.py) ----------------------------------------------


@pytest.fixture(scope="session")
def redis_server() -> Iterator[Any]:
    """One redis-server on a free loopback port for the session."""
    from tests.redis_server import RedisServer

    with RedisServer() as server:
        yield server


@pytest.fixture
def redis_url(redis_server: Any) -> str:
    """The session Redis, emptied for this test."""
    from tests.redis_server import flush

    flush(redis_server.url)
    url: str = redis_server.url
    return url
