"""Stage 6, read: the chosen results' pages fetched and extracted under the deadline
(full mode, or simple mode with ``chunks_per_source``)."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from searcher.backends.local import LocalBackend
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
    budget = ctx.budget
    chosen = results[: budget.max_fetch_pages]
    urls = [r.url for r in chosen]
    # A result of a local collection is read from its index, never fetched: a file:// URL
    # is read only for the backend that produced it.
    local = {i: backend for i, r in enumerate(chosen) if (backend := _local_source(parts, r))}
    web = [url for i, url in enumerate(urls) if i not in local]
    with ctx.timed("fetch"):
        fetched = iter(await read_urls(ctx, parts, web, progress))
        pages = [
            await _read_local(local[i], url, ctx, budget.max_extract_chars_per_page)
            if i in local else next(fetched)
            for i, url in enumerate(urls)
        ]  # fmt: skip
    for i in local:  # the web pages' failures were recorded by read_urls
        if pages[i].status != "fetched":
            kind = pages[i].skip_reason or pages[i].status
            ctx.error("fetch", urls[i], f"{kind}: {pages[i].error}", kind)
    return pages


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
    # The request's render choice rides on the read's limits (searcher.fetch.renderer).
    limits = replace(budget.fetch_limits(), render=ctx.request.constraints.render)
    pages = await parts.reader.read_all(
        urls, limits, budget.max_extract_chars_per_page, ctx.deadline, progress, ctx.client,
    )  # fmt: skip
    for url, page in zip(urls, pages, strict=True):
        if page.status != "fetched":
            kind = page.skip_reason or page.status
            ctx.error(stage, url, f"{kind}: {page.error}", kind)
    return pages


def _local_source(parts: Parts, result: Ranked) -> LocalBackend | None:
    """The local backend that gave ``result``, if one did."""
    for source in result.fused.sources:
        backend = parts.pool.backends.get(source.backend)
        if isinstance(backend, LocalBackend):
            return backend
    return None


async def _read_local(
    backend: LocalBackend, url: str, ctx: RequestContext, max_chars: int
) -> PageOutcome:
    """A local document's content from its index: the chunk that best matches the query
    and its neighbours."""
    content = await backend.read(url, ctx.request.query_text, max_chars)
    if content is None:
        return PageOutcome("failed", error="the document is no longer in the corpus index")
    return PageOutcome(
        "fetched", content_type="text/markdown", extracted_chars=len(content), content=content
    )
