"""Query rewrite (``llm_query``, seed 001 section 11): one short call turns the question
into a search query. The search operators the user typed are kept even when the model
drops them: they are put back, because ``site:`` or a quoted phrase is an instruction,
not a suggestion. Fallback: the original query."""

from __future__ import annotations

import re

from searcher.contract import MAX_QUERY_CHARS
from searcher.errors import LlmBadReply
from searcher.llm.prompts import messages
from searcher.llm.runner import StepOutcome, StepRunner

# site:example.com, filetype:pdf, "quoted phrase", -excluded.
_OPERATOR = re.compile(
    r'(?<!\S)-?(?:site|filetype|inurl|intitle|intext|ext):\S+|"[^"]+"|(?<!\S)-[^\s"-]\S*'
)
_LABEL = re.compile(r"^(?:search\s+query|query|rewritten(?:\s+query)?)\s*:\s*", re.IGNORECASE)
MAX_REWRITE_CHARS = 400


def operators(query: str) -> list[str]:
    """The search operators in ``query``, in order."""
    return _OPERATOR.findall(query)


def clean_rewrite(reply: str, original: str) -> str:
    """The query in a reply: its first line, without a label or wrapping quotes, with
    every operator of ``original`` present. ``LlmBadReply`` if nothing usable is left."""
    lines = [line.strip() for line in reply.strip().strip("`").splitlines() if line.strip()]
    if not lines:
        raise LlmBadReply("empty rewrite")
    text = _LABEL.sub("", lines[0]).strip()
    if len(text) > 1 and text[0] == text[-1] and text[0] in "'\"" and text.count(text[0]) == 2:
        text = text[1:-1].strip()
    if not text:
        raise LlmBadReply("empty rewrite")
    if len(text) > MAX_REWRITE_CHARS:
        raise LlmBadReply(f"rewrite longer than {MAX_REWRITE_CHARS} characters")
    lowered = text.lower()
    missing = [op for op in operators(original) if op.lower() not in lowered]
    if missing:
        text = f"{text} {' '.join(missing)}"
    return text[:MAX_QUERY_CHARS]


async def rewrite_query(runner: StepRunner, query: str, reserve: int) -> StepOutcome[str]:
    """The rewritten query, or None and why (the caller keeps the original)."""
    return await runner.run(
        "rewrite",
        messages("rewrite", runner.today, query=query),
        lambda reply: clean_rewrite(reply, query),
        reserve,
    )
