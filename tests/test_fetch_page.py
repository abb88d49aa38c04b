"""POST /v1/fetch end to end (searcher's app under uvicorn, the testbed behind it), and the
slicing it is built on."""

import httpx
import pytest

from searcher.errors import InvalidRequest
from searcher.tools.fetch_page import check_url, page_slice

PRIVATE_URL = "http://10.0.0.1/"  # refused by the guard before any connection is made


def fetch(base, body, timeout=30.0):
    return httpx.post(f"{base}/v1/fetch", json=body, timeout=timeout)


def page_requests(testbed):
    return [e for e in testbed.log if e.path.startswith("/pages/")]


def long_page(aeb_ground_truth, min_chars):
    return next(
        pid for pid, truth in sorted(aeb_ground_truth.items())
        if len(truth["articleBody"]) >= min_chars
    )  # fmt: skip


def test_a_page_comes_whole_and_in_slices_that_join_up(
    make_settings, serve_searcher, testbed_clean, aeb_ground_truth
):
    base = serve_searcher(make_settings())
    pid = long_page(aeb_ground_truth, 2000)
    url = testbed_clean.page_url(pid)

    whole = fetch(base, {"url": url, "max_chars": 200_000})
    assert whole.status_code == 200
    data = whole.json()
    text = data["content"]
    assert data["url"] == url and data["status"] == "fetched"
    assert data["start_char"] == 0 and data["next_start_char"] is None
    assert data["total_chars"] == len(text) > 1500
    opening = " ".join(aeb_ground_truth[pid]["articleBody"].split()[:6])
    assert opening in " ".join(text.split())
    assert data["fetch"] == {
        "status": "fetched", "skip_reason": None, "error": None, "http_status": 200,
        "content_type": "text/html", "downloaded_bytes": data["fetch"]["downloaded_bytes"],
        "truncated": False, "extracted_chars": len(text), "cached": False,
        "rendered": False, "render_ms": None,
    }  # fmt: skip
    assert data["fetch"]["downloaded_bytes"] > len(text)

    slices, start = [], 0
    while start is not None:
        part = fetch(base, {"url": url, "max_chars": 700, "start_char": start}).json()
        assert part["start_char"] == start and part["total_chars"] == len(text)
        assert part["fetch"]["cached"] is True  # later reads come from the extraction cache
        slices.append(part["content"])
        start = part["next_start_char"]
    assert "".join(slices) == text
    assert [len(s) for s in slices[:-1]] == [700] * (len(slices) - 1)
    assert len(page_requests(testbed_clean)) == 1


def test_max_chars_defaults_to_mcp_max_output_chars(
    make_settings, serve_searcher, testbed, aeb_ground_truth
):
    base = serve_searcher(make_settings(mcp={"max_output_chars": 1000}))
    data = fetch(base, {"url": testbed.page_url(long_page(aeb_ground_truth, 3000))}).json()
    assert len(data["content"]) == 1000 and data["next_start_char"] == 1000


def test_start_beyond_the_end_is_an_empty_last_slice(
    make_settings, serve_searcher, testbed, aeb_ids
):
    base = serve_searcher(make_settings())
    data = fetch(base, {"url": testbed.page_url(aeb_ids[0]), "start_char": 10_000_000}).json()
    assert data["status"] == "fetched" and data["content"] == ""
    assert data["next_start_char"] is None and data["total_chars"] > 0


@pytest.mark.parametrize("path", ["", "/redirect-to?url=http://10.0.0.1/"])
def test_private_addresses_are_refused_as_a_result(make_settings, serve_searcher, testbed, path):
    base = serve_searcher(make_settings())
    url = testbed.url(path) if path else PRIVATE_URL
    response = fetch(base, {"url": url})
    assert response.status_code == 200
    data = response.json()
    assert data["status"] == "skipped" and data["content"] == "" and data["total_chars"] == 0
    assert data["fetch"]["skip_reason"] == "blocked"
    assert data["fetch"]["error"] == "refused: not a public address"


@pytest.mark.parametrize(
    ("path", "status", "skip_reason", "error"),
    [
        ("/status/404", "failed", None, "HTTP 404"),
        ("/image", "skipped", "content_type", "content type image/png is not allowed"),
    ],
)
def test_a_page_that_cannot_be_read_says_why(
    make_settings, serve_searcher, testbed, path, status, skip_reason, error
):
    data = fetch(serve_searcher(make_settings()), {"url": testbed.url(path)}).json()
    assert data["status"] == status and data["content"] == ""
    assert data["fetch"]["skip_reason"] == skip_reason and error in data["fetch"]["error"]


@pytest.mark.parametrize(
    ("body", "field", "message"),
    [
        ({}, "url", "Field required"),
        ({"url": "ftp://example.com/f"}, "url", "only http and https URLs can be fetched"),
        ({"url": "example.com/page"}, "url", "not a URL without a scheme"),
        ({"url": "http://"}, "url", "the URL has no host"),
        ({"url": "http://[::1/"}, "url", "not a valid URL"),
        ({"url": "http://xn--/"}, "url", "the host is not a valid name"),  # no IDNA label
        ({"url": "http://a.example:99999/"}, "url", "not a valid URL: Port out of range"),
        ({"url": "http://a.example/", "max_chars": 0}, "max_chars", "greater than or equal to 1"),
        ({"url": "http://a.example/", "max_chars": 200_001}, "max_chars", "less than or equal"),
        ({"url": "http://a.example/", "max_chars": "10"}, "max_chars", "valid integer"),
        ({"url": "http://a.example/", "start_char": -1}, "start_char", "greater than or equal"),
        ({"url": "http://a.example/", "offset": 5}, "offset", "unknown field"),
    ],
)
def test_bad_bodies_are_422_naming_the_field(make_settings, serve_searcher, body, field, message):
    response = fetch(serve_searcher(make_settings()), body)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["type"] == "invalid_request" and error["field"] == field
    assert message in error["message"]


def test_page_slice_and_url_check():
    assert page_slice("abcdef", 0, 4) == ("abcd", 4)
    assert page_slice("abcdef", 4, 4) == ("ef", None)
    assert page_slice("abcdef", 2, 4) == ("cdef", None)
    assert page_slice("", 0, 10) == ("", None)
    assert check_url("  HTTPS://Example.com/a?b=c ") == "HTTPS://Example.com/a?b=c"
    with pytest.raises(InvalidRequest) as caught:
        check_url("javascript:alert(1)")
    assert caught.value.field == "url" and "not javascript:" in caught.value.message
