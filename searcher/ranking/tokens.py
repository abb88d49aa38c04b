"""Each result's text read once per request: the keyword filter (``relevance.py``), the
hybrid stage (``hybrid.py``) and near-duplicate removal (``dedup.py``) all compare the same
title + snippet (``searcher.text.document_text``) with the query or with each other. A
``RequestTexts`` lower-cases and splits each such text once (``ReadText``) and counts the
query's stems in it once, for all three.

A text's words are its runs of letters and digits (as ``searcher.text.words``), found here
through its entity words (a letter or digit, then letters, digits, ``-`` and ``_``: what
the hybrid stage's entity overlap names), which split at ``-`` and ``_`` into the words.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass

from searcher.text import (
    COMPOUND_SEPARATOR,
    UNSPACED_FROM,
    query_keywords,
    query_terms,
    searched_prefixes,
    stem,
    words,
)

ENTITY_WORD = re.compile(r"[^\W_][\w-]*")

# ASCII bytes that cannot be in an entity word (``ENTITY_WORD``) become spaces; the bytes
# of other scripts stay as they are.
_ENTITY_BYTES = bytes(
    c if c >= 0x80 or chr(c).isalnum() or chr(c) in "-_" else 0x20 for c in range(256)
)
_MARKS_AFTER_SPACE = re.compile(r" [-_]+")
# A character beyond ASCII that cannot be in a word. Those that can (letters and digits of
# any script) keep their bytes (>= 0x80) through the byte translation, so it splits such
# text as the regex does.
_OTHER_NON_WORD = re.compile(r"[^\x00-\x7f\w]")
# Punctuation that keeps most snippets from being ASCII ("it’s", “quoted”, a – dash).
_COMMON_PUNCTUATION = "\u2019\u2018\u201c\u201d\u2013\u2014\u2026\xa0\xab\xbb\xb7\u2022"


def entity_words(lowered: str) -> list[str]:
    """The entity words (``ENTITY_WORD``) of lower-case text, in order."""
    return spaced_entity_words(lowered).split()


def spaced_entity_words(lowered: str) -> str:
    """The entity words of lower-case text in one string, in order, between spaces (one
    or more; one at each end): a byte translation (several times faster than the regex)
    unless the text has characters beyond ASCII that are not letters or digits (other
    than common punctuation), the regex then."""
    if not lowered.isascii():
        for mark in _COMMON_PUNCTUATION:
            if mark in lowered:
                lowered = lowered.replace(mark, " ")
        if not lowered.isascii() and _OTHER_NON_WORD.search(lowered):  # e.g. "£"
            return f" {' '.join(ENTITY_WORD.findall(lowered))} "
    spaced = f" {lowered.encode().translate(_ENTITY_BYTES).decode()} "
    # A word starts at a letter or digit: hyphens and underscores before one are not in it.
    # (One pass over the text: removing them a layer at a time is quadratic in a run.)
    if " -" in spaced or " _" in spaced:
        spaced = _MARKS_AFTER_SPACE.sub(" ", spaced)
    return spaced


class ReadText:
    """What is compared of one text, from one scan of it: its entity words (``tokens``)
    and the runs of letters and digits they split into (``words``), each kept as one
    string (words between spaces, a space at each end), where a search for `` prefix``
    finds the few words that may stem to the query's words and `` word `` tests a word as
    a set would; ``length``, its words of two or more characters (what BM25 counts).
    (Runs of spaces are left: splitting and joining again costs more than they do.)"""

    __slots__ = ("_distinct", "length", "tokens", "words")

    def __init__(self, text: str) -> None:
        self.tokens = tokens = spaced_entity_words(text.lower())
        if "-" in tokens or "_" in tokens:
            self.words = tokens.replace("-", " ").replace("_", " ")
        else:
            self.words = tokens
        words = self.words.split()
        self.length = len(words) - list(map(len, words)).count(1)
        self._distinct: frozenset[str] | None = None

    def distinct_words(self) -> frozenset[str]:
        """The text's words, each once (read on the first call only)."""
        if self._distinct is None:
            self._distinct = frozenset(self.words.split())
        return self._distinct


# Texts read, remembered across requests as the embedder remembers their vectors: the same
# results come back for a query asked again, its next page, a research round's searches.
# About 2 KB each for a usual title + snippet (their text kept twice, and the key): under
# 10 MB when full.
READ_TEXTS_KEPT = 4096


@functools.lru_cache(maxsize=READ_TEXTS_KEPT)
def read_text(text: str) -> ReadText:
    """``ReadText(text)``, remembered for the ``READ_TEXTS_KEPT`` texts read last (a
    ``ReadText`` depends on its text alone, and nothing changes it but its own cache)."""
    return ReadText(text)


@functools.lru_cache(maxsize=1024)
def _word_starts(stems: frozenset[str]) -> tuple[str, ...]:
    # A space and a prefix (``stem_prefixes``) start a word that may stem to one of
    # ``stems``; as no prefix starts another, no word starts with two of them.
    return tuple(" " + prefix for prefix in searched_prefixes(stems))


def spaced_words_stemming_to(stems: frozenset[str], spaced: str) -> list[str]:
    """Each word of a ``ReadText`` string that may stem to one of ``stems``, once: found
    by its start, a literal (no pattern to compile for a new query)."""
    found = []
    for start in _word_starts(stems):
        at = spaced.find(start)
        while at >= 0:
            end = spaced.find(" ", at + 1)  # the strings end with a space
            found.append(spaced[at + 1 : end])
            at = spaced.find(start, end)
    return found


def stem_counts(spaced: str, stems: frozenset[str]) -> dict[str, int]:
    """How many words of a ``ReadText`` string stem to each of ``stems`` (those it has)."""
    counts: dict[str, int] = {}
    for word in spaced_words_stemming_to(stems, spaced):
        if (found := stem(word)) in stems:
            counts[found] = counts.get(found, 0) + 1
    return counts


@dataclass(frozen=True)
class KeywordSet:
    """A query's keywords (``query_keywords``) sorted by how they are looked for, prepared
    once per query."""

    stems: tuple[str, ...]  # plain words: compared by stem
    phrases: tuple[str, ...]  # " srvo 063 ": compounds, whatever joins their parts
    substrings: tuple[str, ...]  # unspaced scripts (CJK): no word boundaries to use
    total: int


@functools.lru_cache(maxsize=1024)
def keyword_set(keywords: tuple[str, ...]) -> KeywordSet:
    """``keywords`` sorted into a ``KeywordSet``."""
    stems, phrases, substrings = [], [], []
    for keyword in keywords:
        if COMPOUND_SEPARATOR.search(keyword):
            # "SRVO-063", "srvo 063" and ".../srvo-063-alarm" all contain " srvo 063 ".
            phrases.append(f" {' '.join(words(keyword))} ")
        elif any(ord(ch) >= UNSPACED_FROM for ch in keyword):
            substrings.append(keyword)
        else:
            stems.append(keyword)
    return KeywordSet(tuple(stems), tuple(phrases), tuple(substrings), len(keywords))


class RequestTexts:
    """The texts one request compares, each read once (``ReadText``) and the query's stems
    counted in each once: the hybrid stage's BM25 terms (stop words kept) and the keyword
    filter's stemmed keywords, which are among them unless the query has more than
    ``MAX_QUERY_TERMS`` terms (then they are added)."""

    def __init__(self, query: str) -> None:
        self.query = query
        self.terms = query_terms(query, keep_stop_words=True)
        self.keywords = keyword_set(tuple(query_keywords(query)))
        self.stems = frozenset(self.terms).union(self.keywords.stems)
        self._read: dict[str, ReadText] = {}
        self._counts: dict[str, dict[str, int]] = {}

    def read(self, text: str) -> ReadText:
        """``text`` read (the first time it is asked for in this request)."""
        found = self._read.get(text)
        if found is None:
            found = self._read[text] = read_text(text)
        return found

    def counts(self, text: str) -> dict[str, int]:
        """How many words of ``text`` stem to each of the query's stems (those it has)."""
        found = self._counts.get(text)
        if found is None:
            found = self._counts[text] = stem_counts(self.read(text).words, self.stems)
        return found
