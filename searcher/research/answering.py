"""How well a job's evidence answers its question, without an LLM: the best sentence that
holds the question's terms together with a candidate answer of the kind the question asks
for (a date for "when", a number for "how many", a name for "who" and "which"), scored by
the share of the question's terms it holds (the page title counts: it names what the
passage is about)."""

from __future__ import annotations

import re
from collections.abc import Sequence
from typing import Literal

from searcher.research.bridge import NAME, question_names
from searcher.research.evidence import Passage
from searcher.text import STOP_WORDS, query_terms, stem, words

AnswerKind = Literal["date", "number", "name"]

_SENTENCE = re.compile(r"[^.!?\n]+(?:[.!?](?=\s|$))?")
_YEAR = re.compile(r"\b(?:1[0-9]\d\d|20\d\d)s?\b")
_MONTH = re.compile(
    r"\b(?:January|February|March|April|May|June|July|August|September|October|November|"
    r"December)\b"
)
_NUMBER_WORDS = (
    "one two three four five six seven eight nine ten eleven twelve dozen hundred thousand "
    "million billion"
)
_NUMBER = re.compile(rf"\b(?:\d[\d,.]*|{'|'.join(_NUMBER_WORDS.split())})\b", re.IGNORECASE)
# Stems shorter than this match only whole: "install" meets "installation", "art" no "artist".
PREFIX_MATCH_MIN = 5


def answer_kind(question: str) -> AnswerKind:
    """What the question asks for: a date ("when", "what year"), a number ("how many",
    "how much", "how long", "how old"), else a name or code ("who", "which engines")."""
    low = question.lower()
    if re.search(r"\bwhen\b|\bwhat (?:year|date|decade|century)\b|\bwhich year\b", low):
        return "date"
    if re.search(r"\bhow (?:many|much|long|old|far|high|tall|big|large)\b", low):
        return "number"
    return "name"


def _has_candidate(sentence: str, kind: AnswerKind, question: str) -> bool:
    """Whether the sentence holds something of ``kind`` that the question does not."""
    if kind == "date":
        return bool(_YEAR.search(sentence) or _MONTH.search(sentence))
    if kind == "number":
        found = {m.lower() for m in _NUMBER.findall(sentence)}
        return bool(found - {m.lower() for m in _NUMBER.findall(question)})
    named = question_names(question)
    asked = set(query_terms(question))
    for match in NAME.findall(sentence):
        terms = set(query_terms(match))
        if terms and not terms <= asked and not {w.lower() for w in match.split()} <= named:
            return True
    return False


def _holds(term: str, stems: set[str]) -> bool:
    if term in stems:
        return True
    if len(term) < PREFIX_MATCH_MIN:
        return False
    return any(
        s.startswith(term) or (len(s) >= PREFIX_MATCH_MIN and term.startswith(s)) for s in stems
    )


def answer_support(question: str, passages: Sequence[Passage]) -> float:
    """The share of the question's terms held by the best evidence sentence (with its
    page title) that also holds a candidate answer of the kind asked for; 0.0 when no
    sentence holds one."""
    terms = set(query_terms(question))
    if not terms:
        return 0.0
    kind = answer_kind(question)
    best = 0.0
    for passage in passages:
        title = {stem(w) for w in words(passage.title) if w not in STOP_WORDS}
        for sentence in _SENTENCE.findall(passage.text):
            stems = title | {stem(w) for w in words(sentence) if w not in STOP_WORDS}
            share = sum(_holds(t, stems) for t in terms) / len(terms)
            if share > best and _has_candidate(sentence, kind, question):
                best = share
    return best
