"""Full mode's reading step: for each chosen URL, cache -> fetch -> extract -> cache.

A page that turns out to be a wall (bot challenge, CAPTCHA, cookie wall) rather than
content fails with ``skip_reason="blocked"`` and is not cached.

A cached page is held to the guard as its fetch would be: every URL its read went
through (redirects included) is checked against the guard and ``fetch.allowed_hosts`` of
now, so a page read under a configuration that allowed it is ``blocked`` under one that
does not.

Pages are read concurrently (bounded), each under its own fetch timeout, all under the
request deadline; a page still unfinished at the deadline is reported as skipped, and the
response goes out with what is ready.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Awaitable, Callable, Hashable, Sequence
from dataclasses import asdict, dataclass, replace

from searcher.cache.extraction import ExtractionCache
from searcher.contract import FetchInfo, FetchStatus, SkipReason
from searcher.errors import (
    ExtractionTooLarge,
    FetchBlocked,
    FetchError,
    FetchHTTPError,
    PageBlocked,
    RenderError,
    UnsupportedContentType,
)
from searcher.fetch.blocked import HEAD_BYTES, blocked_reason
from searcher.fetch.extractor import Extractor
from searcher.fetch.fetcher import FetchedBody, FetchLimits, PageFetcher
from searcher.fetch.js_shell import needs_javascript
from searcher.fetch.pdf import PDF_MEDIA_TYPE, PartialText
from searcher.fetch.renderer import BrowserTier, RenderedPage
from searcher.pipeline.resilience import Deadline
from searcher.recording.render_tape import recorded_render, taped_render
from searcher.recording.tape import current_tape

_HTML_TYPES = frozenset({"text/html", "application/xhtml+xml"})


@dataclass(frozen=True)
class PageOutcome:
    """The one internal type for a page read: what happened to one page (the item's
    ``fetch`` block, ``FetchInfo`` on the wire) plus its text. Full mode, ``/v1/fetch``,
    the compat endpoints, MCP and the CLI all consume this."""

    status: FetchStatus
    skip_reason: SkipReason | None = None
    error: str | None = None
    http_status: int | None = None
    content_type: str | None = None
    downloaded_bytes: int = 0
    truncated: bool = False
    extracted_chars: int = 0
    cached: bool = False
    rendered: bool = False  # the text is the headless browser's DOM's
    render_ms: int | None = None
    content: str | None = None
    # The read was stopped by the caller (Ctrl-C, a client gone): the progress report
    # says so; such a page never reaches a response.
    cancelled: bool = False

    def fetch_info(self) -> FetchInfo:
        """The wire form of the read: everything but the text."""
        fields = asdict(self)
        fields.pop("content")
        fields.pop("cancelled")
        return FetchInfo(**fields)


Progress = Callable[[int, int, str, PageOutcome], None]
Fetch = Callable[[str, FetchLimits], Awaitable[FetchedBody]]


@dataclass(frozen=True)
class _Read:
    """What one page read runs under: its limits, the characters wanted and cut at, the
    caller (its share of the extraction workers), the owner of its browser pages (the
    client, else the request: a per-request budget of pages) and the deadline."""

    limits: FetchLimits
    max_chars: int
    cut_at: int
    client: str | None
    owner: Hashable
    deadline: Deadline | None = None

    def render_timeout(self) -> float:
        """Time the browser may take for this page: within the read's and the deadline's."""
        if self.deadline is None:
            return self.limits.timeout_s
        return self.deadline.cap(self.limits.timeout_s)


class _PastDeadline(FetchError):
    """A download whose turn came after the request's deadline: it never started."""

    status = "skipped"
    skip_reason = "timeout"


DEADLINE_SKIP = PageOutcome(
    "skipped", "timeout", "request deadline reached before the page was read"
)
CANCELLED = PageOutcome("skipped", error="the read was interrupted", cancelled=True)


class PageReader:
    """Reads pages through the extraction cache, the guarded fetcher and the extractor."""

    def __init__(
        self,
        fetcher: PageFetcher,
        extractor: Extractor,
        cache: ExtractionCache,
        max_concurrency: int = 10,
        browser: BrowserTier | None = None,
    ) -> None:
        self._fetcher = fetcher
        self._extractor = extractor
        self._cache = cache
        self._max_concurrency = max_concurrency
        self._browser = browser

    @property
    def fetcher(self) -> PageFetcher:
        """The guarded fetcher (site maps read sitemaps and links through it)."""
        return self._fetcher

    @property
    def browser(self) -> BrowserTier | None:
        """The headless-browser tier (``available`` says whether it can render)."""
        return self._browser

    @property
    def extractor(self) -> Extractor:
        """The extractor pages are read with (its pool's stats show who holds workers)."""
        return self._extractor

    async def read(
        self, url: str, limits: FetchLimits, max_chars: int, client: str | None = None
    ) -> PageOutcome:
        """Read one page; never raises for a page's own failure. ``client`` is the caller
        whose share of the extraction pool the page counts against."""
        read = self._read_context(limits, max_chars, client, None)
        return await self._read(url, read, self._fetcher.fetch)

    def _read_context(
        self, limits: FetchLimits, max_chars: int, client: str | None, deadline: Deadline | None
    ) -> _Read:
        # The server's ceiling, not this request's max_chars: the cached entry serves
        # later requests for more (see _extracted).
        cut_at = max(max_chars, self._extractor.limits.max_chars)
        owner: Hashable = client if client is not None else object()
        return _Read(limits, max_chars, cut_at, client, owner, deadline)

    async def read_through(
        self, url: str, limits: FetchLimits, max_chars: int, fetch: Fetch, client: str | None
    ) -> PageOutcome:
        """Read one page as ``read`` does, downloading through ``fetch`` (a crawl's wrapper
        of ``fetcher.fetch``: its per-host pacing, and the body kept for its links)."""
        read = self._read_context(limits, max_chars, client, None)
        return await self._read(url, read, fetch)

    async def _read(self, url: str, read: _Read, fetch: Fetch) -> PageOutcome:
        limits, max_chars = read.limits, read.max_chars
        # The cache key is the URL as requested, byte for byte: two URLs that differ only
        # in tracking parameters can be two different pages (one that echoes its query
        # string would otherwise poison the clean URL's entry).
        # A recorded or replayed read goes to the page (its tape), never the cache: the
        # recording must hold the page, and a replay must not be served what came since.
        taped = current_tape() is not None
        found = None if taped else await self._cache.get_first(self._cache_names(limits), url)
        hit = None if found is None else usable_entry(found[1], max_chars)
        drawn = found is not None and found[0] != self._extractor.name
        if hit is not None:
            try:
                for hop in hit.hops:
                    await self._fetcher.vet(hop, limits.timeout_s)
            except FetchBlocked as exc:
                return _not_fetched(exc)
            except FetchError:
                pass  # the guard cannot tell (a name that does not resolve): fetch, as then
            else:
                return replace(self._cached(hit, limits, max_chars), rendered=drawn)
        try:
            page = await fetch(url, limits)
        except FetchError as exc:
            return _not_fetched(exc)
        return await self._extracted(url, page, read)

    async def _extracted(self, url: str, page: FetchedBody, read: _Read) -> PageOutcome:
        """The outcome of a fetched page: its text extracted (and cached), or why not."""
        outcome = PageOutcome(
            "fetched",
            http_status=page.status_code,
            content_type=page.content_type,
            downloaded_bytes=page.downloaded_bytes,
            truncated=page.truncated,
        )
        # The text is cut at the server's ceiling, never at this request's max_chars, so
        # that the cached entry serves later requests for more. ``max_chars`` is already
        # within the ceiling: it exceeds the extractor's cut only when the extractor was
        # built with a lower one than the server's.
        try:
            text = await self._extractor.extract(
                page.body, page.url, page.content_type, page.charset,
                client=read.client, max_chars=read.cut_at,
            )  # fmt: skip
        except FetchError as exc:
            # A PDF cut at the download limit that PDFium cannot read (most keep their
            # cross-reference table at the end) was too large to read. One it can read
            # is not here: its pages within the limit are partial text, marked truncated.
            # One that ran out of memory says so, cut or not.
            cut_pdf = page.truncated and page.content_type == PDF_MEDIA_TYPE
            if cut_pdf and not isinstance(exc, ExtractionTooLarge):
                return replace(
                    outcome, status="skipped", skip_reason="too_large",
                    error="the PDF is larger than the download limit",
                )  # fmt: skip
            return replace(outcome, status="failed", skip_reason=exc.skip_reason, error=exc.reason)
        if isinstance(text, PartialText):  # pages beyond fetch.pdf_max_pages: partial text
            outcome = replace(outcome, truncated=True)
        # A bot wall, CAPTCHA or cookie wall answers 200 with a few lines that are not the
        # page: report it, and keep it out of the pack and the cache.
        wall = blocked_reason(page.body[:HEAD_BYTES], text, None, page.status_code)
        if self._wants_browser(page, text, wall, read.limits):
            drawn = await self._rendered(url, page, outcome, read, usable=bool(text) and not wall)
            if drawn is not None:
                return drawn
        return await self._finished(url, page, outcome, text, wall, read)

    def _rendered_cache_name(self) -> str:
        return f"{self._extractor.name}+browser"

    def _cache_names(self, limits: FetchLimits) -> tuple[str, ...]:
        """Where a cached text may come from: a rendered page's text is kept apart from a
        static read's, so ``render: never`` is never served a browser's DOM, ``always``
        never a static read, and ``auto`` either (the rendered one first)."""
        static = self._extractor.name
        if self._browser is None or not self._browser.available or limits.render == "never":
            return (static,)
        if limits.render == "always":
            return (self._rendered_cache_name(),)
        return (self._rendered_cache_name(), static)

    def _can_render(self, url: str) -> bool:
        """Whether a page can go to the browser: a replay's recording holds its render
        (the recording stands in for the browser, there or not), else a browser is
        configured and found."""
        recorded = recorded_render(url)
        if recorded is not None:
            return recorded
        return self._browser is not None and self._browser.available

    def _wants_browser(
        self, page: FetchedBody, text: str, wall: str | None, limits: FetchLimits
    ) -> bool:
        """Whether this page goes to the browser: an HTML page, a browser configured, and
        rendering asked for always, or by default when the static read found a shell."""
        if not self._can_render(page.url):
            return False
        if page.content_type not in _HTML_TYPES:
            return False
        if limits.render == "always":
            return True
        return limits.render == "auto" and needs_javascript(page.body, text, wall)

    async def _rendered(
        self, url: str, page: FetchedBody, outcome: PageOutcome, read: _Read, usable: bool
    ) -> PageOutcome | None:
        """The outcome of the page read from the browser's DOM; None when the static read
        stands (the browser found no more text, or failed where the static text is usable)."""
        browser = self._browser

        async def draw() -> RenderedPage:
            if browser is None:  # a replay's render is answered by its recording
                raise RenderError(page.url, "no browser")
            return await browser.render(
                page.url, read.render_timeout(), read.limits.max_bytes, read.owner
            )

        try:
            # The tape of a recorded or replayed request is at this edge: the DOM read.
            drawn = await taped_render(page.url, draw)
            text = await self._extractor.extract(
                drawn.html, drawn.url, "text/html", "utf-8", client=read.client,
                max_chars=read.cut_at,
            )  # fmt: skip
        except FetchError as exc:
            if usable and not isinstance(exc, FetchBlocked):
                return None
            return replace(
                outcome, status=exc.status, skip_reason=exc.skip_reason,
                error=f"rendering: {exc.reason}",
            )  # fmt: skip
        if not text or blocked_reason(drawn.html[:HEAD_BYTES], text, None, 200) is not None:
            return None
        rendered = replace(
            outcome, rendered=True, render_ms=drawn.render_ms,
            truncated=outcome.truncated or drawn.truncated,
        )  # fmt: skip
        # Where the browser ended up (a script may navigate on) is a hop of this read: a
        # cache hit checks it against the guard again, as it checks redirects.
        web = drawn.url.startswith(("http://", "https://"))  # not about:blank
        landed = (drawn.url,) if web and drawn.url not in (page.url, url) else ()
        return await self._finished(url, page, rendered, text, None, read, landed)

    async def _finished(
        self,
        url: str,
        page: FetchedBody,
        outcome: PageOutcome,
        text: str,
        wall: str | None,
        read: _Read,
        also_through: tuple[str, ...] = (),
    ) -> PageOutcome:
        """The outcome of a page whose text is in: a wall, no text, or its text (cached
        with the URLs its read went through, and ``also_through``)."""
        cut_at, max_chars = read.cut_at, read.max_chars
        if wall is not None:
            return replace(outcome, status="failed", skip_reason="blocked", error=wall)
        if not text:
            if outcome.truncated:
                return replace(
                    outcome, status="skipped", skip_reason="too_large",
                    error="no main text in the part of the page within the download limit",
                )  # fmt: skip
            return replace(outcome, status="failed", error="no main text found on the page")
        # A truncated page's text is partial: never cache it; nor a replayed one's.
        tape = current_tape()
        if not outcome.truncated and (tape is None or not tape.replaying):
            cut = len(text) >= cut_at
            hops = page.hops or (url,)
            # Under the URL requested and, after redirects, the URL finally read: both
            # name exactly what was fetched. Each keeps the URLs its read went through.
            name = self._rendered_cache_name() if outcome.rendered else self._extractor.name
            for key_url, key_hops in dict.fromkeys(((url, hops), (page.url, (page.url,)))):
                entry = cache_entry(page.content_type, text, cut, key_hops + also_through)
                await self._cache.put(name, key_url, entry)
        return _with_text(outcome, text, max_chars, cut=len(text) >= cut_at)

    @staticmethod
    def _cached(hit: CachedText, limits: FetchLimits, max_chars: int) -> PageOutcome:
        content_type, text = hit.content_type, hit.text
        if content_type not in limits.allowed_content_types:
            return PageOutcome(
                "skipped", "content_type", f"content type {content_type} is not allowed",
                content_type=content_type,
            )  # fmt: skip
        outcome = PageOutcome("fetched", content_type=content_type, cached=True)
        return _with_text(outcome, text, max_chars, cut=hit.cut)

    async def read_all(
        self,
        urls: Sequence[str],
        limits: FetchLimits,
        max_chars: int,
        deadline: Deadline,
        progress: Progress | None = None,
        client: str | None = None,
    ) -> list[PageOutcome]:
        """Read ``urls`` concurrently; the outcomes come back in the same order. Pages
        still unread at the deadline are cancelled (their extractions killed)."""
        if not urls:
            return []
        # The gate bounds the downloads only: a page whose bytes are in is extracted at
        # once (the worker pool bounds extractions), while the next download starts.
        gate = asyncio.Semaphore(self._max_concurrency)
        done_count = 0

        def report(url: str, outcome: PageOutcome) -> None:
            nonlocal done_count
            done_count += 1
            if progress is not None:
                progress(done_count, len(urls), url, outcome)

        async def fetch_in_turn(url: str, limits: FetchLimits) -> FetchedBody:
            async with gate:
                page_limits = replace(limits, timeout_s=deadline.cap(limits.timeout_s))
                if page_limits.timeout_s <= 0:
                    raise _PastDeadline(url, DEADLINE_SKIP.error or "")
                return await self._fetcher.fetch(url, page_limits)

        read = self._read_context(limits, max_chars, client, deadline)

        async def read_one(url: str) -> PageOutcome:
            try:
                outcome = await self._read(url, read, fetch_in_turn)
            except asyncio.CancelledError:
                if stopping:  # the caller's cancellation, not the deadline's
                    report(url, CANCELLED)
                raise
            report(url, outcome)
            return outcome

        stopping = False
        tasks = [asyncio.create_task(read_one(url)) for url in urls]
        try:
            await asyncio.wait(tasks, timeout=deadline.remaining())
        except asyncio.CancelledError:
            # Cancelled (Ctrl-C): the reads stop here, while their HTTP client is still
            # open; left running, each would fail on the closed client (a ReadError
            # reported as a failed page) once the caller's clean-up closed it.
            stopping = True
            for task in tasks:
                task.cancel()
            await asyncio.gather(*tasks, return_exceptions=True)
            raise
        outcomes = []
        for task in tasks:
            if task.done() and not task.cancelled() and task.exception() is None:
                outcomes.append(task.result())
                continue
            task.cancel()
            outcomes.append(DEADLINE_SKIP if not task.done() else _crashed(task))
        await asyncio.gather(*tasks, return_exceptions=True)
        return outcomes


def _with_text(outcome: PageOutcome, text: str, max_chars: int, cut: bool) -> PageOutcome:
    """``outcome`` with the first ``max_chars`` characters of ``text``; ``truncated`` when
    they are not the page's whole text (``cut``: the extraction stopped at the server's
    ceiling), so that a reader paging through a long page is told it did not get it all."""
    content = text[:max_chars]
    partial = outcome.truncated or cut or len(text) > max_chars
    return replace(outcome, extracted_chars=len(content), content=content, truncated=partial)


def _not_fetched(exc: FetchError) -> PageOutcome:
    """The outcome of a fetch that failed, with what the server did say: the status of an
    HTTP error or of a wall, the status and media type of a response refused for its
    content type."""
    outcome = PageOutcome(exc.status, exc.skip_reason, exc.reason)
    if isinstance(exc, FetchHTTPError | PageBlocked):
        return replace(outcome, http_status=exc.status_code)
    if isinstance(exc, UnsupportedContentType):
        return replace(outcome, http_status=exc.status_code, content_type=exc.media_type)
    return outcome


# After the media type on an entry's first line: the text stops at the extraction's cut,
# the page has more.
_CUT_MARK = " cut"


@dataclass(frozen=True)
class CachedText:
    """A page's extracted text as the extraction cache holds it, with the URLs its read
    went through (the one asked for first, then each redirect's)."""

    content_type: str
    text: str
    hops: tuple[str, ...]
    cut: bool = False  # the text stops at the extraction's ceiling; the page has more


def cache_entry(content_type: str, text: str, cut: bool, hops: Sequence[str]) -> str:
    """What the extraction cache holds for a page: on the first line its media type (so a
    hit can honour ``allowed_content_types``), marked when the text was cut at the
    extraction's limit, and after a tab the URLs its read went through as JSON (so a hit
    can be held to the guard); then the extracted text."""
    hops_json = json.dumps(list(hops), ensure_ascii=True)  # one line whatever the URLs
    return f"{content_type}{_CUT_MARK if cut else ''}\t{hops_json}\n{text}"


def _hops(raw: str) -> tuple[str, ...] | None:
    try:
        hops = json.loads(raw)
    except ValueError:
        return None
    if not isinstance(hops, list) or not hops or not all(isinstance(h, str) for h in hops):
        return None
    return tuple(hops)


def usable_entry(entry: str, max_chars: int) -> CachedText | None:
    """The cached text of ``entry`` if it can serve a read of ``max_chars`` characters:
    ``None`` for a malformed entry (one written before entries kept their URLs is one: the
    guard could not be asked about its redirects), and for a cut text shorter than that
    (only the page has the rest)."""
    header, newline, text = entry.partition("\n")
    kind, tab, raw_hops = header.partition("\t")
    hops = _hops(raw_hops) if newline and tab else None
    if hops is None:
        return None
    cut = kind.endswith(_CUT_MARK)
    if cut and len(text) < max_chars:
        return None
    return CachedText(kind.removesuffix(_CUT_MARK), text, hops, cut)


def _crashed(task: asyncio.Task[PageOutcome]) -> PageOutcome:
    exc = None if task.cancelled() else task.exception()
    return PageOutcome("failed", error=f"internal error while reading the page: {exc!r}")
