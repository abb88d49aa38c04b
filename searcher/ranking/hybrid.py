"""Seed 004's hybrid relevance as a rerank stage of the fused pool.

Each result's title + snippet is scored against the query::

    hybrid = 0.4 BM25 (over the pool itself, scaled so the best is 1)
           + 0.4 embedding cosine (query vs title + snippet; 0 when no embedder)
           + 0.2 entity overlap (share of the query's entities: capitalised words after
                 the first, numbers and codes; its keywords when it has none)

and the pool is re-ordered by ``(1 - share) x prior + share x hybrid``, where ``prior``
falls with the heuristic rank (1 at the top, 1/3 at rank 21), so the fused order still
counts. Measured on a real SearXNG (``bench/ranking_searxng.py``); ``share`` is
``scoring.hybrid_share``. Pure: vectors come in, an order goes out.
"""

from __future__ import annotations

import asyncio
import functools
import re
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from searcher.embedding.embedders import Embedder
from searcher.errors import EmbedderUnavailable
from searcher.text import bm25, query_keywords, query_terms, searched_prefixes, stem

T = TypeVar("T")

BM25_WEIGHT, COSINE_WEIGHT, ENTITY_WEIGHT = 0.4, 0.4, 0.2
_ENTITY_WORD = re.compile(r"[^\W_][\w-]*")


# ASCII bytes that cannot be in an entity word (``_ENTITY_WORD``) become spaces; the bytes
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
    """The entity words (``_ENTITY_WORD``) of lower-case text, in order."""
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
            return f" {' '.join(_ENTITY_WORD.findall(lowered))} "
    spaced = f" {lowered.encode().translate(_ENTITY_BYTES).decode()} "
    # A word starts at a letter or digit: hyphens and underscores before one are not in it.
    # (One pass over the text: removing them a layer at a time is quadratic in a run.)
    if " -" in spaced or " _" in spaced:
        spaced = _MARKS_AFTER_SPACE.sub(" ", spaced)
    return spaced


class _Text:
    """What the BM25 and entity scores read of one text, from one scan of it: its entity
    words and the runs of letters and digits they split into, each kept as one string
    (words between spaces, a space at each end), where a search for `` prefix`` finds the
    few words that may stem to the query's words and `` word `` tests a word as a set
    would. (Runs of spaces are left: splitting and joining again costs more than they do.)"""

    __slots__ = ("length", "tokens", "words")

    def __init__(self, text: str) -> None:
        # Lower-cased entity words; split at hyphens and underscores, they give the runs of
        # letters and digits, the words BM25 counts (its lengths: those of two or more).
        self.tokens = tokens = spaced_entity_words(text.lower())
        if "-" in tokens or "_" in tokens:
            self.words = tokens.replace("-", " ").replace("_", " ")
        else:
            self.words = tokens
        words = self.words.split()
        self.length = len(words) - list(map(len, words)).count(1)


@functools.lru_cache(maxsize=1024)
def _word_starts(stems: frozenset[str]) -> tuple[str, ...]:
    # A space and a prefix (``stem_prefixes``) start a word that may stem to one of
    # ``stems``; as no prefix starts another, no word starts with two of them.
    return tuple(" " + prefix for prefix in searched_prefixes(stems))


def _words_stemming_to(stems: frozenset[str], text: str) -> list[str]:
    """Each word of a ``_Text`` string that may stem to one of ``stems``, once: found by
    its start, a literal (no pattern to compile for a new query)."""
    words = []
    for start in _word_starts(stems):
        at = text.find(start)
        while at >= 0:
            end = text.find(" ", at + 1)  # the strings end with a space
            words.append(text[at + 1 : end])
            at = text.find(start, end)
    return words


def _stem_counts(words: str, stems: frozenset[str]) -> dict[str, int]:
    """How many words of a ``_Text`` string stem to each of ``stems`` (those it has)."""
    counts: dict[str, int] = {}
    for word in _words_stemming_to(stems, words):
        if (found := stem(word)) in stems:
            counts[found] = counts.get(found, 0) + 1
    return counts


def pool_bm25(query: str, texts: Sequence[str]) -> list[float]:
    """BM25 of each text for the query's terms (``searcher.text.query_terms``), statistics
    from ``texts`` alone and lengths in words, divided by the best (all 0 when nothing
    matches)."""
    read = [_Text(t) for t in texts]
    terms = query_terms(query, keep_stop_words=True)
    return _pool_bm25(terms, read, _term_counts(terms, read))


def _term_counts(terms: tuple[str, ...], texts: Sequence[_Text]) -> list[dict[str, int]]:
    """For each text, how many of its words stem to each of ``terms`` (those it has)."""
    if not terms:
        return [{} for _ in texts]
    wanted = frozenset(terms)
    return [_stem_counts(t.words, wanted) for t in texts]


def _pool_bm25(
    terms: tuple[str, ...], texts: Sequence[_Text], counts: Sequence[dict[str, int]]
) -> list[float]:
    scores = bm25(terms, counts, [t.length for t in texts])
    best = max(scores, default=0.0)
    return [s / best if best > 0 else 0.0 for s in scores]


def entities(text: str) -> set[str]:
    """Capitalised words after the first, and words with digits; lower-cased."""
    words = _ENTITY_WORD.findall(text)
    found = {w.lower() for i, w in enumerate(words) if i and w[:1].isupper()}
    return found | {w.lower() for w in words if any(c.isdigit() for c in w)}


def entity_overlap(query: str, texts: Sequence[str]) -> list[float]:
    """For each text, the share of the query's entities (else keywords) it names."""
    return _entity_overlap(query, [_Text(t) for t in texts])


def _entity_overlap(
    query: str,
    texts: Sequence[_Text],
    terms: tuple[str, ...] = (),
    counts: Sequence[dict[str, int]] | None = None,
) -> list[float]:
    """``entity_overlap``; ``counts`` (``_term_counts`` of the query's ``terms``), when
    given, answer for the texts they can (``_counts_name``) instead of a second search."""
    wanted = frozenset(entities(query) or query_keywords(query))
    if not wanted:
        return [0.0] * len(texts)
    as_words = [(w, f" {w} ") for w in wanted]
    if counts is None or not _counts_name(wanted, terms):
        return [len(_named(wanted, as_words, t.tokens)) / len(wanted) for t in texts]
    return [
        # Entity words without hyphens or underscores are the text's BM25 words.
        sum(1 for w in wanted if w in c) / len(wanted)
        if t.words == t.tokens
        else len(_named(wanted, as_words, t.tokens)) / len(wanted)
        for t, c in zip(texts, counts, strict=True)
    ]


def _counts_name(wanted: frozenset[str], terms: tuple[str, ...]) -> bool:
    """Whether a text's BM25 counts say which of ``wanted`` it names, for a text whose
    BM25 words are its entity words: they do when every wanted word is a BM25 term (its
    forms were counted) and stems to itself (the word written as it was counted too;
    "phasing" gives the keyword "phas", which the word "phas" names but stems to "pha").
    A query without entities wants its keywords, which nearly always are such terms."""
    return wanted.issubset(terms) and all(stem(w) == w for w in wanted)


def _named(wanted: frozenset[str], as_words: list[tuple[str, str]], tokens: str) -> set[str]:
    """Which of ``wanted`` a ``_Text``'s ``tokens`` name: as written, else in another form
    (a word that stems to it)."""
    named = {w for w, padded in as_words if padded in tokens}
    if len(named) < len(wanted):
        named.update(s for s in map(stem, _words_stemming_to(wanted, tokens)) if s in wanted)
    return named


def hybrid_scores(query: str, texts: Sequence[str], cosines: Sequence[float] | None) -> list[float]:
    """Seed 004's mix for each text; without cosines the other two keep their ratio."""
    read = [_Text(t) for t in texts]
    terms = query_terms(query, keep_stop_words=True)
    counts = _term_counts(terms, read)
    lexical = _pool_bm25(terms, read, counts)
    entity = _entity_overlap(query, read, terms, counts)
    if cosines is None:
        scale = 1.0 / (BM25_WEIGHT + ENTITY_WEIGHT)
        pairs = zip(lexical, entity, strict=True)
        return [scale * (BM25_WEIGHT * b + ENTITY_WEIGHT * e) for b, e in pairs]
    return [
        BM25_WEIGHT * b + COSINE_WEIGHT * max(0.0, min(1.0, c)) + ENTITY_WEIGHT * e
        for b, c, e in zip(lexical, cosines, entity, strict=True)
    ]


def cosines(vectors: np.ndarray) -> list[float]:
    """Cosine of each row after the first with the first (rows are unit vectors)."""
    if len(vectors) < 2:
        return []
    return [float(v) for v in vectors[1:] @ vectors[0]]


def prior(rank_index: int) -> float:
    """What the heuristic rank is worth: 1 at the top, 1/3 at rank 21."""
    return 1.0 / (1.0 + rank_index / 10.0)


def blend(hybrid: Sequence[float], share: float) -> list[float]:
    """Each item's final score in [0, 1]: its heuristic rank's prior and its hybrid score."""
    return [(1 - share) * prior(i) + share * h for i, h in enumerate(hybrid)]


def blended_order(hybrid: Sequence[float], share: float) -> list[int]:
    """Indices (in heuristic order) re-ordered by the blend; ties keep heuristic order."""
    total = blend(hybrid, share)
    return sorted(range(len(hybrid)), key=lambda i: (-total[i], i))


async def hybrid_stage(
    items: Sequence[T],
    query: str,
    share: float,
    embedder: Embedder | None,
    text: Callable[[T], str],
    with_score: Callable[[T, float, float], T],
    time_left_s: float | None = None,
) -> list[T]:
    """``items`` (heuristic order) re-ordered by the blend; ``with_score`` gets each item,
    its hybrid score and its blended score (non-increasing along the new order).
    An embedder that fails, is slower than ``time_left_s`` (what the request's deadline
    leaves), or is not there leaves the cosine out rather than the stage."""
    if share <= 0 or len(items) < 2:
        return list(items)
    texts = [text(i) for i in items]
    sims: list[float] | None = None
    if embedder is not None:
        try:
            async with asyncio.timeout(time_left_s):
                sims = cosines(await embedder.embed([query, *texts]))
        except (EmbedderUnavailable, TimeoutError):
            sims = None
        if sims is not None and len(sims) != len(texts):
            sims = None
    scores = hybrid_scores(query, texts, sims)
    total = blend(scores, share)
    order = sorted(range(len(items)), key=lambda i: (-total[i], i))
    return [with_score(items[i], scores[i], total[i]) for i in order]
