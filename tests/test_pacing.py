"""Pacing (backends.<instance>.rate): searcher never calls an instance more often than its
allowance, across workers sharing the state store; a request waits its turn within its
deadline, or is refused before calling (rate_limited) and falls back."""

from __future__ import annotations

import asyncio
import time

import httpx
import pytest

from searcher.auth.rates import Rate
from searcher.backends.instances import upstream_key, upstream_of
from searcher.backends.pacing import Pacer
from searcher.backends.searxng import SearxngSettings
from searcher.errors import BackendRateLimited
from searcher.pipeline.resilience import Deadline
from searcher.state.sqlite_store import SqliteStore

FRESH = {"constraints": {"cache": "off"}}


def brave_hits(testbed) -> int:
    return sum(1 for e in testbed.log if e.path.startswith("/brave"))


def settings_with_rate(make_settings, rate: str):
    return make_settings(
        backends={
            "order": ["brave", "searxng"],
            "hedge": False,
            "brave": {"api_key": "test-key", "rate": rate},
        }
    )


def test_over_the_allowance_a_request_falls_back_without_calling(
    make_settings, serve_searcher, testbed, matching_query
):
    settings = settings_with_rate(make_settings, "1/min")
    first, second = serve_searcher(settings), serve_searcher(settings)  # two workers
    testbed.reset()
    used = httpx.post(f"{first}/v1/search", json=FRESH | {"query": matching_query}).json()
    assert used["meta"]["backend_used"] == "brave"
    # The other worker shares the allowance: Brave's next turn is a minute away, beyond
    # this request's deadline, so it is not called and SearXNG answers.
    paced = httpx.post(f"{second}/v1/search", json=FRESH | {"query": matching_query}).json()
    assert paced["meta"]["backend_used"] == "searxng"
    (error,) = [e for e in paced["meta"]["errors"] if e["source"] == "brave"]
    assert "paced at 1/min" in error["reason"]
    assert brave_hits(testbed) == 1
    health = httpx.get(f"{second}/v1/health").json()["backends"]["brave"]
    assert health["breaker"] == "closed"  # our own pacing is no verdict on Brave


def test_requests_over_the_burst_wait_their_turn(
    make_settings, serve_searcher, testbed, matching_query
):
    base = serve_searcher(settings_with_rate(make_settings, "4/s"))
    testbed.reset()

    async def burst() -> list[dict]:
        async with httpx.AsyncClient(timeout=30) as client:
            body = FRESH | {"query": matching_query}
            answers = await asyncio.gather(
                *(client.post(f"{base}/v1/search", json=body) for _ in range(6))
            )
        return [a.json() for a in answers]

    started = time.monotonic()
    answers = asyncio.run(burst())
    elapsed = time.monotonic() - started
    assert all(a["meta"]["backend_used"] == "brave" for a in answers)  # none refused
    assert brave_hits(testbed) == 6
    # Four at once, then one every 0.25 s: the last can not have gone before 0.5 s.
    assert elapsed >= 0.5


def test_instances_of_one_upstream_share_its_allowance(
    make_settings, serve_searcher, testbed, matching_query
):
    """Two instances with the same Brave key: Brave counts their calls together, so the
    allowance is one, whatever the instances are called."""
    settings = make_settings(
        backends={
            "order": ["brave", "brave2", "searxng"],
            "hedge": False,
            "brave": {"api_key": "test-key", "rate": "1/min"},
            "instances": {
                "brave2": {
                    "adapter": "brave", "base_url": testbed.brave_url(), "api_key": "test-key",
                    "rate": "1/min",
                },
            },
        }
    )  # fmt: skip
    base = serve_searcher(settings)
    testbed.reset()
    used = [
        httpx.post(f"{base}/v1/search", json=FRESH | {"query": matching_query}).json()
        for _ in range(2)
    ]
    assert [u["meta"]["backend_used"] for u in used] == ["brave", "searxng"]
    assert brave_hits(testbed) == 1
    paced = {e["source"] for e in used[1]["meta"]["errors"] if "paced at" in e["reason"]}
    assert paced == {"brave", "brave2"}


def test_a_base_url_names_one_upstream_with_or_without_its_trailing_slash():
    def upstream(base_url: str) -> str:
        instance = SearxngSettings(adapter="searxng", base_url=base_url)
        return upstream_of(upstream_key("any", instance))

    assert upstream("http://127.0.0.1:8888/searx") == upstream("http://127.0.0.1:8888/searx/")
    assert upstream("http://127.0.0.1:8888") == upstream("http://127.0.0.1:8888/")
    assert upstream("http://127.0.0.1:8888/searx") != upstream("http://127.0.0.1:8888/")
    assert upstream("http://127.0.0.1:8888/") != upstream("http://127.0.0.2:8888/")


async def test_a_shared_allowance_goes_at_the_strictest_rate(tmp_path):
    store = SqliteStore(tmp_path / "pace.sqlite3")
    keys = {"a": "a@same", "b": "b@same", "c": "c@other"}
    pacer = Pacer(store, {"a": Rate.parse("1/min"), "b": Rate.parse("100/s")}, keys)
    try:
        await pacer.wait_turn("a", Deadline(5))
        with pytest.raises(BackendRateLimited, match="paced at 1/min"):
            await pacer.wait_turn("b", Deadline(5))
        await pacer.wait_turn("c", Deadline(5))  # another upstream, no rate: not paced
    finally:
        await store.aclose()


async def test_a_turn_that_leaves_no_time_for_the_call_is_refused_at_once(tmp_path):
    # The bucket's clock stands still: the next turn is exactly 1 s away however long the
    # machine takes between the two turns (on a loaded one, 30 ms brought it within reach).
    store = SqliteStore(tmp_path / "pace.sqlite3", clock=lambda: 1_000_000.0)
    pacer = Pacer(store, {"a": Rate.parse("1/s")}, {})
    try:
        await pacer.wait_turn("a", Deadline(5))
        # The next turn is about 1 s away; the request has barely more: waiting for it
        # would leave the call no time, and fail it as a timeout, not as pacing.
        started = time.monotonic()
        with pytest.raises(BackendRateLimited, match="after the request deadline"):
            await pacer.wait_turn("a", Deadline(1.02))
        assert time.monotonic() - started < 0.5
    finally:
        await store.aclose()
