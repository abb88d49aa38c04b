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
from collections.abc import Callable, Sequence
from typing import TypeVar

import numpy as np

from searcher.embedding.embedders import Embedder
from searcher.errors import EmbedderUnavailable
from searcher.ranking.tokens import (
    ENTITY_WORD,
    ReadText,
    RequestTexts,
    spaced_words_stemming_to,
)
from searcher.text import bm25, query_keywords, stem

T = TypeVar("T")

BM25_WEIGHT, COSINE_WEIGHT, ENTITY_WEIGHT = 0.4, 0.4, 0.2


def pool_bm25(query: str, texts: Sequence[str]) -> list[float]:
    """BM25 of each text for the query's terms (``searcher.text.query_terms``), statistics
    from ``texts`` alone and lengths in words, divided by the best (all 0 when nothing
    matches)."""
    request = RequestTexts(query)
    return _pool_bm25(request.terms, [request.read(t) for t in texts], _term_counts(request, texts))


def _term_counts(request: RequestTexts, texts: Sequence[str]) -> list[dict[str, int]]:
    """For each text, how many of its words stem to each of the query's BM25 terms (those
    it has), from the counts ``request`` keeps of every stem of the query."""
    if not request.terms:
        return [{} for _ in texts]
    counts = [request.counts(t) for t in texts]
    if request.stems.issubset(request.terms):
        return counts
    terms = frozenset(request.terms)  # the keywords of a query of over MAX_QUERY_TERMS
    return [{s: n for s, n in c.items() if s in terms} for c in counts]


def _pool_bm25(
    terms: tuple[str, ...], texts: Sequence[ReadText], counts: Sequence[dict[str, int]]
) -> list[float]:
    scores = bm25(terms, counts, [t.length for t in texts])
    best = max(scores, default=0.0)
    return [s / best if best > 0 else 0.0 for s in scores]


def entities(text: str) -> set[str]:
    """Capitalised words after the first, and words with digits; lower-cased."""
    words = ENTITY_WORD.findall(text)
    found = {w.lower() for i, w in enumerate(words) if i and w[:1].isupper()}
    return found | {w.lower() for w in words if any(c.isdigit() for c in w)}


def entity_overlap(query: str, texts: Sequence[str]) -> list[float]:
    """For each text, the share of the query's entities (else keywords) it names."""
    return _entity_overlap(query, [ReadText(t) for t in texts])


def _entity_overlap(
    query: str,
    texts: Sequence[ReadText],
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
    """Which of ``wanted`` a ``ReadText``'s ``tokens`` name: as written, else in another
    form (a word that stems to it)."""
    named = {w for w, padded in as_words if padded in tokens}
    if len(named) < len(wanted):
        named.update(s for s in map(stem, spaced_words_stemming_to(wanted, tokens)) if s in wanted)
    return named


def hybrid_scores(
    query: str,
    texts: Sequence[str],
    cosines: Sequence[float] | None,
    request: RequestTexts | None = None,
) -> list[float]:
    """Seed 004's mix for each text; without cosines the other two keep their ratio.
    ``request`` (for ``query``) holds the texts as this request has read them already."""
    if request is None or request.query != query:
        request = RequestTexts(query)
    read = [request.read(t) for t in texts]
    counts = _term_counts(request, texts)
    lexical = _pool_bm25(request.terms, read, counts)
    entity = _entity_overlap(query, read, request.terms, counts)
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
    request: RequestTexts | None = None,
) -> list[T]:
    """``items`` (heuristic order) re-ordered by the blend; ``with_score`` gets each item,
    its hybrid score and its blended score (non-increasing along the new order).
    An embedder that fails, is slower than ``time_left_s`` (what the request's deadline
    leaves), or is not there leaves the cosine out rather than the stage. ``request``: the
    texts as this request has read them (``hybrid_scores``)."""
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
    scores = hybrid_scores(query, texts, sims, request)
    total = blend(scores, share)
    order = sorted(range(len(items)), key=lambda i: (-total[i], i))
    return [with_score(items[i], scores[i], total[i]) for i in order]
