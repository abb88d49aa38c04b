"""Hybrid retrieval over a collection, as seed 002's Qdrant query does it: the best chunks
by BM25 and the best by cosine, fused by RRF, then grouped into documents (a document
takes the place of its best chunk; the others are its supporting chunks).

Synchronous SQLite and numpy work: the ``local`` backend runs it in a worker thread.
"""

from __future__ import annotations

import re
import sqlite3
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np

from searcher.corpus import store
from searcher.corpus.store import ChunkRow, VectorCache
from searcher.text import STOP_WORDS

_WORD = re.compile(r"\w+", re.UNICODE)
# Words of a query kept for its FTS5 expression: a long pasted text must not become a
# thousand-term OR.
MAX_QUERY_WORDS = 64
# Chunks on each side of the best one that full mode gives as a document's content.
NEIGHBOURS = 2
# Chunks kept as a document's supporting chunks.
MAX_CHUNKS_PER_DOCUMENT = 3
# How the keyword and vector lists of chunks become one (corpus.fusion).
Fusion = Literal["rrf", "relative_score"]


def fts_query(text: str) -> str | None:
    """The FTS5 expression for ``text``: each word but stop words (unless it has no other)
    quoted (no FTS5 syntax gets through, whatever the user typed), joined by OR so that
    BM25 ranks partial matches; ``None`` when it has no word."""
    words = list(dict.fromkeys(w.lower() for w in _WORD.findall(text)))
    # Stop words match nearly every chunk: BM25 then scores them all for little signal.
    words = ([w for w in words if w not in STOP_WORDS] or words)[:MAX_QUERY_WORDS]
    if not words:
        return None
    return " OR ".join(f'"{w}"' for w in words)


@dataclass(frozen=True)
class DocumentMatch:
    """One document found: its best chunks (best first) and its fused score."""

    score: float
    chunks: tuple[ChunkRow, ...]

    @property
    def best(self) -> ChunkRow:
        return self.chunks[0]


def rrf(
    lists: Sequence[Sequence[int]], k: int, weights: Sequence[float] | None = None
) -> dict[int, float]:
    """Reciprocal-rank fusion of ranked id lists: sum of weight / (k + rank), rank from 1
    (each list's weight 1 unless ``weights`` gives it)."""
    fused: dict[int, float] = {}
    for index, ranked in enumerate(lists):
        weight = 1.0 if weights is None else weights[index]
        for rank, chunk_id in enumerate(ranked, start=1):
            fused[chunk_id] = fused.get(chunk_id, 0.0) + weight / (k + rank)
    return fused


def document_score(chunk_scores: Sequence[float], summed: int) -> float:
    """A document's score from its chunks' fused scores (best first): the sum of the best
    ``summed`` (1: its best chunk alone)."""
    return sum(chunk_scores[:summed])


def relative_scores(
    lists: Sequence[Sequence[tuple[int, float]]], weights: Sequence[float]
) -> dict[int, float]:
    """Relative-score fusion: each list's scores scaled to 0..1 (its worst to its best),
    then summed with the list's weight. Unlike RRF it keeps how far apart two chunks
    were, so a weak list (a static model's cosine) nudges a strong one instead of
    outvoting it (chosen on development queries: bench/corpus_quality.py)."""
    fused: dict[int, float] = {}
    for ranked, weight in zip(lists, weights, strict=True):
        if not ranked:
            continue
        best, worst = ranked[0][1], ranked[-1][1]
        span = best - worst
        for chunk_id, value in ranked:
            scaled = (value - worst) / span if span > 0 else 1.0
            fused[chunk_id] = fused.get(chunk_id, 0.0) + weight * scaled
    return fused


def vector_search(vectors: store.VectorMatrix, query: np.ndarray, limit: int) -> list[int]:
    """Chunk ids of the ``limit`` rows nearest ``query`` by cosine (rows and query are
    unit vectors: a dot product), best first; ties by chunk id."""
    return [chunk_id for chunk_id, _ in vector_scores(vectors, query, limit)]


def vector_scores(
    vectors: store.VectorMatrix, query: np.ndarray, limit: int
) -> list[tuple[int, float]]:
    """``(chunk id, cosine)`` of the ``limit`` rows nearest ``query`` (rows and query
    are unit vectors: a dot product), best first; ties by chunk id; none at or below 0."""
    if vectors.matrix.shape[0] == 0 or vectors.matrix.shape[1] != query.shape[0]:
        return []
    scores = vectors.matrix @ query.astype(np.float32)
    take = min(limit, scores.shape[0])
    top = np.argpartition(-scores, take - 1)[:take]
    order = sorted(top.tolist(), key=lambda i: (-float(scores[i]), int(vectors.ids[i])))
    return [(int(vectors.ids[i]), float(scores[i])) for i in order if scores[i] > 0]


def search_collections(
    conn: sqlite3.Connection,
    cache: VectorCache,
    collections: Sequence[str],
    text: str,
    query_vectors: dict[str, np.ndarray],
    max_documents: int,
    candidates: int,
    rrf_k: int,
    keyword_weight: float = 1.0,
    vector_weight: float = 1.0,
    chunks_summed: int = 1,
    fusion: Fusion = "rrf",
) -> list[DocumentMatch]:
    """The best ``max_documents`` documents of ``collections`` for ``text``: per
    collection a BM25 list and (where ``query_vectors`` has the collection's query vector)
    a cosine list of chunks, all lists fused by ``fusion`` (RRF, or relative scores)
    weighted by ``keyword_weight`` and ``vector_weight`` (a list weighted 0 is not
    searched); each document ranked by the sum
    of its best ``chunks_summed`` chunks. Ties are broken by path and chunk order, never
    by arrival."""
    if keyword_weight <= 0 and not query_vectors:
        keyword_weight = 1.0  # no vectors to search instead: keywords, whatever the weight
    match = fts_query(text) if keyword_weight > 0 else None
    lists: list[list[tuple[int, float]]] = []
    weights: list[float] = []
    for collection in collections:
        if match is not None:
            lists.append(store.keyword_search(conn, collection, match, candidates))
            weights.append(keyword_weight)
        vector = query_vectors.get(collection) if vector_weight > 0 else None
        if vector is not None:
            lists.append(vector_scores(cache.matrix(conn, collection), vector, candidates))
            weights.append(vector_weight)
    if fusion == "relative_score":
        fused = relative_scores(lists, weights)
    else:
        fused = rrf([[cid for cid, _ in ranked] for ranked in lists], rrf_k, weights)
    rows = store.chunks_by_id(conn, list(fused))
    by_document: dict[tuple[str, int], list[ChunkRow]] = {}
    for chunk_id in sorted(fused, key=lambda c: (-fused[c], c)):
        row = rows.get(chunk_id)
        if row is not None:
            by_document.setdefault((row.collection, row.document), []).append(row)
    matches = [
        DocumentMatch(
            document_score([fused[c.id] for c in chunks], chunks_summed),
            tuple(chunks[:MAX_CHUNKS_PER_DOCUMENT]),
        )
        for chunks in by_document.values()
    ]
    matches.sort(key=lambda m: (-m.score, m.best.path, m.best.collection, m.best.ordinal))
    return matches[:max_documents]


def passage_with_neighbours(
    conn: sqlite3.Connection, collections: Sequence[str], path: str, page: int | None,
    query: str, max_chars: int,
) -> str | None:  # fmt: skip
    """Full mode's content of the document at ``path``: the chunk that best matches
    ``query`` (on ``page`` for a PDF page's URL) with ``NEIGHBOURS`` chunks before and
    after it, cut at ``max_chars``; ``None`` when the document is not in
    ``collections``."""
    chunks = store.document_chunks(conn, collections, path)
    if not chunks:
        return None
    first = chunks[0]
    chunks = [c for c in chunks if c.collection == first.collection]
    on_page = [c for c in chunks if page is None or c.page == page] or chunks
    match = fts_query(query)
    best = store.best_in_document(conn, first.document, match) if match else None
    if best is None or all(c.ordinal != best for c in on_page):
        best = on_page[0].ordinal
    return _around(chunks, best, max_chars)


def _around(chunks: list[ChunkRow], centre: int, max_chars: int) -> str:
    """The chunk at ``centre`` and up to ``NEIGHBOURS`` chunks on each side, in reading
    order, each section's heading before its first chunk."""
    window = [c for c in chunks if abs(c.ordinal - centre) <= NEIGHBOURS]
    parts = []
    previous: str | None = None
    for chunk in window:
        if chunk.heading and chunk.heading != previous:
            parts.append(f"## {chunk.heading}")
        parts.append(chunk.text)
        previous = chunk.heading
    return "\n\n".join(parts)[:max_chars]
