"""Blocked SearXNG engines are routed around: per-engine health per instance, a growing
back-off and a probe, driven by an injected clock, over real HTTP against the testbed."""

import aiohttp
import httpx
import pytest

from searcher.backends.base import BackendQuery
from searcher.backends.engine_health import EngineHealth, EngineHealthSettings, engines_to_ask
from searcher.backends.instances import build_backends
from searcher.backends.pool import BackendPool
from searcher.pipeline.resilience import Deadline
from tests.testbed.corpus import ENGINES


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def searxng_on():
    """A pool whose only instance ``searxng`` is the testbed behaviour given, on a fake
    clock; returns (pool, clock)."""
    sessions = []

    async def build(make_settings, testbed, behaviour, **engine_health):
        clock = FakeClock()
        settings = make_settings(
            backends={
                "searxng": {
                    "base_url": testbed.searxng_url(behaviour),
                    "engine_health": {"failure_threshold": 2, "backoff_s": 60, **engine_health},
                }
            }
        )
        session = aiohttp.ClientSession()
        sessions.append(session)
        pool = BackendPool(build_backends(settings, session, clock=clock), settings, clock)
        return pool, clock

    yield build
    for session in sessions:
        await session.close()


def searches(testbed):
    return [e for e in testbed.log if e.path.endswith("/search")]


def asked(entry):
    """The engines a logged search named (None: SearXNG's defaults)."""
    named = entry.query.get("engines")
    return sorted(named.split(",")) if named else None


async def one(pool, query="Google Stadia Microsoft xCloud Apple Arcade games"):
    # max_results=1: one page per call (no auto-paging), so each call is one search.
    return await pool.call("searxng", BackendQuery(query, max_results=1), Deadline(10), 8.0, 0)


async def test_a_blocked_engine_is_left_out_then_probed_with_a_growing_backoff(
    make_settings, testbed_clean, searxng_on
):
    pool, clock = await searxng_on(make_settings, testbed_clean, "engine-fails/google/captcha")
    backend = pool.backends["searxng"]
    for _ in range(2):  # failure_threshold = 2
        answer = await one(pool)
        assert "engine google unresponsive: CAPTCHA" in answer.warnings
    assert [asked(e) for e in searches(testbed_clean)] == [None, None]

    # Suspended: the engines of /config in the query's category, without google.
    testbed_clean.reset()
    answer = await one(pool)
    without_google = sorted(e for e in ENGINES if e != "google")
    assert [asked(e) for e in searches(testbed_clean)] == [without_google]
    assert any(e.path.endswith("/config") for e in testbed_clean.log)
    assert answer.hits and not answer.unresponsive
    assert any(w.startswith("engine google left out") for w in answer.warnings)
    (snap,) = backend.engines_health()
    assert (snap.name, snap.state, snap.last_kind, snap.retry_in_s) == (
        "google", "suspended", "blocked", 60.0,
    )  # fmt: skip

    # The back-off is over: one probe asks google again (SearXNG's defaults, as nothing
    # else is left out); it fails: suspended twice as long now.
    clock.now += 60
    testbed_clean.reset()
    await one(pool)
    assert [asked(e) for e in searches(testbed_clean)] == [None]
    (snap,) = backend.engines_health()
    assert snap.state == "suspended" and snap.retry_in_s == 120.0
    clock.now += 119
    testbed_clean.reset()
    await one(pool)
    assert [asked(e) for e in searches(testbed_clean)] == [without_google]


async def test_an_engine_that_recovers_is_let_back_in_after_its_probe(
    make_settings, testbed_clean, searxng_on
):
    pool, clock = await searxng_on(make_settings, testbed_clean, "engine-fails-for/bing/2")
    await one(pool)
    await one(pool)
    await one(pool)
    assert "bing" not in asked(searches(testbed_clean)[2])
    clock.now += 60
    answer = await one(pool)  # the probe: bing answers now
    assert not answer.unresponsive
    (snap,) = pool.backends["searxng"].engines_health()
    assert snap.state == "healthy" and snap.consecutive_failures == 0
    await one(pool)
    assert [asked(e) for e in searches(testbed_clean)[3:]] == [None, None]  # the defaults


async def test_explicit_engines_lose_only_the_suspended_one(
    make_settings, testbed_clean, searxng_on
):
    pool, _ = await searxng_on(make_settings, testbed_clean, "engine-fails/qwant/ratelimit")
    query = BackendQuery("Google Stadia games", max_results=1, engines=("qwant", "bing"))
    for _ in range(2):
        await pool.call("searxng", query, Deadline(10), 8.0, 0)
    testbed_clean.reset()
    await pool.call("searxng", query, Deadline(10), 8.0, 0)
    assert [asked(e) for e in searches(testbed_clean)] == [["bing"]]
    assert not any(e.path.endswith("/config") for e in testbed_clean.log)  # not needed
    (snap,) = pool.backends["searxng"].engines_health()
    assert snap.last_kind == "rate_limited"


def test_engine_health_state_machine_with_a_fake_clock():
    clock = FakeClock()
    health = EngineHealth(
        EngineHealthSettings(failure_threshold=1, backoff_s=10, max_backoff_s=25), clock
    )
    health.observe(["a", "b"], [("a", "Suspended: CAPTCHA")])
    assert health.left_out() == {"a"}
    clock.now += 10
    assert health.left_out() == set()  # a is probed
    assert health.left_out() == {"a"}  # ... once: the others wait for its answer
    health.observe(["a"], [("a", "CAPTCHA")])
    assert [s.retry_in_s for s in health.snapshot()] == [20.0]
    clock.now += 20
    assert health.left_out() == set()
    health.observe(["a"], [("a", "CAPTCHA")])
    assert [s.retry_in_s for s in health.snapshot()] == [25.0]  # capped
    # A probe that never reports is retried after one more back-off.
    clock.now += 25
    assert health.left_out() == set()
    clock.now += 25
    assert health.left_out() == set()
    health.observe(["a"], [])
    assert health.left_out() == set() and health.snapshot()[0].state == "healthy"


def test_engines_to_ask():
    known = [("bing", ("general",)), ("arxiv", ("science",)), ("google", ("general", "web"))]
    assert engines_to_ask(("google", "bing"), (), known, {"google"}) == ("bing",)
    assert engines_to_ask((), (), known, {"google"}) == ("bing",)
    assert engines_to_ask((), ("science",), known, {"google"}) == ("arxiv",)
    assert engines_to_ask(("google",), (), known, {"google"}) == ("bing",)  # none left: defaults


def test_health_shows_engine_health_and_instances(
    make_settings, serve_searcher, testbed, matching_query
):
    settings = make_settings(
        backends={
            "order": ["searxng"],
            "searxng": {"base_url": testbed.searxng_url("engine-fails/startpage/suspended")},
        }
    )
    base = serve_searcher(settings)
    for _ in range(2):  # default failure_threshold: 2
        data = httpx.post(base + "/v1/search", json={"query": matching_query}, timeout=30).json()
    reasons = [e["reason"] for e in data["meta"]["errors"] if e["source"] == "searxng"]
    assert "engine startpage unresponsive: Suspended: CAPTCHA" in reasons
    health = httpx.get(base + "/v1/health").json()["backends"]
    assert health["searxng"]["adapter"] == "searxng"
    (engine,) = health["searxng"]["engines"]
    assert engine["name"] == "startpage" and engine["state"] == "suspended"
    assert engine["last_kind"] == "blocked" and engine["consecutive_failures"] == 2
    assert health["brave"]["adapter"] == "brave" and health["brave"]["engines"] is None
    data = httpx.post(base + "/v1/search", json={"query": matching_query}, timeout=30).json()
    reasons = [e["reason"] for e in data["meta"]["errors"] if e["source"] == "searxng"]
    assert any(r.startswith("engine startpage left out") for r in reasons)
