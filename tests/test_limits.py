"""Server limits (``limits.*``): a request's budget cannot raise what the server spends.

The pure clamp first, then over HTTP: /v1/search with a 200 MB / 90 s budget, the page
count of /tavily/extract and /openwebui/loader, and strict mode's 422.
"""

import httpx
import pytest

from searcher.config import LimitsSettings, Settings, load_settings
from searcher.contract import Budget
from searcher.errors import ConfigError, InvalidRequest
from searcher.pipeline.limits import clamp_budget, pages_within_limit
from tests.testbed.searxng import MISBEHAVING_PATHS

# --- the clamp, as a function -------------------------------------------------------------


def test_fields_above_their_ceiling_are_lowered_and_each_is_reported():
    budget = Budget(
        max_download_bytes_per_page=200_000_000,
        max_total_time_ms=90_000,
        max_results=7,
        per_request_timeout_ms={"fetch": 90_000, "search": 500},
    )
    clamped, notes = clamp_budget(budget, LimitsSettings())
    assert clamped.max_download_bytes_per_page == 10_000_000
    assert clamped.max_total_time_ms == 30_000
    assert clamped.max_results == 7  # within its ceiling: untouched
    assert clamped.per_request_timeout_ms is not None
    assert clamped.per_request_timeout_ms.fetch == 30_000
    assert clamped.per_request_timeout_ms.search == 500
    assert {n.source for n in notes} == {
        "budget.max_download_bytes_per_page",
        "budget.max_total_time_ms",
        "budget.per_request_timeout_ms.fetch",
    }
    assert all(n.stage == "budget" for n in notes)
    bytes_note = next(n for n in notes if n.source.endswith("bytes_per_page"))
    assert "200000000" in bytes_note.reason and "10000000 used" in bytes_note.reason


def test_a_budget_within_the_ceilings_is_returned_as_it_is():
    budget = Budget(max_results=3)
    clamped, notes = clamp_budget(budget, LimitsSettings())
    assert clamped is budget and notes == []


def test_strict_limits_refuse_naming_the_field():
    with pytest.raises(InvalidRequest) as refused:
        clamp_budget(Budget(max_context_chars=500_000), LimitsSettings(strict=True))
    assert refused.value.field == "budget.max_context_chars"
    assert "100000" in refused.value.message


def test_pages_beyond_the_ceiling_are_split_off_or_refused_when_strict():
    urls = [f"http://e.example/{i}" for i in range(5)]
    read, beyond = pages_within_limit(urls, LimitsSettings(max_fetch_pages=3))
    assert read == urls[:3] and beyond == urls[3:]
    with pytest.raises(InvalidRequest) as refused:
        pages_within_limit(urls, LimitsSettings(max_fetch_pages=3, strict=True))
    assert refused.value.field == "urls"


# --- configuration ------------------------------------------------------------------------


def test_a_configured_default_above_its_ceiling_is_a_config_error(tmp_path):
    path = tmp_path / "searcher.yaml"
    path.write_text("budget: {max_download_bytes_per_page: 50000000}\n")
    with pytest.raises(ConfigError) as bad:
        load_settings(path, environ={})
    assert "budget.max_download_bytes_per_page=50000000" in str(bad.value)
    assert "limits.max_download_bytes_per_page=10000000" in str(bad.value)
    path.write_text("budget: {fetch_timeout_ms: 40000}\n")
    with pytest.raises(ConfigError, match=r"limits\.max_total_time_ms"):
        load_settings(path, environ={})


# --- over HTTP ----------------------------------------------------------------------------

SMALL_LIMITS = {
    "max_download_bytes_per_page": 300_000,
    "max_total_time_ms": 8000,
}
# Defaults may not exceed the ceilings.
SMALL_DEFAULTS = {
    "max_download_bytes_per_page": 200_000,
    "max_total_time_ms": 8000,
    "search_timeout_ms": 8000,
    "fetch_timeout_ms": 8000,
}
GREEDY_BUDGET = {
    "max_results": 20,
    "max_fetch_pages": 20,
    "max_download_bytes_per_page": 200_000_000,
    "max_total_time_ms": 90_000,
    "per_request_timeout_ms": {"fetch": 90_000},
}


def _limited(make_settings, testbed, **limits):
    return make_settings(
        backends={"searxng": {"base_url": testbed.searxng_url("mixed")}},
        scoring={"min_keyword_overlap": 0},  # keep the misbehaving results
        budget=SMALL_DEFAULTS,
        limits={**SMALL_LIMITS, **limits},
    )


def _search(base, budget, timeout=30.0):
    body = {"query": "Stadia xCloud games", "constraints": {"search_mode": "full"}}
    return httpx.post(f"{base}/v1/search", json={**body, "budget": budget}, timeout=timeout)


def test_a_200_mb_90_s_budget_is_held_to_the_server_limits(
    make_settings, serve_searcher, testbed_clean
):
    base = serve_searcher(_limited(make_settings, testbed_clean))
    # The client gives up long before 90 s: an answer at all shows the deadline was cut.
    response = _search(base, GREEDY_BUDGET, timeout=30.0)
    assert response.status_code == 200, response.text
    data = response.json()
    noted = {e["source"]: e["reason"] for e in data["meta"]["errors"] if e["stage"] == "budget"}
    assert set(noted) == {
        "budget.max_download_bytes_per_page",
        "budget.max_total_time_ms",
        "budget.per_request_timeout_ms.fetch",
    }
    assert "300000 used" in noted["budget.max_download_bytes_per_page"]
    assert "8000 used" in noted["budget.max_total_time_ms"]
    by_path = {i["url"].split(str(testbed_clean.port), 1)[1]: i["fetch"] for i in data["items"]}
    assert {"/huge", "/hang"} <= set(by_path) <= {*MISBEHAVING_PATHS, *by_path}
    # /huge serves 50 MB: the read stopped at the ceiling (within the network read that
    # crossed it), not at the 200 MB asked for.
    huge = by_path["/huge"]
    assert huge["truncated"] is True and 0 < huge["downloaded_bytes"] <= 300_000 + 128 * 1024
    # /hang never answers: it was given up at the clamped deadline, not held for 90 s.
    assert by_path["/hang"]["status"] == "skipped"
    # The testbed saw the request for /huge (it was read, only bounded).
    assert any(e.path == "/huge" for e in testbed_clean.log)


def test_strict_limits_refuse_the_greedy_budget_with_422(
    make_settings, serve_searcher, testbed_clean
):
    base = serve_searcher(_limited(make_settings, testbed_clean, strict=True))
    response = _search(base, GREEDY_BUDGET)
    assert response.status_code == 422
    error = response.json()["error"]
    assert error["field"] == "budget.max_download_bytes_per_page"
    assert "limits.max_download_bytes_per_page" in error["message"]
    assert not [e for e in testbed_clean.log if e.path.startswith("/pages/")]  # nothing read
    within = _search(base, {"max_results": 2, "max_fetch_pages": 1})
    assert within.status_code == 200 and not [
        e for e in within.json()["meta"]["errors"] if e["stage"] == "budget"
    ]


def _page_limited(make_settings, strict=False):
    return make_settings(
        budget={"max_fetch_pages": 2}, limits={"max_fetch_pages": 2, "strict": strict}
    )


def test_extract_reads_at_most_max_fetch_pages_and_says_so(
    make_settings, serve_searcher, testbed_clean, aeb_ids
):
    base = serve_searcher(_page_limited(make_settings))
    urls = [testbed_clean.page_url(pid) for pid in aeb_ids[:3]]
    data = httpx.post(f"{base}/tavily/extract", json={"urls": urls}, timeout=30).json()
    assert [r["url"] for r in data["results"]] == urls[:2]
    assert data["failed_results"] == [
        {"url": urls[2], "error": "budget: beyond limits.max_fetch_pages"}
    ]
    read = {e.path for e in testbed_clean.log if e.path.startswith("/pages/")}
    assert read == {f"/pages/{pid}" for pid in aeb_ids[:2]}


def test_strict_page_limit_refuses_extract_and_loader_naming_urls(
    make_settings, serve_searcher, testbed_clean, aeb_ids
):
    base = serve_searcher(_page_limited(make_settings, strict=True))
    urls = [testbed_clean.page_url(pid) for pid in aeb_ids[:3]]
    extract = httpx.post(f"{base}/tavily/extract", json={"urls": urls}, timeout=30)
    assert extract.status_code == 400 and extract.json()["detail"]["field"] == "urls"
    loader = httpx.post(f"{base}/openwebui/loader", json={"urls": urls}, timeout=30)
    assert loader.status_code == 422 and loader.json()["error"]["field"] == "urls"
    assert not [e for e in testbed_clean.log if e.path.startswith("/pages/")]


def test_open_webui_count_is_a_suggestion_held_to_max_results(
    make_settings, serve_searcher, testbed_clean
):
    settings = make_settings(limits={"max_results": 6, "strict": True})
    base = serve_searcher(settings)
    response = httpx.post(
        f"{base}/openwebui/search", json={"query": "Stadia xCloud games", "count": 40}, timeout=30
    )
    assert response.status_code == 200, response.text
    assert 0 < len(response.json()) <= 6


def test_the_default_budget_is_within_the_default_limits():
    # Every default ceiling is at least its default budget value.
    Settings()
