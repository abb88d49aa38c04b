"""The on-disk cache of extracted page text (Search API v1, section 15).

One UTF-8 file per entry, ``<dir>/<key[:2]>/<key>.txt``, with
``key = sha1(extractor + ":" + normalise_url(url))``. Age is the file's mtime, so expiry and
sweeping need no parsing. Writes are atomic (temporary file in the same directory, then
``os.replace``), so a reader sees a whole entry or none. The cache is an optimisation:
every disk problem is logged and becomes a miss, never an error for the request.
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
import os
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

from searcher.urls import normalise_url

log = logging.getLogger(__name__)

_SUFFIX = ".txt"
_TEMP_PREFIX = ".tmp-"


def _entries(directory: Path) -> Iterator[Path]:
    """Entry files under ``directory`` (temporary files excluded); nothing if it is absent."""
    try:
        shards = [p for p in directory.iterdir() if p.is_dir()]
    except OSError:
        return
    for shard in shards:
        try:
            files = list(shard.iterdir())
        except OSError:
            continue
        yield from (f for f in files if f.suffix == _SUFFIX and not f.name.startswith("."))


def _temp_files(directory: Path) -> Iterator[Path]:
    try:
        yield from directory.glob(f"*/{_TEMP_PREFIX}*")
    except OSError:
        return


def _unlink(path: Path) -> bool:
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except OSError as exc:
        log.warning("extraction cache: cannot remove %s: %s", path, exc)
        return False
    return True


class ExtractionCache:
    """Extracted text by (extractor, URL), expiring ``ttl_s`` seconds after it was written."""

    def __init__(
        self,
        directory: Path,
        ttl_s: int,
        enabled: bool = True,
        clock: Callable[[], float] = time.time,
    ) -> None:
        self.directory = Path(directory)
        self.ttl_s = ttl_s
        self.enabled = enabled
        self._clock = clock
        self._hits = 0
        self._misses = 0

    @staticmethod
    def key(extractor: str, url: str) -> str:
        """``sha1(extractor + ":" + normalised URL)`` as hex."""
        return hashlib.sha1(f"{extractor}:{normalise_url(url)}".encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}{_SUFFIX}"

    def _expired(self, mtime: float) -> bool:
        return self._clock() - mtime > self.ttl_s

    async def get(self, extractor: str, url: str) -> str | None:
        """The cached text, or ``None`` if absent, expired, unreadable or corrupt."""
        if not self.enabled:
            return None
        text = await asyncio.to_thread(self._read, self._path(self.key(extractor, url)))
        if text is None:
            self._misses += 1
        else:
            self._hits += 1
        return text

    def _read(self, path: Path) -> str | None:
        try:
            if self._expired(path.stat().st_mtime):
                return None
            data = path.read_bytes()
        except FileNotFoundError:
            return None
        except OSError as exc:
            log.warning("extraction cache: cannot read %s: %s", path, exc)
            return None
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            log.warning("extraction cache: %s is not valid UTF-8; removing it", path)
            _unlink(path)
            return None
        return text or None

    async def put(self, extractor: str, url: str, text: str) -> None:
        """Store non-empty ``text``; a disk error is logged, never raised."""
        if not self.enabled or not text:
            return
        await asyncio.to_thread(self._write, self._path(self.key(extractor, url)), text)

    def _write(self, path: Path, text: str) -> None:
        temp: str | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd, temp = tempfile.mkstemp(dir=path.parent, prefix=_TEMP_PREFIX)
            with os.fdopen(fd, "wb") as handle:
                handle.write(text.encode("utf-8", errors="replace"))
            now = self._clock()
            # The entry's age is measured with the cache's clock, so it is stamped with it.
            os.utime(temp, (now, now))
            os.replace(temp, path)
            temp = None
        except OSError as exc:
            log.warning("extraction cache: cannot write %s: %s", path, exc)
        finally:
            if temp is not None:
                _unlink(Path(temp))

    async def clear(self) -> int:
        """Remove every entry; returns how many were removed."""
        return await asyncio.to_thread(self._remove, lambda _path: True)

    async def sweep(self) -> int:
        """Remove expired entries (and temporary files a crash left behind); returns the
        number of entries removed."""
        return await asyncio.to_thread(self._remove, self._is_stale)

    def _is_stale(self, path: Path) -> bool:
        try:
            return self._expired(path.stat().st_mtime)
        except OSError:
            return False

    def _remove(self, should_remove: Callable[[Path], bool]) -> int:
        removed = sum(_unlink(p) for p in list(_entries(self.directory)) if should_remove(p))
        # Temporary files a crashed write left behind; a fresh one is a write in progress.
        for temp in list(_temp_files(self.directory)):
            if self._is_stale(temp):
                _unlink(temp)
        return removed

    def stats(self) -> dict[str, int]:
        """Entries and bytes on disk now, hits and misses since start."""
        entries = size = 0
        for path in _entries(self.directory):
            try:
                size += path.stat().st_size
            except OSError:
                continue
            entries += 1
        return {"entries": entries, "bytes": size, "hits": self._hits, "misses": self._misses}

    async def run_sweeper(self, interval_s: float) -> None:
        """Sweep every ``interval_s`` seconds, forever; run it as a background task."""
        while True:
            await asyncio.sleep(interval_s)
            removed = await self.sweep()
            if removed:
                log.info("extraction cache: swept %d expired entries", removed)
