"""Crawling a site: its pages read breadth first from the root, each level's links in the
order a query ranks them (``link_rank.py``), under the map's filters (``scope.py``),
robots.txt (``robots.py``), per-host pacing (``politeness.py``), a page and a byte budget
and one deadline. Each page is read as full mode reads it (the page reader: cache, guarded
fetch, extraction) and handed to ``report`` as it completes; exact and near duplicates
(``ranking/dedup.py``'s rule) are reported as skipped instead.
"""

from __future__ import annotations

import asyncio
import hashlib
import time
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field, replace
from urllib.parse import urlsplit

from searcher.contract import CrawledPage, CrawlSkip, CrawlSkipReason
from searcher.errors import FetchError
from searcher.fetch.fetcher import FetchedBody, FetchLimits
from searcher.fetch.page_reader import PageOutcome
from searcher.ranking.dedup import TextSignature, same_text, text_signature
from searcher.site.link_rank import RankLinks, bm25_ranked
from searcher.site.links import Link, page_anchors
from searcher.site.mapping import HTML_TYPES, Fetch, read_robots
from searcher.site.off_loop import off_loop
from searcher.site.politeness import HostPacer, host_delay
from searcher.site.robots import RobotsRules
from searcher.site.scope import SiteScope, admitted, normalised_url

# Reads one page through the given fetch (``PageReader.read_through`` with its limits).
ReadPage = Callable[[str, Fetch], Awaitable[PageOutcome]]
ReportPage = Callable[[CrawledPage], Awaitable[None]]
ReportSkip = Callable[[CrawlSkip], Awaitable[None]]


@dataclass(frozen=True)
class CrawlPlan:
    """One crawl's bounds and manners."""

    root: str  # normalised
    scope: SiteScope
    max_depth: int
    max_breadth: int
    limit: int  # pages read
    max_bytes: int  # downloaded, all pages
    query: str | None
    delay_s: float
    per_host: int
    concurrency: int
    timeout_s: float
    user_agent: str


@dataclass(frozen=True)
class CrawlReport:
    """Where a crawl's findings go as they come."""

    page: ReportPage
    skip: ReportSkip


@dataclass
class CrawlTally:
    """What a crawl spent and kept; ``complete`` False once a budget or the deadline cut it."""

    pages_read: int = 0
    bytes: int = 0
    kept: int = 0
    complete: bool = True
    seen: set[str] = field(default_factory=set)  # URLs queued or read
    _exact: dict[str, str] = field(default_factory=dict)  # text digest -> URL kept
    _kept: list[tuple[TextSignature, str]] = field(default_factory=list)

    def copy_of(self, text: str) -> tuple[CrawlSkipReason, str] | None:
        """Whether ``text`` repeats a kept page (and which); otherwise it is kept."""
        digest = hashlib.sha256(" ".join(text.split()).encode()).hexdigest()
        if digest in self._exact:
            return "duplicate", self._exact[digest]
        signature = text_signature(text)
        for other, url in self._kept:
            if same_text(signature, other):
                return "near_duplicate", url
        return None

    def keep(self, text: str, url: str) -> None:
        """Remember a kept page's text."""
        self._exact[hashlib.sha256(" ".join(text.split()).encode()).hexdigest()] = url
        self._kept.append((text_signature(text), url))
        self.kept += 1


@dataclass
class _Crawl:
    """One running crawl: its plan, robots, pacer, tally and reporting."""

    plan: CrawlPlan
    read: ReadPage
    fetch: Fetch
    robots: dict[str, RobotsRules]  # by origin
    pacer: HostPacer
    report: CrawlReport
    tally: CrawlTally
    gate: asyncio.Semaphore
    rank: RankLinks
    deadline: float  # time.monotonic() at which the crawl ends
    scope: SiteScope  # the plan's, on the host the root redirected to (``_stays``)

    def paced(self, bodies: list[FetchedBody]) -> Fetch:
        """The fetch for one page: paced per host, its body kept for the page's links."""

        async def fetch(url: str, limits: FetchLimits) -> FetchedBody:
            async with self.pacer.turn(urlsplit(url).hostname or ""):
                body = await self.fetch(url, limits)
            self.tally.bytes += body.downloaded_bytes  # a page's, or a cached page's links'
            bodies.append(body)
            return body

        return fetch

    async def page(self, link: Link, depth: int) -> list[Link]:
        """Read one page (if the budgets allow) and report it; its links, when deeper
        levels are to be read."""
        async with self.gate:
            if self.tally.pages_read >= self.plan.limit or self.tally.bytes >= self.plan.max_bytes:
                self.tally.complete = False  # the pages left unread are not listed
                return []
            self.tally.pages_read += 1
            bodies: list[FetchedBody] = []
            outcome = await self.read(link.url, self.paced(bodies))
            if bodies and not await self._stays(bodies[-1].url, depth):
                error = f"redirected to {bodies[-1].url}, outside the crawl's scope"
                skip = CrawlSkip(url=link.url, depth=depth, reason="out_of_scope", error=error)
                await self.report.skip(skip)
                return []
            await self._report(link.url, depth, outcome, bodies)
            if depth >= self.plan.max_depth or outcome.status != "fetched":
                return []
            if not bodies:  # read from the extraction cache: its links are fetched
                try:
                    bodies.append(await self.paced([])(link.url, _link_limits(self.plan)))
                except FetchError:
                    return []
                if depth == 0:  # where the root leads, known only now
                    await self._stays(bodies[-1].url, depth)
        body = bodies[-1]
        if not body.content_type.startswith(HTML_TYPES):
            return []
        # A page of 2 MB may hold 60,000 links: parsed off the event loop.
        return await self._followed(await off_loop(page_anchors, body.body, body.url))

    async def _stays(self, final: str, depth: int) -> bool:
        """Whether the page a read ended on (after redirects) is within the crawl. The
        root may lead to another host (``www.`` to the bare name, an old domain to a new
        one): the site lives there now, so the crawl's scope moves with it. A link that
        leads out of scope is not the site's page (a ``/github`` link to github.com)."""
        url = normalised_url(final)
        if url is None:
            return False
        self.tally.seen.add(url)  # the page a redirect led to is not read again
        host = urlsplit(url).hostname or ""
        if depth == 0:
            if not self.scope.same_site(host):
                self.scope = replace(self.scope, root_host=host)
            return True
        return await off_loop(self.scope.admits, url)

    async def _report(
        self, url: str, depth: int, outcome: PageOutcome, bodies: list[FetchedBody]
    ) -> None:
        final = bodies[-1].url if bodies else url
        if outcome.status != "fetched" or not outcome.content:
            skip = CrawlSkip(url=url, depth=depth, reason="failed",
                             error=outcome.error or outcome.status)  # fmt: skip
            await self.report.skip(skip)
            return
        copy = self.tally.copy_of(outcome.content)
        if copy is not None:
            reason, kept = copy
            skip = CrawlSkip(url=final, depth=depth, reason=reason, duplicate_of=kept)
            await self.report.skip(skip)
            return
        self.tally.keep(outcome.content, final)
        page = CrawledPage(url=final, depth=depth, content=outcome.content,
                           fetch=outcome.fetch_info())  # fmt: skip
        await self.report.page(page)

    async def _followed(self, links: list[Link]) -> list[Link]:
        """A page's links to follow: in scope, not seen, best ``max_breadth`` first."""
        unseen = {link.url: link for link in links if link.url not in self.tally.seen}
        # The client's patterns over a page's links can take seconds: off the event loop.
        urls, _ = await off_loop(
            admitted, list(unseen), self.scope.admits, self.deadline, len(unseen)
        )
        fresh = [unseen[url] for url in urls]
        if len(fresh) <= self.plan.max_breadth:  # all are followed: the level orders them
            return fresh
        ranked = await self.rank(self.plan.query, fresh, self.plan.max_breadth)
        return ranked[: self.plan.max_breadth]

    async def robots_of(self, url: str) -> RobotsRules:
        """The robots.txt rules of ``url``'s origin (read once per crawl and origin: other
        hosts' pages, with ``allow_external``, follow their own site's rules)."""
        origin = _origin(url)
        if origin not in self.robots:
            self.robots[origin] = await read_robots(
                self.fetch, origin, self.plan.user_agent, min(self.plan.timeout_s, 30.0)
            )
        return self.robots[origin]

    async def level(self, links: list[Link], depth: int) -> list[Link]:
        """Read one level's pages (robots first), best ranked first; the next level."""
        readable = []
        for link in links:
            if (await self.robots_of(link.url)).allows(link.url):
                readable.append(link)
            else:
                await self.report.skip(CrawlSkip(url=link.url, depth=depth, reason="robots"))
        found = await asyncio.gather(*(self.page(link, depth) for link in readable))
        following: list[Link] = []
        for page_links in found:
            for link in page_links:
                if link.url not in self.tally.seen:
                    self.tally.seen.add(link.url)
                    following.append(link)
        return await self.rank(self.plan.query, following, len(following))


def _origin(url: str) -> str:
    parts = urlsplit(url)
    return f"{parts.scheme}://{parts.netloc}"


def _link_limits(plan: CrawlPlan) -> FetchLimits:
    return FetchLimits(timeout_s=min(plan.timeout_s, 30.0), max_bytes=2 * 1024 * 1024,
                       allowed_content_types=HTML_TYPES, max_redirects=5)  # fmt: skip


async def crawl_site(
    read: ReadPage,
    fetch: Fetch,
    plan: CrawlPlan,
    report: CrawlReport,
    rank: RankLinks = bm25_ranked,
) -> CrawlTally:
    """Crawl ``plan.root``'s site, reporting each page as it is read, following the links
    ``rank`` puts first; what the budgets or the deadline cut off leaves ``complete``
    False."""
    tally = CrawlTally(seen={plan.root})
    deadline = time.monotonic() + plan.timeout_s
    try:
        async with asyncio.timeout(plan.timeout_s):
            origin = _origin(plan.root)
            robots = await read_robots(fetch, origin, plan.user_agent, plan.timeout_s)
            pacer = HostPacer(host_delay(plan.delay_s, robots.crawl_delay()), plan.per_host)
            crawl = _Crawl(plan, read, fetch, {origin: robots}, pacer, report, tally,
                           asyncio.Semaphore(plan.concurrency), rank, deadline,
                           plan.scope)  # fmt: skip
            level = [Link(plan.root, "")]
            for depth in range(plan.max_depth + 1):
                if not level:
                    break
                level = await crawl.level(level, depth)
    except TimeoutError:
        tally.complete = False
    return tally
