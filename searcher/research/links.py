"""Links between evidence pages: a page whose text names another page's subject (the film's
page names the actress it starred, whose own page holds the answer). That is the hop a
two-hop question makes, so the evidence follows it from its best passage. Works on titles
and texts alone: no page is fetched here."""

from __future__ import annotations

import functools
import re

# The parts of a page title: "Shirley Temple - Wikipedia", "The Space Review: Seeking…".
TITLE_PARTS = re.compile(r"\s+[|–—-]\s+|:\s+|\s+::\s+")
# What a title adds to tell pages of one name apart: "Kiss and Tell (1945 film)".
_QUALIFIER = re.compile(r"\s*\([^)]*\)\s*$")
# A subject shorter than this (letters) names too much by chance ("UK", "Art").
MIN_SUBJECT_LETTERS = 4
# A sentence: up to a full stop, question or exclamation mark before a space, or a line's end.
_SENTENCE = re.compile(r"[^.!?\n]+(?:[.!?](?=\s|$))?")


@functools.lru_cache(maxsize=4096)
def page_subject(title: str) -> str:
    """What a page is about, from its title: its longest part without a trailing
    qualifier ("Kiss and Tell (1945 film)" -> "Kiss and Tell", "Shirley Temple -
    Wikipedia" -> "Shirley Temple"); "" when that is too short to name anything."""
    parts = [p.strip() for p in TITLE_PARTS.split(title) if p.strip()]
    subject = _QUALIFIER.sub("", max(parts, key=len, default="")).strip()
    if sum(ch.isalpha() for ch in subject) < MIN_SUBJECT_LETTERS:
        return ""
    return subject


@functools.lru_cache(maxsize=4096)
def _subject_pattern(subject: str) -> re.Pattern[str]:
    # A capitalised word must be written so: "paper lanterns" names no "Paper Lanterns".
    # A word the title writes in lower case may be capitalised ("Village accountant").
    words = [re.escape(w) if w[:1].isupper() else f"(?i:{re.escape(w)})" for w in subject.split()]
    return re.compile(r"(?<!\w)" + r"\s+".join(words) + r"(?!\w)")


def names(text: str, title: str) -> bool:
    """Whether ``text`` names the subject of the page titled ``title``: as whole words,
    its capitalised words capitalised (a name, not a phrase that happens to match)."""
    subject = page_subject(title)
    return bool(subject) and _subject_pattern(subject).search(text) is not None


def linked(title: str, text: str, other_title: str, other_text: str) -> bool:
    """Whether two pages' passages lead to each other: one names the other's subject.
    Passages of one subject are not linked (they are one page, or two copies of it)."""
    if page_subject(title).lower() == page_subject(other_title).lower():
        return False
    return names(text, other_title) or names(other_text, title)


def sentences(text: str) -> list[str]:
    """The sentences of ``text``, as written (a line break ends one too)."""
    return _SENTENCE.findall(text)
