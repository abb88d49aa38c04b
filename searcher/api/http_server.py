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
import gc
import logging
import resource
import time
from asyncio import TimerHandle
from dataclasses import dataclass
from typing import Any

import httptools
import orjson
import uvicorn
from uvicorn.config import STARTUP_FAILURE
from uvicorn.protocols.http.httptools_impl import HttpToolsProtocol
from uvicorn.supervisors import Multiprocess

from searcher.api.observe import SERVER_ANSWER, log_refusal
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
_LOGGED_PATH = 200  # bytes of a refused request's path in its access line


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


class _HeadTooLarge(Exception):
    """Raised from a parser callback to stop the parser at a refused head."""


class BoundedHttpProtocol(HttpToolsProtocol):
    """uvicorn's httptools protocol with a header size cap, header/body read timeouts and
    JSON answers (each with an access line) for what it refuses itself."""

    def __init__(self, config: uvicorn.Config, *args: Any, **kwargs: Any) -> None:
        super().__init__(config, *args, **kwargs)
        self.bounds = config.bounds if isinstance(config, BoundedConfig) else RequestBounds()
        # ``server.max_connections`` is applied per connection (connection_made). uvicorn's
        # own check, per request, counts this connection among the open ones: with the
        # same number it would let only N-1 connections be served.
        self.max_connections = self.limit_concurrency
        if self.limit_concurrency is not None:
            self.limit_concurrency += 1
        self._awaiting_head = True  # no on_headers_complete yet for the current request
        self._head_bytes = 0
        self._head_started = 0.0  # when the current request's first byte came (monotonic)
        self._tail = b""  # the last bytes seen, for a head end split across reads
        # A read fed past a head end may hold a body and, after it, the next pipelined
        # request's head; that head is counted through the parser's callbacks instead.
        self._in_body = False
        self._counted_by_parser = False
        self._read_timer: TimerHandle | None = None
        self._discarding = False
        self._pending: bytes | None = None  # a refusal waiting for the response on its way
        self.url = b""  # uvicorn's, set per request; read by a refusal before any request

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
        if reading == "body":
            # The app is reading the body: it learns that the client is gone, and the
            # client gets a 408 unless the app's answer has started.
            self._answer_in_app(408, "Request Timeout", "timeout",
                                "request body took too long (server.body_timeout_s)")  # fmt: skip
            self.transport.close()
        elif self._head_bytes:
            self._refuse(408, "Request Timeout", "timeout",
                         "request headers took too long (server.header_timeout_s)")  # fmt: skip
        else:  # a connection that never sent anything just closes
            self.transport.close()

    # --- connection and parser events ----------------------------------------------

    def connection_made(self, transport: asyncio.Transport) -> None:  # type: ignore[override]
        super().connection_made(transport)
        limit = self.max_connections
        if limit is not None and len(self.connections) > limit:  # this one is counted
            # uvicorn would answer 503 once the headers are in, holding the connection (and
            # its file descriptor) until then; beyond the limit, answer at once. While it
            # lingers, a refused connection does not count against the others.
            self.connections.discard(self)
            message = f"over {limit} connections (server.max_connections); try again later"
            self._refuse(503, "Service Unavailable", "overloaded", message)
            return
        self._start_head()  # the first request's headers are timed from the connection

    def connection_lost(self, exc: Exception | None) -> None:
        self._disarm()
        super().connection_lost(exc)

    def data_received(self, data: bytes) -> None:
        # Each head goes to the parser apart from what follows it, so that every request's
        # head in a read is counted, pipelined ones included.
        while data and not self._discarding and not self.transport.is_closing():
            if not self._awaiting_head:
                self._feed_past_head(data)
                return
            if self._read_timer is None:  # the first byte of a request on a kept connection
                self._start_head()
            seen = self._tail + data
            end = seen.find(HEAD_END)
            head = len(data) if end < 0 else end + len(HEAD_END) - len(self._tail)
            self._head_bytes += head
            if self._head_bytes > self.bounds.max_header_bytes:
                self._head_too_large()
                return
            self._tail = seen[-(len(HEAD_END) - 1) :] if end < 0 else b""
            self._feed(data[:head])
            data = data[head:]

    def _feed_past_head(self, data: bytes) -> None:
        self._in_body = True
        try:
            self._feed(data)
        finally:
            self._in_body = False
        if self._counted_by_parser and self._awaiting_head and not self._discarding:
            # The next request's head began in this read and goes on in the next one: its
            # unfinished line is not in a callback yet. From here on, bytes are counted.
            self._counted_by_parser = False
            self._head_bytes += len(data) - (data.rfind(b"\n") + 1)
            self._tail = data[-(len(HEAD_END) - 1) :]
            if self._head_bytes > self.bounds.max_header_bytes:
                self._head_too_large()

    def _feed(self, data: bytes) -> None:
        """uvicorn's ``data_received``, with a JSON 400 for what the parser refuses."""
        self._unset_keepalive_if_required()
        try:
            self.parser.feed_data(data)
        except httptools.HttpParserUpgrade:
            if self._should_upgrade():
                self.handle_websocket_upgrade()
            else:
                self._unsupported_upgrade_warning()
        except httptools.HttpParserError as exc:
            if not self._discarding:  # else stopped by _HeadTooLarge: already answered
                self.send_400_response(str(exc) or type(exc).__name__)

    def send_400_response(self, msg: str) -> None:
        message = f"invalid HTTP request: {msg}"
        # A bad body (a chunk size, say) belongs to the request the app has.
        if self._awaiting_head or not self._answer_in_app(400, "Bad Request", "bad_request",
                                                          message):  # fmt: skip
            self._refuse(400, "Bad Request", "bad_request", message)
            return
        self._discarding = True
        self._linger()

    def _start_head(self) -> None:
        self._head_started = time.monotonic()
        self._arm(self.bounds.header_timeout_s, "headers")

    def _count_by_parser(self, size: int) -> None:
        if not self._counted_by_parser:
            return
        self._head_bytes += size
        if self._head_bytes > self.bounds.max_header_bytes:
            self._head_too_large()
            raise _HeadTooLarge  # the parser stops: this request never reaches the app

    def _head_too_large(self) -> None:
        limit = self.bounds.max_header_bytes
        message = f"request line and headers over {limit} bytes (server.max_header_bytes)"
        self._refuse(431, "Request Header Fields Too Large", "headers_too_large", message)

    def on_message_begin(self) -> None:
        if self._in_body:  # a pipelined request's head, after a body in the same read
            self._counted_by_parser = True
            self._head_bytes = 0
            self._start_head()
        super().on_message_begin()

    def on_url(self, url: bytes) -> None:
        self._count_by_parser(len(url))
        super().on_url(url)

    def on_header(self, name: bytes, value: bytes) -> None:
        self._count_by_parser(len(name) + len(value) + 4)  # ": " and CRLF
        super().on_header(name, value)

    def on_headers_complete(self) -> None:
        self._awaiting_head = False
        self._counted_by_parser = False
        self._head_bytes = 0
        self._tail = b""
        self._arm(self.bounds.body_timeout_s, "body")
        super().on_headers_complete()

    def on_message_complete(self) -> None:
        self._disarm()
        self._awaiting_head = True
        super().on_message_complete()

    # --- answers of the server's own ------------------------------------------------

    def _refuse(self, status: int, phrase: str, type_: str, message: str) -> None:
        """Answer ``status`` to a request the app never got, log it and close. A response
        on its way goes out first; what the client sends meanwhile is discarded."""
        self._discarding = True
        self._disarm()
        method = path = None
        if self._head_bytes and self.url:
            path = self.url.partition(b"?")[0][:_LOGGED_PATH].decode("latin-1")
        if not self._awaiting_head and self.scope is not None:
            method, path = self.scope.get("method"), self.scope.get("path")
        started = self._head_started if self._head_bytes else time.monotonic()
        log_refusal(self.client, method, path, status, time.monotonic() - started)
        self._pending = _response(status, phrase, type_, message)
        if self.cycle is None or self.cycle.response_complete:
            self._send_pending()

    def _send_pending(self) -> None:
        if self._pending is not None:
            self.transport.write(self._pending)
            self._pending = None
        self._linger()

    def _linger(self) -> None:
        """Close once the client has had a moment to read the answer: closing at once,
        with its bytes still coming, would reset the connection under its reader."""
        if self.transport.can_write_eof():
            self.transport.write_eof()
        self.loop.call_later(LINGER_S, self.transport.close)

    def on_response_complete(self) -> None:
        if not self._discarding or self.pipeline:  # requests before a refused one go first
            super().on_response_complete()
        elif self._pending is not None:
            self.server_state.total_requests += 1
            self._send_pending()

    def _answer_in_app(self, status: int, phrase: str, type_: str, message: str) -> bool:
        """Answer, in the server's name, the request the app is working on, unless the
        app's own answer has started; that one then goes nowhere, and the request's access
        line shows this answer. Whether it was answered."""
        cycle = self.cycle
        if cycle is None or cycle.response_started or self.pipeline:
            return False
        self.transport.write(_response(status, phrase, type_, message))
        cycle.disconnected = True  # the app's answer goes nowhere ...
        cycle.message_event.set()  # ... and a read of the body returns at once
        cycle.scope.setdefault("extensions", {})[SERVER_ANSWER] = {"status": status}
        return True


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


# How many container objects may be allocated (net of those freed) before Python's
# youngest-generation collection runs; Python's own default is 700. A search allocates
# thousands (hits, items, token lists) that refcounting frees at its end, and with 32
# searches in flight the default ran about 80 collections per 1,000 searches, each
# walking every live young object: 0.39 ms a search (gc.callbacks timing, bench setup),
# against 0.01 ms at 10,000. Cyclic garbage waits a little longer, a few MB at most.
YOUNG_COLLECTION_THRESHOLD = 10_000


def collect_garbage_in_batches() -> None:
    """Run the cyclic collector less often in a serving process (see the threshold)."""
    _, older, oldest = gc.get_threshold()
    gc.set_threshold(YOUNG_COLLECTION_THRESHOLD, older, oldest)


def run_server(app: Any, server: ServerSettings, workers: int = 1, **kwargs: Any) -> bool:
    """Serve ``app`` (an ASGI app, or with ``workers`` > 1 an import string of an app
    factory) until interrupted; False when it could not start (e.g. the port is taken)."""
    raise_fd_limit(server.max_connections)
    collect_garbage_in_batches()  # (each worker, a process of its own, does so itself)
    config = server_config(app, server, workers=workers, factory=workers > 1, **kwargs)
    if workers > 1:
        supervisor = Multiprocess(config, sockets=[config.bind_socket()])
        supervisor.run()
        # A worker that could not start stops the supervisor (uvicorn's STARTUP_FAILURE).
        return not any(p.exitcode == STARTUP_FAILURE for p in supervisor.processes)
    runner = uvicorn.Server(config)
    runner.run()
    return runner.started
