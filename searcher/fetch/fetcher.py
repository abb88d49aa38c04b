"""Fetching one web page safely: guarded connections, one deadline, bounded bytes.

Redirects are followed by hand so that every hop is counted, re-checked for its scheme and
sent through the guarded transport. The body is streamed raw and decoded here (see
``searcher.fetch.body``) so that no response, compressed or not, can hold more than the
byte budget in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable, Iterable, Iterator
from dataclasses import dataclass, replace
from urllib.parse import urlsplit

import httpcore
import httpx

from searcher.backends.failures import retry_after_s
from searcher.contract import RenderMode
from searcher.errors import (
    FetchBlocked,
    FetchError,
    FetchHTTPError,
    FetchTimeout,
    PageBlocked,
    TooManyRedirects,
    UnsupportedContentType,
)
from searcher.fetch.blocked import HEAD_BYTES, blocked_reason
from searcher.fetch.body import BodyDecoder, looks_like_html, parse_content_type
from searcher.fetch.guard import INVALID_HOST_NAME, GuardedNetworkBackend, guarded_transport
from searcher.fetch.pdf import PDF_MEDIA_TYPE
from searcher.recording.httpx_tape import TapedTransport

REDIRECT_STATUSES = frozenset({301, 302, 303, 307, 308})
_SCHEMES = ("http", "https")
_SNIFF_BYTES = 1024  # decoded bytes looked at to decide whether a body is HTML, or a PDF
# Labels servers give any file they serve as a download: such a body may be a PDF.
DOWNLOAD_TYPES = frozenset({
    "application/octet-stream", "binary/octet-stream", "application/x-pdf",
    "application/download", "application/x-download", "application/force-download",
})  # fmt: skip
_CONNECT_TIMEOUT_S = 5.0
# Statuses that bot walls and CAPTCHAs come with; their body is checked for a wall.
_WALL_STATUSES = frozenset({401, 403, 429, 503})
_ACCEPT = "text/html,application/xhtml+xml;q=0.9,text/plain;q=0.8,application/pdf;q=0.8,*/*;q=0.1"
_MAX_LABEL_CHARS = 63  # DNS: a label is 1-63 octets; the resolver's IDNA codec refuses more


@dataclass(frozen=True)
class FetchLimits:
    """What one page fetch may cost."""

    timeout_s: float  # whole fetch of one page, all hops, connect to last byte
    max_bytes: int  # decoded (decompressed) body bytes kept at most
    allowed_content_types: tuple[str, ...]  # media types, compared case-insensitively
    max_redirects: int
    # Whether the page may be rendered in the headless browser (searcher.fetch.renderer);
    # a read's limits carry it so that every reader of pages (full mode, /v1/fetch, crawl)
    # gets the tier without asking for it.
    render: RenderMode = "auto"


@dataclass(frozen=True)
class FetchedBody:
    """What the fetcher hands the reader: the final response's body, decoded from its
    content coding but not from its charset. Not an outcome: the page read's outcome is
    ``searcher.fetch.page_reader.PageOutcome``."""

    url: str  # final URL after redirects
    status_code: int
    content_type: str  # media type, e.g. "text/html"
    charset: str | None
    body: bytes  # decoded (decompressed), at most max_bytes
    downloaded_bytes: int  # bytes received on the wire
    truncated: bool
    hops: tuple[str, ...] = ()  # every URL requested, the first to ``url``, redirects between


def _require_http(url: str) -> None:
    try:
        parts = urlsplit(url)
    except ValueError as exc:
        raise FetchError(url, f"invalid URL: {exc}") from exc
    if parts.scheme.lower() not in _SCHEMES:
        # The guard's refusal (docs/security.md): a redirect to file:, data: or
        # javascript: is a page refused, not a page that failed.
        raise FetchBlocked(url, f"unsupported scheme {parts.scheme!r}; only http and https")
    if not parts.hostname:
        raise FetchError(url, "the URL has no host")
    _require_valid_host(url)


def _require_valid_host(url: str) -> None:
    """Refuse, before any lookup, a host name that cannot be resolved at all: an empty
    label (``a..b``), a label over 63 characters, or an ``xn--`` label that is not valid
    punycode. httpx and the resolver would raise ``UnicodeError`` for these mid-fetch."""
    try:
        parsed = httpx.URL(url)
        if not parsed.host:  # decoding the xn-- labels raises for a bad one
            raise FetchError(url, "the URL has no host")
    except httpx.InvalidURL as exc:
        raise FetchError(url, f"invalid URL: {exc}") from exc
    except UnicodeError as exc:  # idna.IDNAError is one
        raise FetchError(url, INVALID_HOST_NAME) from exc
    host = parsed.raw_host.decode("ascii", errors="replace")
    if ":" in host:
        return  # an IPv6 literal, checked by httpx already
    labels = host.removesuffix(".").split(".")  # one trailing dot: a fully qualified name
    if any(not 0 < len(label) <= _MAX_LABEL_CHARS for label in labels):
        raise FetchError(url, INVALID_HOST_NAME)


def _blocked_cause(exc: BaseException) -> FetchBlocked | None:
    """The guard's refusal, if httpx wrapped one on its way up."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, FetchBlocked):
            return current
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return None


@contextlib.contextmanager
def _translate_errors(url: str) -> Iterator[None]:
    """httpx's errors (and the guard's refusal from inside httpcore) as ours, naming ``url``."""
    try:
        yield
    except FetchBlocked as exc:
        raise FetchBlocked(url, exc.reason) from exc
    except UnicodeError as exc:
        # A host name that cannot be encoded: httpx raises idna's error building a
        # request, or reading a redirect's Location (it does so even for redirects it
        # does not follow), the resolver its own; ValueErrors, not httpx errors.
        raise FetchError(url, INVALID_HOST_NAME) from exc
    except httpx.TimeoutException as exc:
        # httpx's timeouts often carry no message: the class says which phase timed out.
        raise FetchTimeout(url, f"network timeout: {str(exc) or type(exc).__name__}") from exc
    except (httpx.HTTPError, httpx.InvalidURL) as exc:
        blocked = _blocked_cause(exc)
        if blocked is not None:
            raise FetchBlocked(url, blocked.reason) from exc
        raise FetchError(url, f"{type(exc).__name__}: {exc}".rstrip(": ")) from exc


def _redirect_target(url: str, response: httpx.Response) -> str:
    location = response.headers.get("location")
    if not location:
        raise FetchError(url, f"HTTP {response.status_code} redirect without a Location")
    try:
        target = response.url.join(location).copy_with(fragment=None)
    except (httpx.InvalidURL, ValueError) as exc:
        raise FetchError(url, f"invalid redirect Location {location!r}") from exc
    _require_http(str(target))
    return str(target)


def _retry_note(response: httpx.Response) -> str:
    """When a 429 or 503 says when to come back (``Retry-After``), that, for the reason:
    a caller told only "rate limited" cannot tell a minute from a day."""
    if response.status_code not in (429, 503):
        return ""
    wait = retry_after_s(response.headers.get("retry-after"))
    return "" if wait is None else f"; the site asks to retry after {wait:.0f} s"


async def _vet_redirect(response: httpx.Response) -> None:
    """A response hook: a redirect's Location is checked (scheme, syntax) before httpx
    builds the request it would follow, which raised its own errors for a ``data:``,
    ``javascript:`` or ``mailto:`` target ("InvalidURL: For absolute URLs, path must be
    empty or begin with '/'") before ours could say what was refused."""
    if response.status_code in REDIRECT_STATUSES and "location" in response.headers:
        _redirect_target(str(response.request.url), response)


def _check_media_type(
    url: str, response: httpx.Response, media_type: str | None, allowed: tuple[str, ...]
) -> None:
    if media_type is not None and media_type not in {t.lower() for t in allowed}:
        reason = f"content type {media_type} is not allowed"
        raise UnsupportedContentType(url, reason, response.status_code, media_type)


def _require_html(url: str, response: httpx.Response, prefix: bytes) -> None:
    if not looks_like_html(prefix):
        reason = "no content type, and the body does not look like HTML"
        raise UnsupportedContentType(url, reason, response.status_code, None)


def _pdf_in_disguise(media_type: str | None, allowed: tuple[str, ...]) -> bool:
    """Whether a body labelled ``media_type`` may be a PDF sent as a download (many servers
    label every file they serve so): read it when it starts as a PDF does."""
    return media_type in DOWNLOAD_TYPES and PDF_MEDIA_TYPE in {t.lower() for t in allowed}


def _require_pdf(url: str, response: httpx.Response, prefix: bytes) -> None:
    # The PDF header may follow a little junk (ISO 32000-1, 7.5.2: readers look in the
    # first 1024 bytes).
    if b"%PDF-" not in prefix[:1024]:
        media_type = parse_content_type(response.headers.get("content-type"))[0]
        reason = f"content type {media_type} is not allowed, and the body is not a PDF"
        raise UnsupportedContentType(url, reason, response.status_code, media_type)


@dataclass(frozen=True)
class _Body:
    data: bytes
    downloaded: int
    truncated: bool


PrefixCheck = Callable[[str, httpx.Response, bytes], None]


async def _read_body(
    url: str, response: httpx.Response, decoder: BodyDecoder, max_bytes: int,
    sniff: PrefixCheck | None,
) -> _Body:  # fmt: skip
    """Stream raw bytes until the stream ends, ``max_bytes`` decoded bytes are kept, or
    more than ``max_bytes`` bytes came over the wire (the budget counts received bytes:
    with reads of at most 16 KB, see ``small_reads``, reading stops within 16 KB of it).
    ``sniff`` is called on the first ``_SNIFF_BYTES`` decoded bytes and may refuse them."""
    body = bytearray()
    wire = 0
    wire_cap = max_bytes + 1
    truncated = False
    # One byte beyond max_bytes is decoded so that "exactly max_bytes" and "more" differ.
    async for raw in response.aiter_raw():
        wire += len(raw)
        body += decoder.decode(raw, max_bytes + 1 - len(body))
        if sniff and len(body) >= _SNIFF_BYTES:
            sniff(url, response, bytes(body))
            sniff = None
        if len(body) > max_bytes or wire >= wire_cap:
            truncated = True
            break
    else:
        body += decoder.finish(max_bytes + 1 - len(body))
        truncated = len(body) > max_bytes
    if sniff:
        sniff(url, response, bytes(body))
    return _Body(bytes(body[:max_bytes]), wire, truncated)


class PageFetcher:
    """Fetches web pages within limits through the SSRF guard; raises ``FetchError``s only."""

    def __init__(
        self,
        allowed_hosts: Iterable[str],
        user_agent: str,
        *,
        transport: httpx.AsyncBaseTransport | None = None,
        max_connections: int = 32,
    ) -> None:
        # The guard's policy alone, to hold a page read before (cached) to it: ``vet``.
        self._guard = GuardedNetworkBackend(allowed_hosts)
        self._client = httpx.AsyncClient(
            # The tape of a recorded or replayed request sits at the edge: what the
            # network sent, before anything of ours read it.
            transport=TapedTransport(
                transport or guarded_transport(allowed_hosts, max_connections=max_connections),
                "page",
            ),
            headers={
                "User-Agent": user_agent,
                "Accept": _ACCEPT,
                # Only codings decoded (bounded) in searcher.fetch.body.
                "Accept-Encoding": "gzip, deflate",
            },
            follow_redirects=False,
            event_hooks={"response": [_vet_redirect]},
            trust_env=False,
            # The deadline is FetchLimits.timeout_s, enforced in fetch(). The connect
            # timeout is per address, so that a black-holed first address still leaves
            # time to try the host's next one.
            timeout=httpx.Timeout(None, connect=_CONNECT_TIMEOUT_S),
        )

    async def fetch(self, url: str, limits: FetchLimits) -> FetchedBody:
        """The page at ``url`` after redirects, or a ``FetchError`` saying why not."""
        _require_http(url)
        try:
            async with asyncio.timeout(limits.timeout_s):
                return await self._follow(url, limits)
        except TimeoutError as exc:
            raise FetchTimeout(url, f"not complete within {limits.timeout_s:g} s") from exc

    async def vet(self, url: str, timeout_s: float) -> None:
        """Raise ``FetchBlocked`` if fetching ``url`` would be refused now (its scheme, its
        host by the guard and ``fetch.allowed_hosts``), without fetching it; a
        ``FetchError`` when that cannot be told (the name does not resolve)."""
        _require_http(url)
        parsed = httpx.URL(url)
        port = parsed.port or (443 if parsed.scheme == "https" else 80)
        try:
            with _translate_errors(url):
                await self._guard.vet(parsed.raw_host.decode("ascii"), port, timeout_s)
        except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
            raise FetchError(url, str(exc)) from exc

    async def _follow(self, url: str, limits: FetchLimits) -> FetchedBody:
        current, hops = url, [url]
        for _ in range(limits.max_redirects + 1):
            async with self._open(current) as response:
                if response.status_code in REDIRECT_STATUSES:
                    current = _redirect_target(current, response)
                    hops.append(current)
                    continue
                if not 200 <= response.status_code < 300:
                    if response.status_code in _WALL_STATUSES:
                        await self._raise_if_wall(current, response)
                    raise FetchHTTPError(current, response.status_code, _retry_note(response))
                with _translate_errors(current):
                    page = await self._read(current, response, limits)
                return replace(page, hops=tuple(hops))
        raise TooManyRedirects(url, f"more than {limits.max_redirects} redirects")

    @contextlib.asynccontextmanager
    async def _open(self, url: str) -> AsyncIterator[httpx.Response]:
        with _translate_errors(url):
            request = self._client.build_request("GET", url)
            response = await self._client.send(request, stream=True)
        try:
            yield response
        finally:
            # Closing an unread stream drops the connection rather than draining it.
            with _translate_errors(url):
                await response.aclose()

    async def _read(self, url: str, response: httpx.Response, limits: FetchLimits) -> FetchedBody:
        media_type, charset = parse_content_type(response.headers.get("content-type"))
        sniff: PrefixCheck | None = _require_html if media_type is None else None
        if _pdf_in_disguise(media_type, limits.allowed_content_types):
            media_type, charset, sniff = PDF_MEDIA_TYPE, None, _require_pdf
        _check_media_type(url, response, media_type, limits.allowed_content_types)
        decoder = BodyDecoder(url, response.headers.get("content-encoding"))
        body = await _read_body(url, response, decoder, limits.max_bytes, sniff)
        return FetchedBody(
            url=url,
            status_code=response.status_code,
            content_type=media_type or "text/html",
            charset=charset,
            body=body.data,
            downloaded_bytes=body.downloaded,
            truncated=body.truncated,
        )

    async def _raise_if_wall(self, url: str, response: httpx.Response) -> None:
        """Bot walls and CAPTCHAs often come with 403/429/503: read the head of such an
        answer (bounded) and report a wall as blocked rather than as an HTTP error."""
        with _translate_errors(url):
            decoder = BodyDecoder(url, response.headers.get("content-encoding"))
            head = await _read_body(url, response, decoder, HEAD_BYTES, sniff=None)
        reason = blocked_reason(head.data, "", None, response.status_code)
        if reason is not None:
            raise PageBlocked(url, reason + _retry_note(response), response.status_code)

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._client.aclose()
