"""A crawl run in this process (``searcher crawl``): the same crawl as a job's
(``crawl.py``), reported to the caller as it goes, and its pages as Markdown files for a
collection of own documents (``corpus.operations.add_files``)."""

from __future__ import annotations

import hashlib
import re
from collections.abc import Callable
from dataclasses import dataclass, field
from urllib.parse import urlsplit

from searcher.config import Settings
from searcher.contract import Budget, CrawledPage, CrawlSkip
from searcher.fetch.page_reader import PageOutcome
from searcher.pipeline.budget import effective_budget
from searcher.pipeline.limits import extract_chars_within_limit
from searcher.runtime import open_service
from searcher.site.crawl import CrawlPlan, CrawlReport, crawl_site
from searcher.site.crawl_jobs import link_ranker
from searcher.site.mapping import Fetch

MAX_PATH_PARTS = 6  # a page's file sits at most this deep (the upload limit is 8)
_UNSAFE = re.compile(r"[^A-Za-z0-9_-]+")

Progress = Callable[[CrawledPage | CrawlSkip], None]


@dataclass
class LocalCrawl:
    """What a crawl in this process read and left out."""

    pages: list[CrawledPage] = field(default_factory=list)
    skipped: list[CrawlSkip] = field(default_factory=list)
    complete: bool = True


async def crawl_here(
    settings: Settings, plan: CrawlPlan, max_chars: int, progress: Progress | None = None
) -> LocalCrawl:
    """Crawl under ``plan`` with a service of this process; ``progress`` sees each page
    and skip as it comes."""
    found = LocalCrawl()
    limits = effective_budget(Budget(), settings.budget).fetch_limits()
    chars = extract_chars_within_limit(max_chars, settings.limits)

    async def page(crawled: CrawledPage) -> None:
        found.pages.append(crawled)
        if progress is not None:
            progress(crawled)

    async def skip(left: CrawlSkip) -> None:
        found.skipped.append(left)
        if progress is not None:
            progress(left)

    async with open_service(settings, extract_in_process=True, sweep=False) as runtime:
        reader = runtime.service.parts.reader

        async def read(url: str, fetch: Fetch) -> PageOutcome:
            return await reader.read_through(url, limits, chars, fetch, None)

        rank = link_ranker(runtime.service.parts, plan.timeout_s)
        report = CrawlReport(page, skip)
        tally = await crawl_site(read, reader.fetcher.fetch, plan, report, rank)
    found.complete = tally.complete
    return found


def page_file_name(url: str) -> str:
    """The name a crawled page is kept under in a collection: its host and path as safe
    folder names, ``.md``; one name per URL, so that no page of a crawl (or of an earlier
    one) is written over by another. A path the name cannot spell back (characters
    replaced, folders past ``MAX_PATH_PARTS``, a query, a last part ``index``) adds a
    short hash of the path and query (``a_b-1f2e3d4c.md`` for ``/a.b``); a path ending
    in ``/`` is its folder's ``index.md``."""
    parts = urlsplit(url)
    host = _UNSAFE.sub("_", parts.netloc) or "site"
    named = [p for p in parts.path.split("/") if p]
    folder = parts.path.endswith("/") or not named
    safe = [_UNSAFE.sub("_", p) for p in named] + (["index"] if folder else [])
    path = safe[:MAX_PATH_PARTS]
    stem = path.pop()
    exact = "/" + "/".join(named) + ("/" if folder and named else "")
    spelled = (
        safe[: len(named)] == named and len(safe) <= MAX_PATH_PARTS
        and exact == (parts.path or "/") and named[-1:] != ["index"]
    )  # fmt: skip
    if parts.query or not spelled:
        target = f"{parts.path}?{parts.query}" if parts.query else parts.path
        stem += "-" + hashlib.sha256(target.encode()).hexdigest()[:8]
    return "/".join(["crawl", host, *path, f"{stem}.md"])


def page_file(page: CrawledPage) -> tuple[str, bytes]:
    """A crawled page as a Markdown file: its text, then where it came from."""
    return page_file_name(page.url), f"{page.content}\n\nSource: <{page.url}>\n".encode()
