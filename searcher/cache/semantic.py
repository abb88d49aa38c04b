"""The semantic result cache: a new query close in meaning to a cached one gets its answer.

Close means all of: the cosine of their embeddings reaches the threshold; they share the
same *anchors* — numbers, dates and proper nouns — because "population of France in 2019"
and "... in 2020" embed almost alike and must not answer each other; they negate alike
("foods to eat" is not "foods not to eat"); and the words that direct a relation point
the same way ("London to Paris" is not "Paris to London"): a static embedding is a bag of
words, blind to both. Vectors live in
the state store (shared by workers and replicas); each process mirrors them in memory
and scans them with one matrix product, catching up on rows added since its last look.
"""

from __future__ import annotations

import asyncio
import logging
import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import orjson

from searcher.embedding.embedders import Embedder
from searcher.errors import EmbedderUnavailable
from searcher.state.base import StateStore, VectorRow

log = logging.getLogger(__name__)

SPACE = "results:semantic"  # under the result cache's namespace: cleared with it
_SYNC_BATCH = 1000  # rows mirrored per lookup at most: a fresh worker catches up gradually
_CANDIDATES = 5

_MONTHS = {
    "january", "february", "march", "april", "may", "june", "july", "august", "september",
    "october", "november", "december", "jan", "feb", "mar", "apr", "jun", "jul", "aug",
    "sep", "sept", "oct", "nov", "dec", "monday", "tuesday", "wednesday", "thursday",
    "friday", "saturday", "sunday", "today", "yesterday", "tomorrow",
}  # fmt: skip
_WORD = re.compile(r"[^\W_]+(?:[.'’&+\-][^\W_]+)*")
_SENTENCE_END = re.compile(r"[.!?]\s*$")


def anchors(text: str) -> frozenset[str]:
    """The words two queries must share to answer each other: numbers (and words with
    digits), dates, and proper nouns (capitalised words not opening a sentence, acronyms)."""
    found = set()
    for match in _WORD.finditer(text):
        word = match.group()
        lower = word.casefold()
        opens = match.start() == 0 or _SENTENCE_END.search(text[: match.start()]) is not None
        if any(c.isdigit() for c in word) or lower in _MONTHS:
            found.add(lower)
        elif word.isupper() and len(word) > 1:
            found.add(lower)  # an acronym, wherever it stands
        elif word[0].isupper() and not opens and word != "I":
            found.add(lower)
    return frozenset(found)


def words(text: str) -> frozenset[str]:
    return frozenset(m.group().casefold() for m in _WORD.finditer(text))


def same_anchors(a: str, b: str) -> bool:
    """Each query's anchors appear in the other, whatever their case ("France" matches
    "france": agents often write in lower case, which hides proper nouns)."""
    return anchors(a) <= words(b) and anchors(b) <= words(a)


# Words that turn a question around; "n't" counts as "not".
_NEGATIONS = frozenset({"not", "no", "never", "without", "nor", "none", "cannot", "neither"})


def _negations(text: str) -> frozenset[str]:
    found = set()
    for match in _WORD.finditer(text):
        word = match.group().casefold().replace("’", "'")
        if word in _NEGATIONS or word.endswith("n't"):
            found.add("not" if word.endswith("n't") or word == "cannot" else word)
    return frozenset(found)


# Words whose next word says which way a relation goes: "from London to Paris", "celsius
# to fahrenheit", "better than", "before". Other moves keep the question ("games on
# Stadia" asks what "Stadia games" does).
_DIRECTING = frozenset(
    {"to", "from", "into", "than", "vs", "versus", "before", "after", "over", "under", "against"}
)
_ARTICLES = frozenset({"the", "a", "an"})


def _directions(text: str) -> dict[str, list[str]]:
    """For each directing word of ``text``: the word after each of its occurrences."""
    found: dict[str, list[str]] = {}
    tokens = [m.group().casefold() for m in _WORD.finditer(text)]
    for at, word in enumerate(tokens):
        if word in _DIRECTING:
            rest = [w for w in tokens[at + 1 : at + 3] if w not in _ARTICLES]
            found.setdefault(word, []).append(rest[0] if rest else "")
    return found


def same_question(a: str, b: str) -> bool:
    """Whether two close queries may answer each other: the same anchors, the same
    negations, and the same word after each directing word both use."""
    if not same_anchors(a, b) or _negations(a) != _negations(b):
        return False
    left, right = _directions(a), _directions(b)
    return all(left[word] == right[word] for word in left.keys() & right.keys())


def _scope_id(scope: str) -> int:
    """Scopes are hex digests; their first 15 hex digits fit an int64."""
    try:
        return int(scope[:15], 16)
    except ValueError:
        return hash(scope) & ((1 << 60) - 1)


async def query_vector(embedder: Embedder, query: str) -> np.ndarray | None:
    """The query's embedding; None when the embedder fails or finds no token in it."""
    try:
        vector = (await embedder.embed([query]))[0]
    except EmbedderUnavailable as exc:
        log.warning("semantic cache: no embedding (%s); exact matches only", exc)
        return None
    return vector if np.any(vector) else None


@dataclass(frozen=True)
class Match:
    item_id: str
    query: str
    cosine: float


class VectorIndex:
    """Unit vectors in one growing matrix, with each row's scope, expiry, id and query."""

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self._matrix: np.ndarray | None = None
        self._scopes = np.zeros(0, dtype=np.int64)
        self._expires = np.zeros(0, dtype=np.float64)
        self._ids: list[str] = []
        self._queries: list[str] = []
        self.size = 0

    @property
    def dimension(self) -> int | None:
        """The size of its vectors; None while it has none."""
        return None if self._matrix is None else int(self._matrix.shape[1])

    def add(self, vectors: np.ndarray, scopes: Sequence[str], expires: Sequence[float],
            ids: Sequence[str], queries: Sequence[str]) -> None:  # fmt: skip
        n = len(ids)
        if n == 0:
            return
        if self._matrix is None:
            self._matrix = np.zeros((max(1024, n), vectors.shape[1]), dtype=np.float32)
            self._scopes = np.zeros(len(self._matrix), dtype=np.int64)
            self._expires = np.zeros(len(self._matrix), dtype=np.float64)
        elif vectors.shape[1] != self._matrix.shape[1]:
            return  # another embedder wrote these rows: they cannot be compared
        if self.size + n > self.max_entries:
            self._evict(self.size + n - self.max_entries)
        if self.size + n > len(self._matrix):
            grow = max(self.size + n, 2 * len(self._matrix))
            self._matrix = np.resize(self._matrix, (grow, self._matrix.shape[1]))
            self._scopes = np.resize(self._scopes, grow)
            self._expires = np.resize(self._expires, grow)
        end = self.size + n
        self._matrix[self.size : end] = vectors
        self._scopes[self.size : end] = [_scope_id(s) for s in scopes]
        self._expires[self.size : end] = expires
        self._ids.extend(ids)
        self._queries.extend(queries)
        self.size = end

    def _evict(self, at_least: int) -> None:
        """Drop expired rows, then the oldest, to make room for ``at_least`` more."""
        assert self._matrix is not None
        now = time.time()
        keep = np.flatnonzero(self._expires[: self.size] > now)
        if self.size - len(keep) < at_least:
            keep = keep[min(len(keep), at_least) :]
        self._matrix[: len(keep)] = self._matrix[keep]
        self._scopes[: len(keep)] = self._scopes[keep]
        self._expires[: len(keep)] = self._expires[keep]
        self._ids = [self._ids[i] for i in keep]
        self._queries = [self._queries[i] for i in keep]
        self.size = len(keep)

    def nearest(self, vector: np.ndarray, scope: str, threshold: float, now: float) -> list[Match]:
        """Rows of ``scope``, unexpired, with cosine >= threshold, best first (a few)."""
        if self._matrix is None or self.size == 0 or vector.shape != (self._matrix.shape[1],):
            return []  # nothing, or rows of another embedder: nothing comparable
        # einsum, not BLAS: one thread, so N workers on a busy machine do not fight over
        # cores (multithreaded gemv measured 10x slower than this under load).
        scores = np.einsum("ij,j->i", self._matrix[: self.size], vector)
        ok = (scores >= threshold) & (self._scopes[: self.size] == _scope_id(scope))
        ok &= self._expires[: self.size] > now
        hits = np.flatnonzero(ok)
        if len(hits) > _CANDIDATES:
            hits = hits[np.argsort(-scores[hits])[:_CANDIDATES]]
        ordered = sorted(hits, key=lambda i: -scores[i])
        return [Match(self._ids[i], self._queries[i], float(scores[i])) for i in ordered]


class SemanticCache:
    """Finds the cached answer of a query close to a new one (``SemanticMatcher``)."""

    def __init__(
        self,
        store: StateStore,
        embedder: Embedder,
        threshold: float,
        max_entries: int = 100_000,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.store = store
        self.embedder = embedder
        self.threshold = threshold
        self.index = VectorIndex(max_entries)
        self._cursor: str | None = None
        self._clock = clock
        self._syncing = asyncio.Lock()
        # The size of this embedder's vectors, once it has made one. Rows of another size
        # (another model wrote them, or they are corrupt) can never match: they are skipped.
        self._dimension: int | None = None

    async def sync(self, batches: int | None = None) -> int:
        """Mirror the rows other processes (and this one) added since the last look, at
        most ``batches`` batches of rows (all when None)."""
        added, done = 0, 0
        async with self._syncing:
            while batches is None or done < batches:
                held, wanted = self.index.dimension, self._dimension
                if held is not None and wanted is not None and held != wanted:
                    # The index was filled before this embedder's first vector, with rows
                    # of another size: read the rows again, keeping those of its size.
                    self.index = VectorIndex(self.index.max_entries)
                    self._cursor = None
                rows = await self.store.vectors_after(SPACE, self._cursor, _SYNC_BATCH)
                done += 1
                if rows:
                    self._cursor = rows[-1].cursor
                    self._add_rows(rows)
                    added += len(rows)
                if len(rows) < _SYNC_BATCH:
                    break
        return added

    def _add_rows(self, rows: list[VectorRow]) -> None:
        kept, metas = [], []
        # Before this embedder's first vector, the first row's size stands in for its own.
        size = self._dimension or self.index.dimension
        for row in rows:
            if row.vector.ndim != 1 or not row.vector.size:
                continue  # corrupt
            if size is not None and row.vector.shape[0] != size:
                continue  # another embedder's: not comparable
            try:
                meta = orjson.loads(row.meta)
                metas.append((str(meta["s"]), str(meta["q"])))
            except (orjson.JSONDecodeError, KeyError, TypeError):
                continue  # a corrupt row is no candidate
            size = row.vector.shape[0]
            kept.append(row)
        if not kept:
            return
        self.index.add(
            np.stack([r.vector for r in kept]),
            [m[0] for m in metas],
            [r.expires_at for r in kept],
            [r.item_id for r in kept],
            [m[1] for m in metas],
        )

    async def _embed(self, query: str) -> np.ndarray | None:
        vector = await query_vector(self.embedder, query)
        if vector is not None and vector.ndim == 1:
            self._dimension = vector.shape[0]
        return vector

    async def find(self, query: str, scope: str) -> str | None:
        """The key of the cached answer to the closest query with the same anchors."""
        vector = await self._embed(query)  # first: it tells which rows are comparable
        if vector is None:
            return None
        if not self._syncing.locked():  # else a full sync is running: use what is there
            await self.sync(batches=1)
        for match in self.index.nearest(vector, scope, self.threshold, self._clock()):
            if same_question(query, match.query):
                return match.item_id
        return None

    async def add(self, query: str, scope: str, key: str, ttl_s: float) -> None:
        vector = await self._embed(query)
        if vector is not None:
            meta = orjson.dumps({"q": query, "s": scope})
            await self.store.add_vector(SPACE, key, vector, meta, ttl_s)
