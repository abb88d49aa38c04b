"""Checks on the queries a model writes from a question (rewrites, perspectives, refined
queries, research sub-questions) before any of them is searched.

A small model asked for a search query often answers the question instead ("why did
stadia close" became "The company closed Stadia in 2017."), or drifts off its subject.
Such a query would search for the model's guess, not for the user's question: each check
returns why a query is not one about the same subject, or None when it is.
"""

from __future__ import annotations

import re
from datetime import date

from searcher.text import query_terms, stem, words

# A rewrite keeps at least this share of the question's key terms (stemmed) and of the
# names in it: "why did stadia close" -> "stadia shutdown reason" keeps one of two terms;
# a rewrite may narrow a list of names, not leave it.
MIN_KEPT_SHARE = 1 / 3
# A sentence this long that ends in a full stop is an answer, not a query.
SENTENCE_WORDS = 4
_QUESTION_START = re.compile(
    r"^\s*(?:who|whom|whose|what|which|when|where|why|how|is|are|was|were|do|does|did|can|"
    r"could|should|would|will|has|have|had)\b",
    re.IGNORECASE,
)
# How an answer starts ("The company closed…", "It was…"), and the verbs that state a fact.
_STATEMENT_START = frozenset(
    {"the", "a", "an", "it", "its", "they", "their", "he", "his", "she", "her", "this"}
    | {"that", "these", "those", "there"}
)
_FINITE = frozenset(
    {"is", "was", "were", "are", "has", "had", "have", "will", "would", "can", "could"}
    | {"did", "does"}
)
# Words that give a reason or a result: a query asks for one, it does not state it.
_EXPLAINING = frozenset({"because", "due", "owing", "thanks", "therefore", "hence"})
_NUMBER = re.compile(r"\d+(?:[.,]\d+)*")
# A name: a capitalised word not at the start, an all-capitals word, or one with digits.
_NAME = re.compile(r"(?<=\S\s)[A-Z][\w'-]+|\b[A-Z]{2,}\w*|\b\w*\d\w*\b")


def key_terms(text: str) -> set[str]:
    """The stemmed topical words of ``text`` (stop words out)."""
    return set(query_terms(text))


def names(text: str) -> list[str]:
    """The names, codes and numbers ``text`` mentions (lower-cased, first-seen order)."""
    return list(dict.fromkeys(m.group().lower() for m in _NAME.finditer(text)))


def _is_question(text: str) -> bool:
    return text.rstrip().endswith("?") or bool(_QUESTION_START.match(text))


def new_numbers(text: str, original: str, today: date) -> list[str]:
    """Numbers in ``text`` that ``original`` lacks, the current year aside (a rewrite
    may date a search, "… 2026"): facts the model added, not the user."""
    have = set(_NUMBER.findall(original)) | {str(today.year)}
    return [n for n in dict.fromkeys(_NUMBER.findall(text)) if n not in have]


def statement_problem(
    text: str, original: str, today: date, count_numbers: bool = True
) -> str | None:
    """Why ``text`` reads as an answer to ``original`` rather than a query for it: a
    sentence ending in a full stop, a statement of fact ("The company closed …" for a
    question), or (with ``count_numbers``) numbers the question did not have; None if it
    does not."""
    said = words(text)
    last = text.rstrip().split()[-1] if text.split() else ""
    if len(said) >= SENTENCE_WORDS and last.endswith((".", "!")) and last.count(".") <= 1:
        return f"it is a sentence, not a search query: {text[:80]!r}"
    added = new_numbers(text, original, today) if count_numbers else []
    if added:
        return f"it adds facts the question does not have ({', '.join(added[:3])})"
    asked = set(words(original))
    starts = bool(said) and said[0] in _STATEMENT_START and said[0] not in asked
    states = starts or bool((set(said) & _EXPLAINING) - asked)
    verbs = [w for w in said[1:] if w in _FINITE or (w.endswith("ed") and w not in asked)]
    if _is_question(original) and states and verbs:
        return f"it states an answer instead of asking: {text[:80]!r}"
    return None


def on_topic(text: str, original: str) -> bool:
    """Whether ``text`` shares a key term with ``original`` (or ``original`` has none)."""
    wanted = key_terms(original)
    return not wanted or bool(wanted & key_terms(text))


def drift_problem(text: str, original: str) -> str | None:
    """Why ``text`` is not about ``original``'s subject: it keeps less than
    ``MIN_KEPT_SHARE`` of its key terms or of the names it mentions; None if it is."""
    wanted = key_terms(original)
    if wanted:
        kept = wanted & key_terms(text)
        if not kept or len(kept) < MIN_KEPT_SHARE * len(wanted):
            return f"it keeps {len(kept)} of the question's {len(wanted)} key terms"
    named = names(original)
    have = {stem(w) for w in words(text)} | set(words(text))
    lost = [n for n in named if n not in have and stem(n) not in have]
    if named and len(named) - len(lost) < MIN_KEPT_SHARE * len(named):
        return f"it drops {', '.join(repr(n) for n in lost[:3])} from the question"
    return None


def rewrite_problem(text: str, original: str, today: date) -> str | None:
    """Why a rewrite of ``original`` must not be searched in its place, or None."""
    return statement_problem(text, original, today) or drift_problem(text, original)
