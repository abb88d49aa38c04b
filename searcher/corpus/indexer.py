"""``searcher index add``: walk the paths named, and bring a collection up to date with
them. Incremental: a file whose size and mtime are unchanged is not read; one whose
content hash is unchanged is not re-indexed; a changed file is re-indexed; an indexed file
that is gone from under a path named is removed. Every file that gives no text is recorded
with its reason. Each file is one transaction (``CorpusStore.replace_document``).
"""

from __future__ import annotations

import asyncio
import errno
import hashlib
import os
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Literal, TypeVar

from searcher.config import FetchSettings
from searcher.corpus.base import CorpusStore, NewDocument, StoredFile
from searcher.corpus.chunking import Chunk, chunk_document
from searcher.corpus.readers import (
    Document,
    SkipReason,
    Unreadable,
    html_document,
    kind_of,
    read_document,
)
from searcher.corpus.roots import within
from searcher.embedding.embedders import Embedder
from searcher.errors import ExtractionError
from searcher.fetch.extractor import Extractor, build_extractor

T = TypeVar("T")
Outcome = Literal["indexed", "unchanged", "skipped", "removed"]
Progress = Callable[[int, int, str, Outcome], None]  # (done, total, path, outcome)


@dataclass(frozen=True)
class IndexOptions:
    """``off_loop``: each file's reading, chunking and write in a worker thread, so that
    a server indexing uploads goes on answering meanwhile. The CLI has nothing else to
    answer and does them in place: on a busy machine a thread hop per step cost more
    than the step (500 files: 49 s instead of 23 s at a load of 30)."""

    collection: str
    max_file_bytes: int
    chunk_chars: int
    roots: tuple[Path, ...] = ()
    off_loop: bool = False


async def _in_turn(options: IndexOptions, work: Callable[..., T], *args: Any) -> T:
    """``work(*args)`` in a worker thread when ``options.off_loop``, else in place."""
    if options.off_loop:
        return await asyncio.to_thread(work, *args)
    return work(*args)


@dataclass
class IndexReport:
    """What one run did, file by file counted."""

    indexed: int = 0
    unchanged: int = 0
    removed: int = 0
    chunks: int = 0
    skipped: list[tuple[str, SkipReason, str]] = field(default_factory=list)

    def count(self, outcome: Outcome) -> None:
        if outcome == "indexed":
            self.indexed += 1
        elif outcome == "unchanged":
            self.unchanged += 1
        elif outcome == "removed":
            self.removed += 1


@dataclass(frozen=True)
class Candidate:
    """A file found under a path named, or one that cannot be taken, with why."""

    path: Path
    skip: tuple[SkipReason, str] | None = None


# Reading a named pipe waits for a writer: never opened.
NOT_A_FILE: tuple[SkipReason, str] = ("unreadable", "not a regular file (a pipe, socket or device)")


def walk(start: Path, roots: Sequence[Path]) -> Iterator[Candidate]:
    """The files under ``start`` (itself if a file), in sorted order. Hidden files and
    folders (a leading dot: ``.git``, ``.venv``) are left out unless named. A symlink is
    followed when it stays inside ``roots``; one that leads back into a folder being
    walked is a ``symlink_loop``; what is neither file nor folder (a pipe, a socket, a
    device) is ``unreadable``. Nothing when ``start`` is gone (deleted since it was
    indexed: its files are removed)."""
    if not start.is_dir():
        if start.is_file():
            yield Candidate(start)
        elif start.exists():
            yield Candidate(start, NOT_A_FILE)
        return
    yield from _walk_dir(start, roots, (start.resolve(),))


def _walk_dir(
    folder: Path, roots: Sequence[Path], ancestors: tuple[Path, ...]
) -> Iterator[Candidate]:
    try:
        entries = sorted(os.scandir(folder), key=lambda e: e.name)
    except OSError as exc:
        yield Candidate(folder, ("unreadable", f"cannot list the folder: {exc.strerror}"))
        return
    for entry in entries:
        if entry.name.startswith("."):
            continue
        path = Path(entry.path)
        real: Path | None = None
        if entry.is_symlink():
            try:
                real = path.resolve(strict=True)
            except (OSError, RuntimeError) as exc:
                looped = isinstance(exc, RuntimeError) or getattr(exc, "errno", None) == errno.ELOOP
                yield Candidate(path, ("symlink_loop", "the link leads to itself") if looped
                                else ("unreadable", "a broken link"))  # fmt: skip
                continue
            if not within(real, roots):
                yield Candidate(path, ("outside_roots", f"the link leads to {real}"))
                continue
        try:
            is_dir = entry.is_dir()
        except OSError as exc:
            yield Candidate(path, ("unreadable", exc.strerror or str(exc)))
            continue
        if is_dir:
            real = real or path.resolve()
            if any(real == a or a.is_relative_to(real) for a in ancestors):
                yield Candidate(path, ("symlink_loop", f"the link leads back to {real}"))
                continue
            yield from _walk_dir(path, roots, (*ancestors, real))
        elif entry.is_file():
            yield Candidate(path)
        else:
            yield Candidate(path, NOT_A_FILE)


def _storable(candidate: Candidate) -> Candidate:
    """``candidate``, or a skip when its name cannot be kept as text: a name that is not
    valid UTF-8 (bytes Python holds as lone surrogates) stopped the whole run. The skip
    is listed under the name with its bad bytes written out (``bad\\xff.md``)."""
    name = str(candidate.path)
    try:
        name.encode("utf-8")
    except UnicodeEncodeError:
        shown = os.fsencode(candidate.path).decode("utf-8", "backslashreplace")
        return Candidate(Path(shown), ("unreadable", "its name is not valid UTF-8"))
    return candidate


def is_under(path: str, starts: Sequence[Path]) -> bool:
    """Whether ``path`` is one of ``starts`` or inside one."""
    return any(path == str(s) or path.startswith(str(s).rstrip("/") + "/") for s in starts)


def embedding_text(title: str, chunk: Chunk) -> str:
    """What a chunk's vector is made of: its document's title and heading give a chunk
    of a section its topic."""
    head = " — ".join(part for part in (title, chunk.heading) if part)
    return f"{head}\n{chunk.text}" if head else chunk.text


async def index_paths(
    store: CorpusStore,
    starts: Sequence[Path],
    options: IndexOptions,
    embedder: Embedder | None,
    progress: Progress | None = None,
    extractor: Extractor | None = None,
) -> IndexReport:
    """Bring ``options.collection`` up to date with the files under ``starts`` (already
    checked against the roots); what changed is committed file by file. HTML is
    extracted by ``extractor`` (default: one worker process under the fetcher's
    default bounds, started at the first HTML file)."""
    own = extractor is None
    extractor = extractor or build_extractor(FetchSettings(extract_workers=1))
    try:
        return await _index_all(store, starts, options, embedder, progress, extractor)
    finally:
        if own:
            extractor.close()


async def _index_all(
    store: CorpusStore,
    starts: Sequence[Path],
    options: IndexOptions,
    embedder: Embedder | None,
    progress: Progress | None,
    extractor: Extractor,
) -> IndexReport:
    collection = options.collection
    rebuilt = _indexed_with_another(store, collection, embedder)
    store.ensure_collection(collection, embedder.name if embedder else None)
    known = store.stored_files(collection)
    # Each file once, also when the paths named overlap (a folder and a file in it).
    found = {c.path: c for start in starts for c in map(_storable, walk(start, options.roots))}
    # A collection indexed with another embedder lost every document (its vectors must
    # all come from one model): the files it held are read again, not only those named;
    # one no longer there is removed, and counted so.
    for path in rebuilt:
        for candidate in walk(Path(path), options.roots):
            found.setdefault(candidate.path, candidate)
    candidates = list(found.values())
    report = IndexReport()
    seen = {str(path) for path in found}
    gone = [p for p in known if is_under(p, starts) and p not in seen]
    gone += [p for p in rebuilt if p not in seen and p not in known]
    stale_skips = [
        row.path for row in store.skipped(collection)
        if is_under(row.path, starts) and row.path not in seen
    ]  # fmt: skip
    total = len(candidates) + len(gone)
    done = 0
    for candidate in candidates:
        outcome = await _index_one(store, candidate, known, options, embedder, extractor, report)
        # Between two files: where Ctrl-C (asyncio.run cancels this task) takes effect
        # even when embedding never waits (a static model computes in place).
        await asyncio.sleep(0)
        report.count(outcome)
        done += 1
        if progress is not None:
            progress(done, total, str(candidate.path), outcome)
    report.removed += store.remove_documents(collection, gone)
    report.removed += sum(1 for p in gone if p in rebuilt)  # dropped by the rebuild already
    store.remove_documents(collection, stale_skips)
    # Off the event loop: at 100,000 chunks a snapshot takes seconds to write.
    await asyncio.to_thread(store.publish, collection)
    for path in gone:
        done += 1
        if progress is not None:
            progress(done, total, path, "removed")
    return report


def _indexed_with_another(
    store: CorpusStore, collection: str, embedder: Embedder | None
) -> list[str]:
    """The paths ``collection`` holds when it was indexed with an embedder other than
    ``embedder`` (none else)."""
    exists, indexed_with = store.collection_embedder(collection)
    if not exists or indexed_with == (embedder.name if embedder else None):
        return []
    return list(store.stored_files(collection))


async def _index_one(
    store: CorpusStore,
    candidate: Candidate,
    known: dict[str, StoredFile],
    options: IndexOptions,
    embedder: Embedder | None,
    extractor: Extractor,
    report: IndexReport,
) -> Outcome:
    path, collection = str(candidate.path), options.collection
    try:
        new = await _read_new(candidate, known.get(path), options, embedder, extractor)
    except Unreadable as exc:
        store.record_skip(collection, path, exc.reason, exc.detail)
        report.skipped.append((path, exc.reason, exc.detail))
        return "skipped"
    if isinstance(new, _Unchanged):
        if new.touch is not None:
            store.touch_document(collection, path, new.touch)
        return "unchanged"
    # Each chunk's terms are counted as it is written: CPU work (``off_loop``).
    await _in_turn(options, store.replace_document, new)
    report.chunks += len(new.chunks)
    return "indexed"


@dataclass(frozen=True)
class _Unchanged:
    touch: int | None = None  # the new mtime, when only the mtime moved


async def _read_new(
    candidate: Candidate,
    stored: StoredFile | None,
    options: IndexOptions,
    embedder: Embedder | None,
    extractor: Extractor,
) -> NewDocument | _Unchanged:
    """The file's new index entry, or ``_Unchanged``. Raises ``Unreadable``."""
    if candidate.skip is not None:
        raise Unreadable(*candidate.skip)
    try:
        stat = candidate.path.stat()
        if stored is not None and (stat.st_size, stat.st_mtime_ns) == (
            stored.size,
            stored.mtime_ns,
        ):
            return _Unchanged()
        if stat.st_size > options.max_file_bytes:
            raise Unreadable(
                "too_large",
                f"{stat.st_size} bytes, over corpus.max_file_bytes ({options.max_file_bytes})",
            )
        body = candidate.path.read_bytes()
    except OSError as exc:
        raise Unreadable("unreadable", exc.strerror or str(exc)) from None
    if not body.strip():
        raise Unreadable("empty", "the file is empty")
    digest = hashlib.sha256(body).hexdigest()
    if stored is not None and digest == stored.sha256:
        return _Unchanged(stat.st_mtime_ns)
    if kind_of(candidate.path, body) == "html":
        markdown = await extracted_html(extractor, candidate.path, body, options.max_file_bytes)
        document = html_document(candidate.path, body, markdown)
        chunks = await _in_turn(options, chunk_document, document, options.chunk_chars)
    else:
        document, chunks = await _in_turn(options, _read_chunks, candidate.path, body, options)
    if not chunks:
        raise Unreadable("empty", "no text in the file")
    vectors = None
    if embedder is not None:
        vectors = await embedder.embed([embedding_text(document.title, c) for c in chunks])
    return NewDocument(
        options.collection, str(candidate.path), document.kind, document.title,
        stat.st_size, stat.st_mtime_ns, digest, chunks, vectors,
    )  # fmt: skip


def _read_chunks(path: Path, body: bytes, options: IndexOptions) -> tuple[Document, list[Chunk]]:
    document = read_document(path, body)
    return document, chunk_document(document, options.chunk_chars)


async def extracted_html(extractor: Extractor, path: Path, body: bytes, max_chars: int) -> str:
    """The main text of an HTML file as full mode extracts a page, and under the same
    bounds: the pre-scan, the time limit and the memory bound of a worker process. Raises
    ``Unreadable("extraction_failed")`` naming what stopped it."""
    try:
        return await extractor.extract(body, path.as_uri(), "text/html", None, max_chars=max_chars)
    except ExtractionError as exc:
        raise Unreadable("extraction_failed", exc.reason) from None
