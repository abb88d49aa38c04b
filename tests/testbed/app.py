"""The testbed's one ASGI app: every route, the request log and the counters.

Introspection routes (not logged themselves):

- ``GET /_log``    the request log as JSON: ``[{"path", "query", "headers"}, ...]``
- ``GET /_bodies`` the JSON bodies recorded by routes that keep them (the scripted chat
                   API): ``[{"path", "body"}, ...]``
- ``POST /_reset`` clear the log, the bodies and the flaky counters
"""

from __future__ import annotations

import asyncio
import threading
from collections import deque
from collections.abc import Hashable
from typing import Any, NamedTuple

from . import (
    blocked,
    brave,
    browser_pages,
    chat,
    crawl_site,
    hops,
    hostile,
    misbehaviour,
    openai_compat,
    pages,
    pdf_bombs,
    pdfs,
    rerank,
    searxng,
    site,
)
from .asgi import TEXT, Receive, Request, Router, Scope, Send


class LoggedRequest(NamedTuple):
    """One logged request: path (no query string), query params (last value wins) and
    headers (lower-case names; repeated headers joined with ", ")."""

    path: str
    query: dict[str, str]
    headers: dict[str, str]


_INTROSPECTION = frozenset({"/_log", "/_bodies", "/_reset"})


class TestbedApp:
    """ASGI app. ``log`` and ``reset()`` are safe to use from other threads."""

    __test__ = False  # not a pytest test class

    def __init__(self, log_limit: int = 10_000) -> None:
        self.router = Router()
        for module in (
            pages, misbehaviour, searxng, brave, openai_compat, chat, blocked, hostile, pdfs,
            pdf_bombs, rerank, site, browser_pages, crawl_site, hops,
        ):  # fmt: skip
            self.router.include(module.router)
        self.router.add("/_log", self._log_route)
        self.router.add("/_bodies", self._bodies_route)
        self.router.add("/_reset", self._reset_route, methods=("POST",))
        self._log: deque[LoggedRequest] = deque(maxlen=log_limit)
        self._bodies: deque[dict[str, Any]] = deque(maxlen=log_limit)
        self._counters: dict[Hashable, int] = {}
        self._lock = threading.Lock()
        # Set (from the server's loop) when the server begins to stop: waits end at once.
        self.shutting_down = asyncio.Event()

    # ---- state -----------------------------------------------------------------------

    @property
    def log(self) -> list[LoggedRequest]:
        with self._lock:
            return list(self._log)

    @property
    def bodies(self) -> list[dict[str, Any]]:
        with self._lock:
            return list(self._bodies)

    def record_body(self, path: str, body: Any) -> None:
        with self._lock:
            self._bodies.append({"path": path, "body": body})

    def reset(self) -> None:
        with self._lock:
            self._log.clear()
            self._bodies.clear()
            self._counters.clear()

    def count(self, key: Hashable) -> int:
        """Increment and return the counter ``key`` (1 on first call)."""
        with self._lock:
            n = self._counters.get(key, 0) + 1
            self._counters[key] = n
            return n

    def _record(self, scope: Scope, req: Request) -> None:
        headers: dict[str, str] = {}
        for k, v in scope["headers"]:
            name, value = k.decode("latin-1").lower(), v.decode("latin-1")
            headers[name] = f"{headers[name]}, {value}" if name in headers else value
        entry = LoggedRequest(scope["path"], dict(req.query), headers)
        with self._lock:
            self._log.append(entry)

    # ---- ASGI ------------------------------------------------------------------------

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] == "lifespan":
            while True:
                message = await receive()
                if message["type"] == "lifespan.startup":
                    await send({"type": "lifespan.startup.complete"})
                elif message["type"] == "lifespan.shutdown":
                    await send({"type": "lifespan.shutdown.complete"})
                    return
        if scope["type"] != "http":
            return
        req = Request(scope, receive, send, self)
        path = scope["path"]
        if path not in _INTROSPECTION:
            self._record(scope, req)
        handler, params, other_method = self.router.match(scope["method"], path)
        if handler is None:
            if other_method:
                await req.respond(405, b"method not allowed", TEXT)
            else:
                await req.respond(404, b"<html><body><h1>404 Not Found</h1></body></html>")
            return
        req.params = params
        await handler(req)

    async def _log_route(self, req: Request) -> None:
        await req.json(200, [entry._asdict() for entry in self.log])

    async def _bodies_route(self, req: Request) -> None:
        await req.json(200, self.bodies)

    async def _reset_route(self, req: Request) -> None:
        self.reset()
        await req.respond(204)


def build_app(log_limit: int = 10_000) -> TestbedApp:
    return TestbedApp(log_limit=log_limit)


__all__ = ["LoggedRequest", "TestbedApp", "build_app"]
