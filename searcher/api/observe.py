"""Per HTTP request: a request id, latency per route in the metrics, one JSON log line.

A pure ASGI middleware. The request id is the client's ``X-Request-ID`` when it is a short
token, else a new one; it is echoed in the response. Routes add what only they know (the
backends used, the cache kind, the query) to ``request.state.log``; the query text is
logged only when ``logging.queries`` is on.
"""

from __future__ import annotations

import logging
import re
import time
import uuid
from datetime import UTC, datetime
from typing import Any

import orjson
from starlette.types import ASGIApp, Message, Receive, Scope, Send

from searcher.metrics import Metrics

log = logging.getLogger("searcher.access")
REQUEST_ID_HEADER = b"x-request-id"
_TOKEN = re.compile(rb"[A-Za-z0-9._:-]{1,128}")
QUERY_FIELD = "query"


def request_id(scope: Scope) -> str:
    """The client's request id if it is a plain token of at most 128 characters, else new."""
    for name, value in scope.get("headers", ()):
        if name == REQUEST_ID_HEADER and _TOKEN.fullmatch(value):
            return value.decode("ascii")
    return uuid.uuid4().hex


def route_of(scope: Scope) -> str:
    """The matched route's template (``/v1/research/{id}``), so that labels stay few."""
    route = scope.get("route")
    path = getattr(route, "path", None)
    return path if isinstance(path, str) else "unmatched"


class ObserveMiddleware:
    def __init__(
        self, app: ASGIApp, metrics: Metrics | None, access_log: bool, log_queries: bool
    ) -> None:
        self.app = app
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
            nonlocal recorded
            recorded = True
            seconds = time.perf_counter() - started
            route = route_of(scope)
            if self.metrics is not None:
                self.metrics.http_request(route, scope["method"], status, seconds)
            if self.access_log and log.isEnabledFor(logging.INFO):
                log.info(self._line(scope, state, rid, route, status, seconds))

        async def send_observed(message: Message) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
                headers = list(message.get("headers", ()))
                headers.append((REQUEST_ID_HEADER, rid.encode("ascii")))
                message = {**message, "headers": headers}
            elif message["type"] == "http.response.body" and not message.get("more_body"):
                record()  # before the last byte goes out: the client never outruns the log
            await send(message)

        try:
            await self.app(scope, receive, send_observed)
        finally:
            if not recorded:
                record()

    def _line(
        self, scope: Scope, state: dict[str, Any], rid: str, route: str, status: int,
        seconds: float,
    ) -> str:  # fmt: skip
        extra = dict(state.get("log") or {})
        if not self.log_queries:
            extra.pop(QUERY_FIELD, None)
        client = scope.get("client")
        entry = {
            "ts": datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z"),
            "request_id": rid,
            "key_id": state.get("key_id"),
            "client": client[0] if client else None,
            "method": scope["method"],
            "route": route,
            "path": scope.get("path"),
            "status": status,
            "latency_ms": round(seconds * 1000, 2),
            **extra,
        }
        return orjson.dumps(entry).decode()
