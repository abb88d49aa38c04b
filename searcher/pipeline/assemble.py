"""Stage 7, assemble: the response items in rank order, and the context pack rendered from
them under ``max_context_chars``."""

from __future__ import annotations

from collections.abc import Callable, Sequence

from searcher.contract import FetchInfo, Item, Provenance, Score
from searcher.page_reader import PageOutcome
from searcher.passages import select_passages, top_chunks
from searcher.pipeline.context import RequestContext
from searcher.pipeline.plan import Plan
from searcher.pipeline.rank import Ranked
from searcher.pipeline.read import reads_pages
from searcher.render import PackItem, render_context_pack
from searcher.urls import item_id

CHUNK_CHARS = 500


def fetch_info(page: PageOutcome | None, reading: bool) -> FetchInfo:
    """An item's ``fetch`` block: what happened to its page, or why it was not read."""
    if page is None:
        if reading:
            return FetchInfo(status="skipped", skip_reason="budget", error="beyond max_fetch_pages")
        return FetchInfo()
    return FetchInfo(
        status=page.status,  # type: ignore[arg-type]
        skip_reason=page.skip_reason,  # type: ignore[arg-type]
        error=page.error,
        http_status=page.http_status,
        content_type=page.content_type,
        downloaded_bytes=page.downloaded_bytes,
        truncated=page.truncated,
        extracted_chars=page.extracted_chars,
        cached=page.cached,
    )


def make_item(
    rank_no: int, ranked: Ranked, page: PageOutcome | None, reading: bool, retrieved: str,
    chunks: list[str] | None,
) -> Item:  # fmt: skip
    """One response item."""
    hit = ranked.fused.hit
    return Item(
        id=item_id(hit.url),
        title=hit.title,
        url=hit.url,
        retrieved_utc=retrieved,
        engine=hit.backend,
        engines=list(hit.engines),
        snippet=hit.snippet,
        published_utc=hit.published,
        category=hit.category,
        score=Score(
            rank=rank_no,
            relevance=ranked.relevance,
            method="rrf+heuristics",
            components=ranked.components,
        ),
        provenance=[
            Provenance(backend=s.backend, engine=s.engine, rank=s.rank, perspective=s.perspective)
            for s in ranked.fused.sources
        ],
        fetch=fetch_info(page, reading),
        content=page.content if page else None,
        chunks=chunks,
    )


def make_items(
    ctx: RequestContext, plan: Plan, results: Sequence[Ranked], pages: Sequence[PageOutcome]
) -> list[Item]:
    """The items in rank order; ``pages[i]`` is the page of ``results[i]`` if it was read."""
    constraints = ctx.request.constraints
    reading = reads_pages(ctx)
    made = []
    for rank_no, result in enumerate(results, start=1):
        page = pages[rank_no - 1] if rank_no <= len(pages) else None
        chunks = None
        if constraints.chunks_per_source and page is not None and page.content:
            chunks = top_chunks(
                plan.query, page.content, constraints.chunks_per_source, CHUNK_CHARS
            )
        item = make_item(rank_no, result, page, reading, ctx.retrieved_utc, chunks)
        if constraints.search_mode == "simple":
            item.content = None  # simple mode reads pages only for their chunks
        made.append(item)
    return made


def _pack_content(item: Item) -> str | None:
    if item.content:
        return item.content
    if item.chunks:
        return "\n\n".join(item.chunks)
    return None


def _passage_selector(query: str) -> Callable[[str, int], str]:
    def select(text: str, budget: int) -> str:
        return select_passages(query, text, budget)

    return select


def render_pack(ctx: RequestContext, plan: Plan, made: Sequence[Item], backend: str | None) -> str:
    """The context pack, if the request wants it (or an answer, which is written from it):
    in full mode each page contributes the passages that answer the query."""
    want = ctx.request.want
    if not (want.rendered_text or want.answer):
        return ""
    mode = ctx.request.constraints.search_mode
    budget = ctx.budget.max_context_chars
    with ctx.timed("render"):
        rendered = render_context_pack(
            [PackItem(i.title, i.url, i.snippet, _pack_content(i)) for i in made],
            query=plan.query,
            backend=backend,
            mode=mode,
            max_chars=budget,
            select=_passage_selector(plan.query) if mode == "full" else None,
        )
    if not rendered:
        ctx.error("render", "budget", f"max_context_chars={budget} cannot hold the pack")
    return rendered
