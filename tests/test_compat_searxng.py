"""SearXNG-compatible /search: the translation functions, then LangChain's
SearxSearchWrapper and plain HTTP against searcher, whose backends are the testbed."""

import warnings

import httpx
import pytest

from searcher.api.compat.searxng import (
    default_max_results,
    failed_answer,
    searxng_answer,
    searxng_request,
)
from searcher.contract import ErrorEntry, Item, Provenance, Score, SearchResponse
from searcher.errors import AllBackendsFailed, BackendFailure, InvalidRequest
from tests.responses import search_response

# --- parameters -> SearchRequest -----------------------------------------------------


def test_every_searxng_parameter_lands_in_the_request():
    request = searxng_request(
        {
            "q": "  okapi bm25 ",
            "format": "json",
            "categories": "news, it",
            "engines": "bing,wikipedia",
            "language": "de",
            "pageno": "2",
            "time_range": "week",
            "safesearch": "2",
            "max_results": "7",
        },
        max_results=10,
    )
    assert request.query_text == "okapi bm25" and request.lang == "de"
    c = request.constraints
    assert c.categories == ["news", "it"] and c.engines == ["bing", "wikipedia"]
    assert (c.pageno, c.time_range, c.safesearch) == (2, "week", 2)
    assert request.budget.max_results == 7
    assert request.want.rendered_text is False and request.want.items is True


def test_what_open_webui_sends_for_no_filter_means_no_filter():
    # Open WebUI's SearXNG client sends empty strings, and theme/image_proxy we ignore.
    request = searxng_request(
        {
            "q": "x",
            "format": "json",
            "pageno": "1",
            "safesearch": "",
            "language": "all",
            "time_range": "",
            "categories": "",
            "theme": "simple",
            "image_proxy": "0",
        },
        max_results=12,
    )
    c = request.constraints
    assert (c.categories, c.engines, c.lang, c.time_range, c.safesearch) == (None,) * 5
    assert c.pageno == 1 and request.budget.max_results == 12
    assert searxng_request({"q": "x"}, 10).constraints.pageno == 1  # no format: JSON


def test_default_result_count_is_at_least_one_searxng_page():
    assert default_max_results(5) == 10 and default_max_results(25) == 25


@pytest.mark.parametrize(
    ("params", "field", "words"),
    [
        ({"format": "html"}, "format", "only format=json"),
        ({"format": "rss"}, "format", "only format=json"),
        ({"q": ""}, "q", "non-empty"),
        ({"q": "   "}, "q", "non-empty"),
        ({"q": "x" * 2001}, "q", "2000"),
        ({"pageno": "0"}, "pageno", "from 1 to 50"),
        ({"pageno": "two"}, "pageno", "whole number"),
        ({"pageno": "1_0"}, "pageno", "whole number"),  # int() reads it as 10
        ({"pageno": "\uff11"}, "pageno", "whole number"),  # a full-width 1
        ({"pageno": "+-5"}, "pageno", "whole number"),
        ({"pageno": "51"}, "pageno", "from 1 to 50"),
        ({"safesearch": "3"}, "safesearch", "from 0 to 2"),
        ({"time_range": "decade"}, "time_range", "day, week, month, year"),
        ({"max_results": "0"}, "max_results", "from 1 to 100"),
        ({"max_results": "101"}, "max_results", "from 1 to 100"),
        ({"language": "x" * 36}, "language", "35"),
    ],
)
def test_invalid_parameters_are_named(params, field, words):
    with pytest.raises(InvalidRequest) as raised:
        searxng_request({"q": "query", "format": "json", **params}, 10)
    assert raised.value.field == field and words in raised.value.message


# --- SearchResponse -> SearXNG JSON --------------------------------------------------


def _item(rank: int, url: str, provenance: list[Provenance], category: str | None) -> Item:
    return Item(
        id=f"web:{rank}",
        title=f"Title {rank}",
        url=url,
        retrieved_utc="2026-01-01T00:00:00Z",
        engine="searxng",
        snippet=f"Snippet {rank}",
        published_utc="2025-05-01T00:00:00Z" if rank == 1 else None,
        category=category,
        score=Score(rank=rank, relevance=1.0 / rank, method="rrf+heuristics"),
        provenance=provenance,
    )


def _response(items: list[Item], errors: list[ErrorEntry]) -> SearchResponse:
    return search_response(items, errors=errors)


def test_items_become_searxng_results_with_engines_from_provenance():
    items = [
        _item(
            1,
            "https://example.org/a?x=1",
            [
                Provenance(backend="searxng", engine="google", rank=2),
                Provenance(backend="searxng", engine="bing", rank=1),
                Provenance(backend="brave", engine=None, rank=4),
            ],
            "news",
        ),
        _item(2, "https://example.org/b", [], None),
    ]
    errors = [
        ErrorEntry(stage="search", source="duckduckgo", reason="rate limited", kind="rate_limited"),
        # An empty answer is told by its kind, whatever its reason says.
        ErrorEntry(stage="search", source="brave", reason="nothing found", kind="no_results"),
        ErrorEntry(stage="fetch", source="https://example.org/a", reason="timeout", kind="timeout"),
    ]
    answer = searxng_answer("bm25", _response(items, errors))
    first, second = answer["results"]
    assert first == {
        "url": "https://example.org/a?x=1",
        "title": "Title 1",
        "content": "Snippet 1",
        "engine": "google",
        "engines": ["google", "bing", "brave"],
        "positions": [2, 1, 4],
        "score": 1.0,
        "category": "news",
        "publishedDate": "2025-05-01T00:00:00Z",
        "parsed_url": ["https", "example.org", "/a", "", "x=1", ""],
        "template": "default.html",
    }
    # No provenance: the item's own engine and rank stand in; no category: "general".
    assert second["engines"] == ["searxng"] and second["positions"] == [2]
    assert second["category"] == "general" and second["score"] == 0.5
    assert answer["query"] == "bm25" and answer["number_of_results"] == 2
    assert answer["unresponsive_engines"] == [["duckduckgo", "rate limited"]]
    for key in ("answers", "corrections", "infoboxes", "suggestions"):
        assert answer[key] == []


def test_all_backends_failing_is_an_empty_answer_listing_them():
    # A retried attempt that failed alike (500 twice) is one unresponsive engine.
    failed = BackendFailure("searxng", "HTTP 500", "http_status")
    other = BackendFailure("brave", "HTTP 401", "auth")
    answer = failed_answer("q", [failed, failed, other])
    assert answer["results"] == [] and answer["number_of_results"] == 0
    assert answer["unresponsive_engines"] == [["searxng", "HTTP 500"], ["brave", "HTTP 401"]]
    said = str(AllBackendsFailed([failed, failed, other]))
    assert said == "all search backends failed (searxng: HTTP 500; brave: HTTP 401)"


# --- over HTTP: LangChain's SearxSearchWrapper --------------------------------------


@pytest.fixture(scope="module")
def searx_wrapper():
    with warnings.catch_warnings():
        # langchain-community warns on import that it is being sunset; the wrapper works.
        warnings.simplefilter("ignore", DeprecationWarning)
        from langchain_community.utilities import SearxSearchWrapper
    return SearxSearchWrapper


def searxng_requests(testbed):
    return [e for e in testbed.log if e.path.startswith("/searxng")]


def test_langchain_results_carry_testbed_pages(
    searx_wrapper, make_settings, serve_searcher, testbed, matching_query, aeb_titles
):
    base = serve_searcher(make_settings())
    results = searx_wrapper(searx_host=base).results(matching_query, num_results=3)
    assert len(results) == 3
    prefix = f"{testbed.base_url}/pages/"
    for result in results:
        assert result["link"].startswith(prefix)
        assert result["title"] == aeb_titles[result["link"].removeprefix(prefix)]
        assert result["snippet"] and result["category"] == "general" and result["engines"]
    assert len({r["link"] for r in results}) == 3


def test_langchain_run_joins_the_snippets(
    searx_wrapper, make_settings, serve_searcher, matching_query
):
    base = serve_searcher(make_settings())
    wrapper = searx_wrapper(searx_host=base, k=2)
    text = wrapper.run(matching_query)
    snippets = [r["snippet"] for r in wrapper.results(matching_query, num_results=2)]
    assert text == "\n\n".join(snippets) and all(snippets)


def test_langchain_filters_reach_the_searxng_backend(
    searx_wrapper, make_settings, serve_searcher, testbed_clean, matching_query
):
    base = serve_searcher(make_settings())
    wrapper = searx_wrapper(searx_host=base, engines=["bing", "wikipedia"], categories=["news"])
    results = wrapper.results(
        matching_query, num_results=5, time_range="month", language="de", safesearch=2, pageno=2
    )
    assert results and all(r["link"].startswith(testbed_clean.base_url) for r in results)
    first = searxng_requests(testbed_clean)[0]
    assert first.query["q"] == matching_query and first.query["format"] == "json"
    assert first.query["engines"] == "bing,wikipedia" and first.query["categories"] == "news"
    assert first.query["time_range"] == "month" and first.query["language"] == "de"
    assert first.query["safesearch"] == "2" and first.query["pageno"] == "2"


def test_langchain_sees_a_bad_format_as_an_error(
    searx_wrapper, make_settings, serve_searcher, matching_query
):
    base = serve_searcher(make_settings())
    wrapper = searx_wrapper(searx_host=base, params={"format": "html"})
    with pytest.raises(ValueError, match="only format=json is supported"):
        wrapper.results(matching_query, num_results=3)


# --- over HTTP: plain requests ------------------------------------------------------


def test_result_count_defaults_to_a_page_and_max_results_overrides(
    make_settings, serve_searcher, matching_query
):
    # No keyword floor, so that every result the testbed answers is kept.
    base = serve_searcher(make_settings(scoring={"min_keyword_overlap": 0}))
    default = httpx.get(f"{base}/search", params={"q": matching_query, "format": "json"})
    assert default.status_code == 200 and len(default.json()["results"]) == 10
    three = httpx.get(f"{base}/search", params={"q": matching_query, "max_results": 3})
    assert [r["url"] for r in three.json()["results"]] == [
        r["url"] for r in default.json()["results"][:3]
    ]


def test_post_form_like_searxng(make_settings, serve_searcher, testbed_clean, matching_query):
    base = serve_searcher(make_settings())
    response = httpx.post(
        f"{base}/search", data={"q": matching_query, "format": "json", "time_range": "year"}
    )
    assert response.status_code == 200
    data = response.json()
    assert data["query"] == matching_query and data["results"]
    assert searxng_requests(testbed_clean)[0].query["time_range"] == "year"
    # multipart/form-data too (curl -F), and form fields win over query parameters.
    testbed_clean.reset()
    multipart = httpx.post(
        f"{base}/search?time_range=day",
        files={"q": (None, matching_query), "time_range": (None, "month")},
    )
    assert multipart.status_code == 200 and multipart.json()["results"]
    assert searxng_requests(testbed_clean)[0].query["time_range"] == "month"


def test_open_webui_style_request_sorted_by_score(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    # What Open WebUI's SearXNG engine sends; it then sorts the results by score.
    params = {
        "q": matching_query,
        "format": "json",
        "pageno": 1,
        "safesearch": "1",
        "language": "en-US",
        "time_range": "",
        "categories": "",
        "theme": "simple",
        "image_proxy": 0,
    }
    base = serve_searcher(make_settings())
    response = httpx.get(f"{base}/search", params=params, headers={"Accept": "text/html"})
    assert response.status_code == 200
    results = response.json()["results"]
    assert results and results == sorted(results, key=lambda r: r["score"], reverse=True)
    logged = searxng_requests(testbed_clean)[0].query
    assert logged["language"] == "en-US" and logged["safesearch"] == "1"
    assert "time_range" not in logged


@pytest.mark.parametrize(
    ("params", "field"),
    [
        ({"q": "x", "format": "html"}, "format"),
        ({"format": "json"}, "q"),
        ({"q": "x", "pageno": "abc"}, "pageno"),
        ({"q": "x", "time_range": "decade"}, "time_range"),
        ({"q": "x", "safesearch": "9"}, "safesearch"),
        ({"q": "x", "max_results": "1000"}, "max_results"),
    ],
)
def test_invalid_parameters_are_a_422_naming_them(
    make_settings, serve_searcher, testbed_clean, params, field
):
    base = serve_searcher(make_settings())
    response = httpx.get(f"{base}/search", params=params)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["type"] == "invalid_request" and error["field"] == field
    assert error["message"].startswith(f"{field}: ")
    assert searxng_requests(testbed_clean) == []


def test_failed_engines_are_listed_as_unresponsive(
    make_settings, serve_searcher, testbed, matching_query
):
    settings = make_settings(
        backends={"searxng": {"base_url": testbed.searxng_url("unresponsive")}},
        budget={"max_search_retries": 0},
    )
    data = httpx.get(f"{serve_searcher(settings)}/search", params={"q": matching_query}).json()
    assert data["results"] and all(r["engines"] == ["brave"] for r in data["results"])
    ((name, reason),) = data["unresponsive_engines"]
    assert name == "searxng" and "google (timeout), bing (CAPTCHA)" in reason


def test_every_backend_failing_answers_like_searxng(make_settings, serve_searcher, testbed):
    settings = make_settings(
        backends={
            "searxng": {"base_url": testbed.searxng_url("status/500")},
            "brave": {"enabled": False},
        },
        budget={"max_search_retries": 0},
    )
    response = httpx.get(f"{serve_searcher(settings)}/search", params={"q": "anything"})
    assert response.status_code == 200
    data = response.json()
    assert data["results"] == [] and data["unresponsive_engines"] == [["searxng", "HTTP 500"]]


def test_root_with_a_query_goes_on_to_search(make_settings, serve_searcher, matching_query):
    base = serve_searcher(make_settings())
    moved = httpx.get(f"{base}/", params={"q": matching_query, "format": "json"})
    assert moved.status_code == 308
    assert moved.headers["location"].startswith("search?q=")
    assert httpx.get(f"{base}/").status_code == 404
