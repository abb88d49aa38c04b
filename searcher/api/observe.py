"""Per HTTP request: a request id, latency per route in the metrics, one JSON log line.

A pure ASGI middleware. A request still running when the server stops (its grace period
over) gets a JSON 503 ``shutting_down``, not uvicorn's plain-text 500. What the HTTP server
refuses before the app sees it (``searcher.api.http_server``) is logged here too, with the
route ``protocol``. The request id is the client's ``X-Request-ID`` when it is a short
token, else a new one; it is echoed in the response. Routes add what only they know (the
backends used, the cache kind, the query) to ``request.state.log``; the query text is
logged only when ``logging.queries`` is on.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
import uuid
from collections.abc import Iterator, Sequence
from typing import Any

from starlette.routing import BaseRoute, Match
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from searcher.api.access_log import AccessEntry, AccessLogWriter, access_line
from searcher.api.errors import send_error
from searcher.api.metrics import Metrics

log = logging.getLogger("searcher.access")
REQUEST_ID_HEADER = b"x-request-id"
_TOKEN = re.compile(rb"[A-Za-z0-9._:-]{1,128}")
QUERY_FIELD = "query"
PROTOCOL_ROUTE = "protocol"
# The scope extension the HTTP server sets (``{"status": 408}``) when it answered a request
# the app was working on (a body that stalled): the app's own answer never went out.
SERVER_ANSWER = "searcher.server_answer"


def request_id(scope: Scope) -> str:
    """The client's request id if it is a plain token of at most 128 characters, else new."""
    for name, value in scope.get("headers", ()):
        if name == REQUEST_ID_HEADER and _TOKEN.fullmatch(value):
            return value.decode("ascii")
    return uuid.uuid4().hex


def client_identity(scope: Scope) -> str | None:
    """Who is asking, for fair shares of shared work: the API key's id when keys are on,
    else the peer address (behind a proxy, the forwarded one uvicorn was told to trust)."""
    key_id = scope.get("state", {}).get("key_id")
    if key_id:
        return f"key:{key_id}"
    client = scope.get("client")
    return f"addr:{client[0]}" if client else None


def route_of(scope: Scope, routes: Sequence[BaseRoute] = ()) -> str:
    """The matched route's template (``/v1/research/{id}``), so that labels stay few. A
    request refused before routing (a missing key, a foreign Host) is labelled with the
    route it was for."""
    route = scope.get("route")
    if route is None:
        route = next((r for r in _leaves(routes) if r.matches(scope)[0] is Match.FULL), None)
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"


def _leaves(routes: Sequence[BaseRoute]) -> Iterator[BaseRoute]:
    """The routes that carry a path template, inside included routers too (FastAPI keeps
    an included router as one entry whose own routes are its ``original_router``'s)."""
    for route in routes:
        if isinstance(getattr(route, "path", None), str):
            yield route
            continue
        inner = getattr(getattr(route, "original_router", route), "routes", None)
        if inner:
            yield from _leaves(inner)


class ObserveMiddleware:
    def __init__(
        self,
        app: ASGIApp,
        metrics: Metrics | None,
        access_log: AccessLogWriter | None,
        log_queries: bool,
        routes: Sequence[BaseRoute] = (),
    ) -> None:
        self.app = app
        self.routes = routes  # the app's own list: routes added later are in it too
        self.metrics = metrics
        self.access_log = access_log
        self.log_queries = log_queries

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        rid = request_id(scope)
        state: dict[str, Any] = scope.setdefault("state", {})
        state["request_id"] = rid
        status = 500  # what a crash before the response started amounts to
        started = time.perf_counter()
        recorded = False

        def record() -> None:
            nonlocal recorded, status
            recorded = True
            answered = scope.get("extensions", {}).get(SERVER_ANSWER)
            if answered:
                status = answered["status"]
            seconds = time.perf_counter() - started
            route = route_of(scope, self.routes)
            if self.metrics is not None:
                self.metrics.http_request(route, scope["method"], status, seconds)
            if self.access_log is not None and log.isEnabledFor(logging.INFO):
                self.access_log.write(self._entry(scope, state, rid, route, status, seconds))

        started_response = False

        async def send_observed(message: Message) -> None:
            nonlocal status, started_response
            if message["type"] == "http.response.start":
                started_response = True
                status = message["status"]
                headers = list(message.get("headers", ()))
                headers.append((REQUEST_ID_HEADER, rid.encode("ascii")))
                message = {**message, "headers": headers}
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                record()  # before the last byte goes out: the client never outruns the log
            await send(message)

        try:
            await self.app(scope, receive, send_observed)
        except asyncio.CancelledError:
            # The server stops and its grace period is over. An answer that has started
            # can only be cut short; one that has not is a clean 503, and the task ends
            # here rather than with uvicorn's plain-text 500 and a traceback.
            if started_response:
                raise
            await send_error(send_observed, 503, "shutting_down",
                             "the server is shutting down; retry the request",
                             headers={"connection": "close"}, scope=scope)  # fmt: skip
        finally:
            if not recorded:
                record()

    def _entry(
        self, scope: Scope, state: dict[str, Any], rid: str, route: str, status: int,
        seconds: float,
    ) -> AccessEntry:  # fmt: skip
        extra = dict(state.get("log") or {})
        if not self.log_queries:
            extra.pop(QUERY_FIELD, None)
        client = scope.get("client")
        return AccessEntry(
            time.time(), rid, state.get("key_id"), client[0] if client else None,
            scope["method"], route, scope.get("path"), status, seconds, extra,
        )  # fmt: skip


def log_refusal(
    client: tuple[str, int] | None, method: str | None, path: str | None, status: int,
    seconds: float,
) -> None:  # fmt: skip
    """The access line of a request the HTTP server answered itself, before the app saw
    it: unparsable (400), headers too large (431) or too slow (408), too many connections
    (503). Method and path are null where they were never read. Written at once: these
    are few, and come from the server, which holds no writer of the app's."""
    if log.isEnabledFor(logging.INFO):
        client_ip = client[0] if client else None
        entry = AccessEntry(time.time(), uuid.uuid4().hex, None, client_ip, method,
                            PROTOCOL_ROUTE, path, status, seconds, {})  # fmt: skip
        log.info(access_line(entry))
