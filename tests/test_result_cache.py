"""The exact result cache, over real HTTP against the testbed, on both state engines."""

from __future__ import annotations

import asyncio
import dataclasses
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from searcher.backends.registry import load_registry
from searcher.cache.results import (
    ResultCache,
    answer_fingerprint,
    budget_defaults,
    canonical_request,
    fresh_seconds,
    is_complete,
    request_key,
    serve_cached,
)
from searcher.config import ResultCacheSettings, Settings
from searcher.contract import ErrorEntry, SearchRequest
from searcher.state import SqliteStore
from tests.conftest import serve_until_it_exits
from tests.redis_server import RedisServer, closed_port_url
from tests.responses import search_response


def post(base: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{base}/v1/search", json=body, timeout=30.0)


def backend_calls(testbed: Any, prefix: str = "/searxng") -> int:
    return sum(1 for r in testbed.log if r.path.startswith(prefix))


@pytest.fixture(params=["sqlite", "redis"])
def engine(request: pytest.FixtureRequest, tmp_path: Path) -> dict[str, Any]:
    """The ``state`` settings of one engine (a private SQLite dir, or the test Redis)."""
    if request.param == "sqlite":
        return {"dir": str(tmp_path / "shared-state")}
    return {"redis_url": request.getfixturevalue("redis_url")}


def test_an_identical_request_is_served_from_cache_by_any_worker(
    make_settings, serve_searcher, testbed_clean, matching_query, engine
):
    # Two app instances over one state store stand for two workers (or two replicas).
    first = serve_searcher(make_settings(state=engine))
    second = serve_searcher(make_settings(state=engine))
    body = {"query": matching_query, "budget": {"max_results": 4}}
    computed = post(first, body).json()
    calls = backend_calls(testbed_clean)
    assert calls >= 1 and computed["meta"]["cache"] == {"hit": False, "kind": None, "age_s": None}
    for base in (first, second):
        hit = post(base, body).json()
        assert backend_calls(testbed_clean) == calls  # no backend was asked
        assert hit["meta"]["cache"]["hit"] is True and hit["meta"]["cache"]["kind"] == "exact"
        assert hit["meta"]["cache"]["age_s"] >= 0
        assert hit["items"] == computed["items"]
        assert hit["rendered_text"] == computed["rendered_text"]
    # A different result count is another question.
    post(second, {"query": matching_query, "budget": {"max_results": 3}})
    assert backend_calls(testbed_clean) > calls


def test_a_shorter_fresh_time_configured_later_holds_for_answers_stored_before(
    make_settings, serve_searcher, testbed_clean, matching_query, engine
):
    # Answers stored under ttl_s 3600; the deployment restarted with a shorter fresh time
    # (here 0: answers never fresh) serves none of them as fresh any more.
    before = serve_searcher(make_settings(state=engine))
    body = {"query": matching_query, "budget": {"max_results": 4}}
    post(before, body)
    assert post(before, body).json()["meta"]["cache"]["hit"] is True
    after = serve_searcher(make_settings(state=engine, cache={"ttl_s": 0}))
    calls = backend_calls(testbed_clean)
    assert post(after, body).json()["meta"]["cache"]["hit"] is False
    assert backend_calls(testbed_clean) > calls
    # Per intent too: fresh_data answers kept for 120 s are not fresh under 0.
    fresh_data = {**body, "intent": "fresh_data"}
    post(before, fresh_data)
    soon = serve_searcher(make_settings(state=engine, cache={"ttl_by_intent": {"fresh_data": 0}}))
    assert post(soon, fresh_data).json()["meta"]["cache"]["hit"] is False


def test_max_age_zero_and_cache_off_bypass_the_cache(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    base = serve_searcher(make_settings())
    body: dict[str, Any] = {"query": matching_query}
    post(base, body)
    warm = backend_calls(testbed_clean)
    fresh = post(base, {**body, "budget": {"max_age_s": 0}}).json()
    assert fresh["meta"]["cache"]["hit"] is False
    assert backend_calls(testbed_clean) > warm
    off = {**body, "constraints": {"cache": "off"}}
    before = backend_calls(testbed_clean)
    assert post(base, off).json()["meta"]["cache"]["hit"] is False
    assert backend_calls(testbed_clean) > before
    # max_age_s above the entry's age still accepts it.
    before = backend_calls(testbed_clean)
    assert post(base, {**body, "budget": {"max_age_s": 3600}}).json()["meta"]["cache"]["hit"]
    assert backend_calls(testbed_clean) == before


def test_cache_off_does_not_store(make_settings, serve_searcher, testbed_clean, matching_query):
    base = serve_searcher(make_settings())
    post(base, {"query": matching_query, "constraints": {"cache": "off"}})
    before = backend_calls(testbed_clean)
    assert post(base, {"query": matching_query}).json()["meta"]["cache"]["hit"] is False
    assert backend_calls(testbed_clean) > before


def test_a_partial_fan_out_answer_is_not_stored(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    settings = make_settings(
        backends={"searxng": {"base_url": testbed_clean.searxng_url("status/500")}},
        budget={"max_search_retries": 0},
    )
    base = serve_searcher(settings)
    body = {"query": matching_query, "constraints": {"backend": ["searxng", "brave"]}}
    partial = post(base, body).json()
    assert partial["items"] and any(e["stage"] == "search" for e in partial["meta"]["errors"])
    before = backend_calls(testbed_clean, "/brave")
    again = post(base, body).json()
    assert again["meta"]["cache"]["hit"] is False
    assert backend_calls(testbed_clean, "/brave") > before


def test_a_full_mode_answer_with_results_beyond_max_fetch_pages_is_stored(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    # More results than pages to read (the defaults: 5 and 3): the unread ones are
    # skipped for the budget, and would be again; the answer is complete.
    base = serve_searcher(make_settings())
    body = {"query": matching_query, "constraints": {"search_mode": "full"},
            "budget": {"max_results": 4, "max_fetch_pages": 1}}  # fmt: skip
    first = post(base, body).json()
    skips = [i["fetch"]["skip_reason"] for i in first["items"]]
    assert first["items"][0]["fetch"]["status"] == "fetched" and skips[1:] == ["budget"] * 3
    calls = backend_calls(testbed_clean)
    again = post(base, body).json()
    assert again["meta"]["cache"]["hit"] is True and backend_calls(testbed_clean) == calls
    assert again["rendered_text"] == first["rendered_text"]


def test_a_request_that_states_the_default_budget_is_served_from_cache(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    base = serve_searcher(make_settings())
    assert post(base, {"query": matching_query}).json()["meta"]["cache"]["hit"] is False
    calls = backend_calls(testbed_clean)
    stated = post(base, {"query": matching_query, "budget": {"max_results": 5}}).json()
    assert stated["meta"]["cache"]["hit"] is True and backend_calls(testbed_clean) == calls


def test_an_answer_with_a_page_that_failed_for_a_passing_reason_is_not_stored(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    # The mixed results point at pages that hang, answer 500, 404, a redirect loop...:
    # some failures would pass on another try, so the answer must be read again.
    settings = make_settings(
        backends={"searxng": {"base_url": testbed_clean.searxng_url("mixed")}},
        scoring={"min_keyword_overlap": 0},
    )
    base = serve_searcher(settings)
    body = {
        "query": matching_query,
        "constraints": {"search_mode": "full"},
        "budget": {"max_results": 20, "max_fetch_pages": 20, "max_total_time_ms": 20000,
                   "per_request_timeout_ms": {"fetch": 1500}},
    }  # fmt: skip
    first = post(base, body).json()
    statuses = {(i["fetch"]["status"], i["fetch"]["http_status"]) for i in first["items"]}
    assert ("failed", 500) in statuses
    again = post(base, body).json()
    assert again["meta"]["cache"]["hit"] is False


def test_stale_if_error_serves_a_marked_stale_answer(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    failing_later = {
        "order": ["searxng"],
        "searxng": {"base_url": testbed_clean.searxng_url("fail-after/1")},
        "brave": {"enabled": False},
    }
    # ttl_s 0: every answer is stale at once, but kept for stale_if_error_s.
    base = serve_searcher(make_settings(backends=failing_later, cache={"ttl_s": 0}))
    body = {"query": matching_query}
    computed = post(base, body).json()
    assert computed["meta"]["cache"]["hit"] is False
    stale = post(base, body)
    assert stale.status_code == 200
    data = stale.json()
    assert data["meta"]["cache"]["hit"] is True and data["meta"]["cache"]["kind"] == "stale"
    assert data["items"] == computed["items"]
    assert any(e["stage"] == "cache" and e["source"] == "stale" for e in data["meta"]["errors"])
    # Fresh only: no stale stand-in, the failure is the answer.
    assert post(base, {**body, "budget": {"max_age_s": 0}}).status_code == 502


def test_no_stale_answer_beyond_the_window(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    failing_later = {
        "order": ["searxng"],
        "searxng": {"base_url": testbed_clean.searxng_url("fail-after/1")},
        "brave": {"enabled": False},
    }
    settings = make_settings(backends=failing_later, cache={"ttl_s": 0, "stale_if_error_s": 0})
    base = serve_searcher(settings)
    post(base, {"query": matching_query})
    assert post(base, {"query": matching_query}).status_code == 502


def test_redis_lost_while_serving_requests_go_on(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    with RedisServer() as server:
        settings = make_settings(state={"redis_url": server.url, "redis_timeout_s": 2.0})
        base = serve_searcher(settings)
        body = {"query": matching_query}
        post(base, body)
        assert post(base, body).json()["meta"]["cache"]["hit"] is True
        health = httpx.get(f"{base}/v1/health").json()
        assert health["state"]["engine"] == "redis" and health["state"]["ok"] is True
        server.kill()
        before = backend_calls(testbed_clean)
        answer = post(base, body)
        assert answer.status_code == 200 and answer.json()["items"]
        assert answer.json()["meta"]["cache"]["hit"] is False
        assert backend_calls(testbed_clean) > before
        health = httpx.get(f"{base}/v1/health").json()
        assert health["status"] == "degraded"
        assert health["state"]["ok"] is False and health["state"]["failures"] >= 1
        assert "Redis at" in health["state"]["last_error"]


def test_serve_exits_2_when_redis_is_unreachable(config_file, tmp_path):
    path = config_file()
    config = yaml.safe_load(Path(path).read_text())
    config["state"]["redis_url"] = closed_port_url()  # one state block: a second is refused
    Path(path).write_text(yaml.safe_dump(config))
    done = serve_until_it_exits(path)
    assert done.returncode == 2
    assert "state store" in done.stderr and "Redis at redis://127.0.0.1" in done.stderr
    assert "Traceback" not in done.stderr


def test_bad_cache_controls_are_422_naming_the_field(make_settings, serve_searcher):
    base = serve_searcher(make_settings())
    bad = post(base, {"query": "x", "budget": {"max_age_s": -1}})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "budget.max_age_s"
    bad = post(base, {"query": "x", "constraints": {"cache": "sometimes"}})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "constraints.cache"


# --- keys, freshness and completeness, as data -----------------------------------------


def _request(**body: Any) -> SearchRequest:
    return SearchRequest.model_validate({"query": "q", **body})


def test_the_key_ignores_what_does_not_change_the_answer():
    base = request_key(_request(), "f")
    same = [
        _request(budget={"max_total_time_ms": 150, "max_age_s": 5}),
        _request(constraints={"cache": "on"}),
        _request(query={"text": "q"}),
    ]
    assert all(request_key(r, "f") == base for r in same)
    assert request_key(_request(query={"text": "q", "lang": "de"}), "f") == request_key(
        _request(constraints={"lang": "de"}), "f"
    )
    different = [
        _request(query="q2"),
        _request(budget={"max_results": 9}),
        _request(constraints={"search_mode": "full"}),
        _request(constraints={"backend": ["searxng", "brave"]}),
        _request(constraints={"time_range": "day"}),
        _request(constraints={"engines": ["arxiv"]}),
        _request(constraints={"include_domains": ["a.org"]}),
        _request(intent="fresh_data"),
        _request(want={"rendered_text": False}),
    ]
    keys = {request_key(r, "f") for r in different}
    assert len(keys) == len(different) and base not in keys
    assert request_key(_request(), "other settings") != base
    assert "text" not in canonical_request(_request(), with_query=False)


def test_a_budget_stated_at_its_default_is_the_same_request():
    defaults = budget_defaults(Settings())
    assert defaults["max_results"] == 5 and "max_total_time_ms" not in defaults
    base = request_key(_request(), "f", defaults)
    stated = _request(budget={"max_results": 5, "max_context_chars": 8000})
    assert request_key(stated, "f", defaults) == base
    assert request_key(_request(budget={"max_results": 6}), "f", defaults) != base


def test_fresh_time_depends_on_intent_time_range_and_route():
    cfg = ResultCacheSettings(ttl_s=1000, fresh_ttl_s=60, ttl_by_intent={"background": 9000})
    plain = search_response([])
    assert fresh_seconds(_request(), plain, cfg) == 1000
    assert fresh_seconds(_request(intent="background"), plain, cfg) == 9000
    assert fresh_seconds(_request(constraints={"time_range": "day"}), plain, cfg) == 60
    news = search_response([])
    news.meta.route = {"group": "news", "pattern": None, "by": "pattern"}
    assert fresh_seconds(_request(intent="background"), news, cfg) == 60


def test_completeness():
    from searcher.contract import ErrorEntry

    def with_errors(*errors: ErrorEntry, backend: str = "searxng", fallback: bool = False):
        response = search_response([])
        response.meta.errors = list(errors)
        response.meta.backend_used, response.meta.fallback_used = backend, fallback
        return response

    failed = ErrorEntry(stage="search", source="searxng", reason="HTTP 500", kind="http_status")
    assert is_complete(with_errors())
    assert not is_complete(with_errors(failed, backend="brave"))  # a fan-out lost one
    assert is_complete(with_errors(failed, backend="brave", fallback=True))  # chain did its job
    warned = ErrorEntry(stage="search", source="searxng", reason="unresponsive engines: x")
    assert not is_complete(with_errors(warned))
    empty = ErrorEntry(stage="search", source="searxng", reason="no results", kind="no_results")
    assert is_complete(with_errors(empty, backend="brave"))  # an empty answer is an answer
    # Read by kind, not by the reason's words: "timeout: ..." of a page that failed is no cut.
    cut = ErrorEntry(stage="fetch", source="http://a", reason="request deadline", kind="budget")
    assert not is_complete(with_errors(cut))
    gone = ErrorEntry(stage="fetch", source="http://a", reason="timeout: HTTP 404", kind="failed")
    assert is_complete(with_errors(gone))
    llm = ErrorEntry(stage="answer", source="llm", reason="timed out", kind="fallback")
    assert not is_complete(with_errors(llm))


@pytest.mark.parametrize(
    ("fetch", "may_change"),
    [
        ({"status": "fetched", "http_status": 200}, False),
        ({"status": "failed", "http_status": 404, "error": "HTTP 404"}, False),
        ({"status": "failed", "http_status": 200, "error": "page too complex"}, False),
        ({"status": "skipped", "skip_reason": "content_type"}, False),
        ({"status": "skipped", "skip_reason": "blocked"}, False),
        ({"status": "failed", "http_status": 500, "error": "HTTP 500"}, True),
        ({"status": "failed", "http_status": 429, "error": "HTTP 429"}, True),
        ({"status": "failed", "error": "ConnectError: refused"}, True),
        ({"status": "failed", "skip_reason": "timeout", "http_status": 200}, True),  # killed
        ({"status": "failed", "skip_reason": "error", "http_status": 200}, True),  # worker died
        ({"status": "skipped", "skip_reason": "timeout"}, True),
        ({"status": "skipped", "skip_reason": "budget"}, False),  # beyond max_fetch_pages
    ],
)
def test_a_page_read_that_may_go_better_makes_the_answer_incomplete(fetch, may_change):
    from searcher.cache.results import page_may_change
    from searcher.contract import FetchInfo, Item, Score

    info = FetchInfo(**fetch)
    assert page_may_change(info) is may_change
    item = Item(
        id="a", title="t", url="https://a.example/", retrieved_utc="2026-01-01T00:00:00Z",
        engine="searxng", snippet="s", score=Score(rank=1, relevance=1.0, method="m"),
        fetch=info,
    )  # fmt: skip
    assert is_complete(search_response([item])) is not may_change


async def test_a_corrupt_entry_is_a_miss(tmp_path):
    store = SqliteStore(tmp_path / "s.sqlite3")
    cache = ResultCache(store, ResultCacheSettings(), "f")
    request = _request()
    await cache.store(request, search_response([]), complete=True)
    assert await cache.lookup(request) is not None
    key = request_key(request, "f")
    for garbage in (b"{not json", b'{"v": 1, "stored_at": 0}', b'{"v": 1, "response": {}}'):
        await store.set(key, garbage, 60)
        assert await cache.lookup(request) is None
    await store.aclose()


async def test_partial_answers_are_not_stored(tmp_path):
    store = SqliteStore(tmp_path / "s.sqlite3")
    cache = ResultCache(store, ResultCacheSettings(), "f")
    await cache.store(_request(), search_response([]), complete=False)
    assert await cache.lookup(_request()) is None
    assert await cache.lookup_stale(_request()) is None
    await store.aclose()


def test_an_answer_made_under_other_server_limits_is_not_served(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    body = {"query": matching_query, "budget": {"max_results": 10}}
    # The configured default stays the same throughout: only the ceilings change.
    default = {"max_results": 3}
    lowered = serve_searcher(make_settings(budget=default, limits={"max_results": 3}))
    first = post(lowered, body).json()
    assert len(first["items"]) == 3
    assert post(lowered, body).json()["meta"]["cache"]["hit"] is True
    # Same state store, higher ceiling: the stored 3-item answer is not this server's.
    raised = serve_searcher(make_settings(budget=default, limits={"max_results": 50}))
    again = post(raised, body).json()
    assert again["meta"]["cache"]["hit"] is False and len(again["items"]) == 10
    # Strict ceilings refuse the request, although an answer to it is stored.
    strict = serve_searcher(
        make_settings(budget=default, limits={"max_results": 3, "strict": True})
    )
    refused = post(strict, body)
    assert refused.status_code == 422
    assert "budget.max_results" in refused.text


def test_a_cached_answer_carries_the_budget_notes_of_the_request_it_answers(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    # The time fields are not in the key: one answer serves requests that differ in them,
    # and each must read what limits.* did to its own budget.
    base = serve_searcher(make_settings(limits={"max_total_time_ms": 30_000}))
    over = post(base, {"query": matching_query, "budget": {"max_total_time_ms": 3_600_000}})
    assert [e["source"] for e in over.json()["meta"]["errors"]] == ["budget.max_total_time_ms"]
    within = post(base, {"query": matching_query, "budget": {"max_total_time_ms": 20_000}})
    assert within.json()["meta"]["cache"]["hit"] is True
    assert within.json()["meta"]["errors"] == []
    retries = post(base, {"query": matching_query, "budget": {"max_search_retries": 100}})
    assert retries.json()["meta"]["cache"]["hit"] is True
    assert [e["source"] for e in retries.json()["meta"]["errors"]] == ["budget.max_search_retries"]


def test_a_request_over_a_ceiling_is_refused_when_strict_even_when_cached(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    base = serve_searcher(make_settings(limits={"max_total_time_ms": 30_000, "strict": True}))
    assert post(base, {"query": matching_query}).status_code == 200
    refused = post(base, {"query": matching_query, "budget": {"max_total_time_ms": 3_600_000}})
    assert refused.status_code == 422
    assert refused.json()["error"]["field"] == "budget.max_total_time_ms"


async def test_a_stale_answer_is_no_older_than_the_request_accepts(tmp_path):
    now = [1000.0]
    store = SqliteStore(tmp_path / "s.sqlite3")
    settings = ResultCacheSettings(ttl_s=10, stale_if_error_s=100)
    cache = ResultCache(store, settings, "f", clock=lambda: now[0])
    await cache.store(_request(), search_response([]), complete=True)
    now[0] = 1050.0  # 40 s past its fresh time, within the stale window
    assert await cache.lookup(_request()) is None
    assert await cache.lookup_stale(_request()) is not None
    within = SearchRequest.model_validate({"query": "q", "budget": {"max_age_s": 60}})
    assert await cache.lookup_stale(within) is not None
    too_old = SearchRequest.model_validate({"query": "q", "budget": {"max_age_s": 30}})
    assert await cache.lookup_stale(too_old) is None
    await store.aclose()


def test_the_fingerprint_follows_what_shapes_an_answer_and_only_that():
    base = answer_fingerprint(Settings())

    def changed(**sections: Any) -> bool:
        return answer_fingerprint(Settings.model_validate(sections)) != base

    # Which pages may be read, and how much of them, changes full-mode answers.
    assert changed(fetch={"max_page_elements": 5})
    assert changed(fetch={"allowed_hosts": ["127.0.0.1:1"]})
    assert changed(fetch={"pdf_max_pages": 3})
    assert changed(limits={"max_results": 30})
    # Whether pages only JavaScript fills are rendered (without: failed, "no main text").
    assert changed(browser={"enabled": False})
    assert changed(browser={"max_dom_elements": 100})
    # Capacity, timeouts and secrets do not.
    assert not changed(fetch={"extract_workers": 7, "max_concurrency": 2})
    assert not changed(browser={"max_pages": 8, "page_timeout_s": 30, "max_memory_mb": 512})
    assert not changed(backends={"brave": {"api_key": "other"}})


def test_each_adapter_declares_what_of_an_instance_shapes_its_answers():
    def fingerprint(**instance: Any) -> str:
        mine = {"adapter": "brave", "base_url": "http://127.0.0.1:9/", **instance}
        return answer_fingerprint(
            Settings.model_validate({"backends": {"instances": {"mine": mine}}})
        )

    base = fingerprint(api_key="a", timeout_s=3)
    # A named instance's key, timeout, breaker and pace are not what it answers.
    assert (
        fingerprint(api_key="b", timeout_s=9, breaker={"failure_threshold": 1}, rate="2/s") == base
    )
    # Its upstream, its weight, whether it is used are.
    assert fingerprint(api_key="a", timeout_s=3, base_url="http://127.0.0.1:10/") != base
    assert fingerprint(api_key="a", timeout_s=3, weight=0.5) != base
    assert fingerprint(api_key="a", timeout_s=3, enabled=False) != base
    # A plugin that declares nothing: every key but the timing ones and its api_key.
    spec = load_registry().spec("brave")
    undeclared = dataclasses.replace(spec, answer_settings=None)
    config = spec.config_model.model_validate({"adapter": "brave", "api_key": "k", "timeout_s": 2})
    assert set(undeclared.answer_shaping(config)) == {"adapter", "enabled", "weight", "base_url"}


def test_a_named_instance_keeps_its_cached_answers_when_its_timeouts_change(
    make_settings, serve_searcher, testbed_clean, matching_query, tmp_path
):
    state = {"dir": str(tmp_path / "shared-state")}

    def served(**instance: Any) -> str:
        mine = {"adapter": "searxng", "base_url": testbed_clean.searxng_url(), **instance}
        backends = {"instances": {"sx-mine": mine}, "order": ["sx-mine"]}
        return serve_searcher(make_settings(state=state, backends=backends))

    body = {"query": matching_query, "budget": {"max_results": 4}}
    assert post(served(timeout_s=5), body).json()["meta"]["cache"]["hit"] is False
    calls = backend_calls(testbed_clean)
    retimed = served(timeout_s=3, breaker={"failure_threshold": 2}, rate="50/s")
    assert post(retimed, body).json()["meta"]["cache"]["hit"] is True
    assert backend_calls(testbed_clean) == calls  # no backend was asked
    # Another base URL is another upstream (here one answering alike, a little later).
    moved = served(timeout_s=5, base_url=testbed_clean.searxng_url("slow/1"))
    assert post(moved, body).json()["meta"]["cache"]["hit"] is False
    assert backend_calls(testbed_clean) > calls


async def _at_once(base: str, bodies: list[dict[str, Any]]) -> list[httpx.Response]:
    async with httpx.AsyncClient(timeout=30.0) as client:
        return list(
            await asyncio.gather(*(client.post(f"{base}/v1/search", json=b) for b in bodies))
        )


def test_identical_requests_at_once_cost_one_backend_search(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    slow = {"order": ["searxng"], "searxng": {"base_url": testbed_clean.searxng_url("slow/400")}}
    base = serve_searcher(make_settings(backends=slow))
    body = {"query": matching_query, "budget": {"max_results": 4}}
    answers = asyncio.run(_at_once(base, [body] * 6))
    assert [a.status_code for a in answers] == [200] * 6
    assert backend_calls(testbed_clean) == 1
    caches = sorted((a.json()["meta"]["cache"]["hit"] for a in answers), key=int)
    assert caches == [False] + [True] * 5  # one computed, five waited for it
    assert len({repr(a.json()["items"]) for a in answers}) == 1
    # One whose deadline ends before the running one's does not wait for it.
    other = {"query": "google stadia games", "budget": {"max_results": 4}}
    hurried = {**other, "budget": {"max_results": 4, "max_total_time_ms": 3000}}
    first, second = asyncio.run(
        _second_once_the_first_searches(base, testbed_clean, other, hurried)
    )
    assert first.status_code == second.status_code == 200
    assert second.json()["meta"]["cache"]["hit"] is False
    assert backend_calls(testbed_clean) == 3


async def _second_once_the_first_searches(
    base: str, testbed: Any, first: dict[str, Any], second: dict[str, Any]
) -> tuple[httpx.Response, httpx.Response]:
    async with httpx.AsyncClient(timeout=30.0) as client:
        calls = backend_calls(testbed)
        running = asyncio.create_task(client.post(f"{base}/v1/search", json=first))
        async with asyncio.timeout(10):
            while backend_calls(testbed) == calls:  # the first is at the backend
                await asyncio.sleep(0.005)
        then = await client.post(f"{base}/v1/search", json=second)
        return await running, then


def test_a_request_with_more_time_is_not_given_the_failure_of_a_hurried_identical_one(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    # The backend answers in 1.5 s: the first request (0.5 s) fails on its deadline; the
    # second, identical but for its 8 s, waits for it and then searches itself.
    slow = {"order": ["searxng"], "searxng": {"base_url": testbed_clean.searxng_url("slow/1500")}}
    base = serve_searcher(make_settings(backends=slow))
    body = {"query": matching_query, "budget": {"max_results": 4}}
    hurried = {**body, "budget": {"max_results": 4, "max_total_time_ms": 500}}
    patient = {**body, "budget": {"max_results": 4, "max_total_time_ms": 8000}}
    first, second = asyncio.run(
        _second_once_the_first_searches(base, testbed_clean, hurried, patient)
    )
    assert first.status_code == 502
    assert second.status_code == 200, second.text
    assert second.json()["meta"]["cache"]["hit"] is False
    assert len(second.json()["items"]) == 4


async def test_a_partial_answer_of_an_identical_request_is_not_shared_while_time_is_left(
    tmp_path,
):
    store = SqliteStore(tmp_path / "s.sqlite3")
    cache = ResultCache(store, ResultCacheSettings(), "f")
    started, release = asyncio.Event(), asyncio.Event()
    cut = ErrorEntry(stage="fetch", source="http://a.example/", reason="deadline", kind="timeout")
    waits: list[float] = []

    async def partial(_waited_s: float) -> Any:
        started.set()
        await release.wait()
        answer = search_response([])
        answer.meta.errors.append(cut)
        return answer

    async def whole(waited_s: float) -> Any:
        waits.append(waited_s)
        return search_response([])

    leader = asyncio.create_task(serve_cached(cache, _request(), partial, (), 1.0))
    await started.wait()
    follower = asyncio.create_task(serve_cached(cache, _request(), whole, (), 60.0))
    await asyncio.sleep(0.2)  # the follower waits for the leader
    release.set()
    assert (await leader).meta.errors == [cut]
    answer = await asyncio.wait_for(follower, 5)
    assert answer.meta.cache.hit is False and answer.meta.errors == []  # its own
    assert len(waits) == 1 and 0.1 < waits[0] < 5  # the time it waited is off its deadline
    assert cache.computing == {}
    await store.aclose()


async def test_a_request_waiting_for_a_cancelled_one_computes_its_own(tmp_path):
    store = SqliteStore(tmp_path / "s.sqlite3")
    cache = ResultCache(store, ResultCacheSettings(), "f")
    started, never = asyncio.Event(), asyncio.Event()

    async def stuck(_waited_s: float) -> Any:
        started.set()
        await never.wait()

    async def quick(_waited_s: float) -> Any:
        return search_response([])

    looked_up = asyncio.Event()
    lookup = cache.lookup

    async def lookup_and_say(
        request: SearchRequest, client: str | None = None, partition: str | None = None
    ) -> Any:
        found = await lookup(request, client, partition)
        looked_up.set()  # the caller goes on at once to wait for the leader
        return found

    leader = asyncio.create_task(serve_cached(cache, _request(), stuck, (), 60.0))
    await started.wait()
    cache.lookup = lookup_and_say  # type: ignore[method-assign]
    follower = asyncio.create_task(serve_cached(cache, _request(), quick, (), 60.0))
    await looked_up.wait()
    assert len(cache.computing) == 1  # the leader's, which the follower now waits for
    leader.cancel()
    answer = await asyncio.wait_for(follower, 5)
    assert answer.meta.cache.hit is False  # computed, not shared
    assert cache.computing == {}
    with pytest.raises(asyncio.CancelledError):
        await leader
    await store.aclose()
