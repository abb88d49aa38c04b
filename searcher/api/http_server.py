"""The HTTP server under ``searcher serve``: uvicorn, with every connection bounded.

uvicorn (httptools) parses headers without any size limit and waits for them without any
timeout: a 50 MB header was buffered whole, and 3,000 connections that never finished
their headers were held until the file descriptors ran out. uvicorn's own settings cover
part of it (``limit_concurrency``: 503 beyond a number of connections;
``timeout_keep_alive``: idle connections between requests); the rest is done here, in a
subclass of uvicorn's httptools protocol, because uvicorn has no hook for it:

- the request line and headers are counted as they arrive, before the parser buffers
  them: beyond ``server.max_header_bytes`` the client gets 431 and the connection closes;
- a connection beyond ``server.max_connections`` gets its 503 at once, instead of
  holding a file descriptor until its headers arrive;
- they must arrive within ``server.header_timeout_s`` of the connection opening (or of
  the first byte of the next request on a kept-alive connection), whatever trickles in;
- a request body must arrive within ``server.body_timeout_s`` of its headers.

Another server (hypercorn, granian) would bring other gaps; this keeps uvicorn's speed and
its well-known behaviour and adds only what is missing.
"""

from __future__ import annotations

import asyncio
import logging
import resource
from asyncio import TimerHandle
from dataclasses import dataclass
from typing import Any

import orjson
import uvicorn
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.supervisors import Multiprocess

from searcher.config import ServerSettings

log = logging.getLogger("searcher.server")

# How long a refused client may go on sending (discarded) after the 431, so that it can
# read the answer instead of a connection reset.
LINGER_S = 2.0
HEAD_END = b"\r\n\r\n"
# File descriptors besides the client connections: page fetches, backends, the cache,
# extraction workers.
SPARE_FDS = 512
WORKER_HEALTHCHECK_S = 60


@dataclass(frozen=True)
class RequestBounds:
    """What one connection may send, and how slowly."""

    max_header_bytes: int = 16 * 1024
    header_timeout_s: float = 10.0
    body_timeout_s: float = 30.0

    @classmethod
    def of(cls, server: ServerSettings) -> RequestBounds:
        return cls(server.max_header_bytes, server.header_timeout_s, server.body_timeout_s)


class BoundedConfig(uvicorn.Config):
    """uvicorn's config carrying the bounds to each connection's protocol (and, pickled,
    to worker processes)."""

    def __init__(self, app: Any, bounds: RequestBounds, **kwargs: Any) -> None:
        super().__init__(app, http=BoundedHttpProtocol, **kwargs)
        self.bounds = bounds


def _response(status: int, phrase: str, type_: str, message: str) -> bytes:
    body = orjson.dumps({"error": {"type": type_, "message": message}})
    head = (
        f"HTTP/1.1 {status} {phrase}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(body)}\r\nconnection: close\r\n\r\n"
    )
    return head.encode("ascii") + body


class BoundedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header size cap and header/body read timeouts."""

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self.bounds = config.bounds if isinstance(config, BoundedConfig) else RequestBounds()
        self._awaiting_head = True  # no on_headers_complete yet for the current request
        self._head_bytes = 0
        self._tail = b""  # the last bytes seen, for a head end split across reads
        self._read_timer: TimerHandle | None = None
        self._discarding = False

    # --- timers --------------------------------------------------------------------

    def _arm(self, seconds: float, reading: str) -> None:
        self._disarm()
        self._read_timer = self.loop.call_later(seconds, self._read_timed_out, reading)

    def _disarm(self) -> None:
        if self._read_timer is not None:
            self._read_timer.cancel()
            self._read_timer = None

    def _read_timed_out(self, reading: str) -> None:
        self._read_timer = None
        if self.transport.is_closing():
            return
        idle = self.cycle is None or self.cycle.response_complete
        if reading == "headers" and self._head_bytes and idle:
            self.transport.write(
                _response(408, "Request Timeout", "timeout", "request headers took too long")
            )
        # A body that stalls: the app is reading it; closing tells it the client is gone.
        self.transport.close()

    # --- connection and parser events ----------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        limit = self.limit_concurrency
        if limit is not None and len(self.connections) >= limit:
            # uvicorn would answer 503 once the headers are in, holding the connection (and
            # its file descriptor) until then; beyond the limit, answer at once.
            message = f"over {limit} connections (server.max_connections); try again later"
            self._refuse(503, "Service Unavailable", "overloaded", message)
            return
        self._arm(self.bounds.header_timeout_s, "headers")

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        if self._discarding:
            return
        if self._awaiting_head:
            if self._read_timer is None:  # the first byte of a request on a kept connection
                self._arm(self.bounds.header_timeout_s, "headers")
            seen = self._tail + data
            end = seen.find(HEAD_END)
            head = len(data) if end < 0 else end + len(HEAD_END) - len(self._tail)
            if self._head_bytes + head > self.bounds.max_header_bytes:
                limit = self.bounds.max_header_bytes
                message = f"request line and headers over {limit} bytes (server.max_header_bytes)"
                self._refuse(431, "Request Header Fields Too Large", "headers_too_large", message)
                return
            self._head_bytes += len(data)
            self._tail = seen[-(len(HEAD_END) - 1) :]
        super().data_received(data)

    def on_headers_complete(self) -> None:
        self._awaiting_head = False
        self._head_bytes = 0
        self._tail = b""
        self._arm(self.bounds.body_timeout_s, "body")
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        self._awaiting_head = True
        super().on_message_complete()

    def _refuse(self, status: int, phrase: str, type_: str, message: str) -> None:
        """Answer ``status`` and close; what the client still sends is discarded for a
        moment, so that it reads the answer rather than a connection reset."""
        self._discarding = True
        self._disarm()
        if self.cycle is None or self.cycle.response_complete:
            self.transport.write(_response(status, phrase, type_, message))
            if self.transport.can_write_eof():
                self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)


def raise_fd_limit(connections: int) -> int:
    """Raise this process's open-file limit (soft, up to the hard limit) to hold
    ``connections`` clients plus the server's own files; returns the limit now set."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    wanted = connections + SPARE_FDS
    if soft != resource.RLIM_INFINITY and soft < wanted:
        target = wanted if hard == resource.RLIM_INFINITY else min(wanted, hard)
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
            soft = target
        except (ValueError, OSError) as exc:
            log.warning("cannot raise the open-file limit to %d: %s", target, exc)
    if soft != resource.RLIM_INFINITY and soft < wanted:
        log.warning(
            "open-file limit %d is low for server.max_connections=%d; lower it or raise "
            "`ulimit -n`",
            soft,
            connections,
        )
    return int(soft)


def server_config(app: Any, server: ServerSettings, **kwargs: Any) -> BoundedConfig:
    """The uvicorn config ``searcher serve`` runs with: ``server.*`` and its bounds."""
    return BoundedConfig(
        app,
        RequestBounds.of(server),
        host=server.host,
        port=server.port,
        ws="none",  # the app has no WebSocket routes: no upgrade path to bound
        limit_concurrency=server.max_connections,
        timeout_keep_alive=server.keep_alive_s,
        forwarded_allow_ips=server.forwarded_allow_ips,
        h11_max_incomplete_event_size=server.max_header_bytes,
        # A worker answers the supervisor's pings only once it has imported the app's
        # modules; on a busy machine that takes more than uvicorn's 5 s, and it kept
        # killing and restarting workers that were merely starting.
        timeout_worker_healthcheck=WORKER_HEALTHCHECK_S,
        **kwargs,
    )


def run_server(app: Any, server: ServerSettings, workers: int = 1, **kwargs: Any) -> bool:
    """Serve ``app`` (an ASGI app, or with ``workers`` > 1 an import string of an app
    factory) until interrupted; False when it could not start (e.g. the port is taken)."""
    raise_fd_limit(server.max_connections)
    config = server_config(app, server, workers=workers, factory=workers > 1, **kwargs)
    if workers > 1:
        Multiprocess(config, sockets=[config.bind_socket()]).run()
        return True
    runner = uvicorn.Server(config)
    runner.run()
    return runner.started
