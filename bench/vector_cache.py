"""Vectors remembered across benchmark runs: an embedder wrapper whose rows are kept in a
SQLite file, keyed by the embedder's name and the SHA-256 of the text.

The ONNX embedder takes a few hundred milliseconds a chunk on the shared machine:
SciFact's chunks would take most of an hour to embed on every run. With this cache the
first run pays once (and an interrupted run keeps what it had: each call commits), and
every later one reads the rows back. The rows are the embedder's own, so the figures are
the same as without it.
"""

from __future__ import annotations

import hashlib
import sqlite3
import tempfile
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from searcher.embedding.embedders import Embedder

DEFAULT_FILE = Path(tempfile.gettempdir()) / "searcher-bench-cache" / "vectors.sqlite3"


def text_key(model: str, text: str) -> bytes:
    """The cache key of ``text`` embedded by ``model``."""
    return hashlib.sha256(f"{model}\0{text}".encode("utf-8", "surrogatepass")).digest()


class CachedVectors:
    """``inner``'s rows for texts, computed once per (model, text) and kept in ``path``.
    Keeps ``inner``'s name, so an index built through it is one of ``inner``'s."""

    def __init__(self, inner: Embedder, path: Path = DEFAULT_FILE) -> None:
        self.name = inner.name
        self.inner = inner
        path.parent.mkdir(parents=True, exist_ok=True)
        self._db = sqlite3.connect(path)
        self._db.execute(
            "CREATE TABLE IF NOT EXISTS vectors (key BLOB PRIMARY KEY, row BLOB NOT NULL)"
        )
        self.computed = 0

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        """The rows of ``texts``: read back, or asked of ``inner`` (those not kept yet, in
        one call) and kept."""
        keys = [text_key(self.name, t) for t in texts]
        rows = self._read(keys)
        missing = [i for i, key in enumerate(keys) if key not in rows]
        if missing:
            fresh = await self.inner.embed([texts[i] for i in missing])
            for i, row in zip(missing, fresh, strict=True):
                rows[keys[i]] = np.asarray(row, dtype=np.float32)
            self._db.executemany(
                "INSERT OR REPLACE INTO vectors VALUES (?, ?)",
                [(keys[i], rows[keys[i]].tobytes()) for i in missing],
            )
            self._db.commit()
            self.computed += len(missing)
        if not texts:
            return np.zeros((0, 0), dtype=np.float32)
        return np.stack([rows[key] for key in keys])

    def encode(self, texts: Sequence[str]) -> np.ndarray:
        """``embed`` for synchronous callers (the tuning grid)."""
        import asyncio

        return asyncio.run(self.embed(texts))

    def _read(self, keys: list[bytes]) -> dict[bytes, np.ndarray]:
        found: dict[bytes, np.ndarray] = {}
        for start in range(0, len(keys), 500):
            part = keys[start : start + 500]
            marks = ",".join("?" * len(part))
            for key, row in self._db.execute(
                f"SELECT key, row FROM vectors WHERE key IN ({marks})", part
            ):
                found[key] = np.frombuffer(row, dtype=np.float32)
        return found

    def close(self) -> None:
        """Close the cache file."""
        self._db.close()
