"""What ``searcher index add | status | remove`` do, as functions of the settings: the CLI
only parses arguments and prints what these return."""

from __future__ import annotations

import os
import shutil
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from searcher.config import Settings
from searcher.corpus import store
from searcher.corpus.base import CorpusStore, DocumentRow, SkippedRow
from searcher.corpus.indexer import IndexOptions, IndexReport, Progress, index_paths, is_under
from searcher.corpus.roots import PathMissing, allowed_path, resolved_roots
from searcher.corpus.uploads import UploadResult, collection_folder, index_uploads, upload_name
from searcher.embedding.embedders import OpenAIEmbedder, build_embedder
from searcher.fetch.extractor import build_extractor


def index_file(settings: Settings) -> Path:
    """Where the corpus index lives."""
    return settings.corpus.directory(settings.state) / store.FILE_NAME


def open_store(settings: Settings) -> CorpusStore:
    """The store of the collections: Qdrant when ``corpus.qdrant_url`` (or
    ``state.qdrant_url``) is set, else the embedded SQLite file. Raises
    ``StateUnavailable`` when Qdrant cannot be used (qdrant-client missing, no answer)."""
    location = settings.corpus.qdrant_location(settings.state)
    if location is not None:
        from searcher.corpus.qdrant_store import QdrantStore  # only this store needs it

        return QdrantStore.open(location)
    return store.SqliteStore(index_file(settings), settings.state.sqlite_busy_timeout_ms)


def where(settings: Settings) -> str:
    """Where the collections live, in words."""
    location = settings.corpus.qdrant_location(settings.state)
    return f"Qdrant at {location}" if location is not None else str(index_file(settings))


async def add(
    settings: Settings, named: Sequence[str], collection: str, progress: Progress | None = None
) -> IndexReport:
    """Index ``named`` into ``collection`` (see ``indexer.index_paths``). Raises
    ``PathRefused``, ``ValueError`` (a bad collection name) or ``EmbedderUnavailable``."""
    store.check_collection_name(collection)
    starts, missing = [], []
    roots = resolved_roots(settings.corpus.roots)
    for name in named:
        try:
            starts.append(allowed_path(name, roots))
        except PathMissing as exc:
            missing.append(exc)
    if missing:
        starts += _deleted_starts(settings, collection, missing)
    embedder = build_embedder(settings.embeddings)
    options = IndexOptions(
        collection, settings.corpus.max_file_bytes, settings.corpus.chunk_chars,
        resolved_roots(settings.corpus.roots),
    )  # fmt: skip
    # HTML is extracted under the fetcher's bounds (pre-scan, time limit, memory), in one
    # worker process: `index add` is one user's command, not a server's load.
    extractor = build_extractor(
        settings.fetch.model_copy(update={"extract_workers": 1}),
        max_chars=settings.corpus.max_file_bytes,
        memory_mb=settings.limits.max_extract_memory_mb,
    )
    corpus = open_store(settings)
    try:
        return await index_paths(corpus, starts, options, embedder, progress, extractor)
    finally:
        corpus.close()
        extractor.close()
        if isinstance(embedder, OpenAIEmbedder):
            await embedder.aclose()


def _deleted_starts(
    settings: Settings, collection: str, missing: Sequence[PathMissing]
) -> list[Path]:
    """The paths named that no longer exist but under which ``collection`` indexed (or
    skipped) files: indexing them again removes those (``index_paths``). Raises the
    first ``PathMissing`` of a path it held nothing under: a typo, not a deletion."""
    corpus = open_store(settings)
    try:
        known = [*corpus.stored_files(collection), *(r.path for r in corpus.skipped(collection))]
    finally:
        corpus.close()
    for exc in missing:
        if not any(is_under(path, [exc.path]) for path in known):
            raise exc
    return [exc.path for exc in missing]


@dataclass(frozen=True)
class CollectionStatus:
    name: str
    embedder: str | None
    documents: list[DocumentRow]
    skipped: list[SkippedRow]

    @property
    def chunks(self) -> int:
        return sum(d.chunks for d in self.documents)

    @property
    def bytes(self) -> int:
        return sum(d.size for d in self.documents)


def status(settings: Settings, collection: str | None = None) -> list[CollectionStatus]:
    """Every collection (or the one named) with its documents and skipped files. Raises
    ``ValueError`` for a collection that does not exist."""
    corpus = open_store(settings)
    try:
        names = corpus.collections()
        if collection is not None:
            if collection not in names:
                known = ", ".join(names) or "none"
                raise ValueError(f"no collection {collection!r} (collections: {known})")
            names = [collection]
        return [
            CollectionStatus(
                name,
                corpus.collection_embedder(name)[1],
                corpus.documents(name),
                corpus.skipped(name),
            )
            for name in names
        ]
    finally:
        corpus.close()


def remove(settings: Settings, path: str | None, collection: str | None) -> int:
    """Drop the documents at or under ``path`` (from ``collection``, or from all), or the
    whole ``collection`` when no path is given; how many documents went. Raises
    ``ValueError`` for a collection that does not exist."""
    corpus = open_store(settings)
    try:
        names = corpus.collections()
        if collection is not None and collection not in names:
            raise ValueError(
                f"no collection {collection!r} (collections: {', '.join(names) or 'none'})"
            )
        if path is None:
            assert collection is not None  # the CLI asks for one of the two
            removed = corpus.remove_collection(collection)
            # The server's copies of files uploaded (or crawled) into it were kept only
            # for it: left behind, a dropped collection's documents stayed on disk.
            folder = collection_folder(settings.corpus.directory(settings.state), collection)
            shutil.rmtree(folder, ignore_errors=True)
            return removed
        # A link found in a folder is kept under its own path: named, it means itself, not
        # the file it leads to (which went instead). A path kept under neither (a link
        # named to ``index add`` is kept under its target) is looked for resolved.
        named = Path(path).expanduser()
        as_named, resolved = os.path.abspath(named), str(named.resolve())
        removed = 0
        for name in [collection] if collection else names:
            held = [*corpus.stored_files(name), *(s.path for s in corpus.skipped(name))]
            under = _under(held, as_named) or _under(held, resolved)
            removed += corpus.remove_documents(name, under)
        return removed
    finally:
        corpus.close()


def _under(held: list[str], target: str) -> list[str]:
    """The paths of ``held`` that are ``target`` or inside it."""
    return [p for p in held if p == target or p.startswith(target.rstrip("/") + "/")]


def collection_exists(settings: Settings, collection: str) -> bool:
    """Whether ``collection`` is indexed already or named by a ``local`` backend instance."""
    configured = {
        instance.get("collection")
        for instance in settings.backends.instances.values()
        if instance.get("adapter") == "local"
    }
    if collection in configured:
        return True
    corpus = open_store(settings)
    try:
        return collection in corpus.collections()
    finally:
        corpus.close()


async def add_files(
    settings: Settings, collection: str, files: Sequence[tuple[str, bytes]]
) -> list[UploadResult]:
    """Keep ``files`` ((name, body), e.g. crawled pages as Markdown) as uploads of
    ``collection`` and index them, as ``POST /v1/collections/{name}/documents`` does.
    Raises ``ValueError`` for a bad collection name or file name, ``EmbedderUnavailable``."""
    store.check_collection_name(collection)
    names = [(upload_name(name), body) for name, body in files]
    corpus_settings = settings.corpus
    options = IndexOptions(collection, corpus_settings.max_file_bytes, corpus_settings.chunk_chars)
    folder = collection_folder(corpus_settings.directory(settings.state), collection)
    embedder = build_embedder(settings.embeddings)
    corpus = open_store(settings)
    try:
        return await index_uploads(corpus, folder, names, options, embedder)
    finally:
        corpus.close()
        if isinstance(embedder, OpenAIEmbedder):
            await embedder.aclose()
