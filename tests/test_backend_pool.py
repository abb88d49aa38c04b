"""The backend pool against the testbed: hedging, fan-out, auto-paging, policy."""

import time
from typing import Any

import aiohttp
import pytest

from searcher.backends.base import BackendAnswer, BackendQuery, Capabilities, Hit
from searcher.backends.instances import build_backends
from searcher.backends.pacing import Pacer, instance_rates
from searcher.backends.policy import plan_backends
from searcher.backends.pool import BackendPool
from searcher.errors import AllBackendsFailed, BackendBadResponse, BackendTimeout, InvalidRequest
from searcher.pipeline.resilience import CircuitBreaker, Deadline
from searcher.state.sqlite_store import SqliteStore
from tests.shared_data import AEB, require_shared


@pytest.fixture
async def pool_for(tmp_path):
    sessions, stores, pools = [], [], []

    async def build(settings, paced=False):
        session = aiohttp.ClientSession()
        sessions.append(session)
        pacer = None
        if paced:  # each instance's rate, in a state store of this test's own
            stores.append(SqliteStore(tmp_path / f"pace{len(stores)}.sqlite3"))
            pacer = Pacer(stores[-1], instance_rates(settings))
        pools.append(BackendPool(build_backends(settings, session), settings, pacer=pacer))
        return pools[-1]

    yield build
    for pool in pools:
        await pool.aclose()
    for session in sessions:
        await session.close()
    for store in stores:
        await store.aclose()


def searxng_pages(testbed):
    return [e.query["pageno"] for e in testbed.log if e.path.startswith("/searxng")]


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


async def test_before_any_latency_history_the_hedge_waits_half_the_time_left(
    make_settings, pool_for, testbed, matching_query
):
    settings = make_settings(backends={"searxng": {"base_url": testbed.searxng_url("slow/300")}})
    pool = await pool_for(settings)
    assert 4.9 <= pool.hedge_delay("searxng", Deadline(10)) <= 5.0
    result = await pool.search_with_fallback(
        ["searxng", "brave"], BackendQuery(matching_query), Deadline(10), 8.0, 0
    )
    assert result.answer.backend == "searxng" and result.hedged is None
    for _ in range(5):
        await pool.call("searxng", BackendQuery(matching_query), Deadline(10), 8.0, 0)
    assert 0.3 <= pool.hedge_delay("searxng", Deadline(10)) < 1.0  # the observed p90


async def test_an_instance_that_hangs_from_the_start_leaves_half_the_time_to_the_next(
    make_settings, pool_for, testbed, matching_query
):
    # No latency history, a deadline no longer than the instance's own timeout: without a
    # hedge, the hanging instance would hold the whole deadline and brave never be asked.
    settings = make_settings(backends={"searxng": {"base_url": testbed.searxng_url("hang")}})
    pool = await pool_for(settings)
    started = time.monotonic()
    result = await pool.search_with_fallback(
        ["searxng", "brave"], BackendQuery(matching_query), Deadline(4), 8.0, 0
    )
    assert result.answer.backend == "brave" and result.hedged is not None
    assert result.hedged["started"] == ["searxng", "brave"]
    assert time.monotonic() - started < 3.5  # brave asked after 2 s, not at the deadline


async def test_the_hedge_delay_is_the_time_of_whole_calls_further_pages_included(
    make_settings, pool_for, testbed, matching_query
):
    # SearXNG has no result count: 25 results take three pages of 150 ms. The race waits
    # for the whole call, so a delay learnt from single pages would hedge every time.
    settings = make_settings(backends={"searxng": {"base_url": testbed.searxng_url("slow/150")}})
    pool = await pool_for(settings)
    query = BackendQuery(matching_query, max_results=25)
    for _ in range(5):
        answer = await pool.call("searxng", query, Deadline(10), 8.0, 0)
    assert len(answer.hits) > 10  # more than one page was read
    assert pool.hedge_delay("searxng", Deadline(10)) >= 0.3


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
            "searxng": {"base_url": testbed.searxng_url("slow/1500")},
            "brave": {"base_url": testbed.brave_url("slow/1500"), "api_key": "test-key"},
        }
    )
    pool = await pool_for(settings)
    started = time.monotonic()
    result = await pool.fan_out(
        ["searxng", "brave"], BackendQuery(matching_query), Deadline(10), 8.0, 0
    )
    assert len(result.answers) == 2
    assert time.monotonic() - started < 2.5  # both at once, not 3 s one after the other


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
    require_shared(AEB)  # its pages and counts are the AEB set's, not the shipped pages'
    pool = await pool_for(make_settings(backends={"max_pages": 10}))
    # The testbed has 21 pages matching this query: pages 1-3 hold them, page 4 is empty.
    answer = await pool.call(
        "searxng", BackendQuery(matching_query, max_results=100), Deadline(10), 8.0, 0
    )
    pages = [e.query["pageno"] for e in testbed_clean.log if e.path.startswith("/searxng")]
    assert pages == ["1", "2", "3", "4"] and len(answer.hits) == 21


async def test_each_extra_page_waits_for_its_pacing_turn(
    make_settings, pool_for, testbed_clean, matching_query
):
    settings = make_settings(backends={"max_pages": 5, "searxng": {"rate": "1/s"}})
    pool = await pool_for(settings, paced=True)
    started = time.monotonic()
    answer = await pool.call(
        "searxng", BackendQuery(matching_query, max_results=15), Deadline(10), 8.0, 0
    )
    assert searxng_pages(testbed_clean) == ["1", "2"] and len(answer.hits) == 20
    assert time.monotonic() - started >= 0.8  # page 2 waited for the next turn


async def test_paging_stops_when_no_turn_comes_before_the_deadline(
    make_settings, pool_for, testbed_clean, matching_query
):
    settings = make_settings(backends={"max_pages": 5, "searxng": {"rate": "1/min"}})
    pool = await pool_for(settings, paced=True)
    answer = await pool.call(
        "searxng", BackendQuery(matching_query, max_results=15), Deadline(5), 8.0, 0
    )
    assert searxng_pages(testbed_clean) == ["1"]
    assert len(answer.hits) == 10  # what was read is kept, and the stop is said
    (warning,) = answer.warnings
    assert warning.startswith("page 2 not read (rate_limited): paced at 1/min")
    assert pool.breakers["searxng"].snapshot().state == "closed"


async def test_a_failing_extra_page_is_counted_by_the_breaker(
    make_settings, pool_for, testbed_clean, matching_query
):
    settings = make_settings(
        backends={
            "max_pages": 5,
            "searxng": {"base_url": testbed_clean.searxng_url("fail-after/1")},
        }
    )
    pool = await pool_for(settings)
    answer = await pool.call(
        "searxng", BackendQuery(matching_query, max_results=15), Deadline(10), 8.0, 0
    )
    assert len(answer.hits) == 10 and answer.warnings == ["page 2 not read (http_status): HTTP 500"]
    assert pool.breakers["searxng"].snapshot().failures_by_kind == {"http_status": 1}


async def test_a_loser_still_waiting_for_its_pacing_turn_is_cancelled(
    make_settings, pool_for, testbed, matching_query
):
    """SearXNG's turn is a second away when Brave, the hedge, wins: SearXNG has asked
    nothing yet, so it is cancelled rather than calling after the request answered."""
    settings = make_settings(backends={"hedge_delay_ms": 1, "searxng": {"rate": "1/s"}})
    pool = await pool_for(settings, paced=True)
    await pool.call("searxng", BackendQuery(matching_query), Deadline(10), 8.0, 0)  # its turn
    testbed.reset()
    result = await pool.search_with_fallback(
        ["searxng", "brave"], BackendQuery(matching_query), Deadline(10), 8.0, 0
    )
    assert result.answer.backend == "brave"
    assert result.hedged and result.hedged["cancelled"] == ["searxng"]
    assert result.hedged["background"] == []
    await pool.settle()  # (a loser sent to the background would call SearXNG by now)
    assert searxng_pages(testbed) == []
    assert pool.breakers["searxng"].snapshot().consecutive_failures == 0


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


class Scripted:
    """A backend that answers as told: hits, no hits, a backend failure or a plugin bug."""

    def __init__(self, name: str, behaviour: str) -> None:
        self.name = name
        self.capabilities = Capabilities(result_count=True)
        self.behaviour = behaviour

    async def search(self, query: BackendQuery, timeout_s: float) -> BackendAnswer:
        if self.behaviour == "timeout":
            raise BackendTimeout(self.name, "timed out")
        if self.behaviour == "bad":
            raise BackendBadResponse(self.name, "garbled")
        if self.behaviour == "bug":
            raise RuntimeError("plugin bug")
        hits = [Hit("https://a.example/", "A", "a", self.name)] if self.behaviour == "hits" else []
        return BackendAnswer(self.name, hits)


class GoneStore:
    """Shared breakers whose state store fails: an error that is no ``BackendError``."""

    async def sync(self, name: str, breaker: CircuitBreaker) -> None:
        raise RuntimeError("state store gone")


async def _chain_outcome(pool, chain, deadline_s):
    try:
        result = await chain(deadline_s)
    except AllBackendsFailed as exc:
        outcome: object = ("failed", exc.failures)
    else:
        outcome = (result.answer, result.tried, result.failures, result.hedged)
    snapshot = pool.breakers["searxng"].snapshot()
    return outcome, snapshot.state, snapshot.consecutive_failures


@pytest.mark.parametrize("behaviour", ["hits", "empty", "timeout", "bad", "bug", "absent", "store"])
@pytest.mark.parametrize("retries", [0, 1])
@pytest.mark.parametrize("deadline_s", [10.0, 0.0])
async def test_a_chain_of_one_instance_ends_as_the_race_does(
    make_settings, behaviour, retries, deadline_s
):
    """A chain of one name is awaited in place (``only``), not raced: same outcome,
    same failures, same breaker state as the race over that one name."""
    settings = make_settings(backends={"searxng": {"breaker": {"failure_threshold": 2}}})
    outcomes = []
    for path in ("_only", "_race"):
        backends = {} if behaviour == "absent" else {"searxng": Scripted("searxng", behaviour)}
        shared: Any = GoneStore() if behaviour == "store" else None
        pool = BackendPool(backends, settings, shared=shared)
        pool.breakers.setdefault("searxng", CircuitBreaker(settings.backends.searxng.breaker))
        query = BackendQuery("q")
        if path == "_only":

            async def chain(budget_s, pool=pool, query=query):
                return await pool.chain.only("searxng", query, Deadline(budget_s), 5.0, retries)
        else:

            async def chain(budget_s, pool=pool, query=query):
                return await pool.chain.race(["searxng"], query, Deadline(budget_s), 5.0, retries)

        outcomes.append(await _chain_outcome(pool, chain, deadline_s))
    assert outcomes[0] == outcomes[1]
    if behaviour == "hits" and deadline_s:  # the public entry takes the in-place path
        pool = BackendPool({"searxng": Scripted("searxng", "hits")}, settings)
        result = await pool.search_with_fallback(
            ["searxng"], BackendQuery("q"), Deadline(10), 5.0, 0
        )
        assert result.tried == ["searxng"] and result.answer.hits
