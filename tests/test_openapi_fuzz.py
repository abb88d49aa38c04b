"""The OpenAPI document says what the API really accepts: a property-based run over it
(schemathesis, every check) against searcher with the testbed behind it finds no server
error and no mismatch, and hostile inputs the generator does not make get a 422 before
any search runs."""

from __future__ import annotations

import gc
import json
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from searcher.api.app import create_app
from tests.conftest import settings_on_testbed
from tests.ddgs_fake import FakeDDGS
from tests.testbed.chat import script
from tests.testbed.server import ThreadedServer

# Cases per operation and phase: the whole run stays well under two minutes on two cores.
# use_after_free is left out: DELETE /v1/research/{id} cancels a job, which stays readable
# (status "cancelled") by design, where the check expects a deleted resource to be gone.
MAX_EXAMPLES = 8
# Above the default request deadline (budget.max_total_time_ms, 12 s): nothing may take
# longer than its deadline, whatever the input.
MAX_RESPONSE_S = 30


def _searcher(make_settings, serve_searcher, testbed) -> str:
    rows = [{"title": "A page", "href": testbed.url("/pages/none"), "body": "cloud gaming"}]
    # An LLM (the testbed's scripted one), so that the chat models answer rather than
    # refuse with 503 (a server error to the fuzzer); research jobs kept short.
    settings = make_settings(
        backends={"duckduckgo": {"enabled": True}},
        llm={"base_url": testbed.llm_url(), "model": script(reply="A page says so [1].")},
        research={"max_total_time_ms": 5000},
    )
    return serve_searcher(settings, ddgs=FakeDDGS(rows=rows))


@pytest.fixture
def leftovers_collected() -> Iterator[None]:
    """Garbage collected when the test's servers have stopped (this fixture is torn down
    after them), so that what the run left behind is met under this test's filters."""
    yield
    gc.collect()


# Known and left (see the session notes): after this run the stopped searcher sometimes
# leaves one idle httpx connection to the testbed open (anyio's, `reading=False`), which
# uvloop reports when its loop closes or the collector frees it. It is collected here,
# under this filter, instead of failing whichever test the collector happens to run in.
@pytest.mark.filterwarnings("ignore:unclosed resource <TCPTransport:ResourceWarning")
def test_schemathesis_finds_no_server_error_and_no_mismatch(
    leftovers_collected, make_settings, serve_searcher, testbed, tmp_path: Path
) -> None:
    base = _searcher(make_settings, serve_searcher, testbed)
    assert base.startswith("http://127.0.0.1:")
    # A chat answer shaped by a generated JSON Schema, which the scripted LLM cannot meet,
    # is the documented 502 (structured_output_failed): the LLM failed, not searcher.
    (tmp_path / "schemathesis.toml").write_text(
        '[[operations]]\ninclude-path = "/v1/chat/completions"\n'
        'checks.not_a_server_error.expected-statuses = ["2xx", "3xx", "4xx", "502"]\n'
    )
    result = subprocess.run(
        [sys.executable, "-m", "schemathesis.cli", "run", f"{base}/openapi.json",
         "--checks", "all", "--exclude-checks", "use_after_free",
         "--max-examples", str(MAX_EXAMPLES), "--workers", "1",
         "--seed", "10", "--max-response-time", str(MAX_RESPONSE_S),
         "--request-timeout", str(MAX_RESPONSE_S + 10), "--no-color"],
        cwd=tmp_path, capture_output=True, text=True, timeout=600,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout[-20_000:] + result.stderr[-5_000:]


HOSTILE = [
    ({"query": "x", "budget": {"max_context_chars": 2**70}}, "budget.max_context_chars"),
    ({"query": "x", "budget": {"max_total_time_ms": 2**64}}, "budget.max_total_time_ms"),
    ({"query": "x", "constraints": {"pick_ids": [0, 2**64]}}, "constraints.pick_ids.1"),
    ({"query": "x", "context_hint": {"a": [1, 2**64]}}, "context_hint.a.1"),
    ({"query": "x", "context_hint": {"a": {"b": 2**53}}}, "context_hint.a.b"),
    ({"query": "x", "budget": {"max_total_time_ms": 0}}, "budget.max_total_time_ms"),
    ({"query": "x", "budget": {"max_total_time_ms": 99}}, "budget.max_total_time_ms"),
    ({"query": "x", "budget": {"per_request_timeout_ms": {"search": 0}}},
     "budget.per_request_timeout_ms.search"),
    ({"query": "\ud800"}, "query"),
    ({"query": {"text": "x\udfff"}}, "query.text"),
    ({"query": "x", "constraints": {"engines": ["a\ud800"]}}, "constraints.engines.0"),
    ({"query": "x", "context_hint": {"k\ud800": 1}}, "context_hint"),
    ({"query": "x", "want": {"items": "yes"}}, "want.items"),
    ({"query": "x", "budget": {"max_results": "5"}}, "budget.max_results"),
]  # fmt: skip


def _nested(depth: int) -> dict:
    node: dict = {}
    for _ in range(depth):
        node = {"a": node}
    return node


@pytest.fixture(scope="module")
def searcher_base(testbed, tmp_path_factory) -> Iterator[str]:
    """One searcher for the module's refusal tests: what they send is refused before any
    search runs, so nothing one of them does changes what another sees."""
    home = tmp_path_factory.mktemp("refusals")
    settings = settings_on_testbed(testbed, home, backends={"duckduckgo": {"enabled": True}})
    rows = [{"title": "A page", "href": testbed.url("/pages/none"), "body": "cloud gaming"}]
    app = create_app(settings, ddgs_factory=FakeDDGS(rows=rows).factory)
    server = ThreadedServer(app, lifespan="on").start()
    yield server.base_url
    server.stop()


def _post(base: str, path: str, content: bytes) -> httpx.Response:
    headers = {"content-type": "application/json"}
    return httpx.post(f"{base}{path}", content=content, headers=headers, timeout=30)


@pytest.mark.parametrize(("body", "field"), HOSTILE, ids=[f for _, f in HOSTILE])
def test_hostile_values_are_a_422_naming_the_field(
    searcher_base, testbed_clean, body, field
) -> None:
    # json.dumps writes lone surrogates as \ud800 escapes, as a hostile client would.
    response = _post(searcher_base, "/v1/search", json.dumps(body).encode())
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == field
    # Refused before the search ran: no backend was asked.
    assert not [r for r in testbed_clean.log if "/searxng" in r.path]


@pytest.mark.parametrize(
    ("content", "field"),
    [
        (b'{"query": "x", "context_hint": {"n": NaN}}', "context_hint.n"),
        (b'{"query": "x", "context_hint": {"n": -Infinity}}', "context_hint.n"),
        (b'{"query": "x", "context_hint": {"n": 1e999}}', "context_hint.n"),
        (json.dumps({"query": "x", "context_hint": _nested(300)}).encode(), "context_hint"),
        (b"[" * 30_000 + b"]" * 30_000, "body"),
        (b'{"query": "caf\xe9"}', "body"),
        (b'{"query": "x"', "body"),
    ],
    ids=["NaN", "-Infinity", "1e999", "300 deep", "30000 deep", "latin-1", "truncated"],
)
def test_unparseable_or_uncarriable_bodies_are_a_422(searcher_base, content, field) -> None:
    response = _post(searcher_base, "/v1/search", content)
    assert response.status_code == 422, response.text
    assert response.json()["error"]["field"] == field


def test_other_bodies_are_checked_the_same_way(searcher_base) -> None:
    for path, body, field in [
        ("/v1/fetch", {"url": "http://x.test/", "start_char": 2**64}, "start_char"),
        ("/openwebui/search", {"query": "x", "count": 2**64}, "count"),
        ("/v1/fetch", {"url": "http://x.test/\ud800"}, "url"),
    ]:
        response = _post(searcher_base, path, json.dumps(body).encode())
        assert response.status_code == 422, (path, response.text)
        assert response.json()["error"]["field"] == field
    tavily = _post(searcher_base, "/tavily/search", b'{"query": "x", "days": 1e999}')
    assert tavily.status_code == 400 and tavily.json()["detail"]["field"] == "days"


def test_get_mcp_answers_at_once_with_405_and_allow(searcher_base) -> None:
    response = httpx.get(f"{searcher_base}/mcp", timeout=10)
    assert response.status_code == 405
    assert response.headers["allow"] == "POST"


def test_405_lists_every_method_of_the_path(searcher_base) -> None:
    response = httpx.request("DELETE", f"{searcher_base}/search", timeout=10)
    assert response.status_code == 405
    assert set(response.headers["allow"].split(", ")) >= {"GET", "POST"}
