"""Corrective retrieval (CRAG, seed 000): grade the evidence CORRECT, AMBIGUOUS or
INCORRECT before it is used. The LLM grades when it can; otherwise a heuristic does, from
how much of the query the best results contain and how relevant they scored. What to do
about a grade (re-search with a refined query, or elsewhere) is the service's part."""

from __future__ import annotations

import typing
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date

from searcher.contract import CragGrade, GradeMethod
from searcher.errors import LlmBadReply
from searcher.llm.json_reply import json_object
from searcher.llm.prompts import messages
from searcher.llm.query_checks import on_topic, statement_problem
from searcher.llm.rewrite import operators, without_operators
from searcher.llm.runner import StepRunner
from searcher.llm.snippet_rank import Candidate, candidate_lines
from searcher.text import STOP_WORDS

GRADES: tuple[CragGrade, ...] = typing.get_args(CragGrade)
SHOWN = 5  # results the grader sees
# Heuristic thresholds on the best result's evidence (keyword overlap, relevance).
CORRECT_OVERLAP = 0.6
INCORRECT_OVERLAP = 0.2


@dataclass(frozen=True)
class Evidence:
    """What the heuristic looks at for one result."""

    keyword_overlap: float
    relevance: float


@dataclass(frozen=True)
class Verdict:
    grade: CragGrade
    method: GradeMethod
    refined_query: str | None = None
    reason: str | None = None


def parse_verdict(reply: str) -> Verdict:
    """The grade (and refined query) of a reply; ``LlmBadReply`` if the grade is invalid."""
    data = json_object(reply)
    said = str(data.get("grade", "")).strip().upper()
    grade = next((g for g in GRADES if g == said), None)
    if grade is None:
        raise LlmBadReply(f"grade must be one of {GRADES}")
    refined = data.get("refined_query")
    text = " ".join(refined.split()) if isinstance(refined, str) else ""
    return Verdict(grade, "llm", text[:300] or None)


def checked_verdict(
    verdict: Verdict, query: str, evidence: Sequence[Evidence], today: date
) -> Verdict:
    """The model's verdict if the evidence does not contradict it: CORRECT for results
    none of which holds a fifth of the question's keywords is refused (``LlmBadReply``).
    A refined query off the question's subject (no key term in common) or a sentence
    answering it is dropped: the heuristic refinement is searched instead. Unlike a
    rewrite, it may narrow to one term and add a number: the model has seen the results."""
    if verdict.grade == "CORRECT" and heuristic_grade(evidence) == "INCORRECT":
        raise LlmBadReply("graded CORRECT, but no result holds the question's keywords")
    refined = verdict.refined_query
    if refined is not None and verdict.grade == "AMBIGUOUS":
        problem = statement_problem(refined, query, today, count_numbers=False)
        if problem is None and not on_topic(refined, query):
            problem = f"it is off the question's subject: {refined[:80]!r}"
        if problem is not None:
            return Verdict(verdict.grade, "llm", None, f"refined query not used: {problem}")
    return verdict


def heuristic_grade(evidence: Sequence[Evidence]) -> CragGrade:
    """CORRECT when a top result holds most of the query's keywords, INCORRECT when none
    holds even a fifth (or there are none), AMBIGUOUS in between."""
    if not evidence:
        return "INCORRECT"
    best = max(e.keyword_overlap for e in evidence[:SHOWN])
    if best >= CORRECT_OVERLAP and max(e.relevance for e in evidence[:SHOWN]) > 0:
        return "CORRECT"
    if best < INCORRECT_OVERLAP:
        return "INCORRECT"
    return "AMBIGUOUS"


def heuristic_refinement(query: str) -> str:
    """A sharper query without an LLM: the query's content words, the longest quoted, then
    the query's operators as typed (an operator is never quoted: ``"site:x.org"`` would
    search for the text instead of the site)."""
    ops = operators(query)
    plain = without_operators(query).split()
    words = [w for w in plain if w.lower().strip("?,.!;:") not in STOP_WORDS]
    if not words:
        return query
    longest = max(words, key=len).strip("?,.!;:\"'")
    rest = [w.strip("?,.!;:") for w in words if w.strip("?,.!;:\"'") != longest]
    refined = " ".join([f'"{longest}"', *rest, *ops]).strip()
    if refined.lower() == query.lower() and not ops:
        return f'"{query}"'
    return refined


async def grade_evidence(
    runner: StepRunner,
    query: str,
    candidates: Sequence[Candidate],
    evidence: Sequence[Evidence],
    reserve: int,
) -> Verdict:
    """The grade of the evidence: the model's, or the heuristic's with the reason."""
    if not candidates:
        runner.fallback("crag", "no results to grade")
        return Verdict("INCORRECT", "heuristic", None, "no results to grade")
    shown = candidate_lines(candidates[:SHOWN])
    room = await runner.room_chars("crag")
    outcome = await runner.run(
        "crag",
        messages("crag", runner.today, room, query=query, candidates=shown),
        lambda reply: checked_verdict(parse_verdict(reply), query, evidence, runner.today),
        reserve,
    )
    if outcome.value is not None:
        return outcome.value
    return Verdict(heuristic_grade(evidence), "heuristic", None, outcome.reason)
