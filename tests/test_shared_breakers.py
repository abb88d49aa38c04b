"""Breakers shared through the state store: two app instances (two workers, or two
replicas) sharing one SQLite file or one real Redis see one breaker per backend."""

from __future__ import annotations

import httpx
import pytest

FRESH = {"constraints": {"cache": "off"}}  # every request must reach the backends


def settings_for(make_settings, searxng_url, threshold, state=None):
    """SearXNG (at ``searxng_url``, its breaker opening at ``threshold``) then Brave, no
    hedge, no retry; ``state`` shared when given."""
    return make_settings(
        backends={
            "order": ["searxng", "brave"],
            "hedge": False,
            "searxng": {
                "base_url": searxng_url,
                "breaker": {"failure_threshold": threshold, "recovery_timeout": 600},
            },
        },
        budget={"max_search_retries": 0},
        state=state or {},
    )


def backend_used(base: str, query: str) -> str:
    data = httpx.post(f"{base}/v1/search", json=FRESH | {"query": query}).json()
    return str(data["meta"]["backend_used"])


def searxng_hits(testbed) -> int:
    """Searches that reached the SearXNG imitation (its ``/config`` is no search)."""
    return sum(
        1 for e in testbed.log if e.path.startswith("/searxng") and e.path.endswith("/search")
    )


@pytest.mark.parametrize("engine", ["sqlite", "redis"])
def test_a_breaker_opened_by_one_worker_is_open_for_all(
    make_settings, serve_searcher, testbed, matching_query, engine, request
):
    threshold = 3
    state = {"redis_url": request.getfixturevalue("redis_url")} if engine == "redis" else {}
    settings = settings_for(make_settings, testbed.searxng_url("status/500"), threshold, state)
    first, second = serve_searcher(settings), serve_searcher(settings)
    testbed.reset()
    for base in [first, second] * 4:  # the workers take turns, as a load balancer would
        assert backend_used(base, matching_query) == "brave"
    # Consecutive failures are counted by both: the breaker opened at the threshold, for
    # both workers, and neither called the failing backend again.
    assert searxng_hits(testbed) == threshold
    for base in (first, second):
        health = httpx.get(f"{base}/v1/health").json()["backends"]["searxng"]
        assert health["breaker"] == "open"


@pytest.mark.parametrize("engine", ["sqlite", "redis"])
@pytest.mark.parametrize("succeeding", ["same", "other"])
def test_a_success_ends_the_consecutive_failures_for_all(
    make_settings, serve_searcher, testbed, matching_query, engine, succeeding, request
):
    # Two failures, a success, then two more: never three in a row, so the breaker stays
    # closed, whichever worker had the success. It opened before when the success was the
    # other worker's (it had not counted, so it reset nothing), and on SQLite even when it
    # was the same worker's (its delete left counters alone).
    state = {"redis_url": request.getfixturevalue("redis_url")} if engine == "redis" else {}
    settings = settings_for(make_settings, testbed.searxng_url("fail-at/1-2-4-5-6"), 3, state)
    first, second = serve_searcher(settings), serve_searcher(settings)
    succeeds = first if succeeding == "same" else second
    testbed.reset()
    used = [backend_used(base, matching_query) for base in (first, first, succeeds, first, first)]
    assert used == ["brave", "brave", "searxng", "brave", "brave"]
    assert searxng_hits(testbed) == 5  # none was skipped for an open breaker
    for base in (first, second):
        health = httpx.get(f"{base}/v1/health").json()["backends"]["searxng"]
        assert health["breaker"] == "closed"
    # The next failure is the third in a row: the breaker opens, for both (the first
    # worker reads so before its next call, and leaves the backend alone).
    httpx.post(f"{second}/v1/search", json=FRESH | {"query": "a third failure"})
    assert httpx.get(f"{second}/v1/health").json()["backends"]["searxng"]["breaker"] == "open"
    assert backend_used(first, matching_query) == "brave"
    assert searxng_hits(testbed) == 6


def test_one_name_for_two_upstreams_shares_no_breaker(
    make_settings, serve_searcher, testbed, matching_query
):
    # Two deployments on one machine share the default state file and both call their
    # SearXNG "searxng", but one points at a failing instance and the other at a good one.
    def deployment(behaviour: str) -> str:
        return serve_searcher(settings_for(make_settings, testbed.searxng_url(behaviour), 2))

    failing, healthy = deployment("status/500"), deployment("")
    for _ in range(3):
        httpx.post(f"{failing}/v1/search", json=FRESH | {"query": matching_query})
    assert httpx.get(f"{failing}/v1/health").json()["backends"]["searxng"]["breaker"] == "open"
    assert backend_used(healthy, matching_query) == "searxng"
    health = httpx.get(f"{healthy}/v1/health").json()["backends"]["searxng"]
    assert health["breaker"] == "closed"
