"""Result caches scoped by API key (``cache.scope``), over real HTTP with two real keys:
no exact hit, age or semantic hit (with its query's wording) crosses keys unless the
operator shares the cache."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.conftest import STATIC_MODEL
from tests.test_auth import bearer, create_key
from tests.test_result_cache import backend_calls

QUERY = "Games on Google Stadia, Microsoft xCloud and Apple Arcade"
PARAPHRASE = "google stadia, microsoft xcloud and apple arcade games"
MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}


def two_keys(make_settings, serve_searcher, config_file, **cache: Any) -> tuple[str, str, str]:
    """A searcher with auth on (``cache`` settings merged in) and two keys' secrets."""
    config = config_file()
    base = serve_searcher(make_settings(auth={"enabled": True}, cache=cache))
    return base, create_key(config, "alice"), create_key(config, "bob")


def search(base: str, secret: str, query: str) -> dict[str, Any]:
    answer = httpx.post(
        f"{base}/v1/search", json={"query": query}, headers=bearer(secret), timeout=30
    )
    assert answer.status_code == 200, answer.text
    result: dict[str, Any] = answer.json()
    return result


def test_an_exact_hit_and_its_age_stay_with_the_key_that_asked(
    make_settings, serve_searcher, config_file, testbed_clean
):
    base, alice, bob = two_keys(make_settings, serve_searcher, config_file)
    assert search(base, alice, QUERY)["meta"]["cache"]["hit"] is False
    assert search(base, alice, QUERY)["meta"]["cache"]["kind"] == "exact"  # her own answer
    calls = backend_calls(testbed_clean)
    theirs = search(base, bob, QUERY)  # before: a hit, with age_s telling when she asked
    assert theirs["meta"]["cache"] == {"hit": False, "kind": None, "age_s": None}
    assert backend_calls(testbed_clean) > calls
    assert search(base, bob, QUERY)["meta"]["cache"]["kind"] == "exact"  # now his own


def test_a_shared_cache_serves_every_key_when_the_operator_says_so(
    make_settings, serve_searcher, config_file, testbed_clean
):
    base, alice, bob = two_keys(make_settings, serve_searcher, config_file, scope="shared")
    search(base, alice, QUERY)
    calls = backend_calls(testbed_clean)
    shared = search(base, bob, QUERY)
    assert shared["meta"]["cache"]["hit"] is True and shared["meta"]["cache"]["age_s"] >= 0
    assert backend_calls(testbed_clean) == calls


@pytest.mark.skipif(not STATIC_MODEL.exists(), reason=f"{STATIC_MODEL} is missing")
def test_a_semantic_hit_never_shows_another_keys_wording(
    make_settings, serve_searcher, config_file, testbed_clean
):
    base, alice, bob = two_keys(
        make_settings, serve_searcher, config_file, semantic={"enabled": True}
    )
    search(base, alice, QUERY)
    mine = search(base, alice, PARAPHRASE)  # the semantic cache works within a key
    assert mine["meta"]["cache"]["kind"] == "semantic"
    theirs = search(base, bob, PARAPHRASE)
    assert theirs["meta"]["cache"]["hit"] is False
    assert QUERY not in theirs["rendered_text"]  # before: her wording in his pack


def test_mcp_web_search_over_http_is_scoped_by_its_key_too(
    make_settings, serve_searcher, config_file, testbed_clean
):
    base, alice, bob = two_keys(make_settings, serve_searcher, config_file)

    def call(secret: str) -> None:
        message = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
                   "params": {"name": "web_search", "arguments": {"query": QUERY}}}  # fmt: skip
        answer = httpx.post(f"{base}/mcp", content=json.dumps(message),
                            headers={**MCP_HEADERS, **bearer(secret)}, timeout=30)  # fmt: skip
        assert answer.status_code == 200 and QUERY in answer.text, answer.text

    call(alice)
    calls = backend_calls(testbed_clean)
    call(alice)
    assert backend_calls(testbed_clean) == calls  # her answer, from the cache
    call(bob)
    assert backend_calls(testbed_clean) > calls  # his own search
