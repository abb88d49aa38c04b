"""Own documents as a backend (``adapter: local``): one or more collections indexed by
``searcher index add``, searched hybrid (BM25 + vectors, RRF) in the embedded index.

An answer is one hit per document (its best chunk as the snippet), so fusion with web
backends, dedup and the pack need no special case. The URL is the file's ``file://`` URI
(``#page=N`` for a PDF page); ``engines`` names the collection that answered. Full mode
reads a local hit's text from the index through ``read`` (never from the disk, never
through the HTTP fetcher).
"""

from __future__ import annotations

import asyncio
import sqlite3
import time
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING
from urllib.parse import unquote, urlsplit

import numpy as np
from pydantic import Field, model_validator

from searcher.backends.base import (
    BackendAnswer,
    BackendQuery,
    BackendSpec,
    BuildContext,
    Capabilities,
    Hit,
)
from searcher.config_sections import InstanceSettings
from searcher.corpus.retrieval import DocumentMatch
from searcher.corpus.serving import CollectionMissing, CorpusReader
from searcher.corpus.store import check_collection_name
from searcher.errors import (
    BackendNotAvailable,
    BackendTimeout,
    EmbedderUnavailable,
    StateUnavailable,
)
from searcher.recording.local_tape import LocalAnswer, NotInRecording, taped_read, taped_search
from searcher.recording.tape import NOT_RECORDED

if TYPE_CHECKING:  # the embedder's module reads the config, which reads this registry
    from searcher.embedding.embedders import Embedder

NAME = "local"
CAPABILITIES = Capabilities(result_count=True)
SNIPPET_CHARS = 500


class LocalSettings(InstanceSettings):
    """A collection (or several) of own documents (``adapter: local``)."""

    collection: str | None = Field(
        default=None, description="The collection searched (as named to `searcher index add`)"
    )
    collections: list[str] = Field(
        default_factory=list, description="Several collections searched as one backend"
    )
    timeout_s: float = Field(default=5.0, gt=0, description="The local search's time limit")

    @model_validator(mode="after")
    def _some_collection(self) -> LocalSettings:
        if not self.collection and not self.collections:
            raise ValueError("needs a collection (collection: NAME, or collections: [...])")
        for name in self.names():  # as `searcher index add --collection` takes it
            check_collection_name(name)
        return self

    def names(self) -> list[str]:
        """Every collection searched, in the order given, once each."""
        return list(
            dict.fromkeys([*([self.collection] if self.collection else []), *self.collections])
        )


def file_url(path: str, page: int | None) -> str:
    """The ``file://`` URI of ``path``, with ``#page=N`` for a PDF page."""
    uri = Path(path).as_uri()
    return f"{uri}#page={page}" if page is not None else uri


def path_of(url: str) -> tuple[str, int | None] | None:
    """The path and PDF page a ``file_url`` names; ``None`` for any other URL."""
    parts = urlsplit(url)
    if parts.scheme != "file" or parts.netloc not in ("", "localhost"):
        return None
    page = None
    if parts.fragment.startswith("page=") and parts.fragment[5:].isdigit():
        page = int(parts.fragment[5:])
    return unquote(parts.path), page


def hit_of(match: DocumentMatch, instance: str) -> Hit:
    """A document found, as a hit: its best chunk is the snippet."""
    best = match.best
    snippet = " ".join(best.text.split())
    if len(snippet) > SNIPPET_CHARS:
        snippet = snippet[: SNIPPET_CHARS - 1].rsplit(" ", 1)[0] + "…"
    page = best.page if best.kind == "pdf" else None
    return Hit(
        file_url(best.path, page), best.title, snippet, instance,
        engines=(best.collection,), score=match.score,
    )  # fmt: skip


class LocalBackend:
    """Searches the collections of one instance in the shared ``CorpusReader``."""

    capabilities = CAPABILITIES

    def __init__(
        self,
        name: str,
        collections: list[str],
        corpus: CorpusReader,
        embedder: Callable[[], Embedder | None],
    ) -> None:
        self.name = name
        self.collections = collections
        self._corpus = corpus
        self._embedder = embedder

    async def search(self, query: BackendQuery, timeout_s: float) -> BackendAnswer:
        started = time.perf_counter()

        async def timed() -> LocalAnswer:
            async with asyncio.timeout(timeout_s):
                return await self._search(query)

        try:
            # The tape of a recorded or replayed request is at this edge: a replay is
            # answered what the collection answered then, not what it holds now.
            hits, warnings = await taped_search(self.name, query.text, query.max_results, timed)
        except NotInRecording:
            raise BackendNotAvailable(self.name, NOT_RECORDED) from None
        except TimeoutError as exc:
            raise BackendTimeout(self.name, f"timed out after {timeout_s:.1f}s") from exc
        except CollectionMissing as exc:
            raise BackendNotAvailable(
                self.name,
                f"collection {exc} is not indexed (searcher index add PATH --collection {exc})",
            ) from None
        except (sqlite3.Error, StateUnavailable) as exc:
            raise BackendNotAvailable(self.name, f"the corpus index cannot be read: {exc}") from exc
        elapsed_ms = int((time.perf_counter() - started) * 1000)
        return BackendAnswer(self.name, hits, elapsed_ms=elapsed_ms, warnings=warnings)

    async def _search(self, query: BackendQuery) -> tuple[list[Hit], list[str]]:
        # The query embedded first, on the loop (a static model computes in place), so
        # that one hop to a worker thread reads the collections' embedders and searches:
        # a second hop cost more than either on a busy machine (bench/corpus.py http).
        embedder = self._embedder()
        vector, failure = await self._query_vector(embedder, query.text)
        matches, warnings = await asyncio.to_thread(
            self._matches, query.text, query.max_results, embedder, vector, failure
        )
        return [hit_of(m, self.name) for m in matches], warnings

    async def _query_vector(
        self, embedder: Embedder | None, text: str
    ) -> tuple[np.ndarray | None, str | None]:
        """The query's vector by the embedder loaded (``None`` without one), or why it
        failed."""
        if embedder is None:
            return None, None
        try:
            return (await embedder.embed([text]))[0], None
        except EmbedderUnavailable as exc:
            return None, f"{self.name}: keywords only, the embedder failed: {exc}"

    def _matches(
        self,
        text: str,
        max_results: int,
        embedder: Embedder | None,
        vector: np.ndarray | None,
        failure: str | None,
    ) -> tuple[list[DocumentMatch], list[str]]:
        """The search, in a worker thread: each collection indexed with the embedder
        loaded is searched with ``vector``; one indexed with another (or while it loads)
        by BM25 alone, and the answer says so."""
        embedders = self._corpus.embedders(self.collections)
        wanted = [c for c, e in embedders.items() if e is not None]
        usable = [c for c in wanted if embedder is not None and embedders[c] == embedder.name]
        warnings = [
            f"{self.name}: collection {c} searched by keywords only (its vectors come from "
            f"{embedders[c]}, the embedder loaded is {embedder.name if embedder else 'none'})"
            for c in wanted if c not in usable
        ]  # fmt: skip
        vectors: dict[str, np.ndarray] = {}
        if usable and failure is not None:
            warnings.append(failure)
        elif usable and vector is not None:
            vectors = dict.fromkeys(usable, vector)
        matches = self._corpus.search(self.collections, text, vectors, max_results)
        return matches, warnings

    def generations(self) -> dict[str, int]:
        """Each collection's generation (``CorpusReader.generations``)."""
        return self._corpus.generations(self.collections)

    async def read(self, url: str, query: str, max_chars: int) -> str | None:
        """Full mode's content of a hit this backend gave: its best chunk for ``query``
        and the neighbours, from the index; ``None`` when the URL is not one of its
        documents (any more)."""
        where = path_of(url)
        if where is None:
            return None
        path, page = where

        async def from_index() -> str | None:
            return await asyncio.to_thread(
                self._corpus.content, self.collections, path, page, query, max_chars
            )

        try:
            return await taped_read(self.name, url, query, max_chars, from_index)
        except NotInRecording:
            return None


async def collection_generations(
    backends: Mapping[str, object], named: str | list[str] | None
) -> dict[str, int] | None:
    """The generation of every collection a request may search: of the ``local``
    instances among the backends it ``named``, or of every one when it named none or
    ``auto`` (routing may pick any). Part of its result-cache key, so that an answer cached before a
    re-index is never served after it. ``None`` when the store cannot say (the cache is
    then bypassed)."""
    # "auto" names no instance: routing may pick any, as when nothing was named.
    wanted = None if named in (None, "auto") else [named] if isinstance(named, str) else named
    chosen = [b for n, b in backends.items() if isinstance(b, LocalBackend)
              and (wanted is None or n in wanted)]  # fmt: skip
    found: dict[str, int] = {}
    try:
        for backend in chosen:
            found.update(await asyncio.to_thread(backend.generations))
    except (sqlite3.Error, StateUnavailable):
        return None
    return found


def _build(name: str, settings: LocalSettings, context: BuildContext) -> LocalBackend:
    if context.corpus is None:
        raise BackendNotAvailable(name, "no corpus index in this process")
    return LocalBackend(name, settings.names(), context.corpus, context.embedder)


SPEC = BackendSpec(NAME, CAPABILITIES, LocalSettings, _build)
