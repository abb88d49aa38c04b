"""BM25 as sparse vectors: a chunk's terms (searcher/text.py's words, stop words dropped,
stemmed) as hashed term ids with their counts, and a query's term ids.

Both stores rank keywords from these: the embedded store keeps them per chunk and scores
BM25 in memory (``keyword_index``); the Qdrant store sends them as sparse vectors whose
IDF Qdrant applies itself (``Modifier.IDF``), as seed 002's hybrid collection does.
"""

from __future__ import annotations

import functools
import zlib
from collections import Counter

import numpy as np

from searcher.text import STOP_WORDS, stem, words

# BM25's term-frequency saturation and length normalisation (the usual constants).
K1 = 1.2
B = 0.75
# Where no collection-wide average is known (Qdrant's sparse vectors are written one
# document at a time), a chunk's length is normalised against this many terms: about a
# default 1,200-character chunk's.
TYPICAL_TERMS = 150
# Query terms kept at most: a long pasted text must not score every posting it names.
MAX_QUERY_TERMS = 64


def _kept(word: str) -> bool:
    return word not in STOP_WORDS and (len(word) > 1 or word.isdigit())


def term_id(term: str) -> int:
    """A term's id: a stable 32-bit hash (Qdrant's sparse indices are uint32)."""
    return zlib.crc32(term.encode())


def terms(text: str) -> list[str]:
    """The BM25 terms of ``text``: its words, stop words and single letters dropped,
    stemmed, in order."""
    return [stem(w) for w in words(text) if _kept(w)]


# A chunk's terms as stored: (term id, count) pairs, ascending by id, 8 bytes each.
PAIR = np.dtype([("id", "<u4"), ("count", "<f4")])


@functools.lru_cache(maxsize=1 << 17)
def _word_term(word: str) -> int | None:
    """The term id of a lower-case word, ``None`` for one not counted: each distinct word
    is stemmed and hashed once (indexing is mostly the same words again)."""
    return term_id(stem(word)) if _kept(word) else None


def term_counts(text: str) -> np.ndarray:
    """The term ids of ``text`` with their counts (an array of ``PAIR``)."""
    # Counted with the words not kept (``None``) and that key dropped after: a filter per
    # word cost a third of the indexer's time here.
    counted = Counter(map(_word_term, words(text)))
    counted.pop(None, None)
    ids = np.fromiter(counted.keys(), dtype=np.uint32, count=len(counted))
    order = np.argsort(ids)
    pairs = np.empty(len(counted), dtype=PAIR)
    pairs["id"] = ids[order]
    pairs["count"] = np.fromiter(counted.values(), dtype=np.float32, count=len(counted))[order]
    return pairs


def saturated(counts: np.ndarray, length: np.ndarray | float, average: float) -> np.ndarray:
    """BM25's term weight before IDF: ``tf·(k1+1) / (tf + k1·(1 − b + b·len/avg))``."""
    norm = K1 * (1 - B + B * np.asarray(length, dtype=np.float32) / max(average, 1.0))
    return (counts * (K1 + 1) / (counts + norm)).astype(np.float32)


def query_term_ids(text: str) -> np.ndarray:
    """The distinct term ids of a query, first-seen order, at most ``MAX_QUERY_TERMS``;
    a query of stop words only keeps them (they are all it asks)."""
    found = terms(text) or [stem(w) for w in words(text)]
    unique = list(dict.fromkeys(term_id(t) for t in found))[:MAX_QUERY_TERMS]
    return np.asarray(unique, dtype=np.uint32)
