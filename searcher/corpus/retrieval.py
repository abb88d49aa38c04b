"""Hybrid retrieval, the part both stores share: the fusion of a keyword list and a
vector list of chunks (seed 002's reciprocal-rank fusion, or relative scores), the
grouping of fused chunks into documents (a document takes the place of its best chunk;
the others are its supporting chunks), and full mode's window of a chunk and its
neighbours.

Synchronous numpy work: the ``local`` backend runs a store's search in a worker thread.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass

import numpy as np

from searcher.corpus.base import ChunkRow, DocumentMatch, Fusing, Fusion
from searcher.text import STOP_WORDS

__all__ = [
    "DocumentMatch", "Fusing", "Fusion", "SignBits", "around", "documents_of", "fts_query",
    "fuse", "rrf", "vector_scores", "vector_search",
]  # fmt: skip

_WORD = re.compile(r"\w+", re.UNICODE)
# Words of a query kept for its FTS5 expression: a long pasted text must not become a
# thousand-term OR.
MAX_QUERY_WORDS = 64
# Chunks on each side of the best one that full mode gives as a document's content.
NEIGHBOURS = 2
# Chunks kept as a document's supporting chunks.
MAX_CHUNKS_PER_DOCUMENT = 3


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


def fuse(
    lists: Sequence[Sequence[tuple[int, float]]], weights: Sequence[float], fusing: Fusing
) -> dict[int, float]:
    """The keyword and vector lists of chunks as one score per chunk, as ``fusing``
    says (``corpus.fusion``)."""
    if fusing.fusion == "relative_score":
        return relative_scores(lists, weights)
    return rrf([[cid for cid, _ in ranked] for ranked in lists], fusing.rrf_k, weights)


# Above this many vectors a collection is ranked in two passes: the Hamming distance of
# the vectors' signs (32 bytes a row instead of 1 KB) picks a shortlist, the dot product
# ranks it. One float pass over 100,000 × 256 floats reads 100 MB per query: 35-50 ms on
# the shared 2-core machine under load, over issue 27's 25 ms for the whole query.
EXACT_UP_TO = 20_000
# Rows the sign pass keeps for every row asked (and at least SHORTLIST_MIN).
SHORTLIST_FACTOR = 40
SHORTLIST_MIN = 2_000


@dataclass(frozen=True)
class SignBits:
    """Each row's signs about the rows' mean, packed: the first pass's form of a matrix."""

    mean: np.ndarray  # float32, one per dimension
    bits: np.ndarray  # uint64, rows × dimensions/64

    @staticmethod
    def of(matrix: np.ndarray) -> SignBits | None:
        """The signs of ``matrix``, or ``None`` when it is small enough to rank exactly."""
        if matrix.shape[0] <= EXACT_UP_TO:
            return None
        mean = matrix.mean(axis=0, dtype=np.float32)
        return SignBits(mean, _words(np.packbits(matrix > mean, axis=1)))

    @property
    def nbytes(self) -> int:
        return int(self.mean.nbytes + self.bits.nbytes)

    def shortlist(self, query: np.ndarray, size: int) -> np.ndarray:
        """The rows whose signs differ least from the query's."""
        mine = _words(np.packbits(query > self.mean)[np.newaxis, :])
        counts = np.bitwise_count(self.bits ^ mine)
        # A few 64-bit words a row: adding the columns beats a sum over a short axis.
        distance = counts[:, 0].astype(np.intp)
        for column in range(1, counts.shape[1]):
            distance += counts[:, column]
        # The ``size`` nearest by counting, not ``argpartition``: distances are small
        # integers, and a histogram finds the cut in one pass (a third of the time at
        # 100,000 rows). Ties at the cut go by row, so a shortlist is the same each time.
        cut = int(np.searchsorted(np.cumsum(np.bincount(distance)), size))
        below = np.flatnonzero(distance < cut)
        return np.concatenate([below, np.flatnonzero(distance == cut)[: size - len(below)]])


def _words(packed: np.ndarray) -> np.ndarray:
    """Packed bits (rows × bytes) as 64-bit words (rows × words), padded with zeros."""
    pad = -packed.shape[1] % 8
    if pad:
        packed = np.pad(packed, ((0, 0), (0, pad)))
    return np.ascontiguousarray(packed).view(np.uint64)


def vector_search(
    ids: np.ndarray,
    matrix: np.ndarray,
    query: np.ndarray,
    limit: int,
    signs: SignBits | None = None,
) -> list[int]:
    """``ids`` of the ``limit`` rows nearest ``query`` (see ``vector_scores``)."""
    return [chunk_id for chunk_id, _ in vector_scores(ids, matrix, query, limit, signs)]


def vector_scores(
    ids: np.ndarray,
    matrix: np.ndarray,
    query: np.ndarray,
    limit: int,
    signs: SignBits | None = None,
    excluded: np.ndarray | None = None,
) -> list[tuple[int, float]]:
    """``(id, cosine)`` of the ``limit`` rows of ``matrix`` nearest ``query`` (rows and
    query are unit vectors: a dot product), best first; ties by id; none at or below 0,
    none of the rows ``excluded`` (a mask). With ``signs``, only the rows of their
    shortlist are ranked."""
    if matrix.shape[0] == 0 or matrix.shape[1] != query.shape[0]:
        return []
    query = query.astype(matrix.dtype)
    rows = np.arange(matrix.shape[0])
    size = max(limit * SHORTLIST_FACTOR, SHORTLIST_MIN)
    if signs is not None and size < matrix.shape[0]:
        rows = signs.shortlist(query, size)
    # einsum, not ``@``: a matrix-vector product is bound by memory, and OpenBLAS's threads
    # for it cost more than they give on a busy machine (34 ms instead of 1 ms at 5,000
    # rows on the shared 2-core box).
    if signs is not None:
        scores = _gathered_scores(matrix, rows, query)
    else:
        scores = np.einsum("ij,j->i", matrix, query)
    if excluded is not None:
        scores[excluded[rows]] = -np.inf
    take = min(limit, scores.shape[0])
    top = np.argpartition(-scores, take - 1)[:take]
    top = top[np.lexsort((ids[rows[top]], -scores[top]))]
    return [(int(ids[rows[i]]), float(scores[i])) for i in top if scores[i] > 0]


# Shortlisted rows gathered this many at a time: a block stays in the CPU's cache between
# the copy and the product, where the whole shortlist (8 MB) went out to memory and back.
GATHER_BLOCK = 512


def _gathered_scores(matrix: np.ndarray, rows: np.ndarray, query: np.ndarray) -> np.ndarray:
    """``matrix[rows] @ query`` block by block, each row's product the same to the bit."""
    scores = np.empty(len(rows), dtype=matrix.dtype)
    block = np.empty((min(GATHER_BLOCK, len(rows)), matrix.shape[1]), dtype=matrix.dtype)
    for start in range(0, len(rows), GATHER_BLOCK):
        chosen = rows[start : start + GATHER_BLOCK]
        taken = block[: len(chosen)]
        np.take(matrix, chosen, axis=0, out=taken)
        np.einsum("ij,j->i", taken, query, out=scores[start : start + len(chosen)])
    return scores


def documents_of(
    fused: Mapping[int, float],
    owners: Mapping[int, tuple[str, int]],
    fetch: Callable[[list[int]], Mapping[int, ChunkRow]],
    max_documents: int,
    chunks_summed: int = 1,
) -> list[DocumentMatch]:
    """Fused chunks as the best ``max_documents`` documents (``owners``: each chunk's
    collection and document; see ``best_documents``)."""
    ids = np.fromiter(fused, dtype=np.int64, count=len(fused))
    scores = np.fromiter(fused.values(), dtype=np.float64, count=len(fused))
    codes: dict[tuple[str, int], int] = {}
    groups = np.fromiter(
        (-1 if (o := owners.get(c)) is None else codes.setdefault(o, len(codes))
         for c in ids.tolist()),
        dtype=np.int64, count=len(ids),
    )  # fmt: skip
    return best_documents(ids, scores, groups, fetch, max_documents, chunks_summed)


def best_documents(
    ids: np.ndarray,
    scores: np.ndarray,
    groups: np.ndarray,
    fetch: Callable[[list[int]], Mapping[int, ChunkRow]],
    max_documents: int,
    chunks_summed: int = 1,
) -> list[DocumentMatch]:
    """Fused chunks (``ids`` with their float64 ``scores``; ``groups``: a number per
    document, -1 for a chunk of none) as the best ``max_documents`` documents, each
    ranked by the sum of its best ``chunks_summed`` chunks. Only the chunks of those
    documents are read (``fetch``, by id): reading all 200 candidates of each list cost
    more than the ranking. Ties are broken by path and chunk order, never by arrival.

    In numpy: a Python loop over the ~400 fused chunks of a query was a fifth of its CPU
    at 100,000 chunks. The sums add each document's chunks best first from 0.0, as
    Python's ``sum`` did, so the scores are the same to the bit."""
    known = groups >= 0
    ids, scores, groups = ids[known], scores[known], groups[known]
    # Best first, ties by id; then each document's chunks together, still best first
    # (``regroup[j]``: where the j-th chunk so grouped stands in the best-first order).
    best_first = np.lexsort((ids, -scores))
    regroup = np.argsort(groups[best_first], kind="stable")
    order = best_first[regroup]
    ids, scores, groups = ids[order], scores[order], groups[order]
    starts = np.flatnonzero(np.r_[True, groups[1:] != groups[:-1]]) if len(ids) else regroup
    sizes = np.diff(np.r_[starts, len(ids)])
    ranks = np.arange(len(ids)) - np.repeat(starts, sizes)
    member = np.repeat(np.arange(len(starts)), sizes)
    best = np.where(ranks < chunks_summed, scores, 0.0)
    totals = np.bincount(member, weights=best, minlength=len(starts))
    # Documents by score, ties in the order their best chunks came.
    ranked = np.lexsort((regroup[starts], -totals))
    if len(ranked) > max_documents > 0:  # keep those tied with the last, for the path order
        floor = totals[ranked[max_documents - 1]]
        ranked = ranked[totals[ranked] >= floor]
    kept = MAX_CHUNKS_PER_DOCUMENT
    scored = [
        (float(totals[g]), ids[starts[g] : starts[g] + min(kept, sizes[g])].tolist())
        for g in ranked.tolist()
    ]
    rows = fetch([c for _, chunks in scored for c in chunks])
    matches = [
        DocumentMatch(score, tuple(rows[c] for c in chunks if c in rows))
        for score, chunks in scored
        if chunks[0] in rows
    ]
    matches.sort(key=lambda m: (-m.score, m.best.path, m.best.collection, m.best.ordinal))
    return matches[:max_documents]


def centre_on_page(chunks: Sequence[ChunkRow], page: int | None, best: int | None) -> int:
    """The ordinal full mode centres on: the best chunk for the query when it is on
    ``page`` (any page when ``None``), else the page's first chunk."""
    on_page = [c for c in chunks if page is None or c.page == page] or list(chunks)
    if best is None or all(c.ordinal != best for c in on_page):
        return on_page[0].ordinal
    return best


def around(chunks: Sequence[ChunkRow], centre: int, max_chars: int) -> str:
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
