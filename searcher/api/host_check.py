"""Host and Origin checks: the defence against DNS rebinding and cross-site requests.

A web page whose name rebinds to 127.0.0.1 reaches a local searcher with its own name in
the ``Host`` header; a page on another site that POSTs here sends its ``Origin``. So every
request must name a host this server answers to (``server.allowed_hosts``; else 421), and a
state-changing request sent by a browser must come from this server's own origin or one
that CORS allows (``server.cors.allow_origins``; else 403). The decisions are pure
functions; the middleware only applies them.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

from starlette.types import ASGIApp, Receive, Scope, Send

from searcher.api.errors import send_error
from searcher.fetch.urls import split_host

STATE_CHANGING = frozenset({"POST", "PUT", "PATCH", "DELETE"})
_DEFAULT_PORTS = {"http": "80", "https": "443"}
_SHOWN = 100  # characters of a refused header value quoted back


def host_allowed(host: str | None, allowed: Sequence[str]) -> bool:
    """Whether a ``Host`` header names this server. Entries: ``name`` (any port),
    ``name:port``, ``*.domain`` (its subdomains), ``*`` (anything)."""
    if not host:
        return False
    try:
        name, port = split_host(host)
    except ValueError:
        return False
    for entry in allowed:
        if entry.strip() == "*":
            return True
        try:
            want_name, want_port = split_host(entry)
        except ValueError:
            continue  # a malformed entry matches nothing
        if want_port not in (None, "*") and want_port != port:
            continue
        if want_name.startswith("*."):
            if name.endswith(want_name[1:]):
                return True
        elif name == want_name:
            return True
    return False


def _origin_key(scheme: str, netloc: str) -> str | None:
    try:
        name, port = split_host(netloc)
    except ValueError:
        return None
    if port is None or port == _DEFAULT_PORTS.get(scheme):
        return f"{scheme}://{name}"
    return f"{scheme}://{name}:{port}"


def origin_allowed(origin: str | None, host: str | None, cors_origins: Sequence[str]) -> bool:
    """Whether a request's ``Origin`` may change state here: absent (not a browser's
    cross-origin request), this server's own origin (same ``Host``), or one CORS allows."""
    if origin is None:
        return True
    listed = {o.strip().lower().rstrip("/") for o in cors_origins}
    if "*" in listed or origin.strip().lower() in listed:
        return True
    parts = urlsplit(origin.strip().lower())
    if parts.scheme not in _DEFAULT_PORTS or not parts.netloc or not host:
        return False  # "null", file:, extensions...: never this server's own pages
    own = _origin_key(parts.scheme, host)
    return own is not None and _origin_key(parts.scheme, parts.netloc) == own


def _header(scope: Scope, name: bytes) -> str | None:
    for key, value in scope.get("headers", []):
        if key == name:
            return str(value.decode("latin-1"))
    return None


def _host_count(scope: Scope) -> int:
    return sum(1 for key, _ in scope.get("headers", []) if key == b"host")


class HostOriginMiddleware:
    """Pure ASGI middleware: 421 for a Host not served here (400 for more than one Host
    header, RFC 9112), 403 for a state-changing request from a foreign Origin. Outermost,
    so nothing else runs for them."""

    def __init__(self, app: ASGIApp, allowed_hosts: Sequence[str], cors_origins: Sequence[str]):
        self.app = app
        self.allowed_hosts = tuple(allowed_hosts)
        self.cors_origins = tuple(cors_origins)

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        if _host_count(scope) > 1:  # which one names the server is anybody's guess
            await send_error(send, 400, "bad_request", "more than one Host header", scope=scope)
            return
        host = _header(scope, b"host")
        if not host_allowed(host, self.allowed_hosts):
            shown = repr(host[:_SHOWN]) if host else "(none)"
            await send_error(
                send,
                421,
                "misdirected_request",
                f"this server does not answer to Host {shown}; "
                "list the name in server.allowed_hosts",
                scope=scope,
            )
            return
        origin = _header(scope, b"origin")
        if scope["method"] in STATE_CHANGING and not origin_allowed(
            origin, host, self.cors_origins
        ):
            await send_error(
                send,
                403,
                "forbidden_origin",
                f"cross-site {scope['method']} from origin {str(origin)[:_SHOWN]!r} refused; "
                "allow it in server.cors.allow_origins",
                scope=scope,
            )
            return
        await self.app(scope, receive, send)
