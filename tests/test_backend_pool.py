"""The backend pool against the testbed: hedging, fan-out, auto-paging, policy."""

import time

import aiohttp
import pytest

from searcher.backends.base import BackendQuery
from searcher.backends.chain import BackendPool
from searcher.backends.policy import plan_backends
from searcher.backends.registry import build_backends
from searcher.errors import AllBackendsFailed, InvalidRequest
from searcher.resilience import Deadline


@pytest.fixture
async def pool_for():
    sessions = []

    async def build(settings):
        session = aiohttp.ClientSession()
        sessions.append(session)
        return BackendPool(build_backends(settings, session), settings)

    yield build
    for session in sessions:
        await session.close()


async def test_hedging_starts_the_next_backend_and_the_first_good_answer_wins(
    make_settings, pool_for, testbed, matching_query
):
    settings = make_settings(
        backends={"searxng": {"base_url": testbed.searxng_url("slow/3000")}, "hedge_delay_ms": 100}
    )
    pool = await pool_for(settings)
    started = time.monotonic()
    result = await pool.search_with_fallback(
        ["searxng", "brave"], BackendQuery(matching_query), Deadline(10), 8.0, 0
    )
    elapsed = time.monotonic() - started
    assert result.answer.backend == "brave" and result.fallback_used
    assert result.hedged == {
        "started": ["searxng", "brave"],
        "winner": "brave",
        "cancelled": [],
        "background": ["searxng"],
    }
    assert elapsed < 2.0  # did not wait for the 3 s backend
    # The loser runs on in the background; it answers in time: no failure on its breaker.
    await pool.settle()
    assert pool.breakers["searxng"].snapshot().consecutive_failures == 0


async def test_no_hedging_without_a_delay_or_latency_history(
    make_settings, pool_for, testbed, matching_query
):
    settings = make_settings(backends={"searxng": {"base_url": testbed.searxng_url("slow/300")}})
    pool = await pool_for(settings)
    assert pool.hedge_delay("searxng") is None
    result = await pool.search_with_fallback(
        ["searxng", "brave"], BackendQuery(matching_query), Deadline(10), 8.0, 0
    )
    assert result.answer.backend == "searxng" and result.hedged is None
    for _ in range(5):
        await pool.call("searxng", BackendQuery(matching_query), Deadline(10), 8.0, 0)
    assert 0.3 <= pool.hedge_delay("searxng") < 1.0  # the observed p90


async def test_fan_out_keeps_partial_results_when_one_backend_fails(
    make_settings, pool_for, testbed, matching_query
):
    settings = make_settings(backends={"searxng": {"base_url": testbed.searxng_url("status/500")}})
    pool = await pool_for(settings)
    result = await pool.fan_out(
        ["searxng", "brave"], BackendQuery(matching_query), Deadline(10), 8.0, 0
    )
    assert [a.backend for a in result.answers] == ["brave"]
    assert [(f.backend, f.reason) for f in result.failures] == [("searxng", "HTTP 500")]


async def test_fan_out_queries_concurrently(make_settings, pool_for, testbed, matching_query):
    settings = make_settings(
        backends={
            "searxng": {"base_url": testbed.searxng_url("slow/600")},
            "brave": {"base_url": testbed.brave_url("slow/600"), "api_key": "test-key"},
        }
    )
    pool = await pool_for(settings)
    started = time.monotonic()
    result = await pool.fan_out(
        ["searxng", "brave"], BackendQuery(matching_query), Deadline(10), 8.0, 0
    )
    assert len(result.answers) == 2
    assert time.monotonic() - started < 1.1  # both at once, not 1.2 s one after the other


async def test_searxng_pages_until_max_results(
    make_settings, pool_for, testbed_clean, matching_query
):
    pool = await pool_for(make_settings(backends={"max_pages": 5}))
    answer = await pool.call(
        "searxng", BackendQuery(matching_query, max_results=15), Deadline(10), 8.0, 0
    )
    pages = [e.query["pageno"] for e in testbed_clean.log if e.path.startswith("/searxng")]
    assert pages == ["1", "2"]  # 10 a page: two pages reach 15
    assert len(answer.hits) == 20 and len({h.url for h in answer.hits}) == 20


async def test_paging_stops_when_searxng_runs_dry(
    make_settings, pool_for, testbed_clean, matching_query
):
    pool = await pool_for(make_settings(backends={"max_pages": 10}))
    # The testbed has 21 pages matching this query: pages 1-3 hold them, page 4 is empty.
    answer = await pool.call(
        "searxng", BackendQuery(matching_query, max_results=100), Deadline(10), 8.0, 0
    )
    pages = [e.query["pageno"] for e in testbed_clean.log if e.path.startswith("/searxng")]
    assert pages == ["1", "2", "3", "4"] and len(answer.hits) == 21


async def test_fallback_chain_reports_every_failure(make_settings, pool_for, testbed):
    settings = make_settings(
        backends={
            "searxng": {"base_url": testbed.searxng_url("garbage")},
            "brave": {"base_url": testbed.brave_url("status/429"), "api_key": "test-key"},
        }
    )
    pool = await pool_for(settings)
    with pytest.raises(AllBackendsFailed) as info:
        await pool.search_with_fallback(
            ["searxng", "brave"], BackendQuery("q"), Deadline(10), 8.0, 0
        )
    assert [f.backend for f in info.value.failures] == ["searxng", "brave"]
    assert info.value.failures[1].reason == "HTTP 429"


def test_policy(make_settings):
    settings = make_settings(
        backends={
            "auto": "fanout",
            "intents": {
                "fresh_data": {"backends": ["brave", "searxng"], "weights": {"brave": 2.0}}
            },
        }
    )
    usable = {"searxng", "brave"}
    single = plan_backends("brave", None, settings, usable)
    assert (single.mode, single.names) == ("single", ("brave",))
    listed = plan_backends(["brave", "searxng", "brave"], None, settings, usable)
    assert (listed.mode, listed.names) == ("fanout", ("brave", "searxng"))
    by_intent = plan_backends("auto", "fresh_data", settings, usable)
    assert by_intent.names == ("brave", "searxng") and by_intent.weight("brave") == 2.0
    auto = plan_backends(None, "background", settings, usable)
    assert (auto.mode, auto.names) == ("fanout", ("searxng", "brave"))
    fallback = plan_backends(None, None, make_settings(), usable)
    assert (fallback.mode, fallback.names) == ("fallback", ("searxng", "brave"))
    with pytest.raises(InvalidRequest):
        plan_backends(["brave", "bing"], None, settings, usable)
