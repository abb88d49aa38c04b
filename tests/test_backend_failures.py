"""Typed backend failures, the breaker reacting by kind, and failures never hidden by
hedging — over real HTTP against the testbed."""

import aiohttp
import httpx
import pytest

from searcher.backends.base import BackendAnswer, BackendQuery, Capabilities
from searcher.backends.failures import (
    classify_status,
    engine_failure_kind,
    retry_after_s,
    transport_failure,
)
from searcher.backends.instances import build_backends
from searcher.backends.policy import BackendPlan
from searcher.backends.pool import BackendPool
from searcher.config import BreakerSettings
from searcher.errors import (
    AllBackendsFailed,
    BackendAuthRejected,
    BackendBadResponse,
    BackendBlocked,
    BackendConnectError,
    BackendError,
    BackendHTTPError,
    BackendRateLimited,
    EnginesBlocked,
    EnginesUnresponsive,
)
from searcher.pipeline.resilience import CircuitBreaker, Deadline
from tests.ports import free_port
from tests.testbed.blocked import CLOUDFLARE


class FakeClock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
async def pool_for():
    sessions, pools = [], []

    async def build(settings, clock=None):
        session = aiohttp.ClientSession()
        sessions.append(session)
        kwargs = {"clock": clock} if clock else {}
        pool = BackendPool(build_backends(settings, session, **kwargs), settings, **kwargs)
        pools.append(pool)
        return pool

    yield build
    for pool in pools:
        await pool.aclose()
    for session in sessions:
        await session.close()


# Every request must reach the backends: a cached answer would hide the breaker's work.
FRESH = {"constraints": {"cache": "off"}}


def post(base, body):
    return httpx.post(base + "/v1/search", json=body, timeout=30)


def hits_on(testbed, prefix):
    return [e for e in testbed.log if e.path.startswith(prefix)]


# --- one function maps answers to kinds --------------------------------------------------


def test_statuses_and_challenge_pages_map_to_kinds():
    html = {"content-type": "text/html"}
    assert classify_status(500, html, b"<h1>500</h1>") == "http_status"
    assert classify_status(429, html, b"") == "rate_limited"
    assert classify_status(401, {}, b"") == "auth" and classify_status(403, {}, b"") == "auth"
    assert classify_status(403, html, CLOUDFLARE.encode()) == "blocked"
    assert classify_status(503, html, CLOUDFLARE.encode()) == "blocked"
    assert retry_after_s("30") == 30.0 and retry_after_s(None) is None
    assert retry_after_s("Wed, 21 Oct 2015 07:28:00 GMT", now=1445412470.0) == 10.0
    assert retry_after_s("soon") is None and retry_after_s("999999") == 3600.0
    assert engine_failure_kind("CAPTCHA") == "blocked"
    assert engine_failure_kind("Suspended: too many requests") == "rate_limited"
    assert engine_failure_kind("timeout") == "timeout"
    assert engine_failure_kind("unexpected crash") == "bad_response"


@pytest.mark.parametrize(
    ("behaviour", "kind", "says"),
    [
        ("status/500", "http_status", "HTTP 500"),
        ("status/404", "http_status", "HTTP 404"),
        ("ratelimit/30", "rate_limited", "HTTP 429"),
        ("captcha", "blocked", "cloudflare"),
        ("garbage", "bad_response", "expected JSON"),
        ("json-off", "auth", "search: formats: [html, json]"),
        ("unresponsive", "blocked", "bing (CAPTCHA)"),
    ],
)
async def test_each_failure_has_its_kind(make_settings, pool_for, testbed, behaviour, kind, says):
    pool = await pool_for(
        make_settings(backends={"searxng": {"base_url": testbed.searxng_url(behaviour)}})
    )
    with pytest.raises(AllBackendsFailed) as info:
        await pool.search_with_fallback(["searxng"], BackendQuery("q"), Deadline(10), 8.0, 0)
    (failure,) = info.value.failures
    assert failure.kind == kind and says in failure.reason


@pytest.mark.parametrize(
    ("behaviour", "error"),
    [
        ("status/500", BackendHTTPError),
        ("ratelimit/30", BackendRateLimited),
        ("captcha", BackendBlocked),
        ("garbage", BackendBadResponse),
        ("json-off", BackendAuthRejected),
        ("unresponsive", EnginesBlocked),
    ],
)
async def test_the_class_of_a_failure_is_its_kind(
    make_settings, pool_for, testbed, behaviour, error
):
    """One failure, one class: the kind is the class's, and no instance can say another."""
    pool = await pool_for(
        make_settings(backends={"searxng": {"base_url": testbed.searxng_url(behaviour)}})
    )
    with pytest.raises(BackendError) as info:
        await pool.backends["searxng"].search(BackendQuery("q"), 8.0)
    assert type(info.value) is error
    assert info.value.failure().kind == error.kind
    if behaviour == "unresponsive":  # SearXNG's engines behind a wall: blocked, not retried
        assert isinstance(info.value, EnginesUnresponsive) and not info.value.retryable


async def test_a_json_off_instance_says_how_to_fix_it(make_settings, serve_searcher, testbed):
    settings = make_settings(
        backends={"order": ["searxng"], "searxng": {"base_url": testbed.searxng_url("json-off")}}
    )
    response = post(serve_searcher(settings), {"query": "q"})
    assert response.status_code == 502
    (entry,) = response.json()["error"]["backends"]
    assert entry["kind"] == "auth"
    assert "JSON format is switched off" in entry["reason"]
    assert "`search: formats: [html, json]`" in entry["reason"]


# --- the breaker by kind -----------------------------------------------------------------


def breaker(threshold=5, recovery=60.0):
    clock = FakeClock()
    settings = BreakerSettings(failure_threshold=threshold, recovery_timeout=recovery)
    return CircuitBreaker(settings, clock), clock


def test_a_rejected_key_opens_the_breaker_at_once():
    b, _ = breaker(threshold=5)
    b.record_failure("auth", "HTTP 401")
    assert b.state == "open"


def test_a_429_keeps_the_breaker_open_for_its_retry_after():
    b, clock = breaker(threshold=5, recovery=60.0)
    b.record_failure("rate_limited", "HTTP 429", retry_after_s=300.0)
    assert b.state == "open" and b.snapshot().retry_in_s == 300.0
    clock.now += 299
    assert b.state == "open"
    clock.now += 1
    assert b.state == "half_open"
    # Without a Retry-After a 429 is one failure among others.
    b2, _ = breaker(threshold=2)
    b2.record_failure("rate_limited", "HTTP 429")
    assert b2.state == "closed"


def test_an_empty_answer_is_no_failure():
    b, _ = breaker(threshold=1)
    b.record_failure("no_results", "no results")
    b.record_failure("circuit_open", "circuit open")
    snap = b.snapshot()
    assert snap.state == "closed" and snap.consecutive_failures == 0
    assert snap.failures_by_kind == {}


def test_the_breaker_keeps_recent_failures_by_kind():
    b, clock = breaker(threshold=10)
    b.record_failure("timeout", "timed out after 1.0s")
    clock.now += 5
    b.record_failure("http_status", "HTTP 502")
    b.record_failure("timeout", "timed out after 1.0s")
    snap = b.snapshot()
    assert snap.failures_by_kind == {"timeout": 2, "http_status": 1}
    assert [(r.kind, r.at) for r in snap.recent] == [
        ("timeout", 1000.0),
        ("http_status", 1005.0),
        ("timeout", 1005.0),
    ]


async def test_a_429_with_retry_after_is_not_retried_and_holds_the_breaker(
    make_settings, pool_for, testbed_clean
):
    clock = FakeClock()
    settings = make_settings(
        backends={"searxng": {"base_url": testbed_clean.searxng_url("ratelimit/120")}}
    )
    pool = await pool_for(settings, clock)
    with pytest.raises(AllBackendsFailed):
        await pool.search_with_fallback(["searxng"], BackendQuery("q"), Deadline(10), 8.0, 2)
    assert len(hits_on(testbed_clean, "/searxng")) == 1  # retrying at once cannot help
    snap = pool.breakers["searxng"].snapshot()
    assert snap.state == "open" and snap.retry_in_s == 120.0
    with pytest.raises(AllBackendsFailed) as info:
        await pool.search_with_fallback(["searxng"], BackendQuery("q"), Deadline(10), 8.0, 2)
    assert info.value.failures[0].kind == "circuit_open"
    assert info.value.failures[0].reason.startswith("circuit open after a failure (HTTP 429")
    assert len(hits_on(testbed_clean, "/searxng")) == 1


# --- failures are never hidden by hedging ------------------------------------------------


def test_a_failing_primary_is_counted_and_reported_although_the_hedge_wins(
    make_settings, serve_searcher, testbed, matching_query
):
    """SearXNG answers 500, Brave (the hedge, started after 1 ms) answers slower but
    well: every request still names SearXNG in meta.errors, its breaker opens within
    failure_threshold requests, and after that it is not called any more."""
    threshold = 3
    settings = make_settings(
        backends={
            "order": ["searxng", "brave"],
            "hedge_delay_ms": 1,
            "searxng": {
                "base_url": testbed.searxng_url("status/500"),
                "breaker": {"failure_threshold": threshold},
            },
            "brave": {"base_url": testbed.brave_url("slow/400"), "api_key": "test-key"},
        }
    )
    base = serve_searcher(settings)
    testbed.reset()
    for _ in range(threshold + 3):
        data = post(base, FRESH | {"query": matching_query}).json()
        assert data["meta"]["backend_used"] == "brave"
        searxng_errors = [e for e in data["meta"]["errors"] if e["source"] == "searxng"]
        assert searxng_errors, data["meta"]["errors"]  # never hidden
    # Every call that reached SearXNG was a failed attempt, counted: it opened at the threshold.
    assert len(hits_on(testbed, "/searxng")) == threshold
    assert searxng_errors[0]["reason"].startswith(
        f"circuit open after {threshold} failures in a row"
    )
    health = httpx.get(base + "/v1/health").json()["backends"]["searxng"]
    assert health["breaker"] == "open"
    assert health["failures_by_kind"] == {"http_status": threshold}
    assert [f["kind"] for f in health["last_failures"]] == ["http_status"] * threshold


def test_a_hanging_primary_times_out_and_opens_its_breaker_although_the_hedge_wins(
    make_settings, serve_searcher, testbed, matching_query
):
    threshold = 3
    settings = make_settings(
        backends={
            "order": ["searxng", "brave"],
            "hedge_delay_ms": 1,
            "searxng": {
                "base_url": testbed.searxng_url("hang"),
                "timeout_s": 0.2,
                "breaker": {"failure_threshold": threshold},
            },
            "brave": {"base_url": testbed.brave_url("slow/700"), "api_key": "test-key"},
        },
        budget={"max_search_retries": 0},
    )
    base = serve_searcher(settings)
    testbed.reset()
    for _ in range(threshold + 2):
        data = post(base, FRESH | {"query": matching_query}).json()
        assert data["meta"]["backend_used"] == "brave"
        (error,) = [e for e in data["meta"]["errors"] if e["source"] == "searxng"]
    assert len(hits_on(testbed, "/searxng")) == threshold
    assert "circuit open" in error["reason"]
    health = httpx.get(base + "/v1/health").json()["backends"]["searxng"]
    assert health["breaker"] == "open" and health["failures_by_kind"] == {"timeout": threshold}


async def test_a_loser_still_in_flight_runs_on_to_its_timeout_and_is_counted(
    make_settings, pool_for, testbed, matching_query
):
    """The hedge wins at once while SearXNG hangs: SearXNG's call is not cancelled but
    left to end by its own timeout in the background, where its breaker counts it."""
    settings = make_settings(
        backends={
            "hedge_delay_ms": 1,
            "searxng": {"base_url": testbed.searxng_url("hang"), "timeout_s": 0.3},
        }
    )
    pool = await pool_for(settings)
    result = await pool.search_with_fallback(
        ["searxng", "brave"], BackendQuery(matching_query), Deadline(10), 8.0, 1
    )
    assert result.answer.backend == "brave"
    assert result.hedged and result.hedged["background"] == ["searxng"]
    assert pool.breakers["searxng"].snapshot().consecutive_failures == 0  # not yet
    await pool.settle()
    snap = pool.breakers["searxng"].snapshot()
    assert snap.consecutive_failures == 1 and snap.failures_by_kind == {"timeout": 1}


async def test_fan_out_reports_every_failed_attempt(
    make_settings, pool_for, testbed_clean, matching_query
):
    settings = make_settings(
        backends={"searxng": {"base_url": testbed_clean.searxng_url("status/502")}}
    )
    pool = await pool_for(settings)
    result = await pool.fan_out(
        ["searxng", "brave"], BackendQuery(matching_query), Deadline(10), 8.0, 1
    )
    assert [a.backend for a in result.answers] == ["brave"]
    assert [(f.backend, f.kind) for f in result.failures] == [("searxng", "http_status")] * 2
    assert pool.breakers["searxng"].snapshot().consecutive_failures == 2


# --- a client's own bad input is no verdict on the backend -------------------------------


@pytest.mark.parametrize("behaviour", ["status/400", "status/404", "status/422"])
async def test_a_refused_request_fails_but_gives_no_verdict(
    make_settings, pool_for, testbed, behaviour
):
    settings = make_settings(
        backends={
            "searxng": {
                "base_url": testbed.searxng_url(behaviour),
                "breaker": {"failure_threshold": 2},
            }
        }
    )
    pool = await pool_for(settings)
    for _ in range(4):
        with pytest.raises(AllBackendsFailed) as info:
            await pool.search_with_fallback(["searxng"], BackendQuery("q"), Deadline(10), 8.0, 1)
        (failure,) = info.value.failures  # reported, not retried
        assert failure.kind == "http_status" and failure.reason.startswith("HTTP 4")
    snap = pool.breakers["searxng"].snapshot()
    assert snap.state == "closed" and snap.consecutive_failures == 0


def test_bad_constraints_cannot_open_a_breaker_for_everyone(
    make_settings, serve_searcher, testbed, matching_query
):
    """The audit's case: requests with a language SearXNG refuses (400) or a page Brave
    does not serve, more than failure_threshold of them; then an ordinary request."""
    settings = make_settings(
        backends={
            "order": ["searxng"],
            "searxng": {
                "base_url": testbed.searxng_url("strict-lang"),
                "breaker": {"failure_threshold": 2},
            },
            "brave": {"breaker": {"failure_threshold": 2}},
        }
    )
    base = serve_searcher(settings)
    testbed.reset()
    for _ in range(4):
        bad_lang = FRESH["constraints"] | {"lang": "xx"}
        assert post(base, {"query": matching_query, "constraints": bad_lang}).status_code == 502
        far_page = FRESH["constraints"] | {"backend": "brave", "pageno": 11}
        response = post(base, {"query": matching_query, "constraints": far_page})
        assert response.status_code == 200  # page 10 asked: empty for this query, no 422
        data = response.json()
        assert [e["reason"] for e in data["meta"]["errors"] if e["stage"] == "search"] == [
            "no results"
        ]
        (note,) = [e for e in data["meta"]["errors"] if e["stage"] == "plan"]
        assert note["source"] == "brave" and "pageno (11)" in note["reason"]
        assert "searched page 10" in note["reason"]
    offsets = {e.query["offset"] for e in hits_on(testbed, "/brave")}
    assert offsets == {"9"}  # never a page Brave refuses
    data = post(base, FRESH | {"query": matching_query}).json()
    assert data["meta"]["backend_used"] == "searxng"
    health = httpx.get(base + "/v1/health").json()["backends"]
    assert health["searxng"]["breaker"] == "closed" and health["brave"]["breaker"] == "closed"


# --- the request's own deadline is no verdict either -------------------------------------


async def test_a_timeout_cut_short_by_the_request_deadline_gives_no_verdict(
    make_settings, pool_for, testbed, matching_query
):
    settings = make_settings(
        backends={
            "searxng": {
                "base_url": testbed.searxng_url("slow/1500"),
                "breaker": {"failure_threshold": 2},
            }
        }
    )
    pool = await pool_for(settings)
    query = BackendQuery(matching_query)
    for _ in range(4):  # the shortest budget: 200 ms for a backend answering in 1.5 s
        with pytest.raises(AllBackendsFailed) as info:
            await pool.search_with_fallback(["searxng"], query, Deadline(0.2), 8.0, 0)
        assert [f.kind for f in info.value.failures] == ["timeout"]  # reported
    snap = pool.breakers["searxng"].snapshot()
    assert snap.state == "closed" and snap.consecutive_failures == 0
    answer = await pool.call("searxng", query, Deadline(10), 8.0, 0)  # a patient request
    assert answer.hits


# --- what a backend sent, named ----------------------------------------------------------


async def test_a_redirect_says_where_it_points(make_settings, pool_for, testbed):
    settings = make_settings(
        backends={"brave": {"base_url": testbed.brave_url("redirect"), "api_key": "test-key"}}
    )
    pool = await pool_for(settings)
    with pytest.raises(AllBackendsFailed) as info:
        await pool.search_with_fallback(["brave"], BackendQuery("q"), Deadline(10), 8.0, 0)
    (failure,) = info.value.failures
    assert failure.reason.startswith("HTTP 302: redirected to http://")
    assert "/brave/res/v1/web/search" in failure.reason and "base_url" in failure.reason


def test_a_body_that_lies_about_its_encoding_is_a_bad_answer():
    exc = transport_failure("brave", aiohttp.ClientPayloadError("bad gzip"))
    assert isinstance(exc, BackendBadResponse) and not exc.retryable
    refused = transport_failure("brave", aiohttp.ClientConnectionError("refused"))
    assert isinstance(refused, BackendConnectError) and refused.retryable


async def test_a_lying_content_encoding_is_not_retried_as_a_connection_failure(
    make_settings, pool_for, testbed_clean
):
    """Needs ``HttpBackend.search`` to translate aiohttp errors with
    ``failures.transport_failure``."""
    brave = {"base_url": testbed_clean.brave_url("bad-encoding"), "api_key": "test-key"}
    pool = await pool_for(make_settings(backends={"brave": brave}))
    with pytest.raises(AllBackendsFailed) as info:
        await pool.search_with_fallback(["brave"], BackendQuery("q"), Deadline(10), 8.0, 2)
    (failure,) = info.value.failures
    assert failure.kind == "bad_response" and "malformed answer body" in failure.reason
    assert len(hits_on(testbed_clean, "/brave")) == 1


# --- a bug in one backend is that backend's failure --------------------------------------


class Crashing:
    """A plugin backend with a bug: it raises what is not a ``BackendError``."""

    def __init__(self, name: str) -> None:
        self.name = name
        self.capabilities = Capabilities()

    async def search(self, query: BackendQuery, timeout_s: float) -> BackendAnswer:
        raise RuntimeError("plugin bug")


@pytest.mark.parametrize("mode", ["fanout", "fallback"])
async def test_an_unexpected_error_is_that_backends_failure_not_a_crash(
    make_settings, testbed, matching_query, mode, caplog
):
    settings = make_settings()
    async with aiohttp.ClientSession() as session:
        backends = build_backends(settings, session)
        backends["searxng"] = Crashing("searxng")
        pool = BackendPool(backends, settings)
        plan = BackendPlan(mode, ("searxng", "brave"))  # type: ignore[arg-type]
        outcome = await pool.search(plan, BackendQuery(matching_query), Deadline(10), 8.0, 0)
    assert outcome.backend_used == "brave"
    (failure,) = outcome.failures
    assert failure.kind == "bad_response" and "RuntimeError('plugin bug')" in failure.reason
    assert any(r.exc_info and "plugin bug" in str(r.exc_info[1]) for r in caplog.records)


def test_a_refused_connection_is_said_in_words_and_its_retries_listed_once(
    make_settings, serve_searcher
):
    port = free_port()  # nothing listens there
    settings = make_settings(
        backends={"order": ["searxng"], "searxng": {"base_url": f"http://127.0.0.1:{port}"}},
        budget={"max_search_retries": 2},
    )
    response = post(serve_searcher(settings), {"query": "q"})
    assert response.status_code == 502
    # Once, though tried three times; in words, not aiohttp's ClientConnectorError(...).
    assert response.json()["error"]["backends"] == [
        {
            "backend": "searxng",
            "reason": f"cannot connect to 127.0.0.1:{port}: connection refused",
            "kind": "connect",
        }
    ]
