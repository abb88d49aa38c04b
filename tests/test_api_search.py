"""POST /v1/search end to end: searcher's app under uvicorn, the testbed behind it."""

import asyncio
import json
import re

import httpx
import pytest
from fastapi import FastAPI, Request, Response
from fastapi.routing import APIRoute
from hypothesis import given, settings
from hypothesis import strategies as st

from searcher.api.search_route import SearchFastPath, _valid_search
from searcher.contract import SearchRequest
from tests.ddgs_fake import FakeDDGS


def post(base: str, body: dict, timeout: float = 20.0) -> httpx.Response:
    return httpx.post(f"{base}/v1/search", json=body, timeout=timeout)


def searxng_requests(testbed):
    return [entry for entry in testbed.log if entry.path.startswith("/searxng")]


def test_simple_search_returns_the_ucp1_contract(make_settings, serve_searcher, matching_query):
    base = serve_searcher(make_settings())
    body = {
        "query": matching_query,
        "intent": "fresh_data",
        "context_hint": {"known_topics": ["cloud gaming"]},
    }
    response = post(base, body)
    assert response.status_code == 200
    data = response.json()
    assert data["schema"] == "ucp-1"
    assert data["producer"]["name"] == "searcher"
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ", data["created_utc"])
    assert data["request"]["intent"] == "fresh_data"
    assert data["request"]["context_hint"] == {"known_topics": ["cloud gaming"]}
    assert data["request"]["query"] == {"text": matching_query}
    # The hint comes back as sent; a number it could not carry exactly is refused where it
    # sits (2^53 + 1 came back as 9007199254740992.0).
    exact = {"m": [-(2**53 - 1), 2**53 - 1], "f": 0.5}
    echoed = post(base, {"query": matching_query, "context_hint": exact})
    assert echoed.json()["request"]["context_hint"] == exact
    for big, field in (
        ({"n": 2**53 + 1}, "context_hint.n"),
        ({"a": [1, 1e17]}, "context_hint.a.1"),
    ):
        refused = post(base, {"query": matching_query, "context_hint": big})
        assert refused.status_code == 422 and refused.json()["error"]["field"] == field

    items = data["items"]
    assert 1 <= len(items) <= 5  # the configured default max_results
    for rank, item in enumerate(items, start=1):
        assert re.fullmatch(r"web:sha256:[0-9a-f]{64}", item["id"])
        assert item["type"] == "web_result" and item["engine"] == "searxng"
        assert item["url"].startswith("http://127.0.0.1:") and item["title"] and item["snippet"]
        assert item["score"]["rank"] == rank and 0 <= item["score"]["relevance"] <= 1
        assert (
            item["score"]["method"] == "rrf+heuristics" and "fusion" in item["score"]["components"]
        )
        assert item["provenance"] and all(p["backend"] == "searxng" for p in item["provenance"])
        assert item["fetch"]["status"] == "skipped" and item["fetch"]["skip_reason"] is None
        assert item["content"] is None
    relevances = [item["score"]["relevance"] for item in items]
    assert relevances == sorted(relevances, reverse=True)
    assert len({item["id"] for item in items}) == len(items)

    meta = data["meta"]
    assert meta["backend_used"] == "searxng" and meta["fallback_used"] is False
    assert (
        meta["mode_used"] == "simple" and meta["pick_applied"] is False and meta["pick_ids"] == []
    )
    assert {"search", "fetch", "total"} <= set(meta["timing_ms"])
    assert meta["errors"] == []
    assert meta["route"] == {"group": "general", "pattern": None, "by": "default"}
    assert meta["hedged"] is None
    assert data["usage"] == {
        "results_returned": len(items),
        "context_chars": len(data["rendered_text"]),
        "fetch_pages_used": 0,
    }
    pack = data["rendered_text"]
    assert pack.startswith("[CONTEXT_PACK ucp-1]\n") and pack.endswith("[/CONTEXT_PACK]")
    assert "backend=searxng" in pack and items[0]["url"] in pack


def test_query_lang_beats_constraints_lang_and_searxng_gets_every_filter(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    base = serve_searcher(make_settings())
    body = {
        "query": {"text": matching_query, "lang": "de"},
        "constraints": {
            "lang": "fr",
            "categories": ["news"],
            "engines": "bing,google",
            "time_range": "week",
            "safesearch": 2,
            "pageno": 1,
        },
    }
    assert post(base, body).status_code == 200
    (logged,) = searxng_requests(testbed_clean)
    assert logged.query["language"] == "de"
    assert logged.query["categories"] == "news" and logged.query["engines"] == "bing,google"
    assert logged.query["time_range"] == "week" and logged.query["safesearch"] == "2"
    assert logged.query["format"] == "json" and logged.query["q"] == matching_query


def test_want_flags_leave_parts_out(make_settings, serve_searcher, matching_query):
    base = serve_searcher(make_settings())
    no_items = post(base, {"query": matching_query, "want": {"items": False}}).json()
    assert "items" not in no_items and no_items["rendered_text"].startswith("[CONTEXT_PACK")
    no_text = post(base, {"query": matching_query, "want": {"rendered_text": False}}).json()
    assert "rendered_text" not in no_text and no_text["items"]
    assert no_text["usage"]["context_chars"] == 0


def test_pick_ids_select_from_the_response_they_index(
    make_settings, serve_searcher, matching_query
):
    # The default fusion: ids index what the same request returns without them, whatever
    # other ids are asked for (an id past max_results once made the search deeper, and
    # per-engine RRF over deeper lists moved the items the other ids named).
    base = serve_searcher(make_settings())
    budget = {"max_results": 10}
    full = post(base, {"query": matching_query, "budget": budget}).json()["items"]
    assert len(full) >= 4
    picked = post(
        base,
        {"query": matching_query, "budget": budget, "constraints": {"pick_ids": [3, 0, 3, 99, -1]}},
    ).json()
    assert [i["url"] for i in picked["items"]] == [full[3]["url"], full[0]["url"]]
    assert [i["score"]["rank"] for i in picked["items"]] == [1, 2]
    assert picked["meta"]["pick_applied"] is True and picked["meta"]["pick_ids"] == [3, 0]
    many = {"pick_ids": [4, 3, 19, 9, 10], "cache": "off"}
    again = post(base, {"query": matching_query, "budget": budget, "constraints": many}).json()
    assert [i["url"] for i in again["items"]] == [full[4]["url"], full[3]["url"], full[9]["url"]]
    assert again["meta"]["pick_ids"] == [4, 3, 9]
    assert not [e for e in again["meta"]["errors"] if "max_results" in e["reason"]]


def test_budget_caps_results_and_context(make_settings, serve_searcher, matching_query):
    base = serve_searcher(make_settings())
    data = post(
        base, {"query": matching_query, "budget": {"max_results": 2, "max_context_chars": 700}}
    ).json()
    assert len(data["items"]) == 2
    assert len(data["rendered_text"]) <= 700 and data["usage"]["context_chars"] <= 700
    tiny = post(base, {"query": matching_query, "budget": {"max_context_chars": 10}}).json()
    assert tiny["rendered_text"] == ""
    assert any(e["stage"] == "render" for e in tiny["meta"]["errors"])


def test_zero_results_is_an_empty_answer_not_an_error(make_settings, serve_searcher):
    settings = make_settings(backends={"order": ["searxng"]})
    data = post(serve_searcher(settings), {"query": "zzqxv nonexistentterm"}).json()
    assert data["items"] == [] and data["usage"]["results_returned"] == 0
    assert data["meta"]["errors"] == [
        {"stage": "search", "source": "searxng", "reason": "no results", "kind": "no_results"}
    ]
    assert "(no results)" in data["rendered_text"]


def test_include_and_exclude_domains(make_settings, serve_searcher, matching_query):
    base = serve_searcher(make_settings())
    assert (
        post(
            base, {"query": matching_query, "constraints": {"exclude_domains": ["127.0.0.1"]}}
        ).json()["items"]
        == []
    )
    kept = post(base, {"query": matching_query, "constraints": {"include_domains": ["127.0.0.1"]}})
    assert kept.json()["items"]


@pytest.mark.parametrize(
    "spelling", ["http://127.0.0.1", "127.0.0.1.", "127.0.0.1:8080", "*.127.0.0.1"]
)
def test_a_domain_written_as_a_url_or_host_port_filters_as_its_host(
    make_settings, serve_searcher, matching_query, spelling
):
    # Such an entry used to match no host: an exclude was silently ignored.
    base = serve_searcher(make_settings())
    dropped = post(base, {"query": matching_query, "constraints": {"exclude_domains": [spelling]}})
    assert dropped.status_code == 200 and dropped.json()["items"] == []
    assert dropped.json()["request"]["constraints"]["exclude_domains"] == ["127.0.0.1"]
    kept = post(base, {"query": matching_query, "constraints": {"include_domains": [spelling]}})
    assert kept.json()["items"]


def test_a_number_too_long_to_read_is_a_422_in_our_words(make_settings, serve_searcher):
    base = serve_searcher(make_settings())
    digits = b"1" * 4301
    for path, body in [
        ("/v1/search", b'{"query": "q", "budget": {"max_results": ' + digits + b"}}"),
        ("/v1/fetch", b'{"url": "http://127.0.0.1/", "max_chars": ' + digits + b"}"),
    ]:
        refused = httpx.post(
            f"{base}{path}", content=body, headers={"content-type": "application/json"}
        )
        assert refused.status_code == 422, (path, refused.text)
        error = refused.json()["error"]
        assert error["field"] == "body" and "too long to read" in error["message"]
        assert "ValueError" not in refused.text


@pytest.mark.parametrize(
    ("content_type", "body"),
    [("text/plain", b'{"query": "q"}'), (None, b'{"query": "q"}'), ("application/json", b'"q"')],
)
def test_a_body_that_is_no_json_object_is_told_how_to_send_one(
    make_settings, serve_searcher, content_type, body
):
    headers = {"content-type": content_type} if content_type else {}
    base = serve_searcher(make_settings())
    refused = httpx.post(f"{base}/v1/search", content=body, headers=headers)
    assert refused.status_code == 422
    assert refused.json()["error"]["message"] == (
        "body: must be a JSON object, sent with content-type: application/json"
    )


def test_an_entry_that_names_no_domain_is_422_naming_it(make_settings, serve_searcher):
    base = serve_searcher(make_settings())
    bad = post(base, {"query": "q", "constraints": {"include_domains": ["ok.example", "a b"]}})
    assert bad.status_code == 422
    assert bad.json()["error"]["field"] == "constraints.include_domains.1"
    assert "not a domain" in bad.json()["error"]["message"]


# --- fallback, retries, breakers ------------------------------------------------------


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [
        ("status/500", "HTTP 500"),
        ("garbage", "expected JSON"),
        ("html", "expected JSON"),
        ("unresponsive", "unresponsive engines: google (timeout), bing (CAPTCHA)"),
    ],
)
def test_searxng_failure_falls_back_to_the_next_backend(
    make_settings, serve_searcher, testbed, matching_query, behaviour, reason
):
    settings = make_settings(
        backends={"searxng": {"base_url": testbed.searxng_url(behaviour)}},
        budget={"max_search_retries": 0},
    )
    data = post(serve_searcher(settings), {"query": matching_query}).json()
    assert data["meta"]["backend_used"] == "brave" and data["meta"]["fallback_used"] is True
    assert data["meta"]["backends_tried"] == ["searxng", "brave"]
    assert all(item["engine"] == "brave" for item in data["items"]) and data["items"]
    (error,) = data["meta"]["errors"]
    assert error["source"] == "searxng" and reason in error["reason"]


def test_duckduckgo_through_its_library_boundary(
    make_settings, serve_searcher, testbed, aeb_ids, aeb_titles
):
    fake = FakeDDGS(
        rows=[
            {"title": aeb_titles[pid], "href": testbed.page_url(pid), "body": aeb_titles[pid]}
            for pid in aeb_ids[:6]
        ]
    )
    settings = make_settings(
        backends={
            "searxng": {"base_url": testbed.searxng_url("status/503")},
            "duckduckgo": {"enabled": True},
        },
        budget={"max_search_retries": 0},
    )
    base = serve_searcher(settings, ddgs=fake)
    body = {
        "query": {"text": "anything", "lang": "en-GB"},
        "constraints": {"time_range": "month", "safesearch": 0},
    }
    data = post(base, body).json()
    assert data["meta"]["backend_used"] == "duckduckgo" and data["meta"]["fallback_used"] is True
    assert [i["title"] for i in data["items"]] == [aeb_titles[pid] for pid in aeb_ids[:5]]
    (query, kwargs) = fake.calls[-1]
    assert query == "anything"
    assert (
        kwargs["region"] == "uk-en" and kwargs["timelimit"] == "m" and kwargs["safesearch"] == "off"
    )

    fake.behaviour = "ratelimit"
    failed = post(base, {"query": "anything", "constraints": {"backend": "duckduckgo"}})
    assert failed.status_code == 502
    assert failed.json()["error"]["backends"] == [
        {
            "backend": "duckduckgo",
            "reason": "rate limited: fake: 202 Ratelimit",
            "kind": "rate_limited",
        }
    ]


def test_explicit_backend_is_used_alone(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    base = serve_searcher(make_settings())
    data = post(base, {"query": matching_query, "constraints": {"backend": "brave"}}).json()
    assert data["meta"]["backend_used"] == "brave" and data["meta"]["fallback_used"] is False
    assert searxng_requests(testbed_clean) == []
    brave_calls = [e for e in testbed_clean.log if e.path.startswith("/brave")]
    assert brave_calls and brave_calls[0].headers["x-subscription-token"] == "test-key"


def test_all_backends_failing_is_a_json_error_listing_each(make_settings, serve_searcher, testbed):
    settings = make_settings(
        backends={
            "searxng": {"base_url": testbed.searxng_url("status/500")},
            "brave": {"api_key": "wrong-key"},
        },
        budget={"max_search_retries": 0},
    )
    response = post(serve_searcher(settings), {"query": "anything"})
    assert response.status_code == 502
    error = response.json()["error"]
    assert error["type"] == "all_backends_failed"
    assert error["backends"] == [
        {"backend": "searxng", "reason": "HTTP 500", "kind": "http_status"},
        {"backend": "brave", "reason": "HTTP 401", "kind": "auth"},
    ]
    assert "Traceback" not in response.text


def test_retries_ride_out_a_transient_failure(
    make_settings, serve_searcher, testbed, matching_query
):
    testbed.reset()
    settings = make_settings(
        backends={"order": ["searxng"], "searxng": {"base_url": testbed.searxng_url("flaky/2")}}
    )
    base = serve_searcher(settings)
    once = post(base, {"query": matching_query, "budget": {"max_search_retries": 1}})
    assert once.status_code == 502  # two failures, one retry: still failing
    testbed.reset()
    twice = post(base, {"query": matching_query, "budget": {"max_search_retries": 2}})
    assert twice.status_code == 200 and twice.json()["meta"]["backend_used"] == "searxng"
    assert len(searxng_requests(testbed)) == 3


def test_breaker_opens_fails_fast_and_shows_in_health(
    make_settings, serve_searcher, testbed, matching_query
):
    settings = make_settings(
        backends={
            "searxng": {
                "base_url": testbed.searxng_url("status/500"),
                "breaker": {"failure_threshold": 2, "recovery_timeout": 3600},
            }
        },
        budget={"max_search_retries": 0},
        cache={"enabled": False},  # every repeat must reach the backends: the breaker's test
    )
    base = serve_searcher(settings)
    testbed.reset()
    for _ in range(2):
        assert post(base, {"query": matching_query}).json()["meta"]["backend_used"] == "brave"
    assert len(searxng_requests(testbed)) == 2
    third = post(base, {"query": matching_query}).json()
    assert len(searxng_requests(testbed)) == 2  # failed fast: never sent
    assert "circuit open" in third["meta"]["errors"][0]["reason"]
    health = httpx.get(f"{base}/v1/health").json()
    assert health["backends"]["searxng"]["breaker"] == "open"
    assert health["backends"]["searxng"]["last_error"] == "HTTP 500"
    assert health["backends"]["brave"]["breaker"] == "closed"


def test_search_timeout_then_fallback(make_settings, serve_searcher, testbed, matching_query):
    settings = make_settings(backends={"searxng": {"base_url": testbed.searxng_url("hang")}})
    body = {
        "query": matching_query,
        "budget": {"max_search_retries": 0, "per_request_timeout_ms": {"search": 300}},
    }
    data = post(serve_searcher(settings), body).json()
    assert data["meta"]["backend_used"] == "brave"
    assert "timed out" in data["meta"]["errors"][0]["reason"]
    assert data["meta"]["timing_ms"]["search"] < 3000


def test_total_deadline_bounds_a_hanging_backend(make_settings, serve_searcher, testbed):
    settings = make_settings(
        backends={"order": ["searxng"], "searxng": {"base_url": testbed.searxng_url("hang")}}
    )
    response = post(serve_searcher(settings), {"query": "q", "budget": {"max_total_time_ms": 400}})
    assert response.status_code == 502
    assert "timed out" in response.json()["error"]["backends"][0]["reason"]


def test_max_tool_calls_zero_makes_no_search(make_settings, serve_searcher, testbed_clean):
    data = post(
        serve_searcher(make_settings()), {"query": "q", "budget": {"max_tool_calls": 0}}
    ).json()
    assert data["items"] == [] and searxng_requests(testbed_clean) == []
    assert data["meta"]["errors"][0]["reason"] == "max_tool_calls is 0"


def test_an_answer_of_thousands_is_read_and_ranked_in_part_and_said_so(
    make_settings, serve_searcher, testbed
):
    # A broken or hostile SearXNG: 1,200 distinct results on one page. The first 1,000
    # are read, and the 500 best by fusion ranked; unbounded, near-duplicate removal
    # compares every pair (5,000 results took 1.6 s and 350 MB).
    settings = make_settings(backends={"searxng": {"base_url": testbed.searxng_url("fixed/1200")}})
    data = post(serve_searcher(settings), {"query": "cloud gaming"}).json()
    assert len(data["items"]) == 5 and data["meta"]["backend_used"] == "searxng"
    reasons = [(e["stage"], e["source"], e["reason"]) for e in data["meta"]["errors"]]
    read = "the answer held 1200 results; the first 1000 were read"
    ranked = "1000 distinct results; the 500 best by fusion were ranked, 500 left out"
    assert ("search", "searxng", read) in reasons and ("rank", "fusion", ranked) in reasons
    # So many results found by several engines are not paired with positions either.
    assert any(r.startswith("engines not paired with positions") for _, _, r in reasons)


def test_an_answer_as_python_writes_it_from_broken_engine_data_is_read(
    make_settings, serve_searcher, testbed
):
    # SearXNG's json.dumps lets through a lone surrogate and NaN; its engines send URLs
    # with no host or with line breaks. One such result must not cost the answer.
    backends = {"order": ["searxng"], "brave": {"enabled": False},
                "searxng": {"base_url": f"{testbed.base_url}/python-json-searxng"}}  # fmt: skip
    # No near-duplicate removal: the two similar snippets must both come back.
    base = serve_searcher(make_settings(backends=backends, embeddings={"provider": "none"}))
    answer = httpx.post(f"{base}/v1/search", json={"query": "cloud gaming", "budget": {
        "max_results": 10}}, timeout=30)  # fmt: skip
    assert answer.status_code == 200, answer.text
    items = answer.json()["items"]
    urls = [item["url"] for item in items]
    assert len(items) == 3 and "http://[::1" not in urls
    assert f"{testbed.base_url}/pages/two%20words/line" in urls
    cut = next(item for item in items if item["url"].endswith("/cut"))
    assert cut["title"] == "Cloud gaming \ufffd cut"
    assert "\ufffd" in cut["snippet"]


# --- POST /v1/search's fast path (searcher/api/search_route.py SearchFastPath) -------------

_JSON = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: (
        st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=6), inner, max_size=3)
    ),
    max_leaves=8,
)
_NAMES = {
    "budget": ["max_results", "max_context_chars", "max_fetch_pages", "max_total_time_ms"],
    "want": ["items", "rendered_text", "answer"],
    "constraints": ["search_mode", "backend", "language", "pick_ids", "time_range"],
}
_BODY = (
    st.fixed_dictionaries(
        {
            "query": st.text(max_size=12)
            | st.fixed_dictionaries({"text": st.text(max_size=12)})
            | _JSON
        },
        optional={
            **{
                part: st.dictionaries(
                    st.sampled_from(names),
                    _JSON | st.integers(0, 50) | st.sampled_from(["simple", "full", "day", "auto"]),
                    max_size=3,
                )
                | _JSON
                for part, names in _NAMES.items()
            },
            "bogus": _JSON,
        },
    )
    | _JSON
)


def _fastapi_body_field():
    """The body field FastAPI builds for the route's signature: how it validates a body."""
    app = FastAPI()

    @app.post("/v1/search")
    async def search(body: SearchRequest, request: Request) -> None: ...

    return next(r for r in app.router.routes if isinstance(r, APIRoute)).body_field


_FIELD = _fastapi_body_field()
_JSON_SCOPE = {"type": "http", "headers": [(b"content-type", b"application/json")]}


@settings(max_examples=400)  # about one body in twenty is valid
@given(_BODY)
def test_the_fast_path_takes_only_what_fastapi_takes_and_as_fastapi_takes_it(value):
    body = json.dumps(value).encode()
    ours = _valid_search(_JSON_SCOPE, body)
    theirs, errors = _FIELD.validate(json.loads(body), {}, loc=("body",))
    if ours is None:
        return  # FastAPI's handler answers it
    assert not errors
    assert ours == theirs
    # The echo of the request is its fields set (model_dump(exclude_unset=True)).
    assert repr(ours.model_dump(exclude_unset=True)) == repr(theirs.model_dump(exclude_unset=True))


def test_the_fast_path_takes_a_plain_valid_body():
    assert _valid_search(_JSON_SCOPE, b'{"query": "bm25"}') is not None


@pytest.mark.parametrize(
    ("content_type", "body"),
    [
        (b"application/json", b""),
        (b"application/json", b'{"query": "x"'),
        (b"application/json", b"[" * 100_000),
        (b"application/json", b'{"query": ""}'),
        (b"application/json; charset=utf-8", b'{"query": "x"}'),
        (b"text/plain", b'{"query": "x"}'),
        (None, b'{"query": "x"}'),
    ],
)
def test_the_fast_path_leaves_everything_else_to_fastapi(content_type, body):
    headers = [] if content_type is None else [(b"content-type", content_type)]
    assert _valid_search({"type": "http", "headers": headers}, body) is None


def _run_fast_path(messages, headers=((b"content-type", b"application/json"),)):
    """What the handler and the endpoint saw when ``messages`` came in."""
    seen: dict = {"handler": None, "endpoint": None}

    async def handler(scope, receive, send):
        got = []
        while True:
            try:
                message = await receive()
            except RuntimeError as exc:
                got.append(exc)
                break
            got.append(message)
            if message["type"] != "http.request" or not message.get("more_body"):
                break
        seen["handler"] = got

    async def endpoint(body, request):
        seen["endpoint"] = body
        return Response(b"ok")

    queue = list(messages)

    async def receive():
        item = queue.pop(0)
        if isinstance(item, BaseException):
            raise item
        return item

    async def send(message):
        pass

    scope = {"type": "http", "method": "POST", "path": "/v1/search", "headers": list(headers)}
    asyncio.run(SearchFastPath(handler, endpoint)(scope, receive, send))
    return seen


def _part(body: bytes, more: bool) -> dict:
    return {"type": "http.request", "body": body, "more_body": more}


def test_a_valid_body_in_parts_goes_to_the_endpoint():
    seen = _run_fast_path([_part(b'{"query"', True), _part(b': "bm25"}', False)])
    assert seen["handler"] is None and seen["endpoint"].query_text == "bm25"


@pytest.mark.parametrize(
    ("messages", "headers"),
    [
        (
            [_part(b'{"query"', True), _part(b": 5}", False)],
            [(b"content-type", b"application/json")],
        ),
        ([_part(b'{"query": "x"}', False)], [(b"content-type", b"text/plain")]),
        (
            [_part(b'{"query"', True), {"type": "http.disconnect"}],
            [(b"content-type", b"application/json")],
        ),
    ],
)
def test_anything_else_reaches_fastapis_handler_as_it_came(messages, headers):
    seen = _run_fast_path(messages, headers)
    assert seen["endpoint"] is None and seen["handler"] == messages


def test_a_failed_read_fails_again_in_fastapis_handler():
    error = RuntimeError("body over the limit")
    seen = _run_fast_path([_part(b'{"query"', True), error])
    assert seen["endpoint"] is None and seen["handler"] == [_part(b'{"query"', True), error]
