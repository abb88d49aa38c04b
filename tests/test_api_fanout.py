"""Issue 3 end to end: fan-out and fusion with provenance, near-duplicates, routing,
hedging, chunks_per_source and blocked pages — through /v1/search over real HTTP."""

import httpx

from tests.ddgs_fake import FakeDDGS


def post(base, body, timeout=30.0):
    return httpx.post(f"{base}/v1/search", json=body, timeout=timeout)


def test_a_backend_list_fans_out_and_fuses_with_provenance(
    make_settings, serve_searcher, matching_query
):
    base = serve_searcher(make_settings(scoring={"min_keyword_overlap": 0}))
    body = {"query": matching_query, "constraints": {"backend": ["searxng", "brave"]},
            "budget": {"max_results": 10}}  # fmt: skip
    data = post(base, body).json()
    assert data["meta"]["backend_used"] == "searxng+brave"
    assert data["meta"]["backends_tried"] == ["searxng", "brave"]
    items = data["items"]
    assert len(items) == 10 and len({i["url"] for i in items}) == 10
    # The testbed's SearXNG and Brave index the same pages: fused items carry both.
    both = [i for i in items if {p["backend"] for p in i["provenance"]} == {"searxng", "brave"}]
    assert len(both) >= 5
    for item in items:
        assert item["score"]["method"] == "rrf+heuristics"
        assert 0 <= item["score"]["relevance"] <= 1
        assert all(p["rank"] >= 1 for p in item["provenance"])
    # Same inputs, same output: fusion is deterministic (computed again, not cached).
    body["constraints"]["cache"] = "off"
    again = post(base, body).json()
    assert again["meta"]["cache"]["hit"] is False
    assert [i["url"] for i in again["items"]] == [i["url"] for i in items]


def test_a_backend_list_that_all_fails_asks_no_other_backend(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    settings = make_settings(
        backends={"brave": {"base_url": testbed_clean.brave_url("status/500"),
                            "api_key": "test-key"}},
        budget={"max_search_retries": 0},
    )  # fmt: skip
    base = serve_searcher(settings)
    body = {"query": matching_query, "constraints": {"backend": ["brave"], "cache": "off"}}
    response = post(base, body)
    assert response.status_code == 502, response.text
    assert "brave" in response.json()["error"]["message"]
    assert not [e for e in testbed_clean.log if e.path.startswith("/searxng")]
    # Left to the policy, the others do stand in.
    auto = post(base, {"query": matching_query, "constraints": {"cache": "off"}}).json()
    assert auto["items"] and "searxng" in auto["meta"]["backends_tried"]


def test_keyword_filter_drops_weak_matches_and_shows_components(
    make_settings, serve_searcher, matching_query
):
    body = {"query": matching_query, "budget": {"max_results": 10}}
    unfiltered = post(serve_searcher(make_settings(scoring={"min_keyword_overlap": 0})), body)
    filtered = post(serve_searcher(make_settings(scoring={"min_keyword_overlap": 0.3})), body)
    every, strong = unfiltered.json()["items"], filtered.json()["items"]
    assert 0 < len(strong) < len(every)
    for item in strong:
        components = item["score"]["components"]
        assert components["keyword_overlap"] >= 0.3
        assert set(components) >= {"fusion", "premium_domain", "trusted_domain", "category",
                                   "multi_engine", "keyword_overlap"}  # fmt: skip
    weak = {i["url"] for i in every} - {i["url"] for i in strong}
    assert all(i["score"]["components"]["keyword_overlap"] < 0.3 for i in every if i["url"] in weak)


def test_fan_out_with_a_failing_backend_returns_partial_results(
    make_settings, serve_searcher, testbed, matching_query
):
    settings = make_settings(
        backends={"auto": "fanout", "searxng": {"base_url": testbed.searxng_url("status/500")}},
        budget={"max_search_retries": 0},
    )
    data = post(serve_searcher(settings), {"query": matching_query}).json()
    assert data["meta"]["backend_used"] == "brave" and data["items"]
    failed = {"stage": "search", "source": "searxng", "reason": "HTTP 500", "kind": "http_status"}
    assert failed in data["meta"]["errors"]


def test_intent_sets_choose_the_fan_out(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    settings = make_settings(
        backends={"intents": {"fresh_data": {"backends": ["brave"], "weights": {"brave": 1.5}}}}
    )
    base = serve_searcher(settings)
    data = post(base, {"query": matching_query, "intent": "fresh_data"}).json()
    assert data["meta"]["backend_used"] == "brave"
    assert not [e for e in testbed_clean.log if e.path.startswith("/searxng")]


def test_an_intents_instance_that_cannot_be_used_is_named(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    settings = make_settings(
        backends={
            "instances": {"sx-off": {"adapter": "searxng", "enabled": False}},
            "intents": {"background": {"backends": ["brave", "sx-off"]}},
        }
    )
    data = post(serve_searcher(settings), {"query": matching_query, "intent": "background"})
    assert data.json()["meta"]["backend_used"] == "brave"
    assert {
        "stage": "plan",
        "source": "sx-off",
        "reason": "not enabled or not configured (intent background)",
        "kind": None,
    } in data.json()["meta"]["errors"]


def test_near_duplicates_are_merged_keeping_the_better_ranked(
    make_settings, serve_searcher, testbed, aeb_ids
):
    snippet = "Google Stadia, Microsoft xCloud and Apple Arcade: so many ways to play and pay."
    title = "Cloud gaming services compared"
    hike = "What to pack for a day hike with small children."
    rows = [
        {"title": title, "href": testbed.page_url(aeb_ids[0]), "body": snippet},
        {
            "title": "Unrelated: hiking survival kit",
            "href": testbed.page_url(aeb_ids[1]),
            "body": hike,
        },
        {"title": title, "href": testbed.page_url(aeb_ids[2]) + "?copy=1", "body": snippet},
    ]
    fake = FakeDDGS(rows=rows)
    settings = make_settings(backends={"order": ["duckduckgo"], "duckduckgo": {"enabled": True}},
                             scoring={"min_keyword_overlap": 0})  # fmt: skip
    data = post(serve_searcher(settings, ddgs=fake), {"query": "cloud gaming"}).json()
    urls = [i["url"] for i in data["items"]]
    assert testbed.page_url(aeb_ids[0]) in urls and testbed.page_url(aeb_ids[1]) in urls
    assert testbed.page_url(aeb_ids[2]) + "?copy=1" not in urls
    merged = next(i for i in data["items"] if i["url"] == testbed.page_url(aeb_ids[0]))
    assert sorted(p["rank"] for p in merged["provenance"]) == [1, 3]


def test_routing_picks_the_engine_group_and_tells_why(make_settings, serve_searcher, testbed_clean):
    base = serve_searcher(make_settings())
    data = post(base, {"query": "literature review of sleep and memory"}).json()
    assert data["meta"]["route"]["group"] == "academic"
    assert "literature" in data["meta"]["route"]["pattern"]
    (logged,) = [e for e in testbed_clean.log if e.path.startswith("/searxng")][:1]
    assert logged.query["categories"] == "science" and "arxiv" in logged.query["engines"]
    testbed_clean.reset()
    explicit = {"query": "literature review", "constraints": {"engines": ["wikipedia"]}}
    post(base, explicit)
    (logged,) = [e for e in testbed_clean.log if e.path.startswith("/searxng")][:1]
    assert logged.query["engines"] == "wikipedia"  # the request's choice beats the route
    assert "categories" not in logged.query
    # Categories named alone come without the group's engines (SearXNG would ask both),
    # and list entries are cleaned as the comma form is.
    testbed_clean.reset()
    news = {"query": "literature review", "constraints": {"categories": [" news ", ""]}}
    post(base, news)
    (logged,) = [e for e in testbed_clean.log if e.path.startswith("/searxng")][:1]
    assert logged.query["categories"] == "news" and "engines" not in logged.query


def test_hedged_request_is_reported(make_settings, serve_searcher, testbed, matching_query):
    settings = make_settings(
        backends={"searxng": {"base_url": testbed.searxng_url("slow/3000")}, "hedge_delay_ms": 100}
    )
    data = post(serve_searcher(settings), {"query": matching_query}).json()
    # SearXNG's attempt was in flight: it runs on to its own timeout, counted by its breaker.
    assert data["meta"]["hedged"] == {
        "started": ["searxng", "brave"], "winner": "brave", "cancelled": [],
        "background": ["searxng"],
    }  # fmt: skip
    assert data["meta"]["backend_used"] == "brave" and data["meta"]["timing_ms"]["search"] < 2000


def test_chunks_per_source_fetches_in_simple_mode(make_settings, serve_searcher, matching_query):
    base = serve_searcher(make_settings())
    body = {"query": matching_query, "constraints": {"chunks_per_source": 2},
            "budget": {"max_results": 3, "max_fetch_pages": 3}}  # fmt: skip
    data = post(base, body).json()
    assert data["meta"]["mode_used"] == "simple"
    fetched = [i for i in data["items"] if i["fetch"]["status"] == "fetched"]
    assert fetched
    for item in fetched:
        assert 1 <= len(item["chunks"]) <= 2 and all(len(c) <= 500 for c in item["chunks"])
        assert item["content"] is None
    # The pack carries the chunks as the item's content (whitespace aside).
    pack_words = " ".join(data["rendered_text"].split())
    first_words = " ".join(fetched[0]["chunks"][0].split()[:6])
    assert first_words in pack_words
    assert "Content:" in data["rendered_text"]


def test_blocked_pages_never_enter_the_pack(make_settings, serve_searcher, testbed, aeb_ids):
    rows = [
        {"title": "A real article", "href": testbed.page_url(aeb_ids[0]), "body": "news"},
        {"title": "Behind a bot wall", "href": testbed.url("/blocked/cloudflare"), "body": "news"},
        {"title": "A captcha", "href": testbed.url("/blocked/captcha"), "body": "news"},
    ]
    settings = make_settings(backends={"order": ["duckduckgo"], "duckduckgo": {"enabled": True}},
                             scoring={"min_keyword_overlap": 0})  # fmt: skip
    base = serve_searcher(settings, ddgs=FakeDDGS(rows=rows))
    body = {
        "query": "news",
        "constraints": {"search_mode": "full"},
        "budget": {"max_fetch_pages": 3},
    }
    data = post(base, body).json()
    by_title = {i["title"]: i for i in data["items"]}
    assert by_title["A real article"]["fetch"]["status"] == "fetched"
    for title in ("Behind a bot wall", "A captcha"):
        fetch = by_title[title]["fetch"]
        assert (fetch["status"], fetch["skip_reason"]) == ("failed", "blocked")
        assert by_title[title]["content"] is None
    assert data["rendered_text"].count("Content:") == 1


def test_embedder_off_by_choice_is_quiet_and_broken_is_reported(
    make_settings, serve_searcher, matching_query, tmp_path
):
    quiet = serve_searcher(make_settings(embeddings={"provider": "none"}))
    data = post(quiet, {"query": matching_query}).json()
    assert not [e for e in data["meta"]["errors"] if e["stage"] == "dedup"]
    broken = serve_searcher(make_settings(embeddings={"model": str(tmp_path / "no-such-model")}))
    data = post(broken, {"query": matching_query}).json()
    # Said once, in /v1/health (and the log), not in every response.
    assert not [e for e in data["meta"]["errors"] if e["stage"] == "dedup"]
    health = httpx.get(f"{broken}/v1/health").json()
    embedder = health["embedder"]
    assert embedder["name"] is None and embedder["state"] == "failed"
    assert "near-duplicate removal is off" in embedder["problem"]
    assert "no-such-model" in embedder["problem"] and "embeddings.model" in embedder["problem"]
