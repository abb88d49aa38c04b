"""Stage 7, assemble: the response items in rank order, and the context pack rendered from
them under ``max_context_chars``."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from searcher.contract import FetchInfo, Item
from searcher.fetch.page_reader import PageOutcome
from searcher.fetch.urls import item_id
from searcher.pack.cross_page import CrossPageAllotter, passage_similarity, passages_meta
from searcher.pack.layout import ContextPack, PackItem, layout_pack
from searcher.pack.passages import top_chunks_across
from searcher.pipeline.context import RequestContext
from searcher.pipeline.parts import Parts
from searcher.pipeline.plan import Plan
from searcher.pipeline.rank import Ranked
from searcher.pipeline.read import reads_pages

CHUNK_CHARS = 500


# An item's ``fetch`` block when its page was not read. FetchInfo is frozen, so every such
# item shares one instance, which pydantic takes as it is (building one per item is about
# a seventh of the item's validation).
_NOT_READ = FetchInfo()  # skipped, no reason
_BEYOND_FETCH_BUDGET = FetchInfo(
    status="skipped", skip_reason="budget", error="beyond max_fetch_pages"
)


def fetch_info(page: PageOutcome | None, reading: bool) -> FetchInfo:
    """An item's ``fetch`` block: what happened to its page, or why it was not read."""
    if page is None:
        return _BEYOND_FETCH_BUDGET if reading else _NOT_READ
    return page.fetch_info()


def make_item(
    rank_no: int, ranked: Ranked, page: PageOutcome | None, reading: bool, retrieved: str,
    chunks: list[str] | None, with_content: bool = True,
) -> Item:  # fmt: skip
    """One response item; its page's text as ``content`` when ``with_content``."""
    hit = ranked.fused.hit
    # One validation of plain data: pydantic builds the nested models itself, about a
    # third faster than an __init__ per nested model (20 items per simple search).
    return Item.model_validate(
        {
            "id": item_id(hit.url),
            "title": hit.title,
            "url": hit.url,
            "retrieved_utc": retrieved,
            "engine": hit.backend,
            "engines": list(hit.engines),
            "snippet": hit.snippet,
            "published_utc": hit.published,
            "category": hit.category,
            "score": {
                "rank": rank_no,
                "relevance": ranked.relevance,
                "method": "rrf+heuristics",
                "components": ranked.components,
            },
            "provenance": [
                {
                    "backend": s.backend,
                    "engine": s.engine,
                    "rank": s.rank,
                    "perspective": s.perspective,
                }
                for s in ranked.fused.sources
            ],
            "fetch": fetch_info(page, reading),
            "content": page.content if page and with_content else None,
            "chunks": chunks,
        }
    )


def make_items(
    ctx: RequestContext, plan: Plan, results: Sequence[Ranked], pages: Sequence[PageOutcome]
) -> list[Item]:
    """The items in rank order; ``pages[i]`` is the page of ``results[i]`` if it was read."""
    constraints = ctx.request.constraints
    reading = reads_pages(ctx)
    # chunks_per_source: the passages of all read pages ranked together.
    per_page = constraints.chunks_per_source or 0
    page_chunks = top_chunks_across(
        plan.query, [p.content or "" if per_page else "" for p in pages], per_page, CHUNK_CHARS
    )
    # Simple mode reads pages only for their chunks.
    with_content = constraints.search_mode != "simple"
    made = []
    for rank_no, result in enumerate(results, start=1):
        page = pages[rank_no - 1] if rank_no <= len(pages) else None
        chunks = None
        if per_page and page is not None and page.content:
            chunks = page_chunks[rank_no - 1]
        made.append(
            make_item(rank_no, result, page, reading, ctx.retrieved_utc, chunks, with_content)
        )
    return made


def _pack_content(item: Item) -> str | None:
    if item.content:
        return item.content
    if item.chunks:
        return "\n\n".join(item.chunks)
    return None


async def render_pack(
    ctx: RequestContext, parts: Parts, plan: Plan, made: Sequence[Item], backend: str | None
) -> ContextPack:
    """The context pack, if the request wants it (or an answer, which is written from it):
    in full mode the passages of all read pages are ranked together against the query
    (BM25, plus embeddings when loaded) and the budget goes to the best of them."""
    want = ctx.request.want
    if not (want.rendered_text or want.answer):
        return ContextPack("", ())
    mode = ctx.request.constraints.search_mode
    budget = ctx.budget.max_context_chars
    with ctx.timed("render"):
        contents = [_pack_content(i) for i in made]
        allot = None
        if mode == "full":  # passages of all pages ranked together (cross_page.py)
            texts = [c for c in contents if c]
            similarity = await passage_similarity(parts.embedder, plan.query, texts)
            allot = CrossPageAllotter(plan.query, similarity)
        pack = layout_pack(
            [PackItem(i.title, i.url, i.snippet, c) for i, c in zip(made, contents, strict=True)],
            query=plan.query,
            backend=backend,
            mode=mode,
            max_chars=budget,
            allot=allot,
        )
        if allot is not None:  # the same content objects: the allotter knows them by identity
            pages = [(i.id, i.url, c) for i, c in zip(made, contents, strict=True)]
            pack = dataclasses.replace(pack, passages=tuple(passages_meta(pages, allot)))
            ctx.extras.passages = list(pack.passages or ())
    if not pack.text:
        ctx.error("render", "budget", f"max_context_chars={budget} cannot hold the pack")
    return pack
