"""A tiny raw-ASGI toolkit for the testbed: request object, router, response helpers.

Raw ASGI (rather than a framework) keeps the per-request overhead tiny, which matters for
the overhead benchmark, and gives exact control over misbehaviour: streams stop as soon as
the client goes away, and waits end when the client disconnects or the server shuts down.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import re
from collections.abc import AsyncIterator, Awaitable, Callable, Iterable
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qsl

Scope = dict[str, Any]
Message = dict[str, Any]
Receive = Callable[[], Awaitable[Message]]
Send = Callable[[Message], Awaitable[None]]
Handler = Callable[["Request"], Awaitable[None]]

HTML = "text/html; charset=utf-8"
JSON = "application/json"
TEXT = "text/plain; charset=utf-8"


@dataclass
class Request:
    """One HTTP request as seen by a handler."""

    scope: Scope
    receive: Receive
    send: Send
    app: Any  # the TestbedApp (shared state: counters, shutdown event)
    params: dict[str, str] = field(default_factory=dict)
    _query: dict[str, str] | None = None

    @property
    def path(self) -> str:
        return self.scope["path"]

    @property
    def method(self) -> str:
        return self.scope["method"]

    @property
    def query(self) -> dict[str, str]:
        """Query parameters; a repeated key keeps its last value."""
        if self._query is None:
            raw = self.scope.get("query_string", b"").decode("latin-1")
            self._query = dict(parse_qsl(raw, keep_blank_values=True))
        return self._query

    def header(self, name: str) -> str | None:
        key = name.lower().encode("latin-1")
        for k, v in self.scope["headers"]:
            if k == key:
                return v.decode("latin-1")
        return None

    @property
    def base_url(self) -> str:
        """The server's own origin, e.g. ``http://127.0.0.1:8899``."""
        server = self.scope.get("server")
        if server and server[1] is not None:
            return f"http://{server[0]}:{server[1]}"
        host = self.header("host") or "127.0.0.1"
        return f"http://{host}"

    # ---- responses -------------------------------------------------------------------

    async def respond(
        self,
        status: int,
        body: bytes = b"",
        content_type: str | None = HTML,
        headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        if content_type is not None and status not in (204, 304):
            raw.append((b"content-type", content_type.encode("latin-1")))
        if status in (204, 304):
            body = b""
        else:
            raw.append((b"content-length", str(len(body)).encode()))
        await self.send({"type": "http.response.start", "status": status, "headers": raw})
        await self.send({"type": "http.response.body", "body": body, "more_body": False})

    async def json(self, status: int, data: Any, headers: Iterable[tuple[str, str]] = ()) -> None:
        body = json.dumps(data, ensure_ascii=False).encode("utf-8")
        await self.respond(status, body, JSON, headers)

    async def redirect(self, location: str, status: int = 302) -> None:
        body = f'<html><body><a href="{location}">moved</a></body></html>'.encode()
        await self.respond(status, body, HTML, [("location", location)])

    async def stream(
        self,
        status: int,
        chunks: AsyncIterator[bytes],
        content_type: str | None,
        length: int | None = None,
        headers: Iterable[tuple[str, str]] = (),
    ) -> None:
        """Stream ``chunks``; stop quietly as soon as the client disconnects."""
        raw = [(k.lower().encode("latin-1"), v.encode("latin-1")) for k, v in headers]
        if content_type is not None:
            raw.append((b"content-type", content_type.encode("latin-1")))
        if length is not None:
            raw.append((b"content-length", str(length).encode()))
        gone = asyncio.ensure_future(wait_disconnect(self.receive))
        try:
            await self.send({"type": "http.response.start", "status": status, "headers": raw})
            async for chunk in chunks:
                if gone.done():
                    return
                await self.send({"type": "http.response.body", "body": chunk, "more_body": True})
            if not gone.done():
                await self.send({"type": "http.response.body", "body": b"", "more_body": False})
        finally:
            gone.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await gone

    async def pause(self, seconds: float) -> bool:
        """Wait ``seconds`` without blocking the loop, before answering. True if the wait ran
        its course. False if the client went away first, or if the server began shutting
        down, in which case a 503 has been sent (so shutdown is quick and quiet); either
        way the handler should just return."""
        waiters = [
            asyncio.ensure_future(wait_disconnect(self.receive)),
            asyncio.ensure_future(self.app.shutting_down.wait()),
        ]
        try:
            done, _ = await asyncio.wait(
                waiters, timeout=seconds, return_when=asyncio.FIRST_COMPLETED
            )
        finally:
            for w in waiters:
                w.cancel()
            for w in waiters:
                with contextlib.suppress(asyncio.CancelledError):
                    await w
        if done and waiters[0] not in done:
            await self.respond(503, b"shutting down", TEXT, [("connection", "close")])
        return not done

    async def hang(self) -> None:
        """Never answer (well, not for an hour)."""
        await self.pause(3600.0)


async def wait_disconnect(receive: Receive) -> None:
    while True:
        message = await receive()
        if message["type"] == "http.disconnect":
            return


class Router:
    """Ordered (method set, regex, handler) table; path params via ``{name}`` or
    ``{name:int}`` placeholders (``int`` ones are still passed as strings); ``{name:path}``
    spans slashes."""

    _PLACEHOLDER = re.compile(r"\{(\w+)(?::(\w+))?\}")

    def __init__(self) -> None:
        self.routes: list[tuple[frozenset[str], re.Pattern[str], Handler]] = []

    def add(self, pattern: str, handler: Handler, methods: Iterable[str] = ("GET", "HEAD")) -> None:
        def repl(m: re.Match[str]) -> str:
            kind = m.group(2)
            inner = {"int": r"-?\d+", "path": r".+"}.get(kind or "", r"[^/]+")
            return f"(?P<{m.group(1)}>{inner})"

        regex = (
            "^"
            + self._PLACEHOLDER.sub(
                repl, re.escape(pattern).replace(r"\{", "{").replace(r"\}", "}")
            )
            + "$"
        )
        self.routes.append((frozenset(methods), re.compile(regex), handler))

    def route(
        self, pattern: str, methods: Iterable[str] = ("GET", "HEAD")
    ) -> Callable[[Handler], Handler]:
        def deco(fn: Handler) -> Handler:
            self.add(pattern, fn, methods)
            return fn

        return deco

    def include(self, other: Router) -> None:
        self.routes.extend(other.routes)

    def match(self, method: str, path: str) -> tuple[Handler | None, dict[str, str], bool]:
        """(handler, params, path_matched_other_method)."""
        other_method = False
        for methods, regex, handler in self.routes:
            m = regex.match(path)
            if m is None:
                continue
            if method in methods:
                return handler, m.groupdict(), False
            other_method = True
        return None, {}, other_method
