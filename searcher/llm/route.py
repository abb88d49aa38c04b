"""LLM routing fallback (seed 000 section 4.1): when no pattern routes a query, one
short classification call picks the engine group. An answer that names no configured
group routes to the default group."""

from __future__ import annotations

import re
from collections.abc import Sequence

from searcher.errors import LlmBadReply
from searcher.llm.prompts import messages
from searcher.llm.runner import StepOutcome, StepRunner

_WORD = re.compile(r"[a-z][a-z0-9_-]*")
_LABEL = re.compile(r"^\W*category\s*:\s*")  # small models echo the prompt's last line


def parse_group(reply: str, groups: Sequence[str]) -> str:
    """The group the reply names: its first word after an echoed ``Category:``, case and
    punctuation aside."""
    match = _WORD.search(_LABEL.sub("", reply.strip().lower()))
    if match is None:
        raise LlmBadReply("no category in the reply")
    word = match.group(0)
    if word not in groups:
        raise LlmBadReply(f"unknown category {word!r}")
    return word


async def classify_group(
    runner: StepRunner, query: str, groups: Sequence[str], reserve: int
) -> StepOutcome[str]:
    """The engine group for ``query``, or None and why (the caller uses the default)."""
    listing = "\n".join(f"- {g}" for g in groups)
    return await runner.run(
        "route",
        messages("route", runner.today, query=query, categories=listing),
        lambda reply: parse_group(reply, groups),
        reserve,
    )
