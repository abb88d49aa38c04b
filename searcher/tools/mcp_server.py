"""The MCP server: ``web_search``, ``fetch_page``, ``deep_research`` and ``crawl_site`` as MCP
tools, over stdio (``searcher mcp``) or streamable HTTP (mounted at ``/mcp`` by the HTTP app).

Built on the official SDK's low-level ``Server`` so that the tools' input schemas are the
ones in ``searcher.tools.specs`` (also served to OpenAI clients) and arguments are checked
against exactly those. Every tool result stays within ``mcp.max_output_chars``; every
failure is a tool error with a one-line reason, never a traceback.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import logging
from collections.abc import AsyncIterator, Awaitable, Callable, Sequence
from typing import Any

import anyio
import orjson
import pydantic_core
from fastapi import FastAPI
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.server.transport_security import TransportSecuritySettings
from mcp.shared.message import SessionMessage
from mcp.types import (
    INVALID_PARAMS,
    INVALID_REQUEST,
    PARSE_ERROR,
    CallToolRequestParams,
    CallToolResult,
    ErrorData,
    JSONRPCError,
    JSONRPCNotification,
    JSONRPCRequest,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
)
from pydantic import ValidationError
from starlette.routing import Route
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from searcher import __version__
from searcher.api.auth import collection_access, key_of
from searcher.api.errors import send_error
from searcher.api.observe import client_identity
from searcher.api.replayed_body import Received, read_body, replaying
from searcher.auth.access import EVERY, CollectionAccess
from searcher.config import Settings
from searcher.contract import FetchPageRequest, FetchPageResponse, SearchRequest
from searcher.errors import (
    AllBackendsFailed,
    InvalidRequest,
    JobFailed,
    ResearchFailed,
    SearcherError,
    TooManyJobs,
    describe_failures,
)
from searcher.fetch.urls import split_host
from searcher.research.job_store import FINISHED
from searcher.research.jobs import JobBook
from searcher.research.sources import refit
from searcher.runtime import open_service
from searcher.service import SearchService
from searcher.site.crawl_jobs import CrawlBook
from searcher.tools.fetch_page import fetch_page
from searcher.tools.specs import ToolSpec, mcp_tool_specs, search_argument, search_body

log = logging.getLogger("searcher.mcp")

# Room fetch_page keeps under the output cap for the line that says how to get the rest
# (<= 130 characters) and the structured paging and fetch facts (<= 350).
FETCH_ROOM = 600
# Seconds an /mcp exchange may run beyond limits.max_total_time_ms (serialising, queueing).
EXCHANGE_GRACE_S = 15.0
INSTRUCTIONS = (
    "web_search returns a numbered context pack of web results (use it as evidence and "
    "cite the URLs); fetch_page reads one page's main text, in slices for long pages; "
    "deep_research answers a harder question over several rounds of searching and reading "
    "and returns a cited report (slow: tens of seconds); crawl_site reads a site's pages "
    "from a start URL (up to 50)."
)

ServiceGetter = Callable[[], SearchService]


# --- output within the cap ---------------------------------------------------------------


def cap_text(text: str, max_chars: int, hint: str) -> str:
    """``text`` if it fits in ``max_chars``, else its head and a marker saying how much was
    cut and ``hint`` (how to get the rest); the result never exceeds ``max_chars``."""
    if len(text) <= max_chars:
        return text
    marker = f"\n[truncated: {len(text)} characters, first {{kept}} shown; {hint}]"
    kept = max(0, max_chars - len(marker.format(kept=max_chars)))
    return text[:kept] + marker.format(kept=kept)


def _json_size(value: Any) -> int:
    return len(json.dumps(value, ensure_ascii=False))


def capped_items(items: list[dict[str, Any]], max_chars: int) -> dict[str, Any]:
    """``{"items": [...]}`` holding as many leading items as fit in ``max_chars`` of JSON;
    ``omitted`` says how many were left out."""
    kept = list(items)
    while kept and _json_size({"items": kept, "omitted": len(items)}) > max_chars:
        kept.pop()
    return {"items": kept, "omitted": len(items) - len(kept)}


def capped_lists(content: dict[str, Any], keys: Sequence[str], max_chars: int) -> dict[str, Any]:
    """``content`` within ``max_chars`` of JSON, if its lists under ``keys`` can make it fit:
    the longest of them loses its last entry until it does; ``omitted`` says how many
    entries were left out (absent when none was)."""
    out = {key: list(value) if key in keys else value for key, value in content.items()}
    omitted = 0
    while _json_size({**out, "omitted": omitted} if omitted else out) > max_chars:
        filled = [key for key in keys if out[key]]
        if not filled:
            break
        out[max(filled, key=lambda key: _json_size(out[key]))].pop()
        omitted += 1
    return {**out, "omitted": omitted} if omitted else out


def _error(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


# --- the tools ---------------------------------------------------------------------------


def _search_request(arguments: dict[str, Any], pack_chars: int) -> SearchRequest:
    try:
        return SearchRequest.model_validate(search_body(arguments, pack_chars))
    except ValidationError as exc:
        raise InvalidRequest.from_validation(exc.errors()) from exc


async def run_web_search(
    service: SearchService,
    arguments: dict[str, Any],
    max_chars: int,
    client: str | None = None,
    access: CollectionAccess = EVERY,
) -> CallToolResult:
    """The context pack as text, the items (without page text) as structured content.
    Clients may show the model both, so together they stay within ``max_chars``: the
    pack gets at most half, the items what the pack leaves. ``client``: who asks, for its
    share of the extraction workers; ``access``: the collections its key may search."""
    pack_chars = min(service.settings.budget.max_context_chars, max_chars // 2)
    try:
        request = _search_request(arguments, pack_chars)
        response = await service.search(request, client=client, access=access)
    except InvalidRequest as exc:  # named as the caller sent it: max_results, not budget.*
        raise InvalidRequest(search_argument(exc.field), exc.message) from exc
    text = cap_text(
        response.rendered_text or "[the context pack does not fit in mcp.max_output_chars]",
        pack_chars,
        "ask for fewer max_results, or read a result's page with fetch_page",
    )
    items = [
        item.model_dump(mode="json", exclude={"content", "chunks"}) for item in response.items or []
    ]
    return CallToolResult(
        content=[TextContent(type="text", text=text)],
        structured_content=capped_items(items, max_chars - len(text)),
    )


def _fetch_text(result: FetchPageResponse) -> str:
    if result.next_start_char is not None:
        end = result.start_char + len(result.content)
        return (
            f"{result.content}\n\n[page continues: characters {result.start_char}-{end} of "
            f"{result.total_chars} shown; call fetch_page with start_char="
            f"{result.next_start_char} for the rest]"
        )
    if not result.content:
        start, total = result.start_char, result.total_chars
        return f"[no text at start_char={start}: the page has {total} characters]"
    return result.content


def _fetch_request(arguments: dict[str, Any]) -> FetchPageRequest:
    # The /v1/fetch body model, so that a tool call is read exactly as that body would be:
    # a whole-number float (50.0, which JSON Schema counts as an integer) becomes an int,
    # and the same upper bounds apply.
    try:
        return FetchPageRequest.model_validate(arguments)
    except ValidationError as exc:
        raise InvalidRequest.from_validation(exc.errors()) from exc


async def run_fetch_page(
    service: SearchService, arguments: dict[str, Any], max_chars: int, client: str | None = None
) -> CallToolResult:
    """The slice of the page's text as text, the paging and fetch facts as structured
    content (together within ``max_chars``); a page that could not be read is a tool
    error saying why."""
    request = _fetch_request(arguments)
    wanted = request.max_chars or max_chars
    result = await fetch_page(
        service, request.url, max(1, min(wanted, max_chars - FETCH_ROOM)), request.start_char,
        client,
    )  # fmt: skip
    if result.status != "fetched":
        page = result.fetch
        reason = f"{page.status} ({page.skip_reason})" if page.skip_reason else page.status
        return _error(f"could not read {result.url}: {reason}: {page.error or 'no detail'}")
    return CallToolResult(
        content=[TextContent(type="text", text=_fetch_text(result))],
        structured_content={
            "status": result.status,
            "start_char": result.start_char,
            "next_start_char": result.next_start_char,
            "total_chars": result.total_chars,
            "fetch": result.fetch.model_dump(mode="json"),
        },
    )


Progress = Callable[[float, str], Awaitable[None]]


async def run_deep_research(
    service: SearchService,
    jobs: JobBook,
    arguments: dict[str, Any],
    max_chars: int,
    progress: Progress,
    client: str | None = None,
    key: str | None = None,
    access: CollectionAccess = EVERY,
) -> CallToolResult:
    """The research report as text (within ``max_chars``, with its Sources list whole);
    confidence, verification and sources as structured content; every event of the job is a progress
    notification. The job is one of ``jobs``, owned by ``key`` (the API key of the MCP
    exchange): it counts against ``research.max_concurrent_jobs`` and that key's share,
    and shows at ``/v1/research/{id}`` to that key."""
    from searcher.contract import ResearchRequest

    preset = arguments.get("preset", "balanced")
    try:
        body = {"query": arguments["query"], "preset": preset}
        if arguments.get("session_id") is not None:
            body["constraints"] = {"session_id": arguments["session_id"]}
        request = ResearchRequest.model_validate(body)
    except ValidationError as exc:
        raise InvalidRequest.from_validation(exc.errors()) from exc
    # The job runs inside one MCP exchange, which limits.max_total_time_ms bounds.
    longest = max(1000, service.settings.limits.max_total_time_ms)
    job = await jobs.submit(request, max_time_ms=longest, client=client, key=key, access=access)
    try:
        async for event in jobs.follow(job.id, key=key):
            if event is not None:
                data = json.dumps(event.data, ensure_ascii=False)[:300]
                await progress(event.id, f"{event.type}: {data}")
    finally:
        if job.status not in FINISHED:  # the exchange ended first (client gone, time)
            await asyncio.shield(jobs.cancel(job.id, key))
    result = job.result
    if result is None:
        raise ResearchFailed(job.error or job.status)
    sources = [{"n": p.n, "url": p.url, "title": p.title} for p in result.evidence or []]
    # Text and structured content together stay within max_chars: the structured part
    # takes at most a quarter, the report the rest.
    structured = capped_lists(
        {
            "confidence": result.confidence,
            "verification_status": result.verification_status,
            "report_method": result.report_method,
            "stopped": result.stopped,
            "sub_questions": [q.model_dump(mode="json") for q in result.sub_questions],
            "conflicts": [c.model_dump(mode="json") for c in result.conflicts],
            "sources": sources,
        },
        ("sources", "sub_questions", "conflicts"),
        max_chars // 4,
    )
    # The report lists its own sources; fitted to what is left, its body gives way, never
    # the sources its remaining citations name.
    room = max_chars - _json_size(structured)
    text = result.report or ""
    if len(text) > room:
        note = f"\n\n[shortened; the whole report: GET /v1/research/{job.id}]"
        text = refit(text, max(0, room - len(note))) + note
    return CallToolResult(
        content=[TextContent(type="text", text=text.strip())], structured_content=structured
    )


async def run_crawl_site(
    service: SearchService,
    crawls: CrawlBook,
    arguments: dict[str, Any],
    max_chars: int,
    progress: Progress,
    client: str | None = None,
    key: str | None = None,
) -> CallToolResult:
    """A crawl job run inline (one of ``crawl.max_concurrent_jobs``, ``key``'s, shown at
    ``/v1/crawl/{id}``): each page read is a progress notification; the pages' texts in
    the order read, within ``max_chars``, and their URLs as structured content."""
    from searcher.api.crawl_routes import crawl_plan
    from searcher.contract import CrawlRequest

    try:
        request = CrawlRequest.model_validate(arguments)
    except ValidationError as exc:
        raise InvalidRequest.from_validation(exc.errors()) from exc
    plan = crawl_plan(request, service.settings)
    # The job runs inside one MCP exchange, which limits.max_total_time_ms bounds.
    plan = dataclasses.replace(
        plan, timeout_s=min(plan.timeout_s, service.settings.limits.max_total_time_ms / 1000)
    )
    job = await crawls.submit(plan, request.max_chars_per_page, client=client, key=key)
    try:
        async for event in crawls.follow(job.id, key=key):
            if event is not None and event.type in ("page", "skip"):
                await progress(event.id, f"{event.type}: {event.data['url']}")
    finally:
        if job.status not in FINISHED:  # the exchange ended first (client gone, time)
            await asyncio.shield(crawls.cancel(job.id, key))
    if job.status != "done":
        raise JobFailed(job.error or job.status)
    structured = capped_lists(
        {
            "pages": [{"url": p.url, "depth": p.depth, "chars": len(p.content)} for p in job.pages],
            "skipped": [{"url": s.url, "reason": s.reason} for s in job.skipped],
            "complete": job.complete,
        },
        ("pages", "skipped"),
        max_chars // 4,
    )
    text = "\n\n".join(f"## {p.url}\n\n{p.content}" for p in job.pages) or "(no pages read)"
    hint = f"GET /v1/crawl/{job.id} has every page whole"
    text = cap_text(text, max(0, max_chars - _json_size(structured)), hint)
    return CallToolResult(
        content=[TextContent(type="text", text=text)], structured_content=structured
    )


async def _no_progress(done: float, message: str) -> None:
    return None


async def call_tool(
    spec: ToolSpec,
    service: SearchService,
    jobs: JobBook,
    arguments: dict[str, Any],
    max_chars: int,
    progress: Progress = _no_progress,
    client: str | None = None,
    key: str | None = None,
    access: CollectionAccess = EVERY,
    crawls: CrawlBook | None = None,
) -> CallToolResult:
    """Validate the arguments against the tool's schema and run it (for the API key
    ``key``, if any); errors become tool errors with a clear message. ``client``: who asks
    (``None`` over stdio, whose one client owns the process), for its share of the
    extraction workers; ``access``: the collections its key may search (all over
    stdio)."""
    try:
        spec.validate(arguments)
        if spec.name == "web_search":
            return await run_web_search(service, arguments, max_chars, client, access)
        if spec.name == "deep_research":
            return await run_deep_research(
                service, jobs, arguments, max_chars, progress, client, key, access
            )
        if spec.name == "crawl_site" and crawls is not None:
            return await run_crawl_site(
                service, crawls, arguments, max_chars, progress, client, key
            )
        return await run_fetch_page(service, arguments, max_chars, client)
    except InvalidRequest as exc:
        return _error(f"invalid arguments: {exc}")
    except AllBackendsFailed as exc:
        failed = describe_failures(exc.failures)
        return _error(f"web search failed: every backend failed ({failed or 'none enabled'})")
    except TooManyJobs as exc:
        return _error(f"{spec.name}: {exc} (in about {exc.retry_after_s} s)")
    except SearcherError as exc:
        log.warning("tool %s failed: %s", spec.name, exc)
        return _error(f"{spec.name} failed: {exc}")
    except Exception:
        log.exception("tool %s crashed", spec.name)
        return _error(f"{spec.name} failed: internal error; see the server log")


def build_server(
    get_service: ServiceGetter,
    get_jobs: Callable[[], JobBook],
    settings: Settings,
    get_crawls: Callable[[], CrawlBook] | None = None,
) -> Server[Any]:
    """The MCP server; ``get_service`` yields the running ``SearchService`` at call time."""
    max_chars = settings.mcp.max_output_chars
    specs = {spec.name: spec for spec in mcp_tool_specs(max_chars, settings.limits.max_results)}

    async def list_tools(
        ctx: ServerRequestContext[Any], params: PaginatedRequestParams | None
    ) -> ListToolsResult:
        tools = [
            Tool(name=s.name, description=s.description, input_schema=s.parameters)
            for s in specs.values()
        ]
        return ListToolsResult(tools=tools)

    async def on_call_tool(
        ctx: ServerRequestContext[Any], params: CallToolRequestParams
    ) -> CallToolResult:
        spec = specs.get(params.name)
        if spec is None:
            return _error(f"unknown tool {params.name!r}; tools: {', '.join(specs)}")

        async def progress(done: float, message: str) -> None:
            # A no-op unless the client asked for progress (a progressToken).
            await ctx.session.report_progress(done, None, message)

        service, jobs = get_service(), get_jobs()
        # Over HTTP the exchange's request says who asks, as on every other route, and
        # came in with an API key (auth on): a job it starts is that key's.
        scope = getattr(ctx.request, "scope", None)
        client = client_identity(scope) if isinstance(scope, dict) else None
        key = key_of(scope) if isinstance(scope, dict) else None
        access = collection_access(scope) if isinstance(scope, dict) else EVERY
        arguments = params.arguments or {}
        crawls = get_crawls() if get_crawls is not None else None
        return await call_tool(
            spec, service, jobs, arguments, max_chars, progress, client, key, access, crawls
        )

    return Server(
        "searcher",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=on_call_tool,
    )


# --- transports --------------------------------------------------------------------------


async def serve_stdio(settings: Settings) -> None:
    """Serve MCP on stdin/stdout until the client closes them. A line that is no JSON-RPC
    message is answered with a JSON-RPC error (null id), as over HTTP: the SDK drops such
    lines unanswered, and a client waiting for its id would wait for ever."""
    async with open_service(settings) as runtime:
        service = runtime.service
        jobs = JobBook(service.parts, settings.research, runtime.state, service.sessions)
        crawls = CrawlBook(runtime.service.parts, runtime.state)
        server = build_server(lambda: runtime.service, lambda: jobs, settings, lambda: crawls)
        try:
            async with stdio_server() as (read_stream, write_stream):
                sent, received = anyio.create_memory_object_stream[Any](0)
                async with anyio.create_task_group() as tasks:
                    tasks.start_soon(_answer_bad_lines, read_stream, sent, write_stream)
                    options = server.create_initialization_options()
                    await server.run(received, write_stream, options)
        finally:
            await jobs.close()
            await crawls.close()


async def _answer_bad_lines(lines: Any, to_server: Any, to_client: Any) -> None:
    """Pass the SDK's messages on to the server; answer what it could not read (it sends
    the exception instead), requests it took for notifications (a malformed id) and tool
    calls whose params are none (``tool_call_error``)."""
    async with to_server:
        async for item in lines:
            refusal = stdio_refusal(item)
            if refusal is None:
                await to_server.send(item)
            else:
                await to_client.send(SessionMessage(refusal))


def stdio_refusal(item: Any) -> JSONRPCError | None:
    """The error answering what the SDK's stdio reader passed on, or None for a message
    the server should get."""
    problem = stdio_problem(item)
    if problem is not None:
        code, reason = problem
        return JSONRPCError(jsonrpc="2.0", id=None, error=ErrorData(code=code, message=reason))
    message = getattr(item, "message", None)
    if not isinstance(message, JSONRPCRequest):
        return None
    refused = tool_call_error(message.model_dump(by_alias=True, mode="json"))
    return None if refused is None else JSONRPCError.model_validate(refused)


def stdio_problem(item: Any) -> tuple[int, str] | None:
    """The JSON-RPC error code and reason for what the SDK's stdio reader passed on, or
    None for a message the server should get."""
    if isinstance(item, pydantic_core.ValidationError):
        errors = item.errors()
        if errors and errors[0]["type"] == "json_invalid":
            return PARSE_ERROR, "Parse error: the line is not JSON"
        decoded = errors[0]["input"] if errors else None
        return INVALID_REQUEST, message_problem(decoded) or NOT_A_MESSAGE
    if isinstance(item, Exception):
        return INVALID_REQUEST, NOT_A_MESSAGE
    message = getattr(item, "message", None)
    method = getattr(message, "method", None)
    if isinstance(message, JSONRPCNotification) and not str(method).startswith(NOTIFICATION):
        # A request whose id the SDK could not read (1.5, null, true) became a notification.
        return INVALID_REQUEST, "id must be a string or an integer (or absent, for a notification)"
    return None


def mount_mcp(app: FastAPI, settings: Settings) -> None:
    """Mount MCP over streamable HTTP at ``/mcp`` when ``mcp.http`` is on; the tools use
    the service of ``app.state.runtime``. ``mcp_sessions(app)`` must run in the lifespan."""
    if not settings.mcp.http:
        return
    server = build_server(
        lambda: app.state.runtime.service, lambda: app.state.jobs, settings,
        lambda: app.state.crawls,
    )  # fmt: skip
    # Stateless: the tools need no session, and any worker process of `searcher serve
    # --workers N` can answer any request. Answers stream (SSE) to clients that accept it,
    # so that deep_research's progress notifications reach them (a JSON-only client gets
    # 406, as the MCP spec allows). The SDK's own DNS-rebinding protection checks Host and
    # Origin against the app's list as well.
    manager = StreamableHTTPSessionManager(
        app=server,
        stateless=True,
        json_response=False,
        security_settings=transport_security(settings),
        max_request_body_size=settings.server.max_body_bytes,
    )
    app.state.mcp_sessions = manager
    # No exchange may outlive the longest request the server allows.
    max_exchange_s = settings.limits.max_total_time_ms / 1000 + EXCHANGE_GRACE_S
    endpoint = McpEndpoint(
        StreamableHTTPASGIApp(manager), max_exchange_s, settings.server.max_body_bytes
    )
    app.router.routes.append(Route("/mcp", endpoint=endpoint, include_in_schema=False))


def transport_security(settings: Settings) -> TransportSecuritySettings:
    """The SDK's Host/Origin check with ``server.allowed_hosts`` and the CORS origins, in
    its notation (``name:*`` for any port). It cannot express wildcard names; with one
    listed it is off, and the app's own check (``HostOriginMiddleware``) stands alone."""
    entries = settings.server.served_hosts()
    cors = settings.server.cors.allow_origins
    if any("*" in split_host(e)[0] for e in entries) or "*" in cors:
        return TransportSecuritySettings(enable_dns_rebinding_protection=False)
    hosts: list[str] = []
    origins: list[str] = list(cors)
    for entry in entries:
        name, port = split_host(entry)
        shown = [f"{name}:{port}"] if port not in (None, "*") else [name, f"{name}:*"]
        hosts += shown
        origins += [f"{scheme}://{h}" for h in shown for scheme in ("http", "https")]
    return TransportSecuritySettings(allowed_hosts=hosts, allowed_origins=origins)


# --- the shape of a posted message ------------------------------------------------------

NOT_A_MESSAGE = 'not a JSON-RPC 2.0 request: needs jsonrpc "2.0" and a method'
NOTIFICATION = "notifications/"  # what every MCP notification's method starts with


def _is_int(value: Any) -> bool:
    # bool is an int in Python, but true/false is no number in JSON.
    return isinstance(value, int) and not isinstance(value, bool)


def _is_id(value: Any) -> bool:
    # JSON-RPC 2.0 ids are strings or numbers; MCP narrows the numbers to integers.
    return isinstance(value, str) or _is_int(value)


def _request_problem(message: dict[str, Any]) -> str | None:
    # A request or, without an id, a notification.
    if "id" in message and not _is_id(message["id"]):
        return "id must be a string or an integer (or absent, for a notification)"
    if not isinstance(message["method"], str):
        return "method must be a string"
    if message.get("params") is not None and not isinstance(message["params"], dict):
        return "params must be an object"
    return None


def _response_problem(message: dict[str, Any]) -> str | None:
    if "id" not in message:
        return "a response needs an id"
    if "result" in message:
        if not _is_id(message["id"]):
            return "id must be a string or an integer"
        return None if isinstance(message["result"], dict) else "result must be an object"
    # An error about a message whose id could not be read has a null id (JSON-RPC §5).
    if message["id"] is not None and not _is_id(message["id"]):
        return "id must be a string, an integer or null"
    error = message["error"]
    if not (
        isinstance(error, dict)
        and _is_int(error.get("code"))
        and isinstance(error.get("message"), str)
    ):
        return "error must be an object with an integer code and a string message"
    return None


def message_problem(decoded: Any) -> str | None:
    """Why a decoded ``/mcp`` body is no JSON-RPC 2.0 message the MCP SDK reads as sent,
    in one line; None if it is one. The SDK would take a request with a malformed id for a
    notification (202, never answered) and explain other shapes with pydantic's dump."""
    if isinstance(decoded, list):
        # MCP 2025-06-18 dropped JSON-RPC batching, and the SDK takes none.
        return "batches are not supported: send one JSON-RPC message per request"
    if not isinstance(decoded, dict):
        return "not a JSON-RPC 2.0 message: the body must be a JSON object"
    if decoded.get("jsonrpc") != "2.0":
        return NOT_A_MESSAGE
    answer = [key for key in ("result", "error") if key in decoded]
    if "method" in decoded:
        # Which one a message with both is depends on the SDK's union; JSON-RPC has none.
        return "a request has no result or error" if answer else _request_problem(decoded)
    if len(answer) == 2:
        return "a response has a result or an error, not both"
    return _response_problem(decoded) if answer else NOT_A_MESSAGE


def tool_call_error(decoded: Any) -> dict[str, Any] | None:
    """The JSON-RPC error (Invalid params, with the request's id) for a ``tools/call``
    request whose params are no tool call, naming the field; None for any other message.
    The SDK answers such params with "Invalid request parameters" and no reason at all,
    arguments sent as a string of JSON (as OpenAI's tool calls carry them) included."""
    if not (isinstance(decoded, dict) and decoded.get("method") == "tools/call"):
        return None
    params = decoded.get("params")
    reason = None
    if not isinstance(params, dict):
        reason = "params must be an object with the tool's name and its arguments"
    else:
        try:
            CallToolRequestParams.model_validate(params, by_alias=True)
        except ValidationError as exc:
            problem = InvalidRequest.from_validation(exc.errors())
            reason = f"params.{problem.field}: {problem.message}"
    if reason is None:
        return None
    error = {"code": INVALID_PARAMS, "message": f"Invalid params: {reason}"}
    return {"jsonrpc": "2.0", "id": decoded.get("id"), "error": error}


async def send_invalid_request(send: Send, reason: str) -> None:
    """A JSON-RPC Invalid Request error with a null id (the id could not be determined),
    with the status and headers the SDK gives its own."""
    error = {"code": INVALID_REQUEST, "message": reason}
    await send_json(send, 400, {"jsonrpc": "2.0", "id": None, "error": error})


async def send_json(send: Send, status: int, message: dict[str, Any]) -> None:
    """A JSON-RPC message as a whole ``application/json`` response."""
    body = orjson.dumps(message)
    headers = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ]
    await send({"type": "http.response.start", "status": status, "headers": headers})
    await send({"type": "http.response.body", "body": body})


class McpEndpoint:
    """``/mcp`` as the app serves it: POST only, each message checked, each exchange
    bounded in time.

    In stateless mode every tool call is one POST answered on its own response (a short
    event stream); a GET would only open a standalone stream that nothing ever writes to
    and that never ends (2,000 of them held 170 MB), so GET and DELETE get 405, as the MCP
    spec allows. A body that is JSON but no well-formed JSON-RPC message gets an Invalid
    Request error here (``message_problem``); anything else goes to the SDK unchanged. An
    exchange still running after ``max_exchange_s`` is cancelled and its response ended."""

    def __init__(self, app: ASGIApp, max_exchange_s: float, max_body_bytes: int) -> None:
        self.app = app
        self.max_exchange_s = max_exchange_s
        self.max_body_bytes = max_body_bytes

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http" or scope["method"] != "POST":
            await send_error(
                send,
                405,
                "method_not_allowed",
                "MCP here is stateless: POST JSON-RPC messages; no event stream is offered",
                headers={"Allow": "POST"},
            )
            return
        started = ended = False

        async def tracked(message: Message) -> None:
            nonlocal started, ended
            if message["type"] == "http.response.start":
                started = True
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                ended = True
            await send(message)

        with anyio.move_on_after(self.max_exchange_s) as bounded:
            await self._exchange(scope, receive, tracked)
        if not bounded.cancelled_caught or ended:
            return
        log.warning("MCP exchange ended after %.0f s", self.max_exchange_s)
        if not started:
            await send_error(send, 504, "timeout", "the MCP exchange took too long", scope=scope)
        else:
            await send({"type": "http.response.body", "body": b"", "more_body": False})

    async def _exchange(self, scope: Scope, receive: Receive, send: Send) -> None:
        received: Received = []
        # Bounded here too: the app's BodyLimitMiddleware cuts a body there already.
        body = await read_body(receive, received, self.max_body_bytes)
        decoded = self._decoded(body)
        problem = message_problem(decoded) if decoded is not None else None
        if problem is not None:
            await send_invalid_request(send, problem)
            return
        refused = tool_call_error(decoded)
        if refused is not None:  # an answer to the request, as the SDK's own error would be
            await send_json(send, 200, refused)
            return
        await self.app(scope, replaying(received, receive), send)

    @staticmethod
    def _decoded(body: bytes | None) -> Any:
        # A body cut short, too large or not JSON is the SDK's to answer (413, parse
        # error); it parses with pydantic_core too, so both read the same message.
        if body is None:
            return None
        try:
            return pydantic_core.from_json(body)
        except ValueError:
            return None


@contextlib.asynccontextmanager
async def mcp_sessions(app: FastAPI) -> AsyncIterator[None]:
    """Run the MCP session manager mounted by ``mount_mcp``, if any, for the app's life."""
    manager: StreamableHTTPSessionManager | None = getattr(app.state, "mcp_sessions", None)
    if manager is None:
        yield
        return
    async with manager.run():
        yield
