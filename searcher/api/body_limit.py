"""Refuse request bodies over a size limit with 413, before they are parsed.

The 413 closes the connection (``connection: close``): the rest of the body is never read,
where a kept-alive connection would go on reading and discarding it."""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass

from starlette.types import ASGIApp, Message, Receive, Scope, Send

from searcher.api.errors import send_error

BODY_CUT = "body_cut"  # request.state's flag: the body was over its limit, cut short


@dataclass(frozen=True)
class RouteLimit:
    """A route whose bodies have their own limit (file uploads), and the setting that
    sets it (named in the 413)."""

    method: str
    path: re.Pattern[str]
    max_bytes: int
    setting: str


class BodyLimitMiddleware:
    """Pure ASGI middleware: checks Content-Length, and counts streamed bytes as well
    (a chunked body has no Content-Length)."""

    def __init__(self, app: ASGIApp, max_bytes: int, routes: Sequence[RouteLimit] = ()) -> None:
        self.app = app
        self.max_bytes = max_bytes
        self.routes = tuple(routes)

    def _limit(self, scope: Scope) -> tuple[int, str | None]:
        for route in self.routes:
            if scope.get("method") == route.method and route.path.fullmatch(scope["path"]):
                return route.max_bytes, route.setting
        return self.max_bytes, None

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        limit, setting = self._limit(scope)
        for name, value in scope.get("headers", []):
            if name == b"content-length" and value.isdigit() and int(value) > limit:
                await self._refuse(scope, send, limit, setting)
                return
        received = 0
        exceeded = False

        async def limited_receive() -> Message:
            # Frameworks turn errors raised while reading the body into 400s, so instead
            # the body is cut short here and the app's answer replaced by a 413 below.
            nonlocal received, exceeded
            if exceeded:
                return {"type": "http.request", "body": b"", "more_body": False}
            message = await receive()
            if message["type"] == "http.request":
                received += len(message.get("body", b""))
                if received > limit:
                    exceeded = True
                    # A route that acts on what it received (an upload stores files)
                    # reads this first: a body cut short may still parse.
                    scope.setdefault("state", {})[BODY_CUT] = True
                    return {"type": "http.request", "body": b"", "more_body": False}
            return message

        async def guarded_send(message: Message) -> None:
            if not exceeded:
                await send(message)
            elif message["type"] == "http.response.start":
                await self._refuse(scope, send, limit, setting)

        await self.app(scope, limited_receive, guarded_send)

    async def _refuse(self, scope: Scope, send: Send, limit: int, setting: str | None) -> None:
        message = f"request body over {limit} bytes ({setting or 'server.max_body_bytes'})"
        await send_error(send, 413, "body_too_large", message, {"connection": "close"},
                         scope, setting)  # fmt: skip
