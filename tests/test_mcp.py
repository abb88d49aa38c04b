"""The MCP server through the SDK's own client, over both transports: stdio (``python -m
searcher mcp`` as a subprocess) and streamable HTTP (``/mcp`` on searcher's app)."""

import asyncio
import concurrent.futures
import contextlib
import json
import os
import subprocess
import sys
import threading
import uuid
from collections.abc import AsyncIterator, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from mcp import Client, StdioServerParameters
from mcp.shared.exceptions import MCPError

from searcher.config import Settings
from searcher.fetch.urls import page_key
from searcher.tools.mcp_server import cap_text, capped_items, capped_lists
from searcher.tools.specs import openai_tools
from tests.conftest import settings_on_testbed

REPO = Path(__file__).resolve().parents[1]
PRIVATE_URL = "http://10.0.0.1/"  # refused by the guard before any connection is made


class SharedStdioServer:
    """One ``python -m searcher mcp`` process, connected once, for every test of this module
    that uses the default settings: starting the process is most of a stdio test's time.

    The SDK's client lives in one task of its own loop on a thread (its connection must be
    opened and closed in the same task); each test's calls run there and are awaited from
    the test's own loop.
    """

    def __init__(self, parameters: StdioServerParameters) -> None:
        self._loop = asyncio.new_event_loop()
        self._thread = threading.Thread(target=self._loop.run_forever, daemon=True)
        self._thread.start()
        self._connected: concurrent.futures.Future[Client] = concurrent.futures.Future()
        self._stop = asyncio.Event()
        self._holder = asyncio.run_coroutine_threadsafe(self._hold(parameters), self._loop)
        self.client = self._connected.result(timeout=120)

    async def _hold(self, parameters: StdioServerParameters) -> None:
        try:
            async with Client(parameters) as client:
                self._connected.set_result(client)
                await self._stop.wait()
        except BaseException as error:
            if not self._connected.done():
                self._connected.set_exception(error)
            raise

    async def run(self, coroutine: Any) -> Any:
        """``coroutine`` (a call on ``self.client``) run on the client's loop."""
        return await asyncio.wrap_future(asyncio.run_coroutine_threadsafe(coroutine, self._loop))

    def close(self) -> None:
        self._loop.call_soon_threadsafe(self._stop.set)
        self._holder.result(timeout=60)
        self._loop.call_soon_threadsafe(self._loop.stop)
        self._thread.join(timeout=60)
        self._loop.close()


class SharedSession:
    """What ``async with connect(...)`` yields for the shared server: the client's calls,
    run where the client lives."""

    def __init__(self, server: SharedStdioServer) -> None:
        self._server = server

    async def list_tools(self) -> Any:
        return await self._server.run(self._server.client.list_tools())

    async def call_tool(self, name: str, arguments: dict[str, Any], **options: Any) -> Any:
        return await self._server.run(self._server.client.call_tool(name, arguments, **options))


@contextlib.asynccontextmanager
async def connect(server: Any) -> AsyncIterator[Any]:
    """A client of ``server``: the shared stdio process, or a new connection (``Client``)."""
    if isinstance(server, SharedStdioServer):
        yield SharedSession(server)
        return
    async with Client(server) as client:
        yield client


def stdio_parameters(settings: Settings, directory: Path) -> StdioServerParameters:
    config = directory / f"searcher-{len(list(directory.glob('*.yaml')))}.yaml"
    config.write_text(yaml.safe_dump(settings.model_dump(mode="json")))
    return StdioServerParameters(
        command=sys.executable,
        args=["-m", "searcher", "mcp"],
        env={"SEARCHER_CONFIG": str(config)},
        cwd=str(REPO),
    )


@pytest.fixture(scope="module")
def shared_stdio(testbed, tmp_path_factory) -> Iterator[SharedStdioServer]:
    """The stdio server with the default settings (``settings_on_testbed``), one per module."""
    home = tmp_path_factory.mktemp("mcp-stdio")
    server = SharedStdioServer(stdio_parameters(settings_on_testbed(testbed, home), home))
    yield server
    server.close()


@pytest.fixture(params=["stdio", "http"])
def mcp_server(request, make_settings, serve_searcher, tmp_path):
    """``start(**overrides)``: a searcher MCP server with ``make_settings(**overrides)``,
    as what ``connect`` takes (the shared stdio server, a subprocess's parameters, or a
    URL). Without overrides, stdio is the module's one shared process unless the test
    needs its own (``own_process=True``: a handshake of its own)."""

    def start(own_process: bool = False, **overrides):
        settings = make_settings(**overrides)
        if request.param == "http":
            return f"{serve_searcher(settings)}/mcp"
        if not overrides and not own_process:
            return request.getfixturevalue("shared_stdio")
        return stdio_parameters(settings, tmp_path)

    return start


def text_of(result) -> str:
    (block,) = result.content
    return block.text


def long_page(aeb_ground_truth, min_chars: int) -> str:
    """The id of a testbed page whose article text is at least ``min_chars`` long."""
    return next(
        pid for pid, truth in sorted(aeb_ground_truth.items())
        if len(truth["articleBody"]) >= min_chars
    )  # fmt: skip


async def test_tools_listed_with_the_schemas_openai_clients_get(mcp_server):
    async with connect(mcp_server()) as client:
        tools = (await client.list_tools()).tools
    async with Client(mcp_server(own_process=True), mode="legacy") as client:
        instructions = client.instructions
    # What the server tells the agent names every tool it lists (crawl_site was left out).
    assert all(tool.name in instructions for tool in tools), instructions
    expected = {t["function"]["name"]: t["function"] for t in openai_tools(20_000)}
    assert [t.name for t in tools] == ["web_search", "fetch_page", "deep_research", "crawl_site"]
    for tool in tools[:2]:  # deep_research is MCP's alone: too slow for a tool-call loop
        assert tool.input_schema == expected[tool.name]["parameters"]
        assert tool.description == expected[tool.name]["description"]


async def test_web_search_returns_the_pack_and_the_items(
    mcp_server, testbed, matching_query, aeb_titles
):
    async with connect(mcp_server()) as client:
        result = await client.call_tool("web_search", {"query": matching_query, "max_results": 3})
    assert result.is_error is False
    pack = text_of(result)
    assert pack.startswith("[CONTEXT_PACK ucp-1]") and pack.endswith("[/CONTEXT_PACK]")
    assert any(title in pack for title in aeb_titles.values())
    items = result.structured_content["items"]
    assert len(items) == 3 and result.structured_content["omitted"] == 0
    for rank, item in enumerate(items, start=1):
        assert item["url"].startswith(f"{testbed.base_url}/pages/")
        assert item["url"] in pack and item["score"]["rank"] == rank
        assert "content" not in item


async def test_web_search_in_a_session_shows_new_results_before_repeats(mcp_server, matching_query):
    async def urls(client, **arguments):
        result = await client.call_tool(
            "web_search", {"query": matching_query, "max_results": 4, **arguments}
        )
        assert result.is_error is False, text_of(result)
        return [item["url"] for item in result.structured_content["items"]]

    async with connect(mcp_server()) as client:
        plain = await urls(client)
        session = f"mcp-{uuid.uuid4().hex}"  # the stdio server is shared by the module
        assert await urls(client, session_id=session) == plain  # nothing shown yet
        again = await urls(client, session_id=session)
    assert again[0] == plain[0]  # still the best
    assert not set(again[1:]) & set(plain)  # the rest is new to the session


async def test_fetch_page_reads_a_page_in_slices(mcp_server, testbed, aeb_ids, aeb_ground_truth):
    pid = long_page(aeb_ground_truth, 600)
    url = testbed.page_url(pid)
    async with connect(mcp_server()) as client:
        whole = await client.call_tool("fetch_page", {"url": url})
        first = await client.call_tool("fetch_page", {"url": url, "max_chars": 150})
        following = first.structured_content["next_start_char"]
        second = await client.call_tool(
            "fetch_page", {"url": url, "max_chars": 150, "start_char": following}
        )
        beyond = await client.call_tool("fetch_page", {"url": url, "start_char": 10**7})
    assert whole.is_error is False and whole.structured_content["next_start_char"] is None
    text = text_of(whole)
    assert len(text) == whole.structured_content["total_chars"] > 300
    opening = " ".join(aeb_ground_truth[pid]["articleBody"].split()[:3])
    assert opening in " ".join(text.split())

    assert following == 150
    assert text_of(first).startswith(text[:150])
    assert "call fetch_page with start_char=150" in text_of(first)
    assert second.structured_content["start_char"] == 150
    assert text_of(second).startswith(text[150:300])
    assert second.structured_content["fetch"]["cached"] is True  # the same text, from the cache
    assert beyond.is_error is False and text_of(beyond) == (
        f"[no text at start_char={10**7}: the page has {len(text)} characters]"
    )


async def test_fetch_page_reads_whole_number_floats_as_v1_fetch_does(
    mcp_server, testbed, aeb_ground_truth
):
    # JSON Schema's "integer" includes 150.0; /v1/fetch takes it, and so must the tool.
    url = testbed.page_url(long_page(aeb_ground_truth, 600))
    async with connect(mcp_server()) as client:
        whole = await client.call_tool("fetch_page", {"url": url})
        sliced = await client.call_tool(
            "fetch_page", {"url": url, "max_chars": 150.0, "start_char": 10.0}
        )
        too_far = await client.call_tool("fetch_page", {"url": url, "start_char": 2**53})
    assert sliced.is_error is False, text_of(sliced)
    assert sliced.structured_content["start_char"] == 10
    assert sliced.structured_content["next_start_char"] == 160
    assert text_of(sliced).startswith(text_of(whole)[10:160])
    # /v1/fetch's upper bound on start_char (2**53 - 1) holds for the tool too.
    assert too_far.is_error is True
    assert text_of(too_far).startswith("invalid arguments: start_char: ")


async def test_private_address_is_refused_with_a_clear_message(mcp_server, testbed):
    redirect = testbed.url(f"/redirect-to?url={PRIVATE_URL}")
    async with connect(mcp_server()) as client:
        direct = await client.call_tool("fetch_page", {"url": PRIVATE_URL})
        redirected = await client.call_tool("fetch_page", {"url": redirect})
    for result in (direct, redirected):
        assert result.is_error is True
        message = text_of(result)
        assert message.startswith("could not read http")
        assert "(blocked)" in message and "refused: not a public address" in message


async def test_bad_arguments_are_tool_errors_naming_the_field(mcp_server):
    cases = [
        ("web_search", {"query": "   "}, "invalid arguments: query: must not be blank"),
        ("web_search", {"query": "x", "max_results": 500}, "invalid arguments: max_results:"),
        ("web_search", {"query": "x", "mode": "deep"}, "invalid arguments: mode:"),
        ("web_search", {"q": "x"}, "invalid arguments: arguments:"),
        ("fetch_page", {"url": "file:///etc/passwd"}, "invalid arguments: url: must be an http"),
        ("fetch_page", {"url": "http://"}, "invalid arguments: url: must be an http or https URL"),
        ("fetch_page", {"url": "http://a.example", "start_char": -1}, "start_char"),
        ("fetch_page", {"url": "http://xn--/"}, "invalid arguments: url: the host "),
        ("no_such_tool", {}, "unknown tool 'no_such_tool'"),
    ]
    async with connect(mcp_server()) as client:
        results = [await client.call_tool(name, args) for name, args, _ in cases]
    for (_, _, expected), result in zip(cases, results, strict=True):
        assert result.is_error is True
        assert expected in text_of(result)
        assert "Traceback" not in text_of(result)


async def test_every_backend_failing_is_a_tool_error_listing_them(mcp_server, testbed):
    server = mcp_server(
        backends={
            "searxng": {"base_url": testbed.searxng_url("status/500")},
            "brave": {"api_key": "wrong-key"},
        },
        budget={"max_search_retries": 0},
    )
    async with connect(server) as client:
        result = await client.call_tool("web_search", {"query": "anything"})
    assert result.is_error is True
    assert text_of(result) == (
        "web search failed: every backend failed (searxng: HTTP 500; brave: HTTP 401)"
    )


async def test_output_stays_within_max_output_chars(
    mcp_server, testbed, matching_query, aeb_ground_truth
):
    cap = 4000
    pid = long_page(aeb_ground_truth, 3 * cap)
    server = mcp_server(mcp={"max_output_chars": cap}, budget={"max_context_chars": 50_000})
    async with connect(server) as client:
        search = await client.call_tool(
            "web_search", {"query": matching_query, "max_results": 20, "mode": "full"}
        )
        page = await client.call_tool(
            "fetch_page", {"url": testbed.page_url(pid), "max_chars": 50_000}
        )
    assert search.is_error is False and page.is_error is False
    pack, structured = text_of(search), search.structured_content
    assert pack.endswith("[/CONTEXT_PACK]")
    assert len(pack) + len(json.dumps(structured, ensure_ascii=False)) <= cap
    assert structured["items"] and structured["omitted"] > 0  # the leading items, not all

    text = text_of(page)
    assert len(text) + len(json.dumps(page.structured_content)) <= cap
    following = page.structured_content["next_start_char"]
    assert following is not None and page.structured_content["total_chars"] >= 3 * cap
    assert text.startswith(" ".join(aeb_ground_truth[pid]["articleBody"].split()[:1]))
    assert f"call fetch_page with start_char={following} for the rest" in text


def test_cap_text_marks_the_cut_and_says_how_to_get_the_rest():
    text = "x" * 5000
    capped = cap_text(text, 1000, "call again with start_char=900")
    assert len(capped) <= 1000 and capped.startswith("x" * 800)
    assert capped.endswith(
        "[truncated: 5000 characters, first "
        f"{capped.index(chr(10))} shown; call again with start_char=900]"
    )
    assert cap_text("short", 1000, "unused") == "short"


def test_capped_items_keeps_the_leading_items_that_fit():
    items = [{"url": f"http://a.example/{i}", "title": "t" * 100} for i in range(10)]
    capped = capped_items(items, 600)
    assert capped["items"] == items[: len(capped["items"])] and len(capped["items"]) >= 2
    assert capped["omitted"] == 10 - len(capped["items"])
    assert len(json.dumps(capped)) <= 600
    assert capped_items(items, 100) == {"items": [], "omitted": 10}


def test_mcp_over_http_can_be_switched_off(make_settings, serve_searcher, matching_query):
    base = serve_searcher(make_settings(mcp={"http": False}))
    assert httpx.post(f"{base}/mcp", json={}, timeout=10).status_code == 404
    response = httpx.post(f"{base}/v1/search", json={"query": matching_query}, timeout=20)
    assert response.status_code == 200 and response.json()["items"]


async def test_clients_of_the_2025_handshake_get_the_same_tools(
    mcp_server, testbed, matching_query, aeb_ids
):
    # Most MCP clients in the field still open with the initialize handshake.
    async with Client(mcp_server(own_process=True), mode="legacy") as client:
        assert client.protocol_version.startswith("2025-")
        assert client.server_info.name == "searcher"
        search = await client.call_tool("web_search", {"query": matching_query})
        page = await client.call_tool("fetch_page", {"url": testbed.page_url(aeb_ids[0])})
        refused = await client.call_tool("fetch_page", {"url": PRIVATE_URL})
    assert search.is_error is False and text_of(search).startswith("[CONTEXT_PACK ucp-1]")
    assert search.structured_content["items"][0]["url"].startswith(testbed.base_url)
    assert page.is_error is False and page.structured_content["status"] == "fetched"
    assert refused.is_error is True and "(blocked)" in text_of(refused)


async def test_deep_research_reports_with_sources_and_progress(mcp_server, testbed):
    progress: list[tuple[float, str | None]] = []

    async def on_progress(done: float, total: float | None, message: str | None) -> None:
        progress.append((done, message))

    arguments = {"query": "Google Stadia Microsoft xCloud cloud gaming", "preset": "minimal"}
    async with connect(mcp_server()) as client:
        result = await client.call_tool("deep_research", arguments, progress_callback=on_progress)
        bad = await client.call_tool("deep_research", {"query": "x", "preset": "huge"})
    assert result.is_error is False
    text = text_of(result)
    assert text.startswith("# Evidence for:") and "## Sources" in text
    sources = result.structured_content["sources"]
    assert sources and all(s["url"].startswith(testbed.base_url) for s in sources)
    assert f"[{sources[0]['n']}]" in text
    assert result.structured_content["verification_status"]
    # Every event of the job arrived as a progress notification, in order.
    assert [done for done, _ in progress] == list(range(1, len(progress) + 1))
    assert progress[0][1].startswith("plan:") and progress[-1][1].startswith("done:")
    assert any(message.startswith("draft:") for _, message in progress)
    assert bad.is_error and "preset" in text_of(bad)


async def test_deep_research_in_a_session_adds_its_sources_to_it(mcp_server):
    question = "Google Stadia Microsoft xCloud cloud gaming"

    async def urls(client, **arguments):
        result = await client.call_tool(
            "web_search", {"query": question, "max_results": 10, **arguments}
        )
        assert result.is_error is False, text_of(result)
        return [page_key(item["url"]) for item in result.structured_content["items"]]

    session = f"mcp-{uuid.uuid4().hex}"  # the stdio server is shared by the module
    async with connect(mcp_server()) as client:
        before = await urls(client)
        research = await client.call_tool(
            "deep_research", {"query": question, "preset": "minimal", "session_id": session}
        )
        after = await urls(client, session_id=session)
        bad = await client.call_tool("deep_research", {"query": "x", "session_id": "a b"})
    assert research.is_error is False, text_of(research)
    sources = {page_key(s["url"]) for s in research.structured_content["sources"]}
    # The report's sources count as shown: the session's next search puts them last,
    # all but the best result.
    assert after[0] == before[0] and after != before
    repeats = [key in sources for key in after[1:]]
    assert repeats == sorted(repeats) and any(repeats)
    assert bad.is_error and "session_id" in text_of(bad)


@pytest.mark.parametrize("cap", [1000, 2500])
async def test_deep_research_stays_within_max_output_chars(mcp_server, cap):
    # Text and structured content together, as for the other tools (a cap of 1,000 gave
    # about 4,500: the sources were listed whole, twice).
    arguments = {"query": "Google Stadia Microsoft xCloud cloud gaming", "preset": "balanced"}
    async with connect(mcp_server(mcp={"max_output_chars": cap})) as client:
        result = await client.call_tool("deep_research", arguments)
    assert result.is_error is False, text_of(result)
    structured = result.structured_content
    assert len(text_of(result)) + len(json.dumps(structured, ensure_ascii=False)) <= cap
    assert structured["verification_status"] and "## Sources" in text_of(result)


def test_capped_lists_drops_trailing_entries_of_the_longest_list_first():
    content = {"a": 1, "long": ["x" * 50] * 4, "short": ["y"] * 2}
    capped = capped_lists(content, ("long", "short"), 120)
    assert len(json.dumps(capped)) <= 120 and capped["a"] == 1
    assert capped["short"] == ["y"] * 2 and len(capped["long"]) < 4
    assert capped["omitted"] == 4 - len(capped["long"])
    assert capped_lists(content, ("long", "short"), 10_000) == content


async def test_a_strict_servers_tool_states_its_limit_and_errors_name_the_arguments(mcp_server):
    server = mcp_server(limits={"strict": True, "max_results": 5})
    async with connect(server) as client:
        (web_search, *_) = (await client.list_tools()).tools
        at_limit = await client.call_tool("web_search", {"query": "stadia", "max_results": 5})
        over = await client.call_tool("web_search", {"query": "stadia", "max_results": 6})
        backend = await client.call_tool("web_search", {"query": "stadia", "backend": "AUTO"})
        domain = await client.call_tool(
            "web_search", {"query": "stadia", "include_domains": ["a.org", "a b"]}
        )
    # The schema says what the server takes: a call it allows is never refused.
    assert web_search.input_schema["properties"]["max_results"]["maximum"] == 5
    assert at_limit.is_error is False, text_of(at_limit)
    assert over.is_error and text_of(over).startswith("invalid arguments: max_results:")
    # Refusals from the search itself name the argument, not the request field it feeds.
    assert text_of(backend).startswith("invalid arguments: backend: ")
    assert text_of(domain).startswith("invalid arguments: include_domains.1: ")


async def test_deep_research_keeps_within_a_strict_servers_deadline(mcp_server):
    # The tool takes no budget: the exchange's deadline lowers the job's, never refuses it.
    server = mcp_server(limits={"strict": True}, research={"max_total_time_ms": 5000})
    arguments = {"query": "Google Stadia Microsoft xCloud cloud gaming", "preset": "balanced"}
    async with connect(server) as client:
        result = await client.call_tool("deep_research", arguments)
    assert result.is_error is False, text_of(result)
    assert "## Sources" in text_of(result)


async def test_deep_research_counts_against_the_running_jobs(
    make_settings, serve_searcher, testbed
):
    hanging = {"order": ["searxng"], "searxng": {"base_url": testbed.searxng_url("hang")}}
    base = serve_searcher(make_settings(backends=hanging, research={"max_concurrent_jobs": 1}))
    body = {"query": "Google Stadia", "preset": "minimal"}
    running = httpx.post(f"{base}/v1/research", json=body, timeout=30)
    assert running.status_code == 202
    async with Client(f"{base}/mcp") as client:
        refused = await client.call_tool("deep_research", {"query": "Apple Arcade"})
    assert refused.is_error is True
    assert "1 research jobs are running already" in text_of(refused)
    httpx.delete(f"{base}/v1/research/{running.json()['id']}", timeout=30)


def mcp_refusal(error: BaseException) -> Any:
    """The MCP error a client raised (the SDK may wrap it in exception groups)."""
    while isinstance(error, BaseExceptionGroup):
        (error,) = error.exceptions
    assert isinstance(error, MCPError), repr(error)
    return error.error


async def test_a_refusal_before_the_tool_reaches_the_mcp_client_with_its_reason(
    make_settings, serve_searcher
):
    # A 401, 413, 429 or 504 on /mcp was our own error body, which MCP clients cannot read:
    # the user saw "Server returned an error response" (an internal error, code -32603).
    auth = serve_searcher(make_settings(auth={"enabled": True}))
    with pytest.raises(BaseException) as no_key:
        async with Client(f"{auth}/mcp") as client:
            await client.list_tools()
    refused = mcp_refusal(no_key.value)
    assert refused.code == -32600 and refused.message.startswith("an API key is required")
    assert refused.data["type"] == "unauthorized"

    base = serve_searcher(make_settings(server={"max_body_bytes": 4096}))
    async with Client(f"{base}/mcp") as client:
        with pytest.raises(MCPError) as too_large:
            await client.call_tool("web_search", {"query": "x" * 5000})
    message = too_large.value.error.message
    assert message == "request body over 4096 bytes (server.max_body_bytes)"


MCP_HEADERS = {"Content-Type": "application/json", "Accept": "application/json, text/event-stream"}
CALL = {"method": "tools/call", "params": {"name": "web_search", "arguments": {"query": "x"}}}


def post_mcp(base: str, message: object) -> httpx.Response:
    return httpx.post(f"{base}/mcp", content=json.dumps(message), headers=MCP_HEADERS, timeout=30)


def invalid_request_message(response: httpx.Response) -> str:
    """The message of a JSON-RPC Invalid Request error, answered as the SDK answers its own."""
    assert response.status_code == 400, response.text
    assert response.headers["content-type"] == "application/json"
    body = response.json()
    assert body["jsonrpc"] == "2.0" and body["id"] is None  # the id could not be determined
    assert body["error"]["code"] == -32600
    return body["error"]["message"]


def test_a_request_id_that_is_not_a_string_or_an_integer_is_an_invalid_request(
    make_settings, serve_searcher
):
    # Such a message used to be taken for a notification: 202 and no answer, ever.
    base = serve_searcher(make_settings())
    for bad_id in [1.5, None, True, [1], {"a": 1}]:
        message = invalid_request_message(post_mcp(base, {"jsonrpc": "2.0", "id": bad_id, **CALL}))
        assert "id" in message and "\n" not in message
    # A string or integer id is a request, no id a notification; both as before.
    listed = post_mcp(base, {"jsonrpc": "2.0", "id": "a", "method": "tools/list"})
    assert listed.status_code == 200 and '"id":"a"' in listed.text and '"tools"' in listed.text
    notified = post_mcp(base, {"jsonrpc": "2.0", "method": "notifications/initialized"})
    assert notified.status_code == 202


def test_a_malformed_message_gets_a_one_line_reason_without_internals(
    make_settings, serve_searcher
):
    base = serve_searcher(make_settings())
    request = {"jsonrpc": "2.0", "id": 1, "method": "tools/list"}
    cases = [
        ({"foo": 1}, 'needs jsonrpc "2.0" and a method'),
        ([request, {**request, "id": 2}], "batches are not supported"),
        ([], "batches are not supported"),
        ("tools/list", "must be a JSON object"),
        ({**request, "jsonrpc": "1.0"}, 'needs jsonrpc "2.0"'),
        ({**request, "method": 5}, "method must be a string"),
        ({**request, "params": [1]}, "params must be an object"),
        ({"jsonrpc": "2.0", "id": 1, "result": 5}, "result must be an object"),
        ({"jsonrpc": "2.0", "result": {}}, "needs an id"),
        ({"jsonrpc": "2.0", "id": 1, "error": {"code": "x"}}, "error must be an object"),
    ]
    for body, expected in cases:
        message = invalid_request_message(post_mcp(base, body))
        assert expected in message, (body, message)
        assert "\n" not in message and len(message) < 200
        assert "pydantic" not in message and "input_value" not in message


# tools/call params that are no tool call, and the reason each is refused with.
BAD_TOOL_CALLS = [
    # OpenAI's tool calls carry the arguments as a string of JSON; passed on as they are.
    ({"name": "web_search", "arguments": '{"query": "x"}'},
     "Invalid params: params.arguments: must be an object (a mapping of keys to values)"),
    ({"arguments": {"query": "x"}}, "Invalid params: params.name: Field required"),
    (None, "Invalid params: params must be an object with the tool's name and its arguments"),
]  # fmt: skip


def test_tool_call_params_that_are_no_call_are_refused_with_the_reason(
    make_settings, serve_searcher
):
    # The SDK answered "Invalid request parameters", with no word of which or why.
    base = serve_searcher(make_settings())
    for index, (params, reason) in enumerate(BAD_TOOL_CALLS):
        call = {"jsonrpc": "2.0", "id": index, "method": "tools/call", "params": params}
        response = post_mcp(base, call)
        assert response.status_code == 200 and response.json() == {
            "jsonrpc": "2.0", "id": index, "error": {"code": -32602, "message": reason}
        }  # fmt: skip


def stdio_answers(make_settings, tmp_path, messages: list[Any]) -> list[dict]:
    """What ``searcher mcp`` answers to ``messages`` (lines as they are, or objects as
    JSON) sent after the handshake, up to its answer to a last ping (id "last")."""
    config = tmp_path / "searcher.yaml"
    config.write_text(yaml.safe_dump(make_settings().model_dump(mode="json")))
    init = {"jsonrpc": "2.0", "id": 0, "method": "initialize",
            "params": {"protocolVersion": "2025-06-18", "capabilities": {},
                       "clientInfo": {"name": "raw", "version": "1"}}}  # fmt: skip
    lines = [
        json.dumps(init),
        json.dumps({"jsonrpc": "2.0", "method": "notifications/initialized"}),
        *(m if isinstance(m, str) else json.dumps(m) for m in messages),
        json.dumps({"jsonrpc": "2.0", "id": "last", "method": "ping"}),
    ]
    server = subprocess.Popen(
        [sys.executable, "-m", "searcher", "mcp"], stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True, cwd=REPO,
        env={**os.environ, "SEARCHER_CONFIG": str(config)},
    )  # fmt: skip
    answers: list[dict] = []
    deadline = threading.Timer(60, server.kill)  # a server that never answers ends the read
    deadline.start()
    try:
        server.stdin.write("\n".join(lines) + "\n")
        server.stdin.flush()
        # Read until the last ping is answered (stdin stays open: at its end the server
        # stops, and may do so before it answers what it read last).
        while not any(a.get("id") == "last" for a in answers):
            line = server.stdout.readline()
            assert line, f"the server stopped; it answered {answers}"
            answers.append(json.loads(line))
    finally:
        deadline.cancel()
        server.stdin.close()
        server.wait(timeout=60)
        server.stdout.close()
    return answers


def test_stdio_answers_lines_that_are_no_json_rpc_message(make_settings, tmp_path):
    # As /mcp over HTTP does: the SDK dropped these unanswered, and a client waiting for
    # the id it sent waited for ever.
    lines = [
        "not json",
        {"jsonrpc": "2.0", "id": 1.5, "method": "tools/list"},
        [{"jsonrpc": "2.0", "id": 2, "method": "ping"}],
        {"id": 3, "method": "ping"},
    ]
    answers = stdio_answers(make_settings, tmp_path, lines)
    errors = [a["error"] for a in answers if "error" in a]
    assert all(a["id"] is None for a in answers if "error" in a)
    assert [e["code"] for e in errors] == [-32700, -32600, -32600, -32600], errors
    assert "batches are not supported" in errors[2]["message"]
    assert {"jsonrpc": "2.0", "id": "last", "result": {}} in answers  # still serving after them


def test_stdio_refuses_tool_call_params_that_are_no_call_with_the_reason(make_settings, tmp_path):
    calls = [
        {"jsonrpc": "2.0", "id": index, "method": "tools/call", "params": params}
        for index, (params, _) in enumerate(BAD_TOOL_CALLS)
    ]
    answers = stdio_answers(make_settings, tmp_path, calls)
    for index, (_, reason) in enumerate(BAD_TOOL_CALLS):
        assert {"jsonrpc": "2.0", "id": index, "error": {"code": -32602, "message": reason}} in (
            answers
        ), answers
