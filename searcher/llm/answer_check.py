"""Self-check of the answer (Self-RAG's reflection tokens, seed 000): is it relevant
(ISREL), supported by the evidence (ISSUP), useful (ISUSE)? The LLM grades when it can;
otherwise a heuristic does, from the query's keywords and the answer's citations."""

from __future__ import annotations

from dataclasses import dataclass

from searcher.errors import LlmBadReply
from searcher.llm.answer import cited_sentences_share
from searcher.llm.json_reply import json_object
from searcher.llm.prompts import messages
from searcher.llm.runner import StepRunner
from searcher.text import query_keywords

ISREL = ("relevant", "irrelevant")
ISSUP = ("fully_supported", "partially_supported", "no_support")


@dataclass(frozen=True)
class Grades:
    method: str  # llm | heuristic
    isrel: str
    issup: str
    isuse: int
    reason: str | None = None


def parse_grades(reply: str) -> Grades:
    """The three grades of a reply; ``LlmBadReply`` if any is missing or out of range."""
    data = json_object(reply)
    isrel, issup, isuse = data.get("isrel"), data.get("issup"), data.get("isuse")
    if isrel not in ISREL:
        raise LlmBadReply(f"isrel must be one of {ISREL}")
    if issup not in ISSUP:
        raise LlmBadReply(f"issup must be one of {ISSUP}")
    if isinstance(isuse, bool) or not isinstance(isuse, int) or not 1 <= isuse <= 5:
        raise LlmBadReply("isuse must be an integer from 1 to 5")
    return Grades("llm", isrel, issup, isuse)


def heuristic_grades(query: str, answer: str, refs: list[int], reason: str | None) -> Grades:
    """Relevant if the answer uses at least a third of the query's keywords; support from
    the share of sentences with a valid citation; usefulness from both."""
    keywords = query_keywords(query)
    lowered = answer.lower()
    overlap = sum(1 for k in keywords if k in lowered) / len(keywords) if keywords else 0.0
    support = cited_sentences_share(answer, refs)
    isrel = "relevant" if overlap >= 1 / 3 else "irrelevant"
    if support >= 0.99:
        issup = "fully_supported"
    elif support > 0:
        issup = "partially_supported"
    else:
        issup = "no_support"
    isuse = 1 + round(4 * (0.5 * min(1.0, overlap) + 0.5 * support))
    return Grades("heuristic", isrel, issup, isuse, reason)


async def check_answer(
    runner: StepRunner, query: str, evidence: str, answer: str, refs: list[int]
) -> Grades:
    """The answer's grades: the model's, or the heuristic's with the reason."""
    room = await runner.room_chars("answer_check")
    outcome = await runner.run(
        "answer_check",
        messages("answer_check", runner.today, room, query=query, evidence=evidence, answer=answer),
        parse_grades,
    )
    if outcome.value is not None:
        return outcome.value
    return heuristic_grades(query, answer, refs, outcome.reason)
