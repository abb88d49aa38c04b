"""Stage 8, answer (``want.answer``): a cited answer written from the pack, its citations
checked against the items, and optionally its self-check (``want.answer_check``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from dataclasses import dataclass

from searcher.contract import AnswerCheck, Citation, Item
from searcher.llm.answer import check_citations, write_answer
from searcher.llm.answer_check import check_answer
from searcher.pack.layout import ContextPack
from searcher.pipeline.context import RequestContext


@dataclass(frozen=True)
class Answer:
    """The answer text with ``[n]`` citations, and what each ``n`` refers to."""

    text: str | None = None
    citations: list[Citation] | None = None


async def _cited_answer(
    ctx: RequestContext, question: str, pack: ContextPack, items: Sequence[Item]
) -> Answer:
    written = await write_answer(ctx.llm, question, pack.text, len(items))
    if written.value is None:
        return Answer()
    # The model read the pack: an item the budget left out of it supports nothing it wrote.
    checked = check_citations(written.value, set(pack.numbers))
    shown = pack.items_shown
    for n in checked.removed:
        reason = f"citation [{n}] refers to no item in the pack (it shows {shown}); removed"
        ctx.error("answer", "llm", reason)
    if not checked.refs:  # an answer nobody can check against the items is not given
        ctx.error("answer", "llm", "the answer cites no item: not returned")
        return Answer()
    citations = [
        Citation(ref=n, id=items[n - 1].id, url=items[n - 1].url, title=items[n - 1].title)
        for n in checked.refs
    ]
    return Answer(checked.text, citations)


async def answer(
    ctx: RequestContext, question: str, pack: ContextPack, items: Sequence[Item]
) -> Answer:
    """The cited answer and its self-check, as the request wants them."""
    want = ctx.request.want
    written = Answer()
    if want.answer:
        with ctx.timed("answer"):
            written = await _cited_answer(ctx, question, pack, items)
    if want.answer_check:
        if written.text is None:
            ctx.error("answer_check", "answer", "no answer to check")
        else:
            with ctx.timed("answer_check"):
                refs = [c.ref for c in written.citations or []]
                grades = await check_answer(ctx.llm, question, pack.text, written.text, refs)
            ctx.extras.answer_check = AnswerCheck(**dataclasses.asdict(grades))
    return written
