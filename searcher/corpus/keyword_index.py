"""BM25 over a collection in memory, as the vectors are: every chunk's terms (stored
with it by the indexer, ``sparse.term_counts``) as one posting array sorted by term, so a
query scores only the postings of its terms, with numpy.

Why not FTS5's ``bm25()`` at query time: it scores every row that matches, and a query
word found in most chunks made a query over 100,000 chunks take 335 ms (issue 27 asks
25 ms). Here such a word costs one vectorised add over its postings.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from searcher.corpus.sparse import PAIR, saturated

# Chunks of one collection at most (24 bits of the sort key); a term's count is capped at
# 255 (BM25 has long saturated by then).
MAX_ROWS = 1 << 24


@dataclass(frozen=True)
class KeywordIndex:
    """Postings of a collection's chunks: ``terms[i]`` occurs in chunk row ``rows[i]`` with
    BM25 weight (before IDF) ``weights[i]``; sorted by term."""

    terms: np.ndarray  # uint32
    rows: np.ndarray  # int32
    weights: np.ndarray  # float32
    size: int  # chunks
    average: float = 0.0  # the mean terms of a chunk, that ``weights`` were normalised by

    @property
    def nbytes(self) -> int:
        return int(self.terms.nbytes + self.rows.nbytes + self.weights.nbytes)


def build(blobs: Sequence[bytes], average: float | None = None) -> KeywordIndex:
    """The index of chunk rows ``0..len(blobs)-1`` (at most ``MAX_ROWS``), each given as
    its stored ``PAIR`` bytes (read as one array: a structured array per chunk costs
    seconds at 100,000). Lengths are normalised by ``average`` terms a chunk (default:
    these chunks' own mean; the chunks added since a snapshot take the snapshot's)."""
    if len(blobs) > MAX_ROWS:
        raise ValueError(f"{len(blobs)} chunks in one collection, over {MAX_ROWS}")
    lengths = np.fromiter((len(b) for b in blobs), dtype=np.int64, count=len(blobs))
    every = np.frombuffer(b"".join(blobs), dtype=PAIR)
    rows = np.repeat(np.arange(len(blobs), dtype=np.int32), lengths // PAIR.itemsize)
    counts = every["count"]
    if len(every) == 0:
        return KeywordIndex(every["id"].copy(), rows, counts.copy(), len(blobs), average or 0.0)
    chunk_terms = np.bincount(rows, weights=counts, minlength=len(blobs))
    mean = float(chunk_terms.mean()) if average is None else average
    # Sorted as one 64-bit key (term, row, count): np.sort is ten times faster than the
    # argsort of the terms (0.2 s instead of 2.8 s at 6 million postings).
    keys = (
        (every["id"].astype(np.uint64) << np.uint64(32))
        | (rows.astype(np.uint64) << np.uint64(8))
        | np.minimum(counts, 255).astype(np.uint64)
    )
    keys.sort()
    terms = (keys >> np.uint64(32)).astype(np.uint32)
    rows = ((keys >> np.uint64(8)) & np.uint64(MAX_ROWS - 1)).astype(np.int32)
    counts = (keys & np.uint64(255)).astype(np.float32)
    weights = saturated(counts, chunk_terms[rows], mean)
    return KeywordIndex(terms, rows, weights, len(blobs), mean)


def idf(chunks: int, containing: int) -> float:
    """BM25's inverse document frequency (Lucene's form: never negative)."""
    return math.log(1 + (chunks - containing + 0.5) / (containing + 0.5))


def frequencies(index: KeywordIndex, query: np.ndarray) -> np.ndarray:
    """How many chunks hold each query term (a term occurs once per chunk)."""
    starts = np.searchsorted(index.terms, query, side="left")
    ends = np.searchsorted(index.terms, query, side="right")
    return (ends - starts).astype(np.int64)


def search(
    index: KeywordIndex,
    query: np.ndarray,
    limit: int,
    chunks: int | None = None,
    containing: np.ndarray | None = None,
    excluded: np.ndarray | None = None,
) -> tuple[np.ndarray, np.ndarray]:
    """(rows, scores) of the ``limit`` best chunks for the query term ids, best first
    (ties by row); only chunks with at least one of the terms. The IDF of a term counts
    ``chunks`` chunks, ``containing`` of them holding it (default: this index's own);
    rows ``excluded`` (a mask) are never answered."""
    if index.size == 0 or len(query) == 0:
        return np.zeros(0, dtype=np.int32), np.zeros(0, dtype=np.float32)
    total = index.size if chunks is None else chunks
    scores = np.zeros(index.size, dtype=np.float32)
    starts = np.searchsorted(index.terms, query, side="left")
    ends = np.searchsorted(index.terms, query, side="right")
    held = (ends - starts) if containing is None else containing
    for start, end, count in zip(starts.tolist(), ends.tolist(), held.tolist(), strict=True):
        if end > start:
            # A term occurs once per chunk: the rows of its slice are distinct.
            weight = idf(total, count)
            scores[index.rows[start:end]] += weight * index.weights[start:end]
    if excluded is not None:
        scores[excluded] = 0
    matched = np.flatnonzero(scores)
    take = min(limit, len(matched))
    if take == 0:
        return matched.astype(np.int32), np.zeros(0, dtype=np.float32)
    top = matched[np.argpartition(-scores[matched], take - 1)[:take]]
    top = top[np.lexsort((top, -scores[top]))]
    return top.astype(np.int32), scores[top]
