"""Open WebUI's "external" web search and web loader: the translation functions, then
Open WebUI's documented wire format over real HTTP against searcher on the testbed."""

import httpx
import pytest

from searcher.api.compat.common import bearer_token
from searcher.api.compat.openwebui import (
    ExternalSearchBody,
    loaded_pages,
    search_request,
    search_results,
)
from searcher.contract import Item, Score
from searcher.fetch.page_reader import PageOutcome
from tests.responses import search_response

# What Open WebUI sends (retrieval/web/external.py, retrieval/loaders/external_web.py).
SEARCH_AGENT = "Open WebUI (https://github.com/open-webui/open-webui) RAG Bot"
LOADER_AGENT = "Open WebUI (https://github.com/open-webui/open-webui) External Web Loader"


def _headers(agent: str, key: str) -> dict[str, str]:
    # Open WebUI sends "Bearer " with an empty key; httpx refuses that header value, so
    # "no key" is sent as no header.
    return {"User-Agent": agent} | ({"Authorization": f"Bearer {key}"} if key else {})


def open_webui_search(base: str, query: str, count: int, key: str = "") -> httpx.Response:
    headers = _headers(SEARCH_AGENT, key)
    return httpx.post(
        f"{base}/openwebui/search",
        json={"query": query, "count": count},
        headers=headers,
        timeout=20,
    )


def open_webui_load(base: str, urls: list[str], key: str = "") -> httpx.Response:
    headers = _headers(LOADER_AGENT, key)
    return httpx.post(f"{base}/openwebui/loader", json={"urls": urls}, headers=headers, timeout=30)


def page_requests(testbed):
    return [e.path for e in testbed.log if e.path.startswith("/pages/")]


# --- translation ----------------------------------------------------------------------


def test_count_becomes_max_results_capped_at_the_contract_limit():
    assert search_request(ExternalSearchBody(query=" bm25 ", count=3)).budget.max_results == 3
    big = search_request(ExternalSearchBody(query="bm25", count=500))
    assert big.budget.max_results == 100 and big.query_text == "bm25"
    assert big.want.rendered_text is False


def test_items_become_link_title_snippet():
    item = Item(
        id="web:1",
        title="Okapi BM25",
        url="https://example.org/bm25",
        retrieved_utc="2026-01-01T00:00:00Z",
        engine="searxng",
        snippet="A ranking function.",
        score=Score(rank=1, relevance=0.9, method="rrf+heuristics"),
    )
    response = search_response([item])
    assert search_results(response) == [
        {
            "link": "https://example.org/bm25",
            "title": "Okapi BM25",
            "snippet": "A ranking function.",
        }
    ]


def test_only_pages_that_were_read_become_documents():
    outcomes = [
        PageOutcome("fetched", content_type="text/html", cached=True, content="Text."),
        PageOutcome("skipped", "blocked", "private address"),
        PageOutcome("failed", error="no main text found on the page"),
    ]
    urls = ["https://a.example/", "http://10.0.0.1/", "https://c.example/"]
    assert loaded_pages(urls, outcomes) == [
        {
            "page_content": "Text.",
            "metadata": {
                "source": "https://a.example/",
                "content_type": "text/html",
                "cached": True,
                "truncated": False,
            },
        }
    ]


@pytest.mark.parametrize(
    ("header", "token"),
    [
        ("Bearer abc", "abc"),
        ("bearer  abc ", "abc"),
        ("Bearer ", None),
        ("Basic abc", None),
        ("", None),
        (None, None),
    ],
)
def test_bearer_token(header, token):
    assert bearer_token(header) == token


# --- external web search over HTTP ----------------------------------------------------


def test_external_search_answers_open_webuis_shape(
    make_settings, serve_searcher, testbed, matching_query, aeb_titles
):
    base = serve_searcher(make_settings())
    response = open_webui_search(base, matching_query, count=3)
    assert response.status_code == 200
    results = response.json()
    assert isinstance(results, list) and len(results) == 3
    prefix = f"{testbed.base_url}/pages/"
    for result in results:
        assert set(result) == {"link", "title", "snippet"}
        assert result["link"].startswith(prefix)
        assert result["title"] == aeb_titles[result["link"].removeprefix(prefix)]
        assert result["snippet"]
    # The same results, in the same order, as the v1 API gives for the same request.
    v1 = httpx.post(
        f"{base}/v1/search",
        json={"query": matching_query, "budget": {"max_results": 3}},
        timeout=20,
    ).json()
    assert [r["link"] for r in results] == [i["url"] for i in v1["items"]]


def test_external_search_every_backend_failing_is_a_502(make_settings, serve_searcher, testbed):
    settings = make_settings(
        backends={"searxng": {"base_url": testbed.searxng_url("status/500")}, "order": ["searxng"]},
        budget={"max_search_retries": 0},
    )
    response = open_webui_search(serve_searcher(settings), "anything", count=3)
    assert response.status_code == 502
    assert response.json()["error"]["backends"] == [
        {"backend": "searxng", "reason": "HTTP 500", "kind": "http_status"}
    ]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"query": "", "count": 3}, "query"),
        ({"query": "   ", "count": 3}, "query"),
        ({"query": "bm25", "count": 0}, "count"),
        ({"query": "bm25", "count": "three"}, "count"),
        ({"count": 3}, "query"),
    ],
)
def test_external_search_bad_bodies_are_a_422_naming_the_field(
    make_settings, serve_searcher, body, field
):
    base = serve_searcher(make_settings())
    response = httpx.post(f"{base}/openwebui/search", json=body)
    assert response.status_code == 422
    assert response.json()["error"]["field"] == field


# --- the bearer key -------------------------------------------------------------------


def test_a_configured_key_is_required(make_settings, serve_searcher, testbed, matching_query):
    base = serve_searcher(make_settings(compat={"openwebui_api_key": "s3cret"}))
    for key in ("", "wrong"):
        for call in (
            open_webui_search(base, matching_query, 3, key=key),
            open_webui_load(base, [testbed.page_url("x")], key=key),
        ):
            assert call.status_code == 401
            error = call.json()["error"]
            assert "API key" in error["message"] and "s3cret" not in call.text
    # The key is checked before the body: no hint about the body's shape without it,
    # even for a body FastAPI cannot parse (it parses before it runs any dependency).
    json_type = {"content-type": "application/json"}
    for path, bad_body in [
        ("search", b'{"count": 0}'),
        ("search", b'{"query":'),
        ("search", b'{"query":"\xff"}'),
        ("loader", b"[" * 5000),
    ]:
        no_key = httpx.post(f"{base}/openwebui/{path}", content=bad_body, headers=json_type)
        assert no_key.status_code == 401, (path, bad_body[:20], no_key.text)
    assert open_webui_search(base, matching_query, 3, key="s3cret").status_code == 200


# --- external web loader over HTTP ----------------------------------------------------


def test_loader_reads_pages_through_guard_and_cache(
    make_settings, serve_searcher, testbed_clean, aeb_ids, aeb_ground_truth
):
    base = serve_searcher(make_settings())
    good = [testbed_clean.page_url(pid) for pid in aeb_ids[:2]]
    # Loopback but not the allow-listed 127.0.0.1:PORT: the address guard must refuse it.
    guarded = f"http://localhost:{testbed_clean.port}/pages/{aeb_ids[2]}"
    missing = f"{testbed_clean.base_url}/status/404"
    response = open_webui_load(base, [good[0], guarded, missing, good[1]])
    assert response.status_code == 200
    documents = response.json()
    assert [d["metadata"]["source"] for d in documents] == good
    for document, pid in zip(documents, aeb_ids[:2], strict=True):
        assert set(document) == {"page_content", "metadata"}
        truth_words = aeb_ground_truth[pid]["articleBody"].split()[:3]
        assert " ".join(truth_words) in " ".join(document["page_content"].split())
        assert document["metadata"]["cached"] is False
        assert document["metadata"]["content_type"] == "text/html"
    assert f"/pages/{aeb_ids[2]}" not in page_requests(testbed_clean)

    testbed_clean.reset()
    again = open_webui_load(base, good).json()
    assert [d["metadata"]["cached"] for d in again] == [True, True]
    assert [d["page_content"] for d in again] == [d["page_content"] for d in documents]
    assert page_requests(testbed_clean) == []


def test_loader_shares_the_cache_with_full_mode(
    make_settings, serve_searcher, testbed, matching_query
):
    base = serve_searcher(make_settings())
    body = {
        "query": matching_query,
        "constraints": {"search_mode": "full"},
        "budget": {"max_results": 2, "max_fetch_pages": 2},
    }
    items = httpx.post(f"{base}/v1/search", json=body, timeout=30).json()["items"]
    testbed.reset()
    documents = open_webui_load(base, [i["url"] for i in items]).json()
    assert [d["metadata"]["cached"] for d in documents] == [True, True]
    assert [d["page_content"] for d in documents] == [i["content"] for i in items]
    assert page_requests(testbed) == []


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"urls": []}, "urls"),
        ({"urls": "http://example.org/"}, "urls"),
        ({"urls": [f"http://example.org/{n}" for n in range(51)]}, "urls"),
        ({}, "urls"),
    ],
)
def test_loader_bad_bodies_are_a_422_naming_the_field(make_settings, serve_searcher, body, field):
    base = serve_searcher(make_settings())
    response = httpx.post(f"{base}/openwebui/loader", json=body)
    assert response.status_code == 422
    assert response.json()["error"]["field"] == field
