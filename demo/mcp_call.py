"""``python -m demo.mcp_call "what is bm25"``: an MCP client, as an agent would be, against
the demo's searcher (``/mcp``, streamable HTTP): it lists the tools searcher offers and
calls ``web_search``, printing what an agent would get back."""

from __future__ import annotations

import argparse
import asyncio
import sys
from dataclasses import dataclass

DEFAULT_URL = "http://127.0.0.1:8080/mcp"


@dataclass(frozen=True)
class ToolCall:
    """What one MCP session saw: the tools offered and one ``web_search`` reply."""

    tools: list[str]
    is_error: bool
    text: str
    items: int


async def search_over_mcp(url: str, query: str, max_results: int = 3) -> ToolCall:
    """Connect to ``url``, list the tools and call ``web_search`` for ``query``."""
    from mcp import Client

    async with Client(url) as client:
        tools = [tool.name for tool in (await client.list_tools()).tools]
        result = await client.call_tool("web_search", {"query": query, "max_results": max_results})
    text = "".join(getattr(block, "text", "") for block in result.content)
    structured = result.structured_content or {}
    return ToolCall(tools, bool(result.is_error), text, len(structured.get("items") or []))


def first_cause(exc: BaseException) -> BaseException:
    """The first leaf of an exception group (the SDK's task groups wrap a refused
    connection in one), or ``exc`` itself."""
    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    return exc


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m demo.mcp_call", description=__doc__)
    parser.add_argument("query", help="what web_search is asked")
    parser.add_argument(
        "--url", default=DEFAULT_URL, help=f"searcher's MCP endpoint ({DEFAULT_URL})"
    )
    args = parser.parse_args(argv)
    try:
        call = asyncio.run(search_over_mcp(args.url, args.query))
    except Exception as exc:  # a demo command: one line, not a traceback
        cause = first_cause(exc)
        print(f"mcp_call: cannot call {args.url}: {cause or type(cause).__name__}", file=sys.stderr)
        return 1
    print(f"MCP tools at {args.url}: {', '.join(call.tools)}")
    print(
        f"web_search({args.query!r}) -> {call.items} results{' (error)' if call.is_error else ''}\n"
    )
    print(call.text)
    return 1 if call.is_error else 0


if __name__ == "__main__":
    sys.exit(main())
