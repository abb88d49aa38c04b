"""POST /v1/map and /tavily/map end to end (searcher under uvicorn, the testbed's small
site behind it: tests/testbed/site.py), POST /v1/fetch with several URLs, and the pure
parts a map is built from (sitemaps, links, scope)."""

import gzip
import threading
import time
from typing import Any

import httpx
import pytest

from searcher.errors import InvalidRequest
from searcher.site.links import page_links
from searcher.site.scope import SiteScope, compile_patterns, normalised_url, repeat_copies
from searcher.site.sitemaps import SitemapTooLarge, gunzipped, parse_sitemap
from tests.testbed import site


def post(base, path, body, timeout=30.0):
    return httpx.post(f"{base}{path}", json=body, timeout=timeout)


def paths(urls, origin):
    return [u.removeprefix(origin) for u in urls]


@pytest.fixture
def mapped(make_settings, serve_searcher, testbed_clean):
    base = serve_searcher(make_settings())
    origin = f"http://127.0.0.1:{testbed_clean.port}"

    def run(**body):
        response = post(base, "/v1/map", {"url": f"{origin}/site/", **body})
        assert response.status_code == 200, response.text
        data = response.json()
        return data, paths(data["results"], origin)

    return run


def test_a_map_lists_sitemap_pages_and_linked_pages_but_not_what_robots_disallows(
    mapped, testbed_clean
):
    data, found = mapped(max_depth=3)
    # The root first; the plain and the gzip sitemap (through the index robots.txt names).
    assert found[0] == "/site/"
    assert set(site.SITEMAP_DOCS) <= set(found)
    assert {"/site/about", "/site/blog/1"} <= set(found)
    # Pages only links reach, three hops deep.
    assert set(site.LINK_CHAIN) <= set(found)
    # robots.txt's Disallow holds for sitemap entries and links alike; no fragments, no
    # other schemes, no other hosts.
    assert not [p for p in found if "/private/" in p]
    assert not [p for p in found if "#" in p or not p.startswith("/site/")]
    assert len(found) == len(set(found))
    assert data["from_sitemaps"] == 4 and data["from_links"] == 3
    assert data["sitemaps_read"] == 3 and data["complete"] is True
    # Only links were read from pages: never a disallowed one, and nothing on the
    # metadata address the index named (another host: not even asked).
    requested = [e.path for e in testbed_clean.log]
    assert "/robots.txt" in requested and "/site/private/secret" not in requested


def test_depth_breadth_and_limit_bound_the_map(mapped):
    _, shallow = mapped(max_depth=1, sitemaps=False)
    assert "/site/links-only" in shallow and "/site/deep/1" not in shallow
    _, none = mapped(max_depth=0, sitemaps=False)
    assert none == ["/site/"]
    _, narrow = mapped(max_depth=1, max_breadth=1, sitemaps=False)
    assert narrow == ["/site/", "/site/about"]
    data, limited = mapped(max_depth=3, limit=4)
    assert len(limited) == 4 and data["complete"] is False


def test_path_patterns_select_and_exclude(mapped):
    _, docs = mapped(max_depth=2, select_paths=[r"^/site/docs/"])
    assert set(docs) == {"/site/", *site.SITEMAP_DOCS}
    _, rest = mapped(max_depth=3, exclude_paths=[r"/deep/", r"/docs/"])
    assert "/site/links-only" in rest and not [p for p in rest if "/deep/" in p or "/docs/" in p]


def test_a_root_that_redirects_to_another_host_maps_the_site_there(
    make_settings, serve_searcher, testbed_clean
):
    port = testbed_clean.port
    both = [f"127.0.0.1:{port}", f"localhost:{port}"]  # the testbed under two host names
    base = serve_searcher(make_settings(fetch={"allowed_hosts": both}))
    elsewhere = f"http://localhost:{port}"
    root = f"http://127.0.0.1:{port}/redirect-to?url={elsewhere}/site/"
    response = post(base, "/v1/map", {"url": root, "max_depth": 1, "sitemaps": False})
    assert response.status_code == 200, response.text
    found = response.json()["results"]
    assert f"{elsewhere}/site/" in found and f"{elsewhere}/site/about" in found, found
    assert f"{elsewhere}/site/private/hidden" not in found  # the new host's robots.txt


def test_tavily_map_answers_in_tavilys_shape(make_settings, serve_searcher, testbed):
    base = serve_searcher(make_settings())
    origin = f"http://127.0.0.1:{testbed.port}"
    response = post(base, "/tavily/map", {"url": f"{origin}/site/", "max_depth": 2})
    assert response.status_code == 200, response.text
    data = response.json()
    assert set(data) == {"base_url", "results", "response_time", "request_id"}
    assert f"{origin}/site/links-only" in data["results"]
    bad = post(base, "/tavily/map", {"url": f"{origin}/site/", "select_paths": ["("]})
    assert bad.status_code == 400 and "select_paths" in bad.text
    # Tavily's own client, with its defaults (it sends timeout 150, Tavily's maximum).
    from tavily import TavilyClient

    tavily = TavilyClient(api_key="tvly-x", api_base_url=f"{base}/tavily")
    assert f"{origin}/site/links-only" in tavily.map(f"{origin}/site/", max_depth=2)["results"]


@pytest.mark.parametrize(
    ("body", "field"),
    [
        ({"url": "ftp://example.org/"}, "url"),
        ({"url": "http://x.org/", "max_depth": 6}, "max_depth"),
        ({"url": "http://x.org/", "limit": 0}, "limit"),
        ({"url": "http://x.org/", "select_paths": ["(unclosed"]}, "select_paths.0"),
        # Compiled, it would take 1.5 GB: refused before compiling.
        (
            {"url": "http://x.org/", "select_paths": ["((((a{100}){100}){100}){4})"]},
            "select_paths.0",
        ),
        ({"url": "http://x.org/", "exclude_domains": ["a", "[z-a]"]}, "exclude_domains.1"),
        ({"url": "http://x.org/", "timeout_s": 0}, "timeout_s"),
        ({"url": "http://x.org/", "depth": 1}, "depth"),
    ],
)
def test_bad_map_bodies_get_a_422_naming_the_field(make_settings, serve_searcher, body, field):
    base = serve_searcher(make_settings())
    response = post(base, "/v1/map", body)
    assert response.status_code == 422
    assert response.json()["error"]["field"] == field


def test_a_slow_pattern_keeps_to_the_maps_deadline_and_the_server_answers_meanwhile(
    make_settings, serve_searcher, testbed_clean
):
    base = serve_searcher(make_settings())
    body = {"url": f"http://127.0.0.1:{testbed_clean.port}/slow-links/", "max_depth": 1,
            "sitemaps": False, "select_paths": ["(a|aa)+$"], "timeout_s": 2}  # fmt: skip
    answers: dict[str, Any] = {}
    mapping = threading.Thread(target=lambda: answers.update(map=post(base, "/v1/map", body)))
    started = time.monotonic()
    mapping.start()
    time.sleep(0.5)  # the page is read and its 400 links are being matched
    health = httpx.get(f"{base}/v1/health", timeout=30)
    health_s = time.monotonic() - started
    mapping.join(timeout=60)
    map_s = time.monotonic() - started
    assert health.status_code == 200
    data = answers["map"].json()
    # Every link takes its 50 ms match limit (20 s in all): the deadline ends the map.
    assert map_s < 8 and data["complete"] is False, (map_s, data)
    # Asked while the links were matched, health did not wait for them (on the old event
    # loop it came back with the map).
    assert health_s + 0.5 < map_s, (health_s, map_s)
    assert data["results"] == [body["url"]]


def test_a_map_never_reaches_a_private_address(make_settings, serve_searcher, testbed_clean):
    base = serve_searcher(make_settings())
    # Allowed to leave the site, the map still cannot read the metadata sitemap the index
    # names: the fetch guard refuses it before connecting, and the map goes on.
    data = post(
        base, "/v1/map",
        {"url": f"http://127.0.0.1:{testbed_clean.port}/site/", "allow_external": True},
    ).json()  # fmt: skip
    assert data["sitemaps_read"] == 3 and not [u for u in data["results"] if "169.254" in u]
    refused = post(base, "/v1/map", {"url": "http://10.0.0.1/", "max_depth": 1}).json()
    assert refused["results"] == ["http://10.0.0.1/"] and refused["pages_read"] == 1


def test_several_urls_are_read_in_one_fetch_each_with_its_own_status(
    make_settings, serve_searcher, testbed, aeb_ids
):
    base = serve_searcher(make_settings())
    urls = [testbed.page_url(aeb_ids[0]), "http://10.0.0.1/", testbed.page_url(aeb_ids[1])]
    response = post(base, "/v1/fetch", {"urls": urls, "max_chars": 300})
    assert response.status_code == 200, response.text
    results = response.json()["results"]
    assert [r["url"] for r in results] == urls
    assert [r["status"] for r in results] == ["fetched", "skipped", "fetched"]
    assert results[1]["fetch"]["skip_reason"] == "blocked"
    assert all(len(r["content"]) == 300 for r in (results[0], results[2]))
    bad = post(base, "/v1/fetch", {"urls": [urls[0], "ftp://x.org/"]})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "urls.1"
    too_many = post(base, "/v1/fetch", {"urls": [urls[0]] * 21})
    assert too_many.status_code == 422 and too_many.json()["error"]["field"] == "urls"
    both = post(base, "/v1/fetch", {"url": urls[0], "urls": urls})
    assert both.status_code == 422


# --- the parts ---------------------------------------------------------------------------


def test_a_gzip_sitemap_that_expands_past_the_budget_is_refused():
    bomb = gzip.compress(b"\0" * 2_000_000)
    assert len(bomb) < 5_000
    with pytest.raises(SitemapTooLarge):
        gunzipped(bomb, 1_000_000)
    assert gunzipped(gzip.compress(b"<urlset/>"), 1000) == b"<urlset/>"


def test_sitemaps_are_parsed_without_entities():
    laughs = (
        b'<?xml version="1.0"?><!DOCTYPE l [<!ENTITY a "aaaaaaaaaa">'
        b'<!ENTITY b "&a;&a;&a;&a;&a;&a;&a;&a;&a;&a;"><!ENTITY c "&b;&b;&b;&b;&b;&b;&b;&b;">]>'
        b'<urlset xmlns="http://www.sitemaps.org/schemas/sitemap/0.9">'
        b"<url><loc>http://x.org/&c;</loc></url><url><loc>http://x.org/b</loc></url></urlset>"
    )
    parsed = parse_sitemap(laughs)
    assert "http://x.org/b" in parsed.pages
    assert all("aaaa" not in p for p in parsed.pages)
    assert parse_sitemap(b"not xml at all").pages == ()
    index = parse_sitemap(
        b"<sitemapindex><sitemap><loc> http://x.org/s.xml </loc></sitemap></sitemapindex>"
    )
    assert index.sitemaps == ("http://x.org/s.xml",) and index.pages == ()


def test_links_are_resolved_against_base_and_normalised():
    html = (
        b'<html><head><base href="http://x.org/docs/"></head><body>'
        b'<a href="a">a</a><a href="/b#frag">b</a><a href="HTTP://X.ORG:80/b">b again</a>'
        b'<a href="mailto:x@y.z">m</a><a href="javascript:go()">j</a>'
        b'<a href="http://[x/">bad</a></body></html>'
    )
    assert page_links(html, "http://x.org/index.html") == ["http://x.org/docs/a", "http://x.org/b"]
    # A malformed <base> leaves the page's own address as the base.
    bad_base = b'<html><head><base href="http://[x/"></head><body><a href="a">a</a></body></html>'
    assert page_links(bad_base, "http://x.org/d/i.html") == ["http://x.org/d/a"]
    assert normalised_url("https://EX.org:443") == "https://ex.org/"
    assert normalised_url("file:///etc/passwd") is None


def test_nested_counted_repeats_are_counted_through_classes_and_escapes():
    assert repeat_copies("(a{3}){4}") == 12 and repeat_copies("a{50}b{50}") == 50
    assert repeat_copies(r"\{100\}") == 1  # escaped braces repeat nothing
    # A ")" inside a class closes no group: the three levels still multiply.
    assert repeat_copies("((x[)]{100}){100}){100}") == 1_000_000
    assert repeat_copies("[a-z]{1,64}/x{2,}") == 64  # an open end is a loop, not copies
    assert repeat_copies("[a-z]{64}/(x{200})") == 200  # side by side: not multiplied
    assert repeat_copies("((a{100}){100}") == 10_000  # a group left open still counts


def test_scope_keeps_subdomains_and_runs_patterns_with_a_time_limit():
    scope = SiteScope(root_host="ex.org")
    assert scope.admits("http://docs.ex.org/a") and not scope.admits("http://badex.org/a")
    slow = SiteScope(root_host="ex.org", select_paths=compile_patterns([r"^(a+)+$"], "p"))
    assert not slow.admits("http://ex.org/" + "a" * 5000 + "!")  # gives up, does not hang
    with pytest.raises(InvalidRequest) as bad:
        compile_patterns(["ok", "(("], "select_paths")
    assert bad.value.field == "select_paths.1"
