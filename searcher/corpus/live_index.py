"""A collection as serving searches it: its newest snapshot (``snapshot``, mapped from
disk) and what changed since, in memory — the chunks added and the snapshot's rows
removed. A write is caught up with by reading only what it changed (``Changes``), so the
first query after a write costs about what the write did, not a reload of the whole
collection (5-11 s at 100,000 chunks before, longer than a backend's timeout).

Keyword scores over the two parts use one IDF (the chunks of both) and the snapshot's
mean chunk length, so a chunk scores as it would in one index; only the chunks removed
since the snapshot still count in the IDF until the next snapshot.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from searcher.corpus import keyword_index, retrieval
from searcher.corpus.keyword_index import KeywordIndex
from searcher.corpus.snapshot import Snapshot


class NeedsSnapshot(Exception):
    """Changes that cannot be laid over the snapshot (vectors of another size: the
    collection was re-embedded); a new snapshot must be read."""


@dataclass(frozen=True)
class Changes:
    """What the writes to a collection did after some generation, up to ``generation``:
    the chunk ids dropped, and the chunks added (ids ascending) with their documents,
    vectors (``None`` when they have none) and stored terms."""

    generation: int
    removed: np.ndarray
    ids: np.ndarray
    documents: np.ndarray
    vectors: np.ndarray | None
    blobs: tuple[bytes, ...]


@dataclass(frozen=True)
class LiveIndex:
    """``base`` with the changes since laid over it, at ``generation``: the base rows
    ``excluded`` (removed since; ``None``: none) and the chunks added (``ids``
    ascending, with their ``documents``, ``matrix`` rows and ``keywords``)."""

    base: Snapshot
    generation: int
    excluded: np.ndarray | None
    ids: np.ndarray
    documents: np.ndarray
    matrix: np.ndarray
    blobs: tuple[bytes, ...]
    keywords: KeywordIndex

    @property
    def removed(self) -> int:
        return 0 if self.excluded is None else int(self.excluded.sum())

    @property
    def changed(self) -> int:
        """Chunks added and removed since the snapshot: what a new snapshot would fold."""
        return self.removed + len(self.ids)

    @property
    def chunks(self) -> int:
        return self.base.keywords.size - self.removed + len(self.ids)

    @property
    def held_bytes(self) -> int:
        """What this index holds in memory, beyond the snapshot's mapped files."""
        excluded = 0 if self.excluded is None else self.excluded.nbytes
        own = self.ids.nbytes + self.documents.nbytes + self.matrix.nbytes
        return int(own + excluded + self.keywords.nbytes + sum(map(len, self.blobs)))


def _no_vectors() -> np.ndarray:
    return np.zeros((0, 0), dtype=np.float32)


def over(base: Snapshot) -> LiveIndex:
    """``base`` with nothing changed since."""
    empty = np.zeros(0, dtype=np.int64)
    keywords = keyword_index.build([], base.keywords.average)
    return LiveIndex(base, base.generation, None, empty, empty, _no_vectors(), (), keywords)


def applied(live: LiveIndex, changes: Changes) -> LiveIndex:
    """``live`` with ``changes`` laid over it: removals first (an id the writer reused
    is dropped, then added again), then additions. Raises ``NeedsSnapshot``."""
    base = live.base
    excluded = live.excluded
    if len(changes.removed) and len(base.ids):
        at = np.searchsorted(base.ids, changes.removed)
        inside = at < len(base.ids)
        at = at[inside]
        rows = at[base.ids[at] == changes.removed[inside]]
        if len(rows):
            excluded = np.zeros(len(base.ids), bool) if excluded is None else excluded.copy()
            excluded[rows] = True
    kept = ~np.isin(live.ids, np.concatenate([changes.removed, changes.ids]))
    ids = np.concatenate([live.ids[kept], changes.ids])
    documents = np.concatenate([live.documents[kept], changes.documents])
    blobs = tuple(b for b, k in zip(live.blobs, kept.tolist(), strict=True) if k) + changes.blobs
    matrix = _stacked(base, live.matrix[kept] if live.matrix.size else live.matrix, changes)
    order = np.argsort(ids, kind="stable")
    if len(matrix):
        matrix = matrix[order]
    blobs = tuple(blobs[i] for i in order.tolist())
    # An empty snapshot has no mean length: the added chunks' own then.
    keywords = keyword_index.build(blobs, base.keywords.average or None)
    return LiveIndex(
        base, changes.generation, excluded, ids[order], documents[order], matrix, blobs, keywords
    )


def _stacked(base: Snapshot, kept: np.ndarray, changes: Changes) -> np.ndarray:
    """The added chunks' vectors, kept ones then new; ``NeedsSnapshot`` when they do not
    fit the snapshot's (another size, or some chunks with vectors and some without)."""
    new = changes.vectors
    dims = {m.shape[1] for m in (base.matrix, kept) if len(m)}
    if new is not None and len(new):
        dims.add(new.shape[1])
    if len(dims) > 1 or (new is None and len(changes.ids) and dims):
        raise NeedsSnapshot()
    if new is None or not len(new):
        return kept if len(kept) else _no_vectors()
    return np.concatenate([kept, new.astype(np.float32)]) if len(kept) else new.astype(np.float32)


def keyword_list(live: LiveIndex, terms: np.ndarray, limit: int) -> list[tuple[int, float]]:
    """``(chunk id, BM25)`` of the ``limit`` best chunks for the query terms, best first
    (ties by id)."""
    base = live.base
    if not len(terms):
        return []
    containing = keyword_index.frequencies(base.keywords, terms)
    if len(live.ids):
        containing = containing + keyword_index.frequencies(live.keywords, terms)
    rows, scores = keyword_index.search(
        base.keywords, terms, limit, live.chunks, containing, live.excluded
    )
    found = list(zip(base.ids[rows].tolist(), scores.tolist(), strict=True))
    if len(live.ids):
        rows, scores = keyword_index.search(live.keywords, terms, limit, live.chunks, containing)
        found += zip(live.ids[rows].tolist(), scores.tolist(), strict=True)
        found.sort(key=lambda pair: (-pair[1], pair[0]))
    return found[:limit]


def vector_list(live: LiveIndex, vector: np.ndarray, limit: int) -> list[tuple[int, float]]:
    """``(chunk id, cosine)`` of the ``limit`` chunks nearest ``vector``, best first."""
    base = live.base
    found = retrieval.vector_scores(base.ids, base.matrix, vector, limit, base.signs, live.excluded)
    if len(live.matrix):
        found += retrieval.vector_scores(live.ids, live.matrix, vector, limit)
        found.sort(key=lambda pair: (-pair[1], pair[0]))
    return found[:limit]


def documents_of(live: LiveIndex, ids: np.ndarray) -> np.ndarray:
    """The document of each chunk of ``ids`` (chunks this index answered)."""
    out = np.empty(len(ids), dtype=np.int64)
    added = np.zeros(len(ids), dtype=bool)
    if len(live.ids):
        at = np.minimum(np.searchsorted(live.ids, ids), len(live.ids) - 1)
        added = live.ids[at] == ids
        out[added] = live.documents[at[added]]
    rest = ~added
    if rest.any():
        base = live.base
        out[rest] = base.documents[np.searchsorted(base.ids, ids[rest])]
    return out
