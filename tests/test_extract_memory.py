"""Issue 24, defects 1 and 2 over real HTTP: every extraction worker is bounded in memory
(hostile PDFs the testbed writes: a form-XObject chain 8 deep, Flate bombs of 1, 2 and
9 MB that expand a thousandfold), and every reader — research jobs, Tavily's research,
MCP's deep_research — holds the fair share of the client that asked, as /v1/search and
/v1/fetch do."""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client

from searcher.api.app import create_app
from searcher.config import Settings
from searcher.fetch.memory_bound import MB, ended_by_memory, worker_memory_mb
from searcher.fetch.worker_pool import WorkerDied, WorkerOutOfMemory, WorkerPool
from tests.process_memory import WorkerPeaks
from tests.testbed import TestbedServer
from tests.testbed.hostile import HOSTILE_RESULTS
from tests.testbed.server import ThreadedServer

# Peaks are read from /proc; the bound is Linux's RLIMIT_AS.
pytestmark = pytest.mark.skipif(not Path("/proc/self/status").exists(), reason="needs /proc")

# Far below what the attacks reach unbounded (1.9-5 GB), far above an ordinary page.
BOUND_MB = 384
# Time is not what stops these attacks here: the bound must, even on a loaded machine.
SLOW_OK = {"extract_timeout_s": 300}


@pytest.fixture
def served(make_settings: Callable[..., Settings]) -> Iterator[Callable[..., tuple[str, Any]]]:
    """``start(**overrides)``: searcher's app under uvicorn with ``make_settings`` and
    ``overrides``; returns its base URL and the app (whose pool stats a test may watch)."""
    servers: list[ThreadedServer] = []

    def start(**overrides: Any) -> tuple[str, Any]:
        app = create_app(make_settings(**overrides))
        server = ThreadedServer(app, lifespan="on").start()
        servers.append(server)
        return server.base_url, app

    yield start
    for server in servers:
        server.stop()


def bounded(workers: int, **fetch: Any) -> dict[str, Any]:
    return {
        "fetch": {"extract_workers": workers, **SLOW_OK, **fetch},
        "limits": {"max_extract_memory_mb": BOUND_MB, "max_total_time_ms": 300_000},
    }


# --- defect 1: a bound on every worker ---------------------------------------------------


@pytest.mark.parametrize("attack", ["xobject-chain?depth=8&fan=10", "flate-bomb?mb=1"])
def test_a_hostile_pdf_is_too_large_and_its_worker_stays_within_the_bound(
    served, testbed: TestbedServer, attack: str
) -> None:
    base, _ = served(**bounded(1))
    with WorkerPeaks() as peaks:
        answer = httpx.post(
            f"{base}/v1/fetch", json={"url": testbed.url(f"/pdf/{attack}")}, timeout=300
        )
    assert answer.status_code == 200, answer.text
    page = answer.json()
    assert page["status"] == "failed"
    assert page["fetch"]["skip_reason"] == "too_large"
    assert f"more than {BOUND_MB} MB" in page["fetch"]["error"]
    assert peaks.peaks, "no extraction worker was seen"
    assert peaks.highest() <= BOUND_MB, peaks.peaks
    # Its worker was replaced: the next page is read.
    plain = httpx.post(
        f"{base}/v1/fetch", json={"url": testbed.url("/pdf/text?pages=2&after=attack")},
        timeout=300,
    ).json()  # fmt: skip
    assert plain["status"] == "fetched"
    assert "Page 2 line 40" in plain["content"]


def test_full_mode_reads_every_bomb_at_once_as_too_large_within_the_bound(
    served, testbed: TestbedServer
) -> None:
    backends = {
        "order": ["searxng"],
        "searxng": {"base_url": testbed.searxng_url("hostile/pdf-bombs")},
    }
    base, _ = served(backends=backends, **bounded(2))
    attacks = HOSTILE_RESULTS["pdf-bombs"]
    body = {
        "query": "hostile pdfs",
        "constraints": {"search_mode": "full"},
        "budget": {
            "max_results": len(attacks),
            "max_fetch_pages": len(attacks),
            "max_download_bytes_per_page": 10_000_000,  # the 9 MB bomb whole
            "max_total_time_ms": 300_000,
            "per_request_timeout_ms": {"fetch": 300_000},
        },
    }
    with WorkerPeaks() as peaks:
        answer = httpx.post(f"{base}/v1/search", json=body, timeout=300)
    assert answer.status_code == 200, answer.text
    items = answer.json()["items"]
    read = {item["url"].split("/pdf/")[1]: item["fetch"] for item in items}
    assert sorted(read) == sorted(a.removeprefix("/pdf/") for a in attacks)
    for attack, fetch in read.items():
        assert (fetch["status"], fetch["skip_reason"]) == ("failed", "too_large"), (attack, fetch)
    assert len(peaks.peaks) >= 2, "fewer extraction workers seen than were attacked"
    assert peaks.highest() <= BOUND_MB, peaks.peaks


async def test_a_task_past_the_bound_is_out_of_memory_and_its_worker_replaced() -> None:
    # Builtins as tasks: a worker needs import nothing to run them.
    pool = WorkerPool(1, memory_limit_bytes=256 * MB)
    try:
        with pytest.raises(WorkerOutOfMemory):
            await pool.run(bytearray, (512 * MB,), timeout_s=120)  # MemoryError
        assert len(await pool.run(bytearray, (MB,), timeout_s=120)) == MB
        with pytest.raises(WorkerOutOfMemory):
            await pool.run(os.abort, (), timeout_s=120)  # as PDFium ends when malloc fails
        stats = pool.stats()
        # The second worker, started for the small task, ran the abort.
        assert (stats.out_of_memory, stats.died, stats.started) == (2, 2, 2)
        assert len(await pool.run(bytearray, (MB,), timeout_s=120)) == MB  # a third
    finally:
        pool.close()


async def test_an_unbounded_worker_that_aborts_has_died_not_run_out_of_memory() -> None:
    pool = WorkerPool(1)
    try:
        with pytest.raises(WorkerDied) as died:
            await pool.run(os.abort, (), timeout_s=120)
        assert not isinstance(died.value, WorkerOutOfMemory)
    finally:
        pool.close()


@pytest.mark.parametrize(
    ("configured", "workers", "machine_gb", "expected"),
    [(0, 2, 24, 1024), (0, 16, 8, 256), (0, 4, 1, 256), (0, 8, 12, 768), (384, 2, 24, 384)],
)
def test_the_default_bound_is_half_the_memory_split_between_the_workers(
    configured: int, workers: int, machine_gb: int, expected: int
) -> None:
    assert worker_memory_mb(configured, workers, machine_gb << 30) == expected


def test_only_the_signals_of_failed_allocations_count_as_out_of_memory() -> None:
    assert ended_by_memory(-6) and ended_by_memory(-9)  # SIGABRT, SIGKILL (the OOM killer)
    assert not any(ended_by_memory(code) for code in (-11, 0, 1, None))


def test_the_memory_bound_is_at_least_what_a_worker_needs_to_start(make_settings) -> None:
    with pytest.raises(ValueError, match=r"limits\.max_extract_memory_mb\n.*at least 160 MB"):
        make_settings(limits={"max_extract_memory_mb": 100})
    assert make_settings(limits={"max_extract_memory_mb": 160}).limits.max_extract_memory_mb == 160


# --- defect 2: one fair share for every reader -------------------------------------------

# Pages that take trafilatura minutes once the pre-scan lets them through.
LIFTED = {"max_table_row_cells": 10**7, "max_page_elements": 10**7}
ATTACK_QUERY = "hostile slow pages"
ANOTHER_CLIENT = "127.0.0.2"  # a second peer address: a second client, as a second key is


async def _start_research_job(base: str) -> None:
    body = {"query": ATTACK_QUERY, "preset": "minimal",
            "budget": {"max_pages": 4, "max_total_time_ms": 120_000}}  # fmt: skip
    async with httpx.AsyncClient(timeout=60) as client:
        started = await client.post(f"{base}/v1/research", json=body)
    assert started.status_code == 202, started.text


async def _start_tavily_research(base: str) -> None:
    async with httpx.AsyncClient(timeout=60) as client:
        started = await client.post(f"{base}/tavily/research", json={"input": ATTACK_QUERY})
    assert started.status_code in (200, 201), started.text


async def _run_deep_research(base: str) -> None:
    async with Client(f"{base}/mcp") as client:  # runs until the server ends the job
        await client.call_tool("deep_research", {"query": ATTACK_QUERY, "preset": "balanced"})


async def _attacker_holds_its_share(pool: Any, attacker: asyncio.Task[Any]) -> dict[str, int]:
    """Wait until the attacker's pages are extracting with more queued behind them, all
    the workers it may take in hand; returns who holds the workers."""
    async with asyncio.timeout(120):
        while (stats := pool.stats()).waiting < 1:
            if attacker.done():
                attacker.result()  # its own failure, if it failed
            await asyncio.sleep(0.02)
    return dict(stats.by_client)


@pytest.mark.parametrize(
    "attack", [_start_research_job, _start_tavily_research, _run_deep_research],
    ids=["v1-research", "tavily-research", "mcp-deep-research"],
)  # fmt: skip
async def test_a_research_job_of_hostile_pages_leaves_other_clients_their_workers(
    served, testbed: TestbedServer, attack: Callable[[str], Any]
) -> None:
    backends = {
        "order": ["searxng"],
        "searxng": {"base_url": testbed.searxng_url("hostile/slow-pages")},
    }
    # The machine's own memory bound: a 150,000-cell row takes trafilatura ~300 MB.
    fetch = {"extract_workers": 2, **SLOW_OK, **LIFTED}
    base, app = served(backends=backends, fetch=fetch, limits={"max_total_time_ms": 300_000})
    attacker = asyncio.create_task(attack(base))
    try:
        holders = await _attacker_holds_its_share(
            app.state.runtime.service.parts.reader.extractor.pool, attacker
        )
        # The job's pages count against the client that started it, not against nobody
        # (alone, it may borrow the idle worker beyond its share of one).
        assert set(holders) == {"addr:127.0.0.1"} and 1 <= holders["addr:127.0.0.1"] <= 2
        victim = httpx.AsyncClient(
            transport=httpx.AsyncHTTPTransport(local_address=ANOTHER_CLIENT), timeout=60
        )
        body = {
            "query": "plain pdf text",
            "constraints": {"search_mode": "full"},
            # Well within the time the attacker's pages hold a worker (their jobs' 45 s
            # or more): before, this search got no worker before its deadline; now a
            # borrowed worker is taken back from the attacker for it.
            "budget": {"max_results": 2, "max_fetch_pages": 2, "max_total_time_ms": 15_000},
        }
        async with victim:
            answer = await victim.post(f"{base}/v1/search", json=body)
        assert answer.status_code == 200, answer.text
        fetched = [item["fetch"] for item in answer.json()["items"]]
        assert [f["status"] for f in fetched] == ["fetched", "fetched"], fetched
    finally:
        attacker.cancel()
        with contextlib.suppress(BaseException):
            await attacker
