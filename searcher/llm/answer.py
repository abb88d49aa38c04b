"""The cited answer: one call over the context pack, then every ``[n]`` checked against
the response's items. A citation of an item that is not there is removed from the text
and reported; the reader never follows a citation to nothing."""

from __future__ import annotations

import re
from collections.abc import Sequence, Set
from dataclasses import dataclass

from searcher.errors import LlmBadReply
from searcher.llm.prompts import messages
from searcher.llm.runner import StepOutcome, StepRunner
from searcher.pack.layout import neutralise_markers

# [1], [1, 2], [ 1 ], [1][2] (each bracket read alone); [a] or [1-3] are not citations.
# Numbers of any length are citations (of items that do not exist, past a pack's few).
CITED = r"\[\s*(\d+(?:\s*,\s*\d+)*)\s*\]"
# Longer numbers cite no item, and are not read as ints (past 4,300 digits Python refuses).
_MAX_DIGITS = 9
_CITATION = re.compile(r"\s?" + CITED)
MAX_ANSWER_CHARS = 8000


@dataclass(frozen=True)
class CheckedAnswer:
    text: str
    refs: list[int]  # valid citations, in order of first use
    removed: list[int]  # citations of items that do not exist, in order


def check_citations(answer: str, shown: int | Set[int]) -> CheckedAnswer:
    """``answer`` with citations of items it was not shown removed: ``shown`` is the
    numbers of those items, or ``n`` for items 1..n."""
    refs: list[int] = []
    removed: list[int] = []
    known = range(1, shown + 1) if isinstance(shown, int) else shown

    def keep(match: re.Match[str]) -> str:
        numbers = [_item_number(n) for n in match.group(1).split(",")]
        valid = [n for n in numbers if n in known]
        removed.extend(n for n in numbers if n not in known)
        refs.extend(n for n in valid if n not in refs)
        if not valid:
            return ""
        space = " " if match.group(0).startswith(" ") else ""
        return f"{space}[{', '.join(str(n) for n in valid)}]"

    text = _CITATION.sub(keep, answer)
    return CheckedAnswer(text.strip(), refs, removed)


def _item_number(digits: str) -> int:
    """The item a cited number names; 0 (none) for one too long to be an item's."""
    digits = digits.strip()
    return int(digits) if len(digits) <= _MAX_DIGITS else 0


def clean_answer(reply: str) -> str:
    """The answer text of a reply, pack markers neutralised (an answer may be pasted into
    another pack); ``LlmBadReply`` if empty."""
    text = reply.strip()
    if not text:
        raise LlmBadReply("empty answer")
    return neutralise_markers(text[:MAX_ANSWER_CHARS])


async def write_answer(
    runner: StepRunner, query: str, pack: str, item_count: int, reserve: int = 0
) -> StepOutcome[str]:
    """The model's answer over ``pack`` (citations not yet checked), or None and why."""
    if item_count == 0 or not pack:
        reason = "no evidence to answer from"
        runner.fallback("answer", reason)
        return StepOutcome(None, reason)
    room = await runner.room_chars("answer")
    prompt = messages("answer", runner.today, room, pack=pack, query=query)
    return await runner.run("answer", prompt, clean_answer, reserve)


def cited_sentences_share(answer: str, refs: Sequence[int]) -> float:
    """Share of the answer's sentences that carry a citation (0 when it has none)."""
    sentences = [s for s in re.split(r"(?<=[.!?])\s+", answer.strip()) if s.strip()]
    if not sentences or not refs:
        return 0.0
    return sum(1 for s in sentences if _CITATION.search(s)) / len(sentences)
