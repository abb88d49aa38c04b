"""searcher.client (sync and async) and ``searcher search --remote``, against a real searcher
on 127.0.0.1 with the testbed behind it."""

import asyncio
import json
import math
import time
from collections.abc import Iterator
from typing import Any
from urllib.parse import quote

import httpx
import pytest
from click.testing import CliRunner

from searcher import __version__
from searcher.cli import main
from searcher.client import AsyncSearcherClient, SearcherClient
from searcher.config import load_settings
from searcher.contract import FetchPageResponse, Health, Item, SearchRequest, SearchResponse
from searcher.errors import AllBackendsFailed, BackendFailure, InvalidRequest, RemoteError
from tests.ports import free_port
from tests.testbed.server import ThreadedServer


def call_sync(base, method, *args, **kwargs):
    with SearcherClient(base) as client:
        return getattr(client, method)(*args, **kwargs)


def call_async(base, method, *args, **kwargs):
    async def go():
        async with AsyncSearcherClient(base) as client:
            return await getattr(client, method)(*args, **kwargs)

    return asyncio.run(go())


@pytest.fixture(params=[call_sync, call_async], ids=["sync", "async"])
def call(request):
    """``call(base_url, method, *args)``: one call through the sync or the async client."""
    return request.param


def closed_port() -> int:
    return free_port()  # nothing listens on it


def failing_settings(make_settings, testbed):
    return make_settings(
        backends={
            "searxng": {"base_url": testbed.searxng_url("status/500")},
            "brave": {"api_key": "wrong-key"},
        },
        budget={"max_search_retries": 0},
    )


FAILURES = [
    BackendFailure("searxng", "HTTP 500", "http_status"),
    BackendFailure("brave", "HTTP 401", "auth"),
]


# --- the client ------------------------------------------------------------------------


def test_search_returns_typed_items_from_the_testbed(
    call, make_settings, serve_searcher, testbed, matching_query
):
    base = serve_searcher(make_settings())
    response = call(base, "search", matching_query, max_results=3, intent="background")
    assert isinstance(response, SearchResponse)
    assert response.meta.backend_used == "searxng" and response.request["intent"] == "background"
    assert 1 <= len(response.items) <= 3
    for rank, item in enumerate(response.items, start=1):
        assert isinstance(item, Item) and item.score.rank == rank
        assert item.url.startswith(f"{testbed.base_url}/") and item.title and item.snippet
    assert response.rendered_text.startswith("[CONTEXT_PACK ucp-1]")
    assert response.items[0].url in response.rendered_text


async def test_async_client_shares_one_pool_across_calls(
    make_settings, serve_searcher, matching_query
):
    base = serve_searcher(make_settings())
    request = SearchRequest.model_validate(
        {"query": matching_query, "want": {"rendered_text": False}}
    )
    async with AsyncSearcherClient(base) as client:
        health = await client.health()
        full = await client.search(request, mode="full", backend="brave", max_results=2)
        stats = await client.cache_stats()
        cleared = await client.cache_clear()
        after = await client.cache_stats()
    assert health.status == "ok"
    assert full.meta.mode_used == "full" and full.meta.backend_used == "brave"
    assert [item.fetch.status for item in full.items] == ["fetched", "fetched"]
    assert all(item.content and len(item.content) > 100 for item in full.items)
    assert full.rendered_text is None  # want.rendered_text=false survived the shortcuts
    assert stats.entries == 2 and stats.bytes > 0 and cleared.removed == 2
    assert after.entries == 0


def test_health_is_typed(call, make_settings, serve_searcher):
    health = call(serve_searcher(make_settings()), "health")
    assert isinstance(health, Health) and health.version == __version__
    assert health.backends["searxng"].breaker == "closed"
    assert health.backends["duckduckgo"].enabled is False


def test_bad_request_raises_invalid_request_naming_the_field(call, make_settings, serve_searcher):
    base = serve_searcher(make_settings())
    # Valid locally; the server refuses it (422).
    with pytest.raises(InvalidRequest) as remote:
        call(base, "search", "q", backend="google")
    assert remote.value.field == "constraints.backend"
    assert remote.value.message.startswith("unknown backend 'google'")
    # Refused before sending, named the same way.
    with pytest.raises(InvalidRequest) as local:
        call(base, "search", "q", budget={"max_results": 0})
    assert local.value.field == "budget.max_results"


def test_a_body_over_the_limit_is_invalid_input(call, make_settings, serve_searcher):
    base = serve_searcher(make_settings(service={"max_body_bytes": 1024}))
    request = SearchRequest.model_validate({"query": "q", "context_hint": {"notes": "x" * 2000}})
    with pytest.raises(InvalidRequest) as caught:
        call(base, "search", request)
    assert caught.value.field == "body" and "over 1024 bytes" in caught.value.message


def test_all_backends_failing_lists_each(call, make_settings, serve_searcher, testbed):
    base = serve_searcher(failing_settings(make_settings, testbed))
    with pytest.raises(AllBackendsFailed) as caught:
        call(base, "search", "anything")
    assert caught.value.failures == FAILURES


def test_fetch_page_reads_a_page_a_slice_at_a_time(
    call, make_settings, serve_searcher, testbed, aeb_ids
):
    base = serve_searcher(make_settings())
    url = testbed.page_url(aeb_ids[0])
    first = call(base, "fetch_page", url, max_chars=200)
    assert isinstance(first, FetchPageResponse) and first.url == url
    assert first.status == "fetched" and first.fetch.status == "fetched"
    assert len(first.content) == 200 and first.start_char == 0
    assert first.next_start_char == 200 and first.total_chars > 200
    second = call(base, "fetch_page", url, max_chars=200, start_char=first.next_start_char)
    assert second.start_char == 200 and second.content and second.content != first.content
    with pytest.raises(InvalidRequest) as caught:
        call(base, "fetch_page", "ftp://127.0.0.1/file")
    assert caught.value.field == "url"


def test_several_pages_and_a_site_map_through_the_client(
    call, make_settings, serve_searcher, testbed, aeb_ids
):
    base = serve_searcher(make_settings())
    urls = [testbed.page_url(aeb_ids[0]), "http://10.0.0.1/"]
    pages = call(base, "fetch_pages", urls, max_chars=100)
    assert [(p.url, p.status) for p in pages.results] == [
        (urls[0], "fetched"),
        (urls[1], "skipped"),
    ]
    assert len(pages.results[0].content) == 100
    origin = f"http://127.0.0.1:{testbed.port}"
    mapped = call(base, "map_site", f"{origin}/site/", max_depth=1, sitemaps=False)
    assert mapped.results[0] == f"{origin}/site/" and f"{origin}/site/about" in mapped.results
    with pytest.raises(InvalidRequest) as caught:
        call(base, "map_site", f"{origin}/site/", max_depth=9)
    assert caught.value.field == "max_depth"
    with pytest.raises(InvalidRequest) as caught:
        call(base, "fetch_pages", [])
    assert caught.value.field == "urls"


def test_connection_refused_is_a_remote_error_naming_the_url(call):
    base = f"http://127.0.0.1:{closed_port()}"
    with pytest.raises(RemoteError) as caught:
        call(base, "health")
    error = caught.value
    assert not isinstance(error, httpx.HTTPError) and error.status is None
    assert str(error).startswith(f"{base}/v1/health: cannot connect")


def test_a_server_that_is_not_searcher_gives_remote_error_with_status(testbed_clean):
    with (
        SearcherClient(testbed_clean.base_url, api_key="k-123") as client,
        pytest.raises(RemoteError) as caught,
    ):
        client.health()
    assert caught.value.status == 404
    assert str(caught.value) == f"{testbed_clean.base_url}/v1/health: HTTP 404: Not Found"
    sent = [entry for entry in testbed_clean.log if entry.path == "/v1/health"]
    assert sent and sent[0].headers["authorization"] == "Bearer k-123"


BAD_BASE_URLS = ["localhost:8080", "http://127.0.0.1:abc", "http://127.0.0.1:99999",
                 "http://xn--/"]  # fmt: skip


@pytest.mark.parametrize("base", BAD_BASE_URLS)
@pytest.mark.parametrize("client_class", [SearcherClient, AsyncSearcherClient])
def test_base_url_must_be_a_usable_http_url(client_class, base):
    # Refused at once, as a ValueError, never as httpx's or the socket's error later.
    with pytest.raises(ValueError, match="base_url must be an http") as caught:
        client_class(base)
    assert repr(base) in str(caught.value)


BAD_SETTINGS = [
    ({"api_key": "clé"}, "api_key must be printable ASCII; character 3 is not ASCII"),
    ({"api_key": "k-1\r\nX-Injected: 1"}, "api_key must be printable ASCII; character 4 is a"),
    ({"timeout": -1}, "timeout must be a positive, finite number of seconds, got -1"),
    ({"timeout": 0}, "timeout must be a positive"),
    ({"timeout": math.nan}, "timeout must be a positive"),
]


@pytest.mark.parametrize(("settings", "message"), BAD_SETTINGS)
@pytest.mark.parametrize("client_class", [SearcherClient, AsyncSearcherClient])
def test_api_key_and_timeout_are_checked_at_construction(client_class, settings, message):
    # Accepted, they failed at the first call as UnicodeEncodeError or httpx's ValueError.
    with pytest.raises(ValueError) as caught:
        client_class("http://127.0.0.1:8080", **settings)
    assert str(caught.value) == message or str(caught.value).startswith(message)
    assert "clé" not in str(caught.value)  # the key is a secret: never echoed


@pytest.mark.parametrize(
    ("options", "field"), [({"constraints": "abc"}, "constraints"), ({"budget": [1]}, "budget"),
                           ({"want": 3}, "want")],
)  # fmt: skip
def test_a_section_that_is_not_a_mapping_is_invalid_request(call, options, field):
    # Refused before sending: nothing listens on the port.
    with pytest.raises(InvalidRequest) as caught:
        call(f"http://127.0.0.1:{closed_port()}", "search", "q", **options)
    assert caught.value.field == field and "must be a mapping or a model" in caught.value.message


@pytest.mark.parametrize(
    ("option", "hint"), [("max_result", "; did you mean 'max_results'?"),
                         ("mdoe", "; did you mean 'mode'?"), ("colour", "")],
)  # fmt: skip
def test_an_unknown_search_option_is_a_type_error(
    call, make_settings, serve_searcher, matching_query, option, hint
):
    # Before, a misspelt option was dropped: max_result=1 returned 5 results.
    base = serve_searcher(make_settings())
    with pytest.raises(TypeError) as caught:
        call(base, "search", matching_query, **{option: 1})
    assert str(caught.value) == f"search() got an unexpected keyword argument {option!r}{hint}"


# What a server that is not searcher (or a proxy) may answer on the event stream's URL.
NOT_STREAMS: dict[str, tuple[str, bytes]] = {
    "html": ("text/html; charset=utf-8", b"<html><body>Sign in</body></html>"),
    "json": ("application/json", b'{"x": 1}'),
    "bad-event": ("text/event-stream", b'id: 1\ndata: {"x":1}\n\n'),
}


async def not_a_searcher(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """ASGI app answering 200 on ``/{kind}/v1/research/job/events`` with ``NOT_STREAMS``."""
    content_type, body = NOT_STREAMS[scope["path"].split("/")[1]]
    headers = [(b"content-type", content_type.encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": body})


@pytest.fixture(scope="module")
def not_searcher_url() -> Iterator[str]:
    with ThreadedServer(not_a_searcher) as server:
        yield server.base_url


def stream_sync(base: str) -> list[Any]:
    with SearcherClient(base) as client:
        return list(client.stream_research("job"))


def stream_async(base: str) -> list[Any]:
    async def go() -> list[Any]:
        async with AsyncSearcherClient(base) as client:
            return [event async for event in client.stream_research("job")]

    return asyncio.run(go())


@pytest.mark.parametrize("stream", [stream_sync, stream_async], ids=["sync", "async"])
@pytest.mark.parametrize(
    ("kind", "reason"),
    [("html", "not an event stream (text/html; charset=utf-8)"),
     ("json", "not an event stream (application/json)"),
     ("bad-event", "unexpected answer: ")],
)  # fmt: skip
def test_an_answer_that_is_not_a_research_event_stream_is_a_remote_error(
    not_searcher_url, stream, kind, reason
):
    # Before, HTML or JSON gave no events at all, and a foreign event a pydantic error.
    url = f"{not_searcher_url}/{kind}/v1/research/job/events"
    with pytest.raises(RemoteError) as caught:
        stream(f"{not_searcher_url}/{kind}")
    assert str(caught.value).startswith(f"{url}: {reason}")


# --- searcher search --remote ----------------------------------------------------------


@pytest.fixture
def config_path(config_file):
    """A searcher.yaml against the testbed, for both the local CLI and the served app."""
    return config_file()


def run(*args, env=None):
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def test_remote_prints_the_same_pack_as_local_mode(config_path, serve_searcher, matching_query):
    base = serve_searcher(load_settings(config_path))
    local = run("search", matching_query, "--config", config_path, "--max-results", "3")
    remote = run("search", matching_query, "--remote", base, "--max-results", "3")
    assert local.exit_code == remote.exit_code == 0, remote.output
    assert remote.stdout.count("Title:") == 3 and "backend=searxng" in remote.stdout
    assert remote.stdout == local.stdout  # the pack is deterministic for the same items


def test_remote_json_has_local_modes_shape(config_path, serve_searcher, matching_query):
    base = serve_searcher(load_settings(config_path))
    args = ["search", matching_query, "--json", "--backend", "brave", "--max-results", "2"]
    local = json.loads(run(*args, "--config", config_path).stdout)
    remote = json.loads(run(*args, "--remote", base).stdout)
    assert remote.keys() == local.keys() and remote["meta"].keys() == local["meta"].keys()
    assert remote["meta"]["backend_used"] == "brave"
    assert [i["url"] for i in remote["items"]] == [i["url"] for i in local["items"]]
    assert remote["rendered_text"] == local["rendered_text"]


def test_remote_reports_every_backend_failure_with_exit_1(make_settings, serve_searcher, testbed):
    base = serve_searcher(failing_settings(make_settings, testbed))
    result = run("search", "q", "--remote", base)
    assert result.exit_code == 1
    assert "all search backends failed" in result.stderr
    assert "searxng: HTTP 500" in result.stderr and "brave: HTTP 401" in result.stderr
    assert "Traceback" not in result.output


def test_remote_bad_input_exits_2(config_path, serve_searcher):
    base = serve_searcher(load_settings(config_path))
    assert run("search", "", "--remote", base).exit_code == 2
    unknown = run("search", "q", "--remote", base, "--backend", "google")
    assert unknown.exit_code == 2 and "unknown backend 'google'" in unknown.stderr
    for bad in BAD_BASE_URLS:
        bad_url = run("search", "q", "--remote", bad)
        assert bad_url.exit_code == 2 and bad_url.stderr.startswith("searcher: invalid --remote: ")
        assert len(bad_url.stderr.splitlines()) == 1  # one line, no traceback


def test_remote_unreachable_exits_1_with_the_url():
    base = f"http://127.0.0.1:{closed_port()}"
    result = run("search", "q", "--remote", base)
    assert result.exit_code == 1
    assert f"{base}/v1/search: cannot connect" in result.stderr
    assert "Traceback" not in result.output


def test_searcher_remote_environment_variable(
    config_path, serve_searcher, tmp_path, matching_query
):
    base = serve_searcher(load_settings(config_path))
    broken = tmp_path / "broken.yaml"
    broken.write_text("backends: {searxng: {timeout_s: -1}}\n")
    # A local search would fail on the broken config (exit 2); the remote one never reads it.
    result = run("search", matching_query, "--config", str(broken), env={"SEARCHER_REMOTE": base})
    assert result.exit_code == 0, result.output
    assert result.stdout.startswith("[CONTEXT_PACK ucp-1]") and "Title:" in result.stdout


@pytest.mark.parametrize("job_id", ["../health", "a?b=1", "#top"])
def test_a_job_id_is_one_path_segment_whatever_it_holds(
    call, make_settings, serve_searcher, job_id
):
    base = serve_searcher(make_settings())
    # Unquoted, "../health" reached /v1/health and "a?b=1" asked for job "a".
    for method in ("research_status", "cancel_research"):
        with pytest.raises(RemoteError) as raised:
            call(base, method, job_id)
        assert raised.value.status == 404, raised.value
        assert f"/v1/research/{quote(job_id, safe='')}:" in str(raised.value)


def test_a_closed_client_an_empty_job_id_and_a_negative_after_are_said_plainly(
    make_settings, serve_searcher
):
    base = serve_searcher(make_settings())
    with SearcherClient(base) as client:
        with pytest.raises(InvalidRequest) as empty:
            client.research_status("")
        assert empty.value.field == "job_id"  # not "HTTP 307" from the job list's path
        with pytest.raises(InvalidRequest) as negative:
            list(client.stream_research("abc", after=-1))
        assert negative.value.field == "after"  # not the header it is sent as
    for closed_call in (lambda: client.search("stadia"), lambda: list(client.stream_research("a"))):
        with pytest.raises(RemoteError, match="this client is closed"):
            closed_call()

    async def closed_async() -> None:
        async with AsyncSearcherClient(base) as aclient:
            pass
        with pytest.raises(RemoteError, match="this client is closed"):
            await aclient.health()
        with pytest.raises(RemoteError, match="this client is closed"):
            [event async for event in aclient.stream_research("a")]

    asyncio.run(closed_async())


# A health answer sent a few bytes every 0.2 s: 3 s in all, each wait far under a second.
TRICKLED = json.dumps({"status": "ok"}).encode().ljust(30)


async def trickling(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """ASGI app answering every request with ``TRICKLED``, two bytes at a time."""
    if scope["type"] != "http":
        return
    headers = [(b"content-type", b"application/json")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    for start in range(0, len(TRICKLED), 2):
        await send({"type": "http.response.body", "body": TRICKLED[start : start + 2],
                    "more_body": True})  # fmt: skip
        await asyncio.sleep(0.2)
    await send({"type": "http.response.body", "body": b""})


@pytest.mark.parametrize("client_class", [SearcherClient, AsyncSearcherClient])
def test_timeout_bounds_the_whole_call_even_when_the_answer_trickles(client_class):
    # httpx's timeout bounds each wait for a part of the answer: a server (or proxy)
    # trickling it held a call with timeout=1 for as long as it kept trickling.
    async def call_async(base: str) -> None:
        async with AsyncSearcherClient(base, timeout=1) as client:
            await client.health()

    with ThreadedServer(trickling) as server:
        started = time.monotonic()
        with pytest.raises(RemoteError) as caught:
            if client_class is SearcherClient:
                with SearcherClient(server.base_url, timeout=1) as client:
                    client.health()
            else:
                asyncio.run(call_async(server.base_url))
        elapsed = time.monotonic() - started
    assert str(caught.value) == f"{server.base_url}/v1/health: no answer within 1 s"
    assert caught.value.status is None and elapsed < 2.5


@pytest.mark.parametrize(
    ("method", "args", "field", "message"),
    [("research_status", (123,), "job_id", "must be a string, got int"),
     ("cancel_crawl", (None,), "job_id", "must be a string, got NoneType"),
     ("upload", ("notes", [b"# a note"]), "files[0]", "must be a (name, bytes) pair, got bytes"),
     ("upload", ("notes", ["a.md"]), "files[0]", "must be a (name, bytes) pair, got str"),
     ("upload", ("notes", [(b"a.md", b"x")]), "files[0]", "must be a (name, bytes) pair"),
     ("upload", (7, [("a.md", b"x")]), "collection", "must be a string, got int"),
     ("delete_document", ("notes", 5), "name", "must be a string, got int")],
)  # fmt: skip
def test_arguments_of_the_wrong_kind_are_invalid_request_naming_them(
    call, method, args, field, message
):
    # They raised Python's own errors from deep inside: "quote_from_bytes() expected
    # bytes", "too many values to unpack (expected 2)". Refused before sending.
    with pytest.raises(InvalidRequest) as caught:
        call(f"http://127.0.0.1:{closed_port()}", method, *args)
    assert caught.value.field == field and caught.value.message.startswith(message)


# Events a job gives before its done event, each on a stream the server then cuts.
CUT_EVENTS = 8


async def cutting_stream(scope: dict[str, Any], receive: Any, send: Any) -> None:
    """ASGI app: the event after Last-Event-ID, then the connection dropped mid-stream
    (as a proxy ending idle streams does); the done event once CUT_EVENTS have gone."""
    if scope["type"] != "http":
        return
    last = int(dict(scope["headers"]).get(b"last-event-id", b"0"))
    kind = "done" if last + 1 > CUT_EVENTS else "search"
    event = {"id": last + 1, "type": kind, "ts": "2026-01-01T00:00:00Z", "data": {}}
    headers = [(b"content-type", b"text/event-stream")]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    body = f"id: {last + 1}\ndata: {json.dumps(event)}\n\n".encode()
    await send({"type": "http.response.body", "body": body, "more_body": kind != "done"})
    if kind != "done":
        raise ConnectionAbortedError("stream cut")  # uvicorn drops the connection


@pytest.mark.parametrize("stream", [stream_sync, stream_async], ids=["sync", "async"])
def test_a_stream_resumed_after_each_drop_goes_on_for_a_long_job(stream):
    # Resumes were counted over the job's whole life: the sixth drop of a long job failed
    # it with a RemoteError, though every resume had gone on with the next event.
    with ThreadedServer(cutting_stream) as server:
        events = stream(server.base_url)
    assert [event.id for event in events] == list(range(1, CUT_EVENTS + 2))
    assert events[-1].type == "done"
