"""Bad input, health, cache endpoints and the OpenAPI document, over real HTTP."""

import json
import re

import httpx
import pytest
from hypothesis import given
from hypothesis import strategies as st
from pydantic import ValidationError

from searcher.config import Settings
from searcher.contract import FetchInfo, Item, Want
from searcher.pipeline.assemble import fetch_info
from tests.responses import search_response


@pytest.fixture
def base(make_settings, serve_searcher):
    return serve_searcher(make_settings())


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": ""}, "query.text"),
        ({"query": "   "}, "query.text"),
        ({"query": "\u001f"}, "query.text"),  # a control character is no query either
        ({"query": {"text": " \u0085\ufeff\x00"}}, "query.text"),
        ({"query": {"text": ""}}, "query.text"),
        ({"query": 42}, "query"),
        ({"query": ["a"]}, "query"),
        ({"query": None}, "query"),
        ({}, "query"),
        ({"query": "x" * 2001}, "query.text"),
        ({"query": "q", "constraints": {"search_mode": "deep"}}, "constraints.search_mode"),
        ({"query": "q", "constraints": {"pick_ids": ["1"]}}, "constraints.pick_ids.0"),
        ({"query": "q", "constraints": {"pick_ids": [1.5]}}, "constraints.pick_ids.0"),
        ({"query": "q", "constraints": {"pick_ids": 3}}, "constraints.pick_ids"),
        ({"query": "q", "constraints": {"backend": "google"}}, "constraints.backend"),
        ({"query": "q", "constraints": {"backend": []}}, "constraints.backend"),
        ({"query": "q", "constraints": {"time_range": "decade"}}, "constraints.time_range"),
        ({"query": "q", "budget": {"max_results": -1}}, "budget.max_results"),
        ({"query": "q", "budget": {"max_context_chars": -5}}, "budget.max_context_chars"),
        ({"query": "q", "budget": {"max_total_time_ms": -1}}, "budget.max_total_time_ms"),
        (
            {"query": "q", "budget": {"per_request_timeout_ms": {"fetch": -1}}},
            "budget.per_request_timeout_ms.fetch",
        ),
        ({"query": "q", "budget": {"max_results": "5"}}, "budget.max_results"),
        ({"query": "q", "serch_mode": "full"}, "serch_mode"),
        ({"query": "q", "want": {"items": "yes please"}}, "want.items"),
    ],
)
def test_bad_input_is_422_naming_the_field(base, body, field):
    response = httpx.post(f"{base}/v1/search", json=body)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["type"] == "invalid_request"
    assert error["field"] == field
    assert "Traceback" not in response.text


@pytest.mark.parametrize("text", ["\u001f", " \u0085", "\ufeff", "\u3000", "\x7f", "a", "\u001fa"])
def test_the_blank_rule_is_the_openapi_pattern_read_either_way(base, text):
    # The schema's pattern is ECMA-262; the server reads it with Python's re. Both dialects
    # must agree with the server's own rule, or a schema-valid query gets a 422.
    import re

    from searcher.contract import NOT_BLANK, is_blank

    document = httpx.get(f"{base}/openapi.json").text
    assert json.dumps(NOT_BLANK)[1:-1] in document  # the pattern the document states
    ecma_space = " \t\n\v\f\r\u00a0\u1680\u2000\u2001\u2002\u2003\u2004\u2005\u2006\u2007"
    ecma_space += "\u2008\u2009\u200a\u2028\u2029\u202f\u205f\u3000\ufeff"
    ecma_class = NOT_BLANK.replace("\\s", re.escape(ecma_space))
    assert (re.search(NOT_BLANK, text) is None) == is_blank(text)
    assert (re.search(ecma_class, text) is None) == is_blank(text)
    status = httpx.post(f"{base}/v1/search", json={"query": text}).status_code
    assert (status == 422) == is_blank(text), status


@pytest.mark.parametrize("raw", [b"{not json", b'{"query": "q",}', b"", b"[1, 2, 3]", b'"q"'])
def test_malformed_or_non_object_json_is_422(base, raw):
    response = httpx.post(
        f"{base}/v1/search", content=raw, headers={"content-type": "application/json"}
    )
    assert response.status_code == 422
    assert response.json()["error"]["field"] in {"body", "query"}


def test_body_over_64kb_is_413(base):
    big = {"query": "q", "context_hint": {"blob": "x" * 70_000}}
    response = httpx.post(f"{base}/v1/search", json=big)
    assert response.status_code == 413
    assert response.json()["error"]["type"] == "body_too_large"

    def chunks():  # no Content-Length: the limit must count streamed bytes too
        yield b'{"query": "q", "context_hint": {"blob": "'
        for _ in range(10):
            yield b"x" * 10_000
        yield b'"}}'

    streamed = httpx.post(
        f"{base}/v1/search", content=chunks(), headers={"content-type": "application/json"}
    )
    assert streamed.status_code == 413


def test_a_body_over_the_limit_is_refused_in_the_shape_its_route_speaks(base):
    big = "x" * 70_000
    ours = httpx.post(f"{base}/v1/search", json={"query": big}).json()
    assert ours["error"]["type"] == "body_too_large"
    assert "server.max_body_bytes" in ours["error"]["message"]
    chat = {"model": "searcher-search", "messages": [{"role": "user", "content": big}]}
    openai = httpx.post(f"{base}/v1/chat/completions", json=chat).json()["error"]
    assert openai["code"] == openai["type"] == "body_too_large" and "param" in openai
    assert "server.max_body_bytes" in openai["message"]
    tavily = httpx.post(f"{base}/tavily/search", json={"query": big}).json()
    assert "server.max_body_bytes" in tavily["detail"]["error"]


def test_unknown_route_and_method_are_json_errors(base):
    missing = httpx.get(f"{base}/v1/nope")
    assert missing.status_code == 404 and missing.json()["error"]["type"] == "http_error"
    wrong = httpx.get(f"{base}/v1/search")
    assert wrong.status_code == 405


def test_health_lists_every_backend(make_settings, serve_searcher):
    settings = make_settings(
        backends={"brave": {"api_key": None}, "duckduckgo": {"enabled": False}}
    )
    health = httpx.get(f"{serve_searcher(settings)}/v1/health").json()
    assert health["status"] == "ok"
    searxng, ddg, brave = (health["backends"][n] for n in ("searxng", "duckduckgo", "brave"))
    assert searxng["enabled"] and searxng["configured"] and searxng["breaker"] == "closed"
    assert not ddg["enabled"] and ddg["breaker"] is None and ddg["note"] == "disabled"
    assert brave["enabled"] and not brave["configured"] and "BRAVE_API_KEY" in brave["note"]


def test_health_and_metrics_answer_head_as_probes_send_it(make_settings, serve_searcher):
    base = serve_searcher(make_settings())
    for path in ("/v1/health", "/metrics"):
        head = httpx.head(f"{base}{path}")
        assert head.status_code == 200 and head.content == b"", path
        assert head.headers["content-type"] == httpx.get(f"{base}{path}").headers["content-type"]


def test_no_usable_backend_is_a_clear_error(make_settings, serve_searcher):
    settings = make_settings(backends={"searxng": {"enabled": False}, "brave": {"enabled": False}})
    response = httpx.post(f"{serve_searcher(settings)}/v1/search", json={"query": "q"})
    assert response.status_code == 502
    assert "no backend is enabled" in response.json()["error"]["message"]


def test_openapi_document_and_docs(base):
    spec = httpx.get(f"{base}/openapi.json").json()
    assert {"/v1/search", "/v1/health", "/v1/cache/stats", "/v1/cache/clear"} <= set(spec["paths"])
    search = spec["paths"]["/v1/search"]["post"]
    assert "SearchRequest" in str(search["requestBody"])
    assert {"200", "422", "502"} <= set(search["responses"])
    docs = httpx.get(f"{base}/docs")
    assert docs.status_code == 200 and "swagger" in docs.text.lower()


# --- the wire form of items (Item.to_wire, built by hand for speed) -------------------------

_TEXT = st.text(max_size=12)
_MAYBE_TEXT = st.none() | _TEXT
_SCORE = st.fixed_dictionaries(
    {"rank": st.integers(1, 50), "relevance": st.floats(0, 1), "method": _TEXT},
    optional={
        "components": st.none()
        | st.dictionaries(_TEXT, st.floats() | st.integers(-5, 5), max_size=3)
    },
)
_FETCH = st.fixed_dictionaries(
    {},
    optional={
        "status": st.sampled_from(["skipped", "fetched", "failed"]),
        "skip_reason": st.none() | st.sampled_from(["budget", "timeout", "blocked"]),
        "error": _MAYBE_TEXT,
        "http_status": st.none() | st.integers(100, 599),
        "content_type": _MAYBE_TEXT,
        "downloaded_bytes": st.integers(0, 10**9),
        "truncated": st.booleans(),
        "extracted_chars": st.integers(0, 10**6),
        "cached": st.booleans(),
    },
)
_PROVENANCE = st.fixed_dictionaries(
    {"backend": _TEXT, "rank": st.integers(1, 50)},
    optional={"engine": _MAYBE_TEXT, "perspective": _MAYBE_TEXT},
)
_ITEM = st.fixed_dictionaries(
    {
        "id": _TEXT,
        "title": _TEXT,
        "url": _TEXT,
        "retrieved_utc": _TEXT,
        "engine": _TEXT,
        "snippet": _TEXT,
        "score": _SCORE,
    },
    optional={
        "engines": st.lists(_TEXT, max_size=3),
        "published_utc": _MAYBE_TEXT,
        "category": _MAYBE_TEXT,
        "provenance": st.lists(_PROVENANCE, max_size=3),
        "fetch": _FETCH,
        "content": _MAYBE_TEXT,
        "chunks": st.none() | st.lists(_TEXT, max_size=3),
    },
).map(Item.model_validate)


@given(_ITEM)
def test_an_items_wire_form_is_its_json_dump(item):
    # repr: the same keys in the same order, the same values of the same types (nan too).
    assert repr(item.to_wire()) == repr(item.model_dump(mode="json"))


@given(_ITEM, _ITEM, st.sampled_from(["copy", "assign"]))
def test_an_items_wire_form_follows_its_changes(item, other, how):
    # to_wire copies the models' __dict__: its order and values must stay the fields' own
    # when an item is changed after validation (model_copy, attribute assignment).
    changes = {name: getattr(other, name) for name in ("title", "score", "fetch", "chunks")}
    if how == "copy":
        item = item.model_copy(update=changes)
    else:
        for name, value in changes.items():
            setattr(item, name, value)
    assert repr(item.to_wire()) == repr(item.model_dump(mode="json"))


@given(_ITEM)
def test_an_items_wire_form_shares_nothing_mutable_with_it(item):
    before = item.model_dump(mode="json")
    wire = item.to_wire()
    nested = [wire["engines"], wire["chunks"], wire["score"]["components"]]
    for value in [*nested, wire["score"], wire["fetch"], *wire["provenance"], wire]:
        if value is not None:
            value.clear()
    assert item.model_dump(mode="json") == before


@pytest.mark.parametrize(
    ("reading", "plain"),
    [
        (False, {}),
        (True, {"status": "skipped", "skip_reason": "budget", "error": "beyond max_fetch_pages"}),
    ],
)
def test_the_shared_fetch_block_of_an_unread_page_is_its_plain_data_and_frozen(reading, plain):
    # One instance serves every item whose page was not read: it must be what validating
    # the plain data gave (fields set included), and nothing may change it.
    block, expected = fetch_info(None, reading), FetchInfo.model_validate(plain)
    assert block == expected and block.model_fields_set == expected.model_fields_set
    with pytest.raises(ValidationError):
        block.status = "fetched"


@given(st.lists(_ITEM, max_size=3) | st.none(), st.booleans(), st.booleans(), st.booleans())
def test_the_wire_form_is_the_json_dump_less_what_was_not_wanted(items, with_items, pack, answer):
    want = Want(items=with_items, rendered_text=pack, answer=answer)
    response = search_response(items or [], answer="a [1]").model_copy(
        update={"items": items, "rendered_text": "pack"}
    )
    expected = response.model_dump(mode="json", by_alias=True)
    for key, kept in [("items", want.items), ("rendered_text", want.rendered_text)]:
        if not kept:
            expected.pop(key)
    if not want.answer:
        expected.pop("answer"), expected.pop("answer_citations")
    assert repr(response.to_wire(want)) == repr(expected)


def test_the_docs_page_loads_its_assets_from_searcher_itself(serve_searcher, tmp_path):
    # Offline, a CDN asset is a blank page: every URL the page names must be ours, and load.
    # No backend is needed for that (nor the testbed): this runs on any fresh clone.
    settings = Settings.model_validate(
        {
            "embeddings": {"provider": "none"},
            "service": {"cache": {"dir": str(tmp_path / "cache")}},
            "state": {"dir": str(tmp_path / "state")},
        }
    )
    base = serve_searcher(settings)
    page = httpx.get(f"{base}/docs").text
    urls = re.findall(r"""(?:src|href|url)\s*[=:]\s*['"]([^'"]+)['"]""", page)
    assert urls and all(u.startswith("/") for u in urls), urls
    assert "http://" not in page and "https://" not in page
    for url in urls:
        answer = httpx.get(f"{base}{url}")
        assert answer.status_code == 200, url
    script = next(u for u in urls if u.split("?")[0].endswith(".js"))
    assert "SwaggerUIBundle" in httpx.get(f"{base}{script}").text
