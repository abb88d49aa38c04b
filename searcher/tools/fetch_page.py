"""fetch_page: one page's extracted text, a slice at a time.

The page is read the way full mode reads it (``SearchService.read_pages``: extraction
cache, SSRF-guarded fetch, limits, extraction, blocked-page check), so a URL an LLM asks
for gets no path around the guard. A page that cannot be read is a result that says why,
not an exception. The result is the wire model ``FetchPageResponse`` itself: the read is a
``PageOutcome`` (``fetch`` is its ``FetchInfo``), the rest is the slice.
"""

from __future__ import annotations

from collections.abc import Sequence
from urllib.parse import urlsplit

import httpx

from searcher.contract import FetchPageResponse, RenderMode
from searcher.errors import InvalidRequest
from searcher.fetch.page_reader import PageOutcome
from searcher.service import SearchService

SCHEMES = ("http", "https")


def check_url(url: str) -> str:
    """The URL, stripped; ``InvalidRequest`` on field ``url`` unless it is http(s) with a host."""
    url = url.strip()
    try:
        parts = urlsplit(url)
        host = parts.hostname
        _ = parts.port  # raises for a port that is not a number in 0-65535
    except ValueError as exc:
        raise InvalidRequest("url", f"not a valid URL: {exc}") from exc
    if parts.scheme.lower() not in SCHEMES:
        shown = f"{parts.scheme}:" if parts.scheme else "a URL without a scheme"
        raise InvalidRequest("url", f"only http and https URLs can be fetched, not {shown}")
    if not host:
        raise InvalidRequest("url", "the URL has no host")
    _check_host_name(url)
    return url


def _check_host_name(url: str) -> None:
    # The fetcher (httpx) decodes the host's IDNA labels before it connects; one that does
    # not decode (``xn--``) would otherwise fail there, as an exception inside the read.
    try:
        parsed = httpx.URL(url)
    except httpx.InvalidURL as exc:
        raise InvalidRequest("url", f"not a valid URL: {exc}") from exc
    try:
        _ = parsed.host
    except ValueError as exc:  # idna's IDNAError is a UnicodeError
        raise InvalidRequest("url", f"the host is not a valid name: {exc}") from exc


def page_slice(text: str, start_char: int, max_chars: int) -> tuple[str, int | None]:
    """``text[start_char:start_char+max_chars]`` and where the next slice starts (None at
    the end)."""
    end = start_char + max_chars
    return text[start_char:end], (end if end < len(text) else None)


async def fetch_page(
    service: SearchService,
    url: str,
    max_chars: int,
    start_char: int = 0,
    client: str | None = None,
    render: RenderMode = "auto",
) -> FetchPageResponse:
    """Read ``url`` and return ``max_chars`` characters of its text from ``start_char``.
    Raises ``InvalidRequest`` for a bad URL or range, never for the page's own failure."""
    (page,) = await fetch_pages(service, [check_url(url)], max_chars, start_char, client, render)
    return page


async def fetch_pages(
    service: SearchService,
    urls: Sequence[str],
    max_chars: int,
    start_char: int = 0,
    client: str | None = None,
    render: RenderMode = "auto",
) -> list[FetchPageResponse]:
    """Read ``urls`` concurrently under one deadline (checked by the caller) and return a
    slice of each page's text, in the order asked; each page has its own status."""
    if max_chars < 1:
        raise InvalidRequest("max_chars", "must be at least 1")
    if start_char < 0:
        raise InvalidRequest("start_char", "must not be negative")
    pages = await service.read_pages(urls, client=client, render=render)
    return [_slice(url, page, max_chars, start_char) for url, page in zip(urls, pages, strict=True)]


def _slice(url: str, page: PageOutcome, max_chars: int, start_char: int) -> FetchPageResponse:
    text = (page.content or "") if page.status == "fetched" else ""
    content, next_start = page_slice(text, start_char, max_chars)
    return FetchPageResponse(
        url=url,
        status=page.status,
        content=content,
        start_char=start_char,
        next_start_char=next_start,
        total_chars=len(text),
        fetch=page.fetch_info(),
    )
