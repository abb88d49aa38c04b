"""Files sent over HTTP (``POST /v1/collections/{name}/documents``): kept in the corpus
directory under ``uploads/COLLECTION/``, never at a path the client chose, and indexed by
the same indexer as ``searcher index add`` (same readers, skip reasons, and incremental by
content hash: a file sent again unchanged is ``unchanged``).

A name is the file's name as sent, folders allowed (``docs/intro.md``); a name that is
absolute, holds ``..``, a NUL or another control character, or a part starting with a dot,
is refused, not repaired: the client learns what it sent was wrong. A skipped file is not
kept on disk (its skip is recorded, as for a file found by a walk).
"""

from __future__ import annotations

import os
import re
import tempfile
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path, PurePosixPath
from typing import Literal

from searcher.corpus.base import CorpusStore
from searcher.corpus.indexer import IndexOptions, Outcome, index_paths
from searcher.corpus.readers import SkipReason
from searcher.embedding.embedders import Embedder
from searcher.fetch.extractor import Extractor

FOLDER = "uploads"
MAX_NAME_CHARS = 255
MAX_DEPTH = 8
_CONTROL = re.compile(r"[\x00-\x1f\x7f]")

UploadStatus = Literal["indexed", "unchanged", "skipped"]


class BadUploadName(ValueError):
    """A file name an upload may not use; the message says why."""


@dataclass(frozen=True)
class UploadResult:
    """What became of one file sent."""

    name: str
    status: UploadStatus
    reason: SkipReason | None = None
    detail: str | None = None


def collection_folder(corpus_dir: Path, collection: str) -> Path:
    """Where a collection's uploaded files are kept (the name checked already)."""
    return corpus_dir / FOLDER / collection


def upload_name(sent: str) -> str:
    """The name a file is kept under: ``sent`` with ``\\`` read as ``/``; raises
    ``BadUploadName`` for one that could reach outside its folder or hide in it."""
    if "\x00" in sent:
        raise BadUploadName("a NUL character in the file name")
    if _CONTROL.search(sent):
        raise BadUploadName("a control character in the file name")
    name = sent.replace("\\", "/")
    if not name.strip():
        raise BadUploadName("an empty file name")
    if name.startswith("/") or re.match(r"^[A-Za-z]:", name):
        raise BadUploadName(f"{sent!r} is an absolute path; send a relative name")
    parts = [p for p in name.split("/") if p]
    if ".." in parts:
        raise BadUploadName(f"{sent!r}: '..' is not allowed in a file name")
    if any(p.startswith(".") for p in parts):
        raise BadUploadName(f"{sent!r}: a name or folder starting with '.' is not allowed")
    if len(parts) > MAX_DEPTH or any(len(p.encode()) > MAX_NAME_CHARS for p in parts):
        raise BadUploadName(
            f"{sent[:80]!r}: at most {MAX_DEPTH} folders deep, {MAX_NAME_CHARS} bytes a part"
        )
    return str(PurePosixPath(*parts))


def kept_path(folder: Path, name: str) -> Path:
    """Where the file named ``name`` (from ``upload_name``) is kept in ``folder``; raises
    ``BadUploadName`` if it would resolve outside it (a link planted there)."""
    real_folder = folder.resolve()
    path = real_folder / name
    if not path.parent.resolve().is_relative_to(real_folder):
        raise BadUploadName(f"{name!r} leads outside the upload folder")
    return path


def _write(path: Path, body: bytes) -> None:
    """``body`` at ``path``, whole or not at all (a reader never sees half a file)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=".upload-")
    try:
        with os.fdopen(fd, "wb") as out:
            out.write(body)
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


async def index_uploads(
    corpus: CorpusStore,
    folder: Path,
    files: Sequence[tuple[str, bytes]],
    options: IndexOptions,
    embedder: Embedder | None,
    extractor: Extractor | None = None,
) -> list[UploadResult]:
    """Keep ``files`` ((name from ``upload_name``, body)) in ``folder`` and index them
    into ``options.collection``; what became of each, in the order sent. A file sent
    twice in one request is kept once, as last sent. ``extractor``: the server's
    extraction workers, for HTML (else the indexer starts one of its own)."""
    paths: dict[str, Path] = {}
    unkept: dict[str, UploadResult] = {}
    for name, body in files:
        path = kept_path(folder, name)
        try:
            _write(path, body)
        except OSError as exc:  # e.g. a folder of that name is there already
            detail = f"cannot be kept: {exc.strerror or exc}"
            unkept[name] = UploadResult(name, "skipped", "unreadable", detail)
            continue
        paths[name] = path
    outcomes: dict[str, Outcome] = {}

    def note(done: int, total: int, path: str, outcome: Outcome) -> None:
        outcomes[path] = outcome

    report = await index_paths(corpus, list(paths.values()), options, embedder, note, extractor)
    for name, result in unkept.items():  # listed by `index status` as any skip is
        detail = result.detail or ""
        corpus.record_skip(options.collection, str(kept_path(folder, name)), "unreadable", detail)
    skips = {path: (reason, detail) for path, reason, detail in report.skipped}
    results = dict(unkept)
    for name, path in paths.items():
        outcome = outcomes.get(str(path), "skipped")
        if outcome == "skipped":
            path.unlink(missing_ok=True)
            reason, detail = skips.get(str(path), ("unreadable", "not indexed"))
            results[name] = UploadResult(name, "skipped", reason, detail)
        else:
            status: UploadStatus = "unchanged" if outcome == "unchanged" else "indexed"
            results[name] = UploadResult(name, status)
    # In the order sent: a client pairs each answer with the file it sent.
    return [results[name] for name in dict.fromkeys(name for name, _ in files)]


def remove_upload(corpus: CorpusStore, folder: Path, collection: str, name: str) -> bool:
    """Drop the uploaded file ``name`` (from ``upload_name``) from the index and the
    disk; whether there was one."""
    path = kept_path(folder, name)
    if path.is_dir():  # the folder of uploads named "a/b.md": no document of its own
        return False
    removed = corpus.remove_documents(collection, [str(path)]) > 0
    existed = path.is_file()
    path.unlink(missing_ok=True)
    return removed or existed
