"""The defaults of issue 28 over real HTTP: one backend keeps its own order when nothing
else tells results apart, and a small full-mode pack gives its budget to the evidence."""

from __future__ import annotations

import re

import httpx

from searcher.config import ScoringSettings


def post(base: str, body: dict, timeout: float = 60.0) -> dict:
    response = httpx.post(f"{base}/v1/search", json=body, timeout=timeout)
    assert response.status_code == 200, response.text
    return response.json()


def test_one_backend_keeps_its_order_when_relevance_is_flat(make_settings, serve_searcher, testbed):
    # A real SearXNG's answer (engines as a set, positions in arrival order, best first by
    # its score); the query matches no word of any result and there is no embedder, so
    # only the backend's order can tell the results apart. Per-engine RRF (the default
    # before issue 28) re-ordered it.
    url = testbed.searxng_url("fixed/20")
    settings = make_settings(
        backends={"order": ["searxng"], "searxng": {"base_url": url}, "brave": {"enabled": False}},
        embeddings={"provider": "none"},
        fusion={"method": "searxng"},
        # The shipped heuristics and hybrid share; keyword and bonus off, as dev chose
        # them for this method (bench/fusion_defaults.py).
        scoring={"hybrid_share": ScoringSettings().hybrid_share, "keyword_weight": 0,
                 "multi_engine_bonus": 0},
    )  # fmt: skip
    base = serve_searcher(settings)
    query = "qqzx vvkw"
    answer = httpx.get(f"{url}/search", params={"q": query, "format": "json"}).json()
    data = post(base, {"query": query, "budget": {"max_results": 20}})
    got = [item["url"] for item in data["items"]]
    assert len(got) >= 15
    assert got == [r["url"] for r in answer["results"] if r["url"] in set(got)]


def test_a_small_full_mode_pack_gives_its_budget_to_the_passages(
    make_settings, serve_searcher, matching_query
):
    # Five pages read, 2,000 characters: their title, URL and snippet lines alone would
    # take most of it (before issue 28 they did, and the passages got the scraps).
    # Generous extraction time: a loaded machine must not leave pages unread here.
    base = serve_searcher(make_settings(fetch={"extract_timeout_s": 60}))
    body = {
        "query": matching_query,
        "constraints": {"search_mode": "full"},
        "budget": {"max_results": 5, "max_fetch_pages": 5, "max_context_chars": 2000,
                   "max_total_time_ms": 60_000, "per_request_timeout_ms": {"fetch": 30_000}},
    }  # fmt: skip
    data = post(base, body)
    read = [i for i in data["items"] if i["content"]]
    assert len(read) >= 3
    pack = data["rendered_text"]
    assert len(pack) <= 2000
    given = data["meta"]["passages"]
    assert sum(p["chars"] for p in given) >= 600
    # Every page that gave a passage is listed, with its passage under it.
    for entry in given:
        if entry["passages"]:
            assert f"   URL: {entry['url']}\n" in pack
    content = " ".join(ln for ln in pack.split("\n") if ln.startswith("     ")).lower()
    assert sum(content.count(w) for w in ("stadia", "xcloud", "arcade")) >= 3
    # Results listed at all are numbered by their rank.
    numbers = [int(n) for n in re.findall(r"^(\d+)\. Title:", pack, re.M)]
    assert numbers == sorted(numbers) and numbers
