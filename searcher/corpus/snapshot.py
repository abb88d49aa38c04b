"""A collection's search arrays at one generation, as files that every ``serve`` worker
maps instead of holding: chunk ids, their documents, the vector matrix, its sign bits and
the keyword postings (``.npy`` each, in ``DIR/COLLECTION/g<GENERATION>/``).

Mapped, the arrays are the page cache's, shared by every worker and given back under
memory pressure: the memory of ``serve`` does not grow with the corpus beyond what it
maps (issue 27). A snapshot is written to a temporary folder and renamed into place, so a
reader sees one whole or none; an older one is removed once a newer is in place (a
worker that still maps it keeps its pages until it lets go).
"""

from __future__ import annotations

import contextlib
import fcntl
import json
import os
import shutil
import tempfile
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from searcher.corpus.keyword_index import KeywordIndex
from searcher.corpus.retrieval import SignBits

_ARRAYS = ("ids", "documents", "matrix", "terms", "rows", "weights", "mean", "bits")
_ROWS = {"ids": 1, "documents": 1, "matrix": 2, "terms": 1, "rows": 1, "weights": 1}
_META = "meta.json"
_PREFIX = "g"


class Damaged(Exception):
    """A snapshot's files cannot be read as one (cut short, edited, a folder in a file's
    place): the collection is read again from its database, which is what counts."""


@dataclass(frozen=True)
class Snapshot:
    """A collection's chunks as serving searches them: ``ids[i]`` is the chunk of row
    ``i`` of the vector ``matrix`` and of the ``keywords`` postings (ids ascending);
    ``generation`` says which state of the collection they are."""

    generation: int
    ids: np.ndarray
    documents: np.ndarray  # the document of each row
    matrix: np.ndarray
    keywords: KeywordIndex
    signs: SignBits | None = None  # a large matrix's first pass

    @property
    def nbytes(self) -> int:
        signs = self.signs.nbytes if self.signs is not None else 0
        held = self.ids.nbytes + self.documents.nbytes + self.matrix.nbytes
        return int(held + self.keywords.nbytes + signs)


def _folder_generation(path: Path) -> int | None:
    name = path.name
    if not name.startswith(_PREFIX) or not name[1:].isdigit():
        return None
    return int(name[1:])


def newest(folder: Path) -> tuple[int, Path] | None:
    """The generation and folder of the newest whole snapshot in ``folder``, if any."""
    try:
        entries = list(folder.iterdir())
    except FileNotFoundError:
        return None
    found = [(g, p) for p in entries if (g := _folder_generation(p)) is not None]
    return max(found) if found else None


def write(folder: Path, snapshot: Snapshot) -> Path:
    """``snapshot`` as files in ``folder`` (renamed into place whole); older snapshots
    there are removed. Returns its folder."""
    folder.mkdir(parents=True, exist_ok=True)
    final = folder / f"{_PREFIX}{snapshot.generation}"
    if final.is_dir():  # another worker wrote this generation already
        return final
    staging = Path(tempfile.mkdtemp(dir=folder, prefix=".staging-"))
    try:
        for name, array in _arrays(snapshot).items():
            np.save(staging / f"{name}.npy", np.ascontiguousarray(array), allow_pickle=False)
        meta = {"generation": snapshot.generation, "size": snapshot.keywords.size,
                "average": snapshot.keywords.average}  # fmt: skip
        (staging / _META).write_text(json.dumps(meta))
        os.rename(staging, final)
    except OSError:
        shutil.rmtree(staging, ignore_errors=True)
        if not final.is_dir():
            raise
    remove_older(folder, snapshot.generation)
    return final


def _arrays(snapshot: Snapshot) -> dict[str, np.ndarray]:
    keywords, signs = snapshot.keywords, snapshot.signs
    return {
        "ids": snapshot.ids, "documents": snapshot.documents, "matrix": snapshot.matrix,
        "terms": keywords.terms, "rows": keywords.rows, "weights": keywords.weights,
        "mean": signs.mean if signs is not None else np.zeros(0, dtype=np.float32),
        "bits": signs.bits if signs is not None else np.zeros((0, 0), dtype=np.uint64),
    }  # fmt: skip


def remove_older(folder: Path, generation: int) -> None:
    """Drop the snapshots in ``folder`` older than ``generation``."""
    for path in list(folder.iterdir()) if folder.is_dir() else []:
        older = _folder_generation(path)
        if older is not None and older < generation:
            shutil.rmtree(path, ignore_errors=True)


def size(path: Path) -> int | None:
    """The chunks of the snapshot in ``path``; ``None`` when it is gone. Raises
    ``Damaged`` when its description cannot be read."""
    try:
        return int(_meta(path)["size"])
    except FileNotFoundError:
        return None


def _meta(path: Path) -> dict:
    try:
        meta = json.loads((path / _META).read_text())
        if not isinstance(meta, dict):
            raise ValueError("not an object")
        int(meta["size"]), int(meta["generation"]), float(meta["average"])
    except FileNotFoundError:
        raise
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise Damaged(f"{path / _META}: {exc}") from exc
    return meta


def discard(path: Path) -> None:
    """Remove the damaged snapshot in ``path`` (a new one is written in its place)."""
    shutil.rmtree(path, ignore_errors=True)


def mapped(path: Path) -> Snapshot:
    """The snapshot in ``path``, its arrays memory-mapped read-only. Raises
    ``FileNotFoundError`` when it was removed meanwhile (a newer one is in place) and
    ``Damaged`` when its files do not make one whole snapshot."""
    meta = _meta(path)
    # Plain arrays over the maps: numpy's ``memmap`` subclass costs a Python call on every
    # slice and gather (a tenth of a query at 100,000 chunks).
    try:
        arrays = {n: np.asarray(np.load(path / f"{n}.npy", mmap_mode="r")) for n in _ARRAYS}
    except FileNotFoundError:
        raise
    except (OSError, ValueError, EOFError) as exc:  # cut short, not an array, a folder
        raise Damaged(f"{path}: {exc}") from exc
    _check_shapes(path, arrays, int(meta["size"]))
    keywords = KeywordIndex(
        arrays["terms"], arrays["rows"], arrays["weights"], int(meta["size"]),
        float(meta["average"]),
    )  # fmt: skip
    signs = SignBits(arrays["mean"], arrays["bits"]) if arrays["bits"].size else None
    return Snapshot(
        int(meta["generation"]), arrays["ids"], arrays["documents"], arrays["matrix"],
        keywords, signs,
    )  # fmt: skip


def _check_shapes(path: Path, arrays: dict[str, np.ndarray], size: int) -> None:
    """Raise ``Damaged`` unless the arrays fit each other: a search indexes one by another,
    and an array of another length would fail it far from here."""
    for name, dims in _ROWS.items():
        if arrays[name].ndim != dims:
            raise Damaged(f"{path}: {name} has {arrays[name].ndim} dimensions, not {dims}")
    ids, postings = arrays["ids"], arrays["terms"]
    fits = (
        len(ids) == size == len(arrays["documents"])
        and arrays["matrix"].shape[0] in (0, size)
        and len(postings) == len(arrays["rows"]) == len(arrays["weights"])
        and (not len(postings) or 0 <= arrays["rows"].min() <= arrays["rows"].max() < size)
    )
    if not fits:
        raise Damaged(f"{path}: its arrays do not fit each other or its {size} chunks")


@contextlib.contextmanager
def building(folder: Path) -> Iterator[bool]:
    """Whether this process may build a snapshot of ``folder``'s collection now: one
    builder at a time across workers (a lock file); the others go on serving."""
    folder.mkdir(parents=True, exist_ok=True)
    with open(folder / ".building", "a+b") as lock:
        try:
            fcntl.flock(lock, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except OSError:
            yield False
            return
        try:
            yield True
        finally:
            fcntl.flock(lock, fcntl.LOCK_UN)
