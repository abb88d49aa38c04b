"""Sub-questions of a research question: from the LLM when one is configured (validated
JSON), else from templates; after a round, from the bridge entities its evidence names
(the people, places and works a multi-hop question leads through)."""

from __future__ import annotations

import re
from collections.abc import Collection, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Literal

from searcher.errors import LlmBadReply
from searcher.llm.json_reply import json_object
from searcher.llm.prompts import messages
from searcher.llm.query_checks import key_terms, new_numbers, on_topic
from searcher.llm.runner import StepRunner
from searcher.research.bridge import NAME, bridge_query, rank_bridges
from searcher.research.evidence import Passage
from searcher.text import query_keywords

Source = Literal["question", "llm", "templates", "entities", "refined"]
MAX_QUESTION_CHARS = 300

# "X or Y", "X vs. Y", "between X and Y": the two things a comparison question is about
# ("and" alone joins too much else: "Health and Scientific Affairs").
_COMPARISON = re.compile(
    r"(?:\bbetween\s+(?P<a2>[^,?]+?)\s+and\s+(?P<b2>[^,?]+?)"
    r"|(?P<a>[^,?]+?)\s+(?:or|vs\.?|versus)\s+(?P<b>[^,?]+?))\s*(?:\?|$)",
    re.IGNORECASE,
)
# The stretches of a question a comparison can sit in: no comma or question mark inside,
# one or the end of the text after. Searched one by one: searched whole, a text whose only
# "or"s are followed by a comma held the event loop for the cube of its length (20 s for
# 2,000 characters of "a or a or ... b,").
_CLAUSE = re.compile(r"[^,?]*[,?]?")


@dataclass(frozen=True)
class SubQ:
    question: str
    source: Source


def _clean(text: str) -> str:
    return " ".join(text.split())[:MAX_QUESTION_CHARS]


def template_questions(question: str, n: int) -> list[SubQ]:
    """The question itself, then, for a comparison, one question per side (the side's
    name with the rest of the question's keywords)."""
    found = [SubQ(_clean(question), "question")]
    found_at = _comparison(question)
    if found_at:
        match, start = found_at
        sides = [match.group("a") or match.group("a2"), match.group("b") or match.group("b2")]
        # The left side starts after the question's own words ("Which magazine was
        # started first, Arthur's Magazine or ..."): keep its last name-like run.
        names = [(NAME.findall(side) or [side])[-1].strip() for side in sides]
        rest = [
            k for k in query_keywords(question[:start])
            if not any(k in query_keywords(name) for name in names)
        ]  # fmt: skip
        for name in names:
            if name and len(found) < n:
                found.append(SubQ(_clean(" ".join([name, *rest])), "templates"))
    return _distinct(found)[:n]


def _comparison(question: str) -> tuple[re.Match[str], int] | None:
    """The first comparison in ``question`` (as ``_COMPARISON.search`` finds it) and where
    it starts; each clause is searched alone, so the time grows with the square of the
    longest clause at worst, not the cube of the text."""
    for clause in _CLAUSE.finditer(question):
        if not clause.group().endswith(","):  # it ends with "?" or at the end
            match = _COMPARISON.search(clause.group())
            if match:
                return match, clause.start() + match.start()
    return None


def _distinct(questions: Sequence[SubQ]) -> list[SubQ]:
    seen: set[str] = set()
    kept = []
    for q in questions:
        key = q.question.lower()
        if key and key not in seen:
            seen.add(key)
            kept.append(q)
    return kept


def bridge_questions(
    question: str,
    passages: Sequence[Passage],
    asked: Sequence[str],
    n: int,
    lower: Collection[str] = frozenset(),
) -> list[SubQ]:
    """Follow-up questions through the bridge entities of ``passages`` (the best first
    hop's passages, best first), most telling first: each entity with the question's
    words its sentence lacks. ``asked``: the queries searched so far (an entity in one is
    not followed again); ``lower``: the words the job's passages write in lower case
    (see ``rank_bridges``)."""
    if n <= 0 or not passages:
        return []
    done = {a.lower() for a in asked}
    found = []
    for bridge in rank_bridges(question, passages, asked, n * 3, lower):
        text = _clean(bridge_query(bridge))
        if text.lower() not in done:
            done.add(text.lower())
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


def checked_sub_questions(questions: list[str], question: str, today: date) -> list[str]:
    """The sub-questions on ``question``'s subject (a key term in common) that state no
    fact it lacks (a number the model added: its guess at an answer) and are distinct in
    their key terms; ``LlmBadReply`` if none is left."""
    kept: list[str] = []
    seen: list[frozenset[str]] = []
    for q in questions:
        terms = frozenset(key_terms(q))
        if on_topic(q, question) and not new_numbers(q, question, today) and terms not in seen:
            seen.append(terms)
            kept.append(q)
    if not kept:
        raise LlmBadReply("no sub-question on the question's subject")
    return kept


async def llm_questions(
    runner: StepRunner, question: str, n: int, known: Sequence[str], reserve: int
) -> list[SubQ] | None:
    """Sub-questions from the model (``known``: those asked already, which it should not
    repeat), or None if it failed (the caller takes the templates)."""
    asked = "\n".join(f"- {k}" for k in known) or "(none yet)"
    outcome = await runner.run(
        "research_plan",
        messages("research_plan", runner.today, question=question, n=n, asked=asked),
        lambda reply: checked_sub_questions(parse_sub_questions(reply, n), question, runner.today),
        reserve,
    )
    if outcome.value is None:
        return None
    source: Source = "refined" if known else "llm"
    return [SubQ(q, source) for q in outcome.value]
