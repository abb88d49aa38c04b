"""From what a backend answered to why it failed: the one place that maps HTTP statuses,
``Retry-After`` and challenge pages to a ``FailureKind`` (as SearXNG's
``raise_for_httperror`` does for its engines).

Pure functions of (status, headers, body); ``HttpBackend`` calls them.
"""

from __future__ import annotations

import email.utils
import os
import time
from collections.abc import Mapping
from typing import TYPE_CHECKING

from searcher.errors import (
    BackendAuthRejected,
    BackendBadResponse,
    BackendBlocked,
    BackendConnectError,
    BackendError,
    BackendHTTPError,
    BackendRateLimited,
    FailureKind,
)
from searcher.fetch.blocked import blocked_reason

if TYPE_CHECKING:  # loaded by whoever opens the client
    import aiohttp

# A challenge page is judged on its first bytes only (walls are short).
CHALLENGE_HEAD_BYTES = 64 * 1024
# Of the walls ``searcher.fetch.blocked`` recognises, those that mean "you look like a bot".
CHALLENGE_REASONS = ("bot wall", "captcha")
# Longest Retry-After honoured: a server asking for a day is treated as asking for this.
MAX_RETRY_AFTER_S = 3600.0
# Statuses that refuse our request as invalid (a page Brave does not serve, a language
# SearXNG does not know): the client's input was at fault, not the backend, so the
# breaker gets no verdict; a client must not be able to open it for everyone.
NO_VERDICT_STATUSES = frozenset({400, 404, 422})


def retry_after_s(value: str | None, now: float | None = None) -> float | None:
    """Seconds to wait from a ``Retry-After`` header (delta-seconds or an HTTP date),
    capped at ``MAX_RETRY_AFTER_S``; None when absent or unreadable."""
    if not value:
        return None
    text = value.strip()
    if text.isdigit():
        return min(float(text), MAX_RETRY_AFTER_S)
    try:
        moment = email.utils.parsedate_to_datetime(text)
    except (TypeError, ValueError):
        return None
    wall_now = time.time() if now is None else now
    return max(0.0, min(moment.timestamp() - wall_now, MAX_RETRY_AFTER_S))


def challenge(headers: Mapping[str, str], body: bytes) -> str | None:
    """Why an HTML body is a CAPTCHA or bot wall rather than an answer, or None. A plain
    "access denied" page is not one: on an error status that is a refusal (``auth``)."""
    ctype = headers.get("content-type", "").lower()
    if "html" not in ctype and not body.lstrip()[:15].lower().startswith((b"<!doctype", b"<html")):
        return None
    reason = blocked_reason(body[:CHALLENGE_HEAD_BYTES], "", None, 200)
    return reason if reason and reason.startswith(CHALLENGE_REASONS) else None


def classify_status(status: int, headers: Mapping[str, str], body: bytes) -> FailureKind:
    """The failure kind of an HTTP error answer: a challenge page is ``blocked`` whatever
    its status; 429 is ``rate_limited``; 401 and 403 ``auth`` (a rejected key, or access
    switched off: retrying will not help); anything else ``http_status``."""
    if challenge(headers, body):
        return "blocked"
    if status == 429:
        return "rate_limited"
    if status in (401, 403):
        return "auth"
    return "http_status"


def http_failure(
    backend: str,
    status: int,
    headers: Mapping[str, str],
    body: bytes,
    hints: Mapping[int, str] | None = None,
) -> BackendError:
    """The error for an HTTP error answer, its class chosen by ``classify_status``, with
    its Retry-After and the reason a user can act on (``hints``: the adapter's
    explanation of a status, e.g. SearXNG's 403 when its JSON format is off)."""
    kind = classify_status(status, headers, body)
    reason = f"HTTP {status}"
    if kind == "blocked":
        reason += f": {challenge(headers, body)}"
    elif hints and status in hints:
        reason += f": {hints[status]}"
    elif 300 <= status < 400:
        reason += f": {_redirect(headers)}"
    if kind == "blocked":
        return BackendBlocked(backend, reason, status=status)
    if kind == "rate_limited":
        wait = retry_after_s(headers.get("retry-after"))
        return BackendRateLimited(backend, reason, status=status, retry_after_s=wait)
    if kind == "auth":
        return BackendAuthRejected(backend, reason, status=status)
    return BackendHTTPError(backend, status, reason, verdict=status not in NO_VERDICT_STATUSES)


def _redirect(headers: Mapping[str, str]) -> str:
    """What a redirect says: backends are not followed (an API that moved is a base_url
    to fix, not something to chase on every call)."""
    location = headers.get("location")
    if not location:
        return "a redirect without a Location"
    return f"redirected to {location[:200]}; point base_url there"


def transport_failure(backend: str, exc: aiohttp.ClientError) -> BackendError:
    """The error for an aiohttp failure while asking or reading: a body that lies about
    its encoding or length (``ClientPayloadError``) is a bad answer, not worth a retry;
    anything else is a connection failure."""
    import aiohttp  # loaded already (``exc`` is one of its errors)

    if isinstance(exc, aiohttp.ClientPayloadError):
        return BackendBadResponse(backend, f"malformed answer body: {exc!r}")
    return BackendConnectError(backend, connection_problem(exc))


def connection_problem(exc: aiohttp.ClientError) -> str:
    """A connection failure in words ("cannot connect to 127.0.0.1:8898: connection
    refused"), not aiohttp's object dump with its connection key."""
    import aiohttp  # loaded already (``exc`` is one of its errors)

    replayed = getattr(exc, "problem", None)
    if isinstance(replayed, str):  # a recorded failure replayed: its words as they were
        return replayed
    if isinstance(exc, aiohttp.ClientConnectorDNSError):
        return f"cannot resolve {exc.host}: {_os_reason(exc.os_error)} (no network or DNS?)"
    if isinstance(exc, aiohttp.ClientConnectorError):
        return f"cannot connect to {exc.host}:{exc.port}: {_os_reason(exc.os_error)}"
    if isinstance(exc, aiohttp.ServerDisconnectedError):
        return "the server closed the connection before answering"
    text = str(exc)
    return f"connection failed: {type(exc).__name__}" + (f": {text}" if text else "")


def _os_reason(error: OSError) -> str:
    """The system's words for an OS error ("connection refused"), lower-case."""
    if error.errno is not None and error.errno > 0:
        return os.strerror(error.errno).lower()
    return (error.strerror or str(error) or type(error).__name__).lower()


# SearXNG's texts for an engine's failure (``searx/webutils.py``), lower-case, and what
# they mean here. A suspended engine is reported as "Suspended: <text>".
_ENGINE_MESSAGES: tuple[tuple[str, FailureKind], ...] = (
    ("captcha", "blocked"),
    ("access denied", "blocked"),
    ("too many requests", "rate_limited"),
    ("timeout", "timeout"),
    ("connection", "connect"),
    ("network", "connect"),
    ("ssl", "connect"),
    ("proxy", "connect"),
    ("http error", "http_status"),
    ("server api error", "http_status"),
    ("parsing error", "bad_response"),
)


def engine_failure_kind(message: str) -> FailureKind:
    """The failure kind of one entry of SearXNG's ``unresponsive_engines``."""
    text = message.lower().removeprefix("suspended:").strip()
    for needle, kind in _ENGINE_MESSAGES:
        if needle in text:
            return kind
    return "bad_response"  # "unexpected crash" and anything unknown
