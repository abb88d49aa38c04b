"""Mapping a site: its URLs from robots.txt's sitemaps (or ``/sitemap.xml``) and from the
links of its pages, breadth first from the root, under the scope's filters, within a
depth, a breadth per page, a URL limit and one deadline. Only links are read from pages.

Every request goes through the caller's fetch (the guarded fetcher), so a sitemap or a
link cannot lead a map to an address the fetch guard refuses.
"""

from __future__ import annotations

import asyncio
import time
import weakref
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit, urlunsplit

from searcher.errors import FetchError, FetchHTTPError
from searcher.fetch.fetcher import FetchedBody, FetchLimits
from searcher.site.links import page_links
from searcher.site.off_loop import off_loop
from searcher.site.robots import RobotsRules
from searcher.site.scope import SiteScope, admitted, normalised_url
from searcher.site.sitemaps import Sitemap, SitemapTooLarge, gunzipped, parse_sitemap

Fetch = Callable[[str, FetchLimits], Awaitable[FetchedBody]]

HTML_TYPES = ("text/html", "application/xhtml+xml")
SITEMAP_TYPES = (
    "application/xml", "text/xml", "application/gzip", "application/x-gzip",
    "application/octet-stream", "text/plain",
)  # fmt: skip
ROBOTS_TYPES = ("text/plain",)
MAX_SITEMAPS = 50  # sitemap documents read per map, an index's children included
MAX_SITEMAP_BYTES = 50 * 1024 * 1024  # sitemaps.org's own cap, uncompressed
MAX_PAGE_BYTES = 2 * 1024 * 1024
PAGE_CONCURRENCY = 4
_ROBOTS_BYTES = 512 * 1024


@dataclass(frozen=True)
class MapPlan:
    """One map's bounds."""

    root: str  # normalised
    scope: SiteScope
    max_depth: int
    max_breadth: int
    limit: int
    use_sitemaps: bool
    timeout_s: float
    user_agent: str


@dataclass
class SiteMap:
    """What a map found: URLs in the order found (the root first), and how."""

    urls: list[str] = field(default_factory=list)
    from_sitemaps: int = 0
    from_links: int = 0
    sitemaps_read: int = 0
    pages_read: int = 0
    complete: bool = True  # False: cut by the limit or the deadline

    def add(self, url: str, limit: int) -> bool:
        """Keep ``url`` unless known or the limit is reached; True if it was new."""
        if url in self._seen:
            return False
        if len(self.urls) >= limit:
            self.complete = False
            return False
        self._seen.add(url)
        self.urls.append(url)
        return True

    def __post_init__(self) -> None:
        self._seen: set[str] = set(self.urls)


SITEMAPS_AT_ONCE = 2
MAP_PAGES_AT_ONCE = 8  # of the fetcher's 32 connections: full mode keeps the rest
_SLOTS: weakref.WeakKeyDictionary[asyncio.AbstractEventLoop, dict[str, asyncio.Semaphore]] = (
    weakref.WeakKeyDictionary()
)


def _process_slots(kind: str, size: int) -> asyncio.Semaphore:
    """Slots shared by every map in this process, whoever asks (one set per event loop:
    tests run several), so that concurrent maps cannot add up past ``size``."""
    slots = _SLOTS.setdefault(asyncio.get_running_loop(), {})
    return slots.setdefault(kind, asyncio.Semaphore(size))


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return urlunsplit((parts.scheme, parts.netloc, "", "", ""))


def _limits(timeout_s: float, max_bytes: int, types: tuple[str, ...]) -> FetchLimits:
    return FetchLimits(
        timeout_s=timeout_s, max_bytes=max_bytes, allowed_content_types=types, max_redirects=5
    )


async def read_robots(fetch: Fetch, origin: str, user_agent: str, timeout_s: float) -> RobotsRules:
    """The origin's robots.txt rules (everything allowed when it has none)."""
    try:
        body = await fetch(f"{origin}/robots.txt", _limits(timeout_s, _ROBOTS_BYTES, ROBOTS_TYPES))
    except FetchHTTPError as exc:
        return RobotsRules(None, user_agent, refuse_all=exc.status_code >= 500)
    except FetchError:
        return RobotsRules(None, user_agent)
    return RobotsRules(body.body.decode("utf-8", "replace"), user_agent)


async def _sitemap_pages(
    fetch: Fetch, plan: MapPlan, robots: RobotsRules, found: SiteMap, deadline: float
) -> None:
    queue = [u for u in (normalised_url(s) for s in robots.sitemaps()) if u] or [
        f"{_origin(plan.root)}/sitemap.xml"
    ]
    seen: set[str] = set()
    while queue:
        if found.sitemaps_read >= MAX_SITEMAPS or len(found.urls) >= plan.limit:
            found.complete = False  # sitemaps left unread
            return
        url = queue.pop(0)
        if url in seen or not plan.scope.host_allowed(urlsplit(url).hostname or ""):
            continue
        seen.add(url)
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            found.complete = False
            return
        try:
            # A sitemap may hold 50 MB compressed and 50 MB inflated: a few at a time.
            async with _process_slots("sitemaps", SITEMAPS_AT_ONCE):
                body = await fetch(url, _limits(remaining, MAX_SITEMAP_BYTES, SITEMAP_TYPES))
                # Seconds of work for a sitemap of 50 MB: off the event loop.
                sitemap = await off_loop(_parsed, body.body)
        except (FetchError, SitemapTooLarge, ValueError):
            continue
        found.sitemaps_read += 1
        queue.extend(u for u in (normalised_url(s) for s in sitemap.sitemaps) if u)
        pages, checked = await _in_scope(sitemap.pages, plan, robots, found, deadline)
        for page in pages:
            found.from_sitemaps += found.add(page, plan.limit)
        if not checked:
            found.complete = False
            return


def _parsed(body: bytes) -> Sitemap:
    return parse_sitemap(gunzipped(body, MAX_SITEMAP_BYTES))


async def _in_scope(
    urls: Sequence[str], plan: MapPlan, robots: RobotsRules, found: SiteMap, deadline: float
) -> tuple[list[str], bool]:
    """The normalised ``urls`` the scope and robots.txt admit and the map does not hold,
    as many as its limit has room for, checked in a worker thread until ``deadline``;
    and whether every URL was checked."""
    known = set(found.urls)

    def keep(url: str) -> bool:
        return url not in known and plan.scope.admits(url) and robots.allows(url)

    room = plan.limit - len(found.urls)
    normalised = (normalised_url(u) for u in urls)
    unique = list(dict.fromkeys(u for u in normalised if u))
    kept, checked = await off_loop(admitted, unique, keep, deadline, room + 1)
    return kept, checked


async def _page_of(fetch: Fetch, url: str, deadline: float) -> tuple[str, list[str]]:
    """Where ``url`` leads (after redirects) and the links of the page there."""
    remaining = deadline - time.monotonic()
    if remaining <= 0:
        return url, []
    try:
        body = await fetch(url, _limits(remaining, MAX_PAGE_BYTES, HTML_TYPES))
    except FetchError:
        return url, []
    return body.url, await off_loop(page_links, body.body, body.url)  # lxml, off the loop


async def _settled(
    fetch: Fetch, plan: MapPlan, robots: RobotsRules, deadline: float
) -> tuple[MapPlan, RobotsRules, list[str] | None]:
    """The plan and robots.txt of the site the root leads to, and the root's links
    (None when it is not read: ``max_depth`` 0, or robots.txt disallows it). A root that
    redirects to another host (``www.`` to the bare name, an old domain to a new one)
    moves the map there: its links would all be off the old host's site."""
    if plan.max_depth < 1 or not robots.allows(plan.root):
        return plan, robots, None
    async with _process_slots("pages", MAP_PAGES_AT_ONCE):
        final, links = await _page_of(fetch, plan.root, deadline)
    root = normalised_url(final) or plan.root
    host = urlsplit(root).hostname or ""
    if plan.scope.same_site(host):
        return plan, robots, links
    moved = replace(plan, root=root, scope=replace(plan.scope, root_host=host))
    remaining = max(deadline - time.monotonic(), 0.001)
    return moved, await read_robots(fetch, _origin(root), plan.user_agent, remaining), links


async def _link_pages(
    fetch: Fetch,
    plan: MapPlan,
    robots: RobotsRules,
    found: SiteMap,
    deadline: float,
    root_links: list[str] | None,
) -> None:
    level, gate = [plan.root], asyncio.Semaphore(PAGE_CONCURRENCY)

    async def links(url: str) -> list[str]:
        if url == plan.root and root_links is not None:  # read already (``_settled``)
            return root_links
        async with gate, _process_slots("pages", MAP_PAGES_AT_ONCE):
            return (await _page_of(fetch, url, deadline))[1]

    for _depth in range(plan.max_depth):
        readable = [u for u in level if robots.allows(u)]
        if not readable or time.monotonic() >= deadline:
            break
        pages = await asyncio.gather(*(links(u) for u in readable))
        found.pages_read += len(readable)
        level = []
        for page in pages:
            kept, checked = await off_loop(
                admitted, page, lambda u: plan.scope.admits(u) and robots.allows(u),
                deadline, plan.max_breadth,
            )  # fmt: skip
            if not checked and len(kept) < plan.max_breadth:
                found.complete = False  # the deadline came first
            for url in kept:
                if found.add(url, plan.limit):
                    found.from_links += 1
                    level.append(url)


async def map_site(fetch: Fetch, plan: MapPlan) -> SiteMap:
    """The site's URLs under ``plan``; what the deadline cut off leaves ``complete`` False."""
    deadline = time.monotonic() + plan.timeout_s
    found = SiteMap()
    found.add(plan.root, plan.limit)
    try:
        async with asyncio.timeout(plan.timeout_s):
            robots = await read_robots(fetch, _origin(plan.root), plan.user_agent, plan.timeout_s)
            plan, robots, root_links = await _settled(fetch, plan, robots, deadline)
            found.add(plan.root, plan.limit)  # where the root led, when it moved
            if plan.use_sitemaps:
                await _sitemap_pages(fetch, plan, robots, found, deadline)
            await _link_pages(fetch, plan, robots, found, deadline, root_links)
    except TimeoutError:
        found.complete = False
    return found
