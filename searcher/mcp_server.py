"""The MCP server: ``web_search`` and ``fetch_page`` as MCP tools, over stdio
(``searcher mcp``) or streamable HTTP (mounted at ``/mcp`` by the HTTP app).

Built on the official SDK's low-level ``Server`` so that the tools' input schemas are the
ones in ``searcher.tool_specs`` (also served to OpenAI clients) and arguments are checked
against exactly those. Every tool result stays within ``mcp.max_output_chars``; every
failure is a tool error with a one-line reason, never a traceback.
"""

from __future__ import annotations

import contextlib
import json
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import FastAPI
from mcp.server import Server, ServerRequestContext
from mcp.server.stdio import stdio_server
from mcp.server.streamable_http_manager import StreamableHTTPASGIApp, StreamableHTTPSessionManager
from mcp.types import (
    CallToolRequestParams,
    CallToolResult,
    ListToolsResult,
    PaginatedRequestParams,
    TextContent,
    Tool,
)
from pydantic import ValidationError
from starlette.routing import Route

from searcher import __version__
from searcher.config import Settings
from searcher.contract import FetchPageResponse, SearchRequest
from searcher.errors import AllBackendsFailed, InvalidRequest, SearcherError
from searcher.fetch_page import fetch_page
from searcher.runtime import open_service
from searcher.service import SearchService
from searcher.tool_specs import ToolSpec, search_body, tool_specs

log = logging.getLogger("searcher.mcp")

# Room fetch_page keeps under the output cap for the line that says how to get the rest
# (<= 130 characters) and the structured paging and fetch facts (<= 350).
FETCH_ROOM = 600
INSTRUCTIONS = (
    "web_search returns a numbered context pack of web results (use it as evidence and "
    "cite the URLs); fetch_page reads one page's main text, in slices for long pages."
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


def _error(message: str) -> CallToolResult:
    return CallToolResult(content=[TextContent(type="text", text=message)], is_error=True)


# --- the tools ---------------------------------------------------------------------------


def _search_request(arguments: dict[str, Any], pack_chars: int) -> SearchRequest:
    try:
        return SearchRequest.model_validate(search_body(arguments, pack_chars))
    except ValidationError as exc:
        err = exc.errors()[0]
        field = ".".join(str(p) for p in err["loc"])
        raise InvalidRequest(field, str(err["msg"]).removeprefix("Value error, ")) from exc


async def run_web_search(
    service: SearchService, arguments: dict[str, Any], max_chars: int
) -> CallToolResult:
    """The context pack as text, the items (without page text) as structured content.
    Clients may show the model both, so together they stay within ``max_chars``: the
    pack gets at most half, the items what the pack leaves."""
    pack_chars = min(service.settings.budget.max_context_chars, max_chars // 2)
    response = await service.search(_search_request(arguments, pack_chars))
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


async def run_fetch_page(
    service: SearchService, arguments: dict[str, Any], max_chars: int
) -> CallToolResult:
    """The slice of the page's text as text, the paging and fetch facts as structured
    content (together within ``max_chars``); a page that could not be read is a tool
    error saying why."""
    wanted = arguments.get("max_chars", max_chars)
    result = await fetch_page(
        service,
        arguments["url"],
        max(1, min(wanted, max_chars - FETCH_ROOM)),
        arguments.get("start_char", 0),
    )
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


async def call_tool(
    spec: ToolSpec, service: SearchService, arguments: dict[str, Any], max_chars: int
) -> CallToolResult:
    """Validate the arguments against the tool's schema and run it; errors become tool
    errors with a clear message."""
    try:
        spec.validate(arguments)
        if spec.name == "web_search":
            return await run_web_search(service, arguments, max_chars)
        return await run_fetch_page(service, arguments, max_chars)
    except InvalidRequest as exc:
        return _error(f"invalid arguments: {exc}")
    except AllBackendsFailed as exc:
        failed = "; ".join(f"{f.backend}: {f.reason}" for f in exc.failures)
        return _error(f"web search failed: every backend failed ({failed or 'none enabled'})")
    except SearcherError as exc:
        log.warning("tool %s failed: %s", spec.name, exc)
        return _error(f"{spec.name} failed: {exc}")
    except Exception:
        log.exception("tool %s crashed", spec.name)
        return _error(f"{spec.name} failed: internal error; see the server log")


def build_server(get_service: ServiceGetter, settings: Settings) -> Server[Any]:
    """The MCP server; ``get_service`` yields the running ``SearchService`` at call time."""
    max_chars = settings.mcp.max_output_chars
    specs = {spec.name: spec for spec in tool_specs(max_chars)}

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
        return await call_tool(spec, get_service(), params.arguments or {}, max_chars)

    return Server(
        "searcher",
        version=__version__,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=on_call_tool,
    )


# --- transports --------------------------------------------------------------------------


async def serve_stdio(settings: Settings) -> None:
    """Serve MCP on stdin/stdout until the client closes them."""
    async with open_service(settings) as runtime:
        server = build_server(lambda: runtime.service, settings)
        async with stdio_server() as (read_stream, write_stream):
            await server.run(read_stream, write_stream, server.create_initialization_options())


def mount_mcp(app: FastAPI, settings: Settings) -> None:
    """Mount MCP over streamable HTTP at ``/mcp`` when ``mcp.http`` is on; the tools use
    the service of ``app.state.runtime``. ``mcp_sessions(app)`` must run in the lifespan."""
    if not settings.mcp.http:
        return
    server = build_server(lambda: app.state.runtime.service, settings)
    # Stateless, JSON answers: the tools need no session, and any worker process of
    # `searcher serve --workers N` can answer any request.
    manager = StreamableHTTPSessionManager(app=server, stateless=True, json_response=True)
    app.state.mcp_sessions = manager
    app.router.routes.append(
        Route("/mcp", endpoint=StreamableHTTPASGIApp(manager), include_in_schema=False)
    )


@contextlib.asynccontextmanager
async def mcp_sessions(app: FastAPI) -> AsyncIterator[None]:
    """Run the MCP session manager mounted by ``mount_mcp``, if any, for the app's life."""
    manager: StreamableHTTPSessionManager | None = getattr(app.state, "mcp_sessions", None)
    if manager is None:
        yield
        return
    async with manager.run():
        yield
