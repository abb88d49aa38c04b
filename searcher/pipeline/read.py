"""Stage 6, read: the chosen results' pages fetched and extracted under the deadline
(full mode, or simple mode with ``chunks_per_source``)."""

from __future__ import annotations

from collections.abc import Sequence

from searcher.fetch.page_reader import PageOutcome, Progress
from searcher.pipeline.context import RequestContext
from searcher.pipeline.parts import Parts
from searcher.pipeline.rank import Ranked


def reads_pages(ctx: RequestContext) -> bool:
    """Whether this request reads the pages of its results."""
    constraints = ctx.request.constraints
    return constraints.search_mode == "full" or constraints.chunks_per_source is not None


async def read(
    ctx: RequestContext, parts: Parts, results: Sequence[Ranked], progress: Progress | None
) -> list[PageOutcome]:
    """The outcomes of the first ``max_fetch_pages`` results' pages, in rank order; a page
    that was not read is in ``meta.errors`` with why."""
    ctx.timing.setdefault("fetch", 0)
    if not reads_pages(ctx) or not results:
        return []
    urls = [r.url for r in results[: ctx.budget.max_fetch_pages]]
    with ctx.timed("fetch"):
        return await read_urls(ctx, parts, urls, progress)


async def read_urls(
    ctx: RequestContext,
    parts: Parts,
    urls: Sequence[str],
    progress: Progress | None = None,
    stage: str = "fetch",
) -> list[PageOutcome]:
    """The pages of ``urls`` in their order, read under the context's budget and deadline,
    counted against its client's share of the extraction workers; each page not read is
    recorded under ``stage`` with why."""
    budget = ctx.budget
    pages = await parts.reader.read_all(
        urls, budget.fetch_limits(), budget.max_extract_chars_per_page, ctx.deadline,
        progress, ctx.client,
    )  # fmt: skip
    for url, page in zip(urls, pages, strict=True):
        if page.status != "fetched":
            kind = page.skip_reason or page.status
            ctx.error(stage, url, f"{kind}: {page.error}", kind)
    return pages
