"""The local web behaves as specified (real HTTP on 127.0.0.1 only)."""

from __future__ import annotations

import time
import zlib

import httpx
import pytest

from tests.testbed import TestbedServer
from tests.testbed.corpus import corpus, query_terms, tokenize
from tests.testbed.shipped_pages import shipped_pages

TOKEN = {"X-Subscription-Token": "test-key"}


@pytest.fixture
def client(testbed_clean: TestbedServer):
    with httpx.Client(base_url=testbed_clean.base_url, timeout=5) as c:
        yield c


def sx(client: httpx.Client, base: str = "/searxng", **params):
    return client.get(f"{base}/search", params={"format": "json", **params})


def brave(client: httpx.Client, base: str = "/brave", headers=TOKEN, **params):
    return client.get(f"{base}/res/v1/web/search", params=params, headers=headers)


# ---- pages ---------------------------------------------------------------------------


def test_page_served_decompressed(client, aeb_ids, aeb_ground_truth):
    assert aeb_ids == sorted(aeb_ground_truth)
    assert len(aeb_ids) == (121 if corpus().is_aeb else len(shipped_pages()[0]))
    r = client.get(f"/pages/{aeb_ids[0]}")
    assert r.status_code == 200
    assert r.headers["content-type"].startswith("text/html")
    assert b"<html" in r.content[:2000].lower()
    assert client.get("/pages/nope").status_code == 404


def test_slow_page_and_hang(client, aeb_ids):
    t = time.monotonic()
    assert client.get(f"/slow/200/pages/{aeb_ids[1]}").status_code == 200
    assert time.monotonic() - t >= 0.2
    with pytest.raises(httpx.ReadTimeout):
        client.get("/hang", timeout=0.2)


def test_status_text_types(client):
    r = client.get("/status/503")
    assert r.status_code == 503 and "503" in r.text
    r = client.get("/wrong-type")
    assert r.headers["content-type"] == "application/zip" and r.content.startswith(b"PK")
    assert len(r.content) > 2000
    r = client.get("/image")
    assert r.headers["content-type"] == "image/png" and r.content.startswith(b"\x89PNG")
    r = client.get("/text")
    assert r.headers["content-type"] == "text/plain; charset=utf-8" and "café" in r.text
    r = client.get("/mislabelled")
    assert r.headers["content-type"] == "text/html" and r.json()["ok"] is True


def test_huge_and_drip(client):
    r = client.get("/huge", params={"bytes": 200_000})
    assert r.headers["content-length"] == "200000" and len(r.content) == 200_000
    assert r.content.startswith(b"<!doctype html>") and r.content.endswith(b"</html>\n")
    with client.stream("GET", "/huge") as r:  # default 50 MB: read only the start
        assert int(r.headers["content-length"]) == 50 * 1024 * 1024
        assert next(r.iter_raw()).startswith(b"<!doctype html>")
    t = time.monotonic()
    r = client.get("/drip", params={"bytes": 40, "interval_ms": 50})
    assert len(r.content) == 40 and time.monotonic() - t >= 0.15


def test_gzip_bomb(client):
    with client.stream("GET", "/gzip-bomb") as r:
        assert r.headers["content-encoding"] == "gzip"
        assert r.headers["content-type"] == "text/html"
        assert int(r.headers["content-length"]) < 2 * 1024 * 1024
        first = next(r.iter_raw())
    out = zlib.decompressobj(31).decompress(first, 1 << 20)
    assert out.startswith(b"<!doctype html>") and len(out) == 1 << 20


def test_redirects(client, aeb_ids, testbed_clean):
    r = client.get("/redirect-loop/a")
    assert r.status_code == 302 and r.headers["location"] == "/redirect-loop/b"
    assert client.get("/redirect-loop/b").headers["location"] == "/redirect-loop/a"
    with pytest.raises(httpx.TooManyRedirects):
        client.get("/redirect-loop/a", follow_redirects=True)
    r = client.get("/redirect/3", follow_redirects=True)
    assert r.status_code == 200 and str(r.url).endswith(f"/pages/{aeb_ids[0]}")
    assert len(r.history) == 4
    target = "http://169.254.169.254/latest/meta-data/"
    r = client.get("/redirect-to", params={"url": target})  # not followed: never leave 127.0.0.1
    assert r.status_code == 302 and r.headers["location"] == target


# ---- SearXNG -------------------------------------------------------------------------


def test_searxng_search_and_paging(client, testbed_clean, broad_query):
    r = sx(client, q=broad_query)
    assert r.status_code == 200 and r.headers["content-type"].startswith("application/json")
    body = r.json()
    assert body["query"] == broad_query and body["unresponsive_engines"] == []
    results = body["results"]
    assert len(results) == 10
    first = results[0]
    assert first["url"].startswith(testbed_clean.base_url + "/pages/")
    assert set(query_terms(broad_query)) & set(tokenize(first["title"] + " " + first["content"]))
    assert first["engine"] == first["engines"][0] and first["category"] == "general"
    assert [x["score"] for x in results] == sorted((x["score"] for x in results), reverse=True)
    page2 = sx(client, q=broad_query, pageno=2).json()["results"]
    assert page2 and not {x["url"] for x in page2} & {x["url"] for x in results}
    # deterministic, and fetchable
    assert sx(client, q=broad_query).json() == body
    assert client.get(first["url"]).status_code == 200
    # nothing matches: no results
    assert sx(client, q="zzqxjv").json()["results"] == []


def test_searxng_rejects_non_json(client):
    assert client.get("/searxng/search", params={"q": "x", "format": "html"}).status_code == 403
    assert client.get("/searxng/search", params={"q": "x"}).status_code == 403


def test_searxng_behaviours(client, broad_query):
    r = sx(client, "/searxng/unresponsive", q=broad_query)
    assert r.json()["results"] == []
    assert r.json()["unresponsive_engines"] == [["google", "timeout"], ["bing", "CAPTCHA"]]
    e = sx(client, "/searxng/empty", q=broad_query).json()
    assert e["results"] == [] and e["unresponsive_engines"] == []
    g = sx(client, "/searxng/garbage", q=broad_query)
    assert g.status_code == 200 and g.headers["content-type"] == "application/json"
    with pytest.raises(ValueError):
        g.json()
    h = sx(client, "/searxng/html", q=broad_query)
    assert h.headers["content-type"].startswith("text/html")
    assert sx(client, "/searxng/status/429", q=broad_query).status_code == 429
    with pytest.raises(httpx.ReadTimeout):
        client.get("/searxng/hang/search", params={"q": "x", "format": "json"}, timeout=0.2)
    t = time.monotonic()
    assert sx(client, "/searxng/slow/150", q=broad_query).json()["results"]
    assert time.monotonic() - t >= 0.15
    fixed = sx(client, "/searxng/fixed/5", q="anything").json()
    assert fixed["query"] == "anything" and len(fixed["results"]) == 5
    fresh = sx(client, "/searxng/fresh/5", q="anything 7").json()["results"]
    assert [r["url"] for r in fresh] == [r["url"] for r in fixed["results"]]
    assert all(r["content"].endswith(" anything 7") for r in fresh)
    quoted = sx(client, "/searxng/fresh/2", q='a "b" \\ é').json()["results"]
    assert all(r["content"].endswith(' a "b" \\ é') for r in quoted)
    mixed = sx(client, "/searxng/mixed", q=broad_query).json()["results"]
    assert any(x["url"].endswith("/hang") for x in mixed)


def test_searxng_flaky_and_reset(client, testbed_clean, broad_query):
    codes = [sx(client, "/searxng/flaky/2", q=broad_query).status_code for _ in range(3)]
    assert codes == [500, 500, 200]
    assert sx(client, "/searxng/flaky/1", q=broad_query).status_code == 500  # own counter
    client.post("/_reset")
    assert sx(client, "/searxng/flaky/2", q=broad_query).status_code == 500


# ---- Brave ---------------------------------------------------------------------------


def test_brave_auth(client, broad_query):
    for headers in ({}, {"X-Subscription-Token": "wrong"}):
        r = brave(client, headers=headers, q=broad_query)
        assert r.status_code == 401
        assert r.json()["type"] == "ErrorResponse"
        assert r.json()["error"]["code"] == "SUBSCRIPTION_TOKEN_INVALID"


def test_brave_search(client, testbed_clean, broad_query):
    r = brave(client, q=broad_query, count=5)
    assert r.status_code == 200
    body = r.json()
    assert body["type"] == "search" and body["query"]["original"] == broad_query
    results = body["web"]["results"]
    assert len(results) == 5
    assert results[0]["url"].startswith(testbed_clean.base_url + "/pages/")
    assert results[0]["type"] == "search_result" and "<strong>" in results[0]["description"]
    nxt = brave(client, q=broad_query, count=5, offset=1).json()["web"]["results"]
    assert not {x["url"] for x in nxt} & {x["url"] for x in results}
    assert len(brave(client, q=broad_query).json()["web"]["results"]) == 20
    assert "web" not in brave(client, q="zzqxjv").json()
    assert brave(client, q="google", count=50).status_code == 422


def test_brave_behaviours(client, broad_query):
    r = brave(client, "/brave/status/429", q=broad_query)
    assert r.status_code == 429 and r.json()["error"]["code"] == "RATE_LIMITED"
    with pytest.raises(ValueError):
        brave(client, "/brave/garbage", q=broad_query).json()
    with pytest.raises(httpx.ReadTimeout):
        client.get("/brave/hang/res/v1/web/search", params={"q": "x"}, timeout=0.2)
    assert "web" not in brave(client, "/brave/empty", q=broad_query).json()
    assert brave(client, "/brave/slow/50", q=broad_query).json()["web"]["results"]


# ---- introspection -------------------------------------------------------------------


def test_log_and_reset(client, testbed_clean):
    sx(client, q="hello world", pageno=1)
    brave(client, q="hi")
    log = testbed_clean.log
    assert [e.path for e in log] == ["/searxng/search", "/brave/res/v1/web/search"]
    assert log[0].query == {"format": "json", "q": "hello world", "pageno": "1"}
    assert log[1].headers["x-subscription-token"] == "test-key"
    remote = client.get("/_log").json()
    assert [e["path"] for e in remote] == [e.path for e in log]
    assert client.post("/_reset").status_code == 204
    assert testbed_clean.log == [] and client.get("/_log").json() == []


def test_own_server_stops_quickly_with_hanging_request():
    with TestbedServer() as tb:
        assert tb.base_url.startswith("http://127.0.0.1:")
        with httpx.Client(timeout=0.2) as c, pytest.raises(httpx.ReadTimeout):
            c.get(tb.url("/hang"))
        t = time.monotonic()
    assert time.monotonic() - t < 3
    with pytest.raises(ValueError):
        TestbedServer(host="0.0.0.0")
