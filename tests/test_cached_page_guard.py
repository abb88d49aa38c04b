"""A page from the extraction cache is held to the fetch guard of now, over real HTTP: a
page read under a configuration that allowed it (``fetch.allowed_hosts``) is ``blocked``
after a restart with one that does not, redirects included."""

from __future__ import annotations

from typing import Any

import httpx

from tests.testbed.corpus import corpus


def fetch(base: str, url: str) -> dict[str, Any]:
    answer = httpx.post(f"{base}/v1/fetch", json={"url": url}, timeout=30)
    assert answer.status_code == 200, answer.text
    page: dict[str, Any] = answer.json()
    return page


def serve(make_settings, serve_searcher, allowed: list[str]) -> str:
    """A searcher over the test's one page cache, allowing ``allowed`` past the guard
    (each call: another server, as after a restart with a new configuration)."""
    return serve_searcher(make_settings(fetch={"allowed_hosts": allowed, "extract_workers": 1}))


def test_a_cached_page_the_guard_now_refuses_is_blocked(
    make_settings, serve_searcher, testbed_clean
):
    url = testbed_clean.page_url(corpus().first_id)
    loopback = f"127.0.0.1:{testbed_clean.port}"
    before = serve(make_settings, serve_searcher, [loopback])
    assert fetch(before, url)["fetch"]["status"] == "fetched"
    assert fetch(before, url)["fetch"]["cached"] is True  # in the page cache now

    after = serve(make_settings, serve_searcher, [])  # loopback no longer allowed
    refused = fetch(after, url)["fetch"]  # before: "fetched", cached, from loopback
    assert refused["status"] == "skipped" and refused["skip_reason"] == "blocked"
    assert refused["cached"] is False

    again = serve(make_settings, serve_searcher, [loopback])  # allowed once more: a hit
    assert fetch(again, url)["fetch"]["cached"] is True


def test_a_cached_page_whose_redirect_the_guard_now_refuses_is_blocked(
    make_settings, serve_searcher, testbed_clean
):
    port = testbed_clean.port
    target = f"http://127.0.0.1:{port}/pages/{corpus().first_id}"
    start = f"http://localhost:{port}/redirect-to?url={target}"
    before = serve(make_settings, serve_searcher, [f"localhost:{port}", f"127.0.0.1:{port}"])
    assert fetch(before, start)["fetch"]["status"] == "fetched"
    assert fetch(before, start)["fetch"]["cached"] is True

    # The first host is still allowed, the one it redirected to is not: a fetch would be
    # refused at the redirect, and so is the cached page (its entry keeps every hop).
    after = serve(make_settings, serve_searcher, [f"localhost:{port}"])
    refused = fetch(after, start)["fetch"]
    assert refused["status"] == "skipped" and refused["skip_reason"] == "blocked"
    assert fetch(after, target)["fetch"]["skip_reason"] == "blocked"
