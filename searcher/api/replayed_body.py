"""A request body read ahead of an ASGI app and handed to it unchanged.

Two front doors look at a body before the app they wrap does: ``POST /v1/search``'s fast
path (``search_route.SearchFastPath``) and the MCP endpoint's message check
(``mcp_server.McpEndpoint``). Each reads the body's messages, keeps them, and replays
them to the app they wrap, so that app sees exactly what the client sent.
"""

from __future__ import annotations

from starlette.types import Message, Receive

Received = list[Message | BaseException]


async def read_body(
    receive: Receive, received: Received, max_bytes: int | None = None
) -> bytes | None:
    """The whole body, every message (or error) kept in ``received``; None when the read
    did not end with the last part of a body: a client gone, an error (e.g. a body limit:
    the wrapped app decides what it is), or more than ``max_bytes``."""
    size = 0
    while True:
        try:
            message = await receive()
        except Exception as exc:
            received.append(exc)
            return None
        received.append(message)
        if message["type"] != "http.request":
            return None
        size += len(message.get("body", b""))
        if max_bytes is not None and size > max_bytes:
            return None
        if not message.get("more_body", False):
            break
    return b"".join(m.get("body", b"") for m in received if isinstance(m, dict))


def replaying(received: Received, receive: Receive) -> Receive:
    """``receive`` that first gives back (or raises again) what was received already."""
    queue = list(received)

    async def replayed() -> Message:
        if queue:
            item = queue.pop(0)
            if isinstance(item, BaseException):
                raise item
            return item
        return await receive()

    return replayed
