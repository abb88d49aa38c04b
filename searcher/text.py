"""One way to read text, for every step that compares a query with it: the keyword filter
and heuristic scores (``ranking/relevance.py``), the hybrid stage (``ranking/hybrid.py``),
passages within and across pages (``pack/passages.py``), research evidence and the LLM
steps' fallbacks.

- words: runs of letters and digits (any script), lower-cased (``words``);
- one stemmer (``stem``): plurals, -ing / -ed and a silent -e stripped, so that route,
  routes, routed and routing meet;
- one stop-word list (``STOP_WORDS``);
- the query's terms (``query_terms``: stemmed words, stop words out) and keywords
  (``query_keywords``: the terms plus compounds such as ``SRVO-063`` kept whole);
- one BM25 (``bm25``) over term counts the caller has taken;
- what is read of a search result (``document_text``: its title and snippet).

Finding the words of a long text that stem to a query's terms (``words_stemming_to``,
``stem_positions``) looks only where a term's first letters are, instead of tokenising
and stemming every word in Python.
"""

from __future__ import annotations

import functools
import math
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

# --- words --------------------------------------------------------------------------------

# Common English function words and question words: they say nothing about what a text is
# about.
_STOP_WORDS_TEXT = """
    a about above after again against all am an and any are as at be because been before
    being below between both but by can could did do does doing down during each few for
    from further had has have having he her here hers herself him himself his how i if in
    into is it its itself just me more most my myself no nor not now of off on once only or
    other our ours ourselves out over own same she should so some such than that the their
    theirs them themselves then there these they this those through to too under until up
    very was we were what when where which while who whom whose why will with would you
    your yours yourself yourselves get got also may might must shall vs via per s t
"""
STOP_WORDS = frozenset(_STOP_WORDS_TEXT.split())

# A token: letters/digits (any script), possibly joined by - _ . / into a compound such as
# "srvo-063", "6es7-214", "node.js" or "tcp/ip".
_TOKEN = re.compile(r"[^\W_]+(?:[-_./][^\W_]+)*")
COMPOUND_SEPARATOR = re.compile(r"[-_./]")
# Scripts written without spaces between words (CJK, kana, hangul) start here: their
# keywords are matched as substrings.
UNSPACED_FROM = 0x2E80
# Query terms kept at most: bounds the work a long query makes on a long page.
MAX_QUERY_TERMS = 32

# Snippets use a few hundred distinct characters; the bound only stops hostile text that
# cycles through all of Unicode from growing the table for ever.
_WORD_CHARS_BOUND = 65536


class _WordChars(dict[int, int]):
    """A ``str.translate`` table turning every character that is not a letter or digit
    into a space: the same split as the regex ``[^\\W_]+``, about five times faster on
    snippets. Filled lazily, one entry per character seen, up to a bound."""

    def __missing__(self, codepoint: int) -> int:
        value = codepoint if chr(codepoint).isalnum() else 0x20
        if len(self) < _WORD_CHARS_BOUND:
            self[codepoint] = value
        return value


_WORD_CHARS = _WordChars()


def words(text: str) -> list[str]:
    """The words of ``text``: its runs of letters and digits, lower-cased, in order."""
    return text.lower().translate(_WORD_CHARS).split()


# --- the stemmer --------------------------------------------------------------------------

# Words whose final -s is not a plural.
_NOT_PLURAL = frozenset({"news", "series", "species", "always", "perhaps", "lens"})
_VOWELS = frozenset("aeiouy")
# Doubled final consonants undone after -ing/-ed ("running" -> "run"); l, s, z stay doubled
# because they are usually part of the word ("installing" -> "install").
_UNDOUBLE = frozenset("bcdfghjkmnpqrtvwx")


def _has_vowel(word: str) -> bool:
    return any(ch in _VOWELS for ch in word)


def _strip_verb_suffix(word: str, suffix: str) -> str:
    stem = word[: -len(suffix)]
    if len(stem) < 3 or not _has_vowel(stem):  # "string", "thing", "need" stay whole
        return word
    if len(stem) > 3 and stem[-1] == stem[-2] and stem[-1] in _UNDOUBLE:
        stem = stem[:-1]
    return stem


@functools.lru_cache(maxsize=65536)
def stem(word: str) -> str:
    """Light suffix stripping for lower-case words, so that forms of a word meet.

    In order: plurals (``-ies`` -> ``-y``; ``-es`` after s/x/z/ch/sh; ``-s`` except after
    s/u/i), then ``-ied`` -> ``-y``, ``-ing``, ``-ed`` (with a doubled consonant undone),
    then a final silent ``-e`` — so "routers" -> "router" and route / routes / routed /
    routing all give "rout". Words of three letters or fewer, and tokens with digits, are
    left alone. Both sides of a comparison go through it once; the output need not be a
    word."""
    if len(word) <= 3 or not word.isalpha() or word in _NOT_PLURAL:
        return word
    if word.endswith("ies") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith(("sses", "xes", "zes", "ches", "shes")):
        word = word[:-2]
    elif word.endswith("s") and not word.endswith(("ss", "us", "is")):
        word = word[:-1]
    if word.endswith("ied") and len(word) > 4:
        word = word[:-3] + "y"
    elif word.endswith("ing"):
        word = _strip_verb_suffix(word, "ing")
    elif word.endswith("ed") and not word.endswith("eed"):
        word = _strip_verb_suffix(word, "ed")
    if len(word) > 3 and word.endswith("e") and not word.endswith("ee"):
        word = word[:-1]
    return word


def stem_prefixes(stems: Iterable[str]) -> tuple[str, ...]:
    """What every word that stems to one of ``stems`` starts with, longest first: ``stem``
    only strips suffixes, and its one rewrite of a letter (-ies / -ied to -y) is of the
    last, so a word that stems to ``s`` starts with ``s`` (less a final ``y``)."""
    return tuple(
        sorted({s[:-1] if s.endswith("y") and len(s) > 1 else s for s in stems if s},
               key=lambda p: (-len(p), p))
    )  # fmt: skip


def shortest_prefixes(prefixes: Iterable[str]) -> tuple[str, ...]:
    """``prefixes`` less those that start with another one (whose words it finds), sorted:
    no word starts with two of them, so a search for each finds each word once."""
    kept: list[str] = []
    for prefix in sorted(prefixes):  # a prefix sorts right before the words it starts
        if not kept or not prefix.startswith(kept[-1]):
            kept.append(prefix)
    return tuple(kept)


@functools.lru_cache(maxsize=1024)
def searched_prefixes(stems: tuple[str, ...] | frozenset[str]) -> tuple[str, ...]:
    """The prefixes a text is searched for to find the words stemming to ``stems``."""
    return shortest_prefixes(stem_prefixes(stems))


@functools.lru_cache(maxsize=1024)
def _prefix_pattern(prefixes: tuple[str, ...]) -> re.Pattern[str]:
    if not prefixes:
        return re.compile(r"(?!)")  # matches nothing
    # No look-behind for the word's start: with one, the re engine tries every position;
    # without, it skips to the prefixes' first letters (2x faster on snippets).
    return re.compile(f"(?:{'|'.join(map(re.escape, prefixes))})[^\\W_]*")


# Up to this many prefixes, a text is searched for each (``str.find``: fast, and no pattern
# to compile for a new query); with more, one scan with a regex of them all is faster.
_SEARCH_PER_PREFIX_UP_TO = 4
# A text longer than this (titles and snippets are a few hundred characters) is scanned
# with the regex too: each word found costs less Python there, which halves the time of a
# hostile snippet of megabytes full of words that start with a prefix.
_SEARCH_PER_PREFIX_CHARS_UP_TO = 20_000
_REST_OF_WORD = re.compile(r"[^\W_]*")


def _word_spans(
    prefixes: tuple[str, ...], text: str, begin: int, end: int
) -> list[tuple[int, int]]:
    """``(start, end)`` of each word of ``text[begin:end]`` (lower-case) that starts with
    one of ``prefixes`` (``shortest_prefixes``), in some order."""
    if len(prefixes) > _SEARCH_PER_PREFIX_UP_TO or end - begin > _SEARCH_PER_PREFIX_CHARS_UP_TO:
        return _spans_in_one_scan(prefixes, text, begin, end)
    return _spans_per_prefix(prefixes, text, begin, end)


def _spans_in_one_scan(
    prefixes: tuple[str, ...], text: str, begin: int, end: int
) -> list[tuple[int, int]]:
    """``_word_spans`` by one scan of a regex of all the prefixes."""
    # A prefix found inside a word is not a word; it cannot hide one either, as a match
    # never crosses the non-letter before the next word.
    return [
        m.span()
        for m in _prefix_pattern(prefixes).finditer(text, begin, end)
        if not m.start() or not text[m.start() - 1].isalnum()
    ]


def _spans_per_prefix(
    prefixes: tuple[str, ...], text: str, begin: int, end: int
) -> list[tuple[int, int]]:
    """``_word_spans`` by a search for each prefix (``str.find``)."""
    spans = []
    for prefix in prefixes:
        at = text.find(prefix, begin, end)
        while at >= 0:
            rest = _REST_OF_WORD.match(text, at + len(prefix), end)
            stop = rest.end() if rest else end  # it always matches, if only ""
            if not at or not text[at - 1].isalnum():
                spans.append((at, stop))
            at = text.find(prefix, stop, end)  # the rest of the word holds no word
    return spans


def words_stemming_to(stems: tuple[str, ...] | frozenset[str], text: str) -> list[str]:
    """The words (runs of letters and digits) of lower-case ``text`` that may stem to one
    of ``stems`` (they start like one; ``stem_prefixes``), in some order: stemming only
    these words, not every word of a text, finds the same stems."""
    return [text[s:e] for s, e in _word_spans(searched_prefixes(stems), text, 0, len(text))]


def stem_positions(
    stems: tuple[str, ...] | frozenset[str], text: str, begin: int = 0, end: int | None = None
) -> list[tuple[int, str]]:
    """``(offset, stem)`` of each word of lower-case ``text[begin:end]`` that stems to one
    of ``stems``, in some order."""
    wanted = frozenset(stems)
    stop = len(text) if end is None else end
    found = []
    for s, e in _word_spans(searched_prefixes(stems), text, begin, stop):
        if (stemmed := stem(text[s:e])) in wanted:
            found.append((s, stemmed))
    return found


# --- the query ----------------------------------------------------------------------------


def _is_keyword(part: str, stop_words: frozenset[str]) -> bool:
    # Single letters are noise ("what's" -> "s"); single digits can be a version or code.
    return part not in stop_words and (len(part) > 1 or part.isdigit())


@functools.lru_cache(maxsize=1024)
def _read_query(query: str, stop_words: frozenset[str]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """(keywords, terms) of ``query``; see ``query_keywords`` and ``query_terms``."""
    keywords: dict[str, None] = {}  # ordered sets
    terms: dict[str, None] = {}
    for token in _TOKEN.findall(query.lower()):
        parts = [p for p in COMPOUND_SEPARATOR.split(token) if p]
        if len(parts) > 1 and any(_is_keyword(p, stop_words) for p in parts):
            keywords[token] = None
        for part in parts:
            if _is_keyword(part, stop_words):
                keywords[stem(part)] = None
                terms[stem(part)] = None
    return tuple(keywords), tuple(terms)[:MAX_QUERY_TERMS]


def query_keywords(query: str) -> list[str]:
    """The query's keywords: lower-case, stop words dropped, stemmed, first-seen order.

    A compound such as ``SRVO-063``, ``6ES7-214`` or ``node.js`` is kept whole (as written,
    lower-cased) and also as its parts (``srvo``, ``063``), so a page that spells the code
    the same way matches more of it than one that only has the parts."""
    return list(_read_query(query, STOP_WORDS)[0])


_NO_STOP_WORDS: frozenset[str] = frozenset()


def query_terms(query: str, keep_stop_words: bool = False) -> tuple[str, ...]:
    """The query's terms, what BM25 counts: its words (compounds split into their parts),
    single letters and (unless ``keep_stop_words``) stop words dropped, stemmed,
    first-seen order, at most ``MAX_QUERY_TERMS``.

    ``keep_stop_words`` is for BM25 over a handful of short texts (the hybrid stage's
    titles and snippets), where a stop word's IDF is its weight; there keeping them ranks
    better (bench/ranking_halves.py, dev halves)."""
    return _read_query(query, _NO_STOP_WORDS if keep_stop_words else STOP_WORDS)[1]


# --- BM25 ---------------------------------------------------------------------------------

K1, B = 1.2, 0.75


def bm25(
    terms: Sequence[str], counts: Sequence[Mapping[str, int]], lengths: Sequence[float]
) -> list[float]:
    """Okapi BM25 (k1 1.2, b 0.75) of each document for ``terms``, with document
    frequencies and the average length taken over these documents alone.

    ``counts`` holds each document's count of each term it has (``{}`` for none);
    ``lengths`` each document's length, in any unit the caller keeps to (words, characters).
    The IDF is ``ln(1 + (n - df + 0.5) / (df + 0.5))``, never negative."""
    n = len(counts)
    scores = [0.0] * n
    present = [t for t in dict.fromkeys(terms) if any(t in c for c in counts)]
    if not present:
        return scores
    average = (sum(lengths) / n) or 1.0
    idf = {}
    for term in present:
        df = sum(1 for c in counts if term in c)
        idf[term] = math.log(1 + (n - df + 0.5) / (df + 0.5))
    for i, (c, length) in enumerate(zip(counts, lengths, strict=True)):
        if c:
            norm = K1 * (1 - B + B * length / average)
            scores[i] = sum(idf[t] * c[t] * (K1 + 1) / (c[t] + norm) for t in present if t in c)
    return scores


# --- search results -----------------------------------------------------------------------

# Results carry a few hundred characters of title and snippet. A backend sending megabytes
# must not stall the event loop: one 4 MB snippet took the static model 5.5 s to embed.
MAX_DOCUMENT_CHARS = 2000


def document_text(title: str, snippet: str) -> str:
    """What is read of a search result when it is compared as a whole — embedded for
    near-duplicate removal and the hybrid stage, scored by the hybrid stage, sent to a
    reranking model: title and snippet, at most ``MAX_DOCUMENT_CHARS``."""
    return f"{title}\n{snippet}".strip()[:MAX_DOCUMENT_CHARS]


# --- characters from JSON -------------------------------------------------------------------


def whole_characters(value: Any) -> Any:
    """A value read by Python's ``json`` with every string (and key) made valid Unicode:
    ``json`` reads an escaped half of a UTF-16 pair ("\\ud800") as a lone surrogate, which
    no UTF-8 writer takes, so one such string from a backend or a model would fail every
    later write of what holds it (a response, a job's stored events). Pairs written as two
    escapes join; a lone half becomes U+FFFD."""
    if isinstance(value, str):
        return value.encode("utf-16", "surrogatepass").decode("utf-16", "replace")
    if isinstance(value, list):
        return [whole_characters(v) for v in value]
    if isinstance(value, dict):
        return {whole_characters(k): whole_characters(v) for k, v in value.items()}
    return value
