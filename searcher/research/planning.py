"""Sub-questions of a research question: from the LLM when one is configured (validated
JSON), else from templates; after a round, from the bridge entities its evidence names
(the people, places and works a multi-hop question leads through)."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from searcher.errors import LlmBadReply
from searcher.llm.json_reply import json_object
from searcher.llm.prompts import messages
from searcher.llm.runner import StepRunner
from searcher.ranking.relevance import keyword_overlap
from searcher.research.evidence import Passage
from searcher.text import STOP_WORDS, query_keywords

Source = Literal["question", "llm", "templates", "entities", "refined"]
MAX_QUESTION_CHARS = 300

# "X or Y", "X vs. Y", "between X and Y": the two things a comparison question is about
# ("and" alone joins too much else: "Health and Scientific Affairs").
_COMPARISON = re.compile(
    r"(?:\bbetween\s+(?P<a2>[^,?]+?)\s+and\s+(?P<b2>[^,?]+?)"
    r"|(?P<a>[^,?]+?)\s+(?:or|vs\.?|versus)\s+(?P<b>[^,?]+?))\s*(?:\?|$)",
    re.IGNORECASE,
)
# A run of capitalised words (with small joiners inside): a name, a title, a place.
_NAME = re.compile(r"\b(?:[A-Z][\w'’.-]*)(?:\s+(?:of|the|de|von|van|for|and|&)?\s*[A-Z][\w'’.-]*)*")


@dataclass(frozen=True)
class SubQ:
    question: str
    source: Source


def _clean(text: str) -> str:
    return " ".join(text.split())[:MAX_QUESTION_CHARS]


def _lead_words(question: str) -> set[str]:
    # "Which", "Who", "What"… start many questions and are no names.
    return {w.lower() for w in re.findall(r"\w+", question)[:1]}


def template_questions(question: str, n: int) -> list[SubQ]:
    """The question itself, then, for a comparison, one question per side (the side's
    name with the rest of the question's keywords)."""
    found = [SubQ(_clean(question), "question")]
    match = _COMPARISON.search(question)
    if match:
        sides = [match.group("a") or match.group("a2"), match.group("b") or match.group("b2")]
        # The left side starts after the question's own words ("Which magazine was
        # started first, Arthur's Magazine or ..."): keep its last name-like run.
        names = [(_NAME.findall(side) or [side])[-1].strip() for side in sides]
        rest = [
            k for k in query_keywords(question[: match.start()])
            if not any(k in query_keywords(name) for name in names)
        ]  # fmt: skip
        for name in names:
            if name and len(found) < n:
                found.append(SubQ(_clean(" ".join([name, *rest])), "templates"))
    return _distinct(found)[:n]


def _distinct(questions: Sequence[SubQ]) -> list[SubQ]:
    seen: set[str] = set()
    kept = []
    for q in questions:
        key = q.question.lower()
        if key and key not in seen:
            seen.add(key)
            kept.append(q)
    return kept


def bridge_entities(question: str, passages: Sequence[Passage], n: int) -> list[str]:
    """Names the best passages mention that the question does not: the entities a
    multi-hop question leads through. Counted over passages, each passage once; ties go to
    the earlier (better) passage."""
    asked = question.lower()
    skip = _lead_words(question) | STOP_WORDS
    counts: Counter[str] = Counter()
    first_seen: dict[str, int] = {}
    for rank, passage in enumerate(passages):
        names = {m.strip(" .'’-") for m in _NAME.findall(f"{passage.title}. {passage.text}")}
        for name in names:
            if len(name) < 3 or name.lower() in skip or name.lower() in asked:
                continue
            counts[name] += 1
            first_seen.setdefault(name, rank)
    ranked = sorted(counts, key=lambda name: (-counts[name], first_seen[name], name))
    return ranked[:n]


def bridge_questions(
    question: str, passages: Sequence[Passage], asked: Sequence[str], n: int
) -> list[SubQ]:
    """Follow-up questions through the bridge entities of ``passages``: each entity with
    the question's keywords that its passages do not hold yet."""
    if n <= 0 or not passages:
        return []
    keywords = query_keywords(question)
    missing = [
        k for k in keywords
        if not any(keyword_overlap([k], p.title, p.text, "") for p in passages[:3])
    ]  # fmt: skip
    follow = missing or keywords
    done = {a.lower() for a in asked}
    found = []
    for entity in bridge_entities(question, passages, n * 3):
        text = _clean(" ".join([entity, *follow]))
        if text.lower() not in done:
            found.append(SubQ(text, "entities"))
        if len(found) >= n:
            break
    return found


def parse_sub_questions(reply: str, n: int) -> list[str]:
    """The model's sub-questions: ``{"sub_questions": ["...", ...]}``, 1 to ``n`` distinct
    non-empty strings; ``LlmBadReply`` otherwise."""
    data = json_object(reply)
    raw = data.get("sub_questions")
    if not isinstance(raw, list):
        raise LlmBadReply('expected {"sub_questions": [...]}')
    questions = list(dict.fromkeys(_clean(q) for q in raw if isinstance(q, str) and q.strip()))
    if not questions:
        raise LlmBadReply("no sub-question in the reply")
    return questions[:n]


async def llm_questions(
    runner: StepRunner, question: str, n: int, known: Sequence[str], reserve: int
) -> list[SubQ] | None:
    """Sub-questions from the model (``known``: those asked already, which it should not
    repeat), or None if it failed (the caller takes the templates)."""
    asked = "\n".join(f"- {k}" for k in known) or "(none yet)"
    outcome = await runner.run(
        "research_plan",
        messages("research_plan", runner.today, question=question, n=n, asked=asked),
        lambda reply: parse_sub_questions(reply, n),
        reserve,
    )
    if outcome.value is None:
        return None
    source: Source = "refined" if known else "llm"
    return [SubQ(q, source) for q in outcome.value]
