"""The browser's only way out: a local forward proxy that puts every request a rendered page
makes through the SSRF guard, before connecting.

Chromium is started with ``--proxy-server`` pointing here and ``<-loopback>`` in its
bypass list (which removes its implicit "loopback goes direct"), so every HTTP request
arrives here as an absolute-URI request and every HTTPS or WebSocket connection as
``CONNECT host:port``, the host name unresolved. The proxy resolves it once, asks the guard
(``GuardedNetworkBackend.vetted_addresses``: public addresses only, or
``fetch.allowed_hosts``) and connects to the address it checked, so a redirect, a
``fetch()``, a WebSocket or a second DNS answer (rebinding) all meet the same check. A
refusal is answered ``403`` with ``X-Searcher-Guard: refused`` without any connection
being made, and recorded (``decisions``) so that a test or a benchmark can show it.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections import deque
from dataclasses import dataclass
from urllib.parse import urlsplit

import httpcore

from searcher.errors import FetchBlocked
from searcher.fetch.guard import GuardedNetworkBackend

log = logging.getLogger(__name__)

GUARD_HEADER = "x-searcher-guard"
_MAX_HEAD_BYTES = 64 * 1024  # a request head larger than this is refused
_HEAD_TIMEOUT_S = 10.0
_CONNECT_TIMEOUT_S = 5.0
_PIPE_CHUNK = 64 * 1024
# Request headers meant for the proxy, or for a connection we do not keep.
_HOP_HEADERS = frozenset({"proxy-connection", "proxy-authorization", "connection", "keep-alive"})


@dataclass(frozen=True)
class ProxyDecision:
    """What the proxy did with one request of the browser: the destination it named and
    whether the guard let it through (``reason`` says why not)."""

    method: str
    host: str
    port: int
    allowed: bool
    reason: str = ""


class _BadRequest(Exception):
    """A request head the proxy cannot read: answered 400, nothing connected."""


@dataclass(frozen=True)
class _Target:
    method: str
    host: str
    port: int
    head: bytes  # what to send upstream first (the rewritten head; empty for CONNECT)


def _split_host_port(authority: str, default_port: int) -> tuple[str, int]:
    parts = urlsplit(f"//{authority}")
    try:
        port = parts.port or default_port
    except ValueError as exc:
        raise _BadRequest(f"bad port in {authority!r}") from exc
    if not parts.hostname:
        raise _BadRequest(f"no host in {authority!r}")
    return parts.hostname, port


def parse_request_head(head: bytes) -> _Target:
    """Where a proxied request goes, and (for plain HTTP) the head to send there: the
    request line in origin form, the proxy's own headers dropped, ``Connection: close``
    so that the upstream connection carries this one request only."""
    lines = head.decode("latin-1").split("\r\n")
    try:
        method, target, version = lines[0].split(" ")
    except ValueError as exc:
        raise _BadRequest("malformed request line") from exc
    if method == "CONNECT":
        host, port = _split_host_port(target, 443)
        return _Target(method, host, port, b"")
    url = urlsplit(target)
    if url.scheme.lower() != "http" or not url.netloc:
        raise _BadRequest(f"not an absolute http URL: {target[:100]!r}")
    host, port = _split_host_port(url.netloc, 80)
    path = url.path or "/"
    if url.query:
        path = f"{path}?{url.query}"
    headers = [
        line for line in lines[1:]
        if line and line.split(":", 1)[0].strip().lower() not in _HOP_HEADERS
    ]  # fmt: skip
    rewritten = "\r\n".join([f"{method} {path} {version}", *headers, "Connection: close", "", ""])
    return _Target(method, host, port, rewritten.encode("latin-1"))


async def _answer_head_then_pipe(
    reader: asyncio.StreamReader, writer: asyncio.StreamWriter
) -> None:
    """Pass an upstream's answer to the browser with ``Connection: close`` in its head, so
    that the browser never sends another request down this connection: it would reach
    this upstream, vetted for another host, whatever host it named. A head that cannot be
    read as one (too large, cut short) or a protocol switch passes as it came."""
    with contextlib.suppress(asyncio.IncompleteReadError, asyncio.LimitOverrunError):
        head = await reader.readuntil(b"\r\n\r\n")
        lines = head.decode("latin-1").split("\r\n")
        if lines[0].split(" ")[1:2] != ["101"]:  # not a protocol switch
            kept = [
                line for line in lines[1:]
                if line and line.split(":", 1)[0].strip().lower() not in _HOP_HEADERS
            ]  # fmt: skip
            head = "\r\n".join([lines[0], *kept, "Connection: close", "", ""]).encode("latin-1")
        with contextlib.suppress(ConnectionError, OSError):
            writer.write(head)
            await writer.drain()
    await _pipe(reader, writer)


async def _pipe(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
    with contextlib.suppress(ConnectionError, OSError):
        while data := await reader.read(_PIPE_CHUNK):
            writer.write(data)
            await writer.drain()
    with contextlib.suppress(ConnectionError, OSError, RuntimeError):
        writer.write_eof()


async def _answer(writer: asyncio.StreamWriter, status: str, extra: str = "") -> None:
    body = status.encode()
    head = f"HTTP/1.1 {status}\r\n{extra}Content-Length: {len(body)}\r\nConnection: close\r\n\r\n"
    with contextlib.suppress(ConnectionError, OSError):
        writer.write(head.encode("latin-1") + body)
        await writer.drain()


class GuardedProxy:
    """An asyncio HTTP forward proxy on 127.0.0.1 whose every upstream connection is vetted
    by the SSRF guard first. ``decisions`` keeps the most recent ones; ``refused`` counts
    the guard's refusals, ``allowed`` the connections let through."""

    def __init__(self, guard: GuardedNetworkBackend, keep_decisions: int = 1000) -> None:
        self._guard = guard
        self._server: asyncio.Server | None = None
        # Open connections, both sides: closing the listener does not end them, and a tunnel
        # left open when the loop stops is a transport nobody closes.
        self._open: set[asyncio.StreamWriter] = set()
        self._handlers: set[asyncio.Task[None]] = set()
        self._closing = False
        self.decisions: deque[ProxyDecision] = deque(maxlen=keep_decisions)
        self.refused = 0
        self.allowed = 0

    @property
    def open_connections(self) -> int:
        """Connections open now, both sides (the browser's and the upstream ones)."""
        return len(self._open)

    @property
    def port(self) -> int:
        """The port the proxy listens on (after ``start``)."""
        assert self._server is not None, "the proxy is not started"
        port: int = self._server.sockets[0].getsockname()[1]
        return port

    async def start(self) -> None:
        """Listen on a free loopback port."""
        self._server = await asyncio.start_server(
            self._serve, "127.0.0.1", 0, limit=_MAX_HEAD_BYTES
        )

    async def aclose(self) -> None:
        """Stop listening and end the connections in flight."""
        if self._server is not None:
            self._closing = True
            self._server.close()
            for writer in list(self._open):
                writer.close()
            for task in list(self._handlers):
                task.cancel()
            await asyncio.gather(*self._handlers, return_exceptions=True)
            await self._server.wait_closed()
            self._server = None
            self._closing = False

    def _record(
        self, target: _Target, allowed: bool, reason: str = "", refused: bool = True
    ) -> None:
        self.decisions.append(
            ProxyDecision(target.method, target.host, target.port, allowed, reason)
        )
        if allowed:
            self.allowed += 1
        elif refused:  # by the guard; a name that does not resolve is not counted here
            self.refused += 1
            log.info("browser proxy: refused %s %s:%s (%s)", target.method, target.host,
                     target.port, reason)  # fmt: skip

    async def _serve(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        task = asyncio.current_task()
        if task is not None:
            self._handlers.add(task)
        self._open.add(writer)
        try:
            await self._handle(reader, writer)
        except (ConnectionError, OSError, asyncio.IncompleteReadError, asyncio.LimitOverrunError):
            pass  # the browser went away, or sent a head too large: nothing to answer
        except TimeoutError:
            await _answer(writer, "408 Request Timeout")
        except asyncio.CancelledError:
            if not self._closing:  # not the proxy closing its connections: pass it on
                raise
        finally:
            self._open.discard(writer)
            if task is not None:
                self._handlers.discard(task)
            writer.close()
            with contextlib.suppress(ConnectionError, OSError):
                await writer.wait_closed()

    async def _handle(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        async with asyncio.timeout(_HEAD_TIMEOUT_S):
            head = await reader.readuntil(b"\r\n\r\n")
        try:
            target = parse_request_head(head)
        except _BadRequest as exc:
            await _answer(writer, "400 Bad Request", f"{GUARD_HEADER}: refused\r\n")
            log.info("browser proxy: bad request (%s)", exc)
            return
        upstream = await self._connect(target, writer)
        if upstream is None:
            return
        up_reader, up_writer = upstream
        self._open.add(up_writer)
        try:
            if target.method == "CONNECT":
                writer.write(b"HTTP/1.1 200 Connection Established\r\n\r\n")
            else:
                up_writer.write(target.head)
            to_browser = asyncio.create_task(
                _pipe(up_reader, writer)
                if target.method == "CONNECT"
                else _answer_head_then_pipe(up_reader, writer)
            )
            try:
                # The browser's side ends when it is done with the connection (the answer
                # is in, or its tab went): nothing more can reach it then, so an upstream
                # that never answers is not waited for.
                await _pipe(reader, up_writer)
            finally:
                to_browser.cancel()
                await asyncio.gather(to_browser, return_exceptions=True)
        finally:
            self._open.discard(up_writer)
            up_writer.close()

    async def _connect(
        self, target: _Target, writer: asyncio.StreamWriter
    ) -> tuple[asyncio.StreamReader, asyncio.StreamWriter] | None:
        """A connection to the vetted address of ``target``, or None when refused (then
        answered, and recorded) or unreachable (answered 502)."""
        try:
            addresses = await self._guard.vetted_addresses(
                target.host, target.port, _CONNECT_TIMEOUT_S
            )
        except FetchBlocked as exc:
            self._record(target, False, exc.reason)
            await _answer(writer, "403 Forbidden", f"{GUARD_HEADER}: refused\r\n")
            return None
        except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
            self._record(target, False, f"unresolved: {exc}", refused=False)
            await _answer(writer, "502 Bad Gateway")
            return None
        self._record(target, True)
        for address in addresses:  # connect to what was checked, never the name again
            with contextlib.suppress(OSError, TimeoutError):
                async with asyncio.timeout(_CONNECT_TIMEOUT_S):
                    return await asyncio.open_connection(address, target.port)
        await _answer(writer, "502 Bad Gateway")
        return None
