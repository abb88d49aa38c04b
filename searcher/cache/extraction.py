"""The on-disk cache of extracted page text (Search API v1, section 15).

One UTF-8 file per entry, ``<dir>/<key[:2]>/<key>.txt``, with
``key = sha1("v2:" + extractor + ":" + url)``: the URL exactly as it was fetched (only the
fragment, which is never sent, is dropped). Canonicalising it here, as dedup does, let a
page read once with ``?utm_source=<instructions>`` be served for the clean URL.

Age is the file's mtime, so expiry needs no parsing; last use is its atime, set on every
hit, so least-recently-used eviction needs none either. The cache holds at most
``max_bytes``: a write that takes it over the cap evicts the least
recently used entries down to 90 % of it. Writes are atomic (temporary file in the same
directory, then ``os.replace``), so a reader sees a whole entry or none. The cache is an
optimisation: every disk problem is logged and becomes a miss, never an error.

The interface is small on purpose (get, put, stats, clear, prune) so that the cache can
move into a shared state layer (SQLite, Redis) without its callers changing.
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import logging
import os
import re
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from urllib.parse import urldefrag

log = logging.getLogger(__name__)

_SUFFIX = ".txt"
_TEMP_PREFIX = ".tmp-"
_KEY_VERSION = "v2"  # v1 keyed normalised URLs; its entries are never read again
_PRUNE_TO = 0.9  # a prune evicts down to this share of max_bytes, so puts do not each prune


# Only files named as this cache names them are its own: the directory may be one the
# user keeps other files in (a cache dir set to ~ or /tmp), and those are never touched.
_SHARD = re.compile(r"[0-9a-f]{2}")
_ENTRY = re.compile(r"([0-9a-f]{2})[0-9a-f]{38}" + re.escape(_SUFFIX))


def _shards(directory: Path) -> list[Path]:
    """The cache's shard folders (``<dir>/<2 hex digits>``); none if it is absent."""
    try:
        return [p for p in directory.iterdir() if _SHARD.fullmatch(p.name) and p.is_dir()]
    except OSError:
        return []


def _entries(directory: Path) -> Iterator[Path]:
    """Entry files under ``directory``: ``<shard>/<sha1 hex>.txt`` in the shard their name
    starts with (temporary files excluded)."""
    for shard in _shards(directory):
        try:
            files = list(shard.iterdir())
        except OSError:
            continue
        for file in files:
            named = _ENTRY.fullmatch(file.name)
            if named is not None and named.group(1) == shard.name:
                yield file


def _temp_files(directory: Path) -> Iterator[Path]:
    for shard in _shards(directory):
        try:
            yield from shard.glob(f"{_TEMP_PREFIX}*")
        except OSError:
            continue


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
        max_bytes: int | None = None,
    ) -> None:
        self.directory = Path(directory)
        self.ttl_s = ttl_s
        self.enabled = enabled
        self.max_bytes = max_bytes  # None: no cap
        self._clock = clock
        self._hits = 0
        self._misses = 0
        self._evicted = 0
        self._size: int | None = None  # bytes on disk, learnt by the first capped put
        self._evicting = asyncio.Lock()

    @staticmethod
    def key(extractor: str, url: str) -> str:
        """``sha1("v2:" + extractor + ":" + url)`` as hex; the URL as fetched, less its
        fragment."""
        exact = urldefrag(url.strip()).url
        return hashlib.sha1(f"{_KEY_VERSION}:{extractor}:{exact}".encode()).hexdigest()

    def _path(self, key: str) -> Path:
        return self.directory / key[:2] / f"{key}{_SUFFIX}"

    def _expired(self, mtime: float) -> bool:
        return self._clock() - mtime > self.ttl_s

    async def get(self, extractor: str, url: str) -> str | None:
        """The cached text, or ``None`` if absent, expired, unreadable or corrupt."""
        found = await self.get_first((extractor,), url)
        return None if found is None else found[1]

    async def get_first(self, extractors: Sequence[str], url: str) -> tuple[str, str] | None:
        """The first of ``extractors`` with a cached text of ``url``, and that text; one
        hit or one miss in the figures, however many were looked at."""
        if not self.enabled or not extractors:
            return None
        paths = [(name, self._path(self.key(name, url))) for name in extractors]
        found = await asyncio.to_thread(self._read_first, paths)
        if found is None:
            self._misses += 1
        else:
            self._hits += 1
        return found

    def _read_first(self, paths: list[tuple[str, Path]]) -> tuple[str, str] | None:
        for name, path in paths:
            text = self._read(path)
            if text is not None:
                return name, text
        return None

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
        self._mark_used(path)
        return text or None

    def _mark_used(self, path: Path) -> None:
        """Stamp the entry's atime with the cache clock (eviction order); mtime stays its
        write time (expiry)."""
        with contextlib.suppress(OSError):
            os.utime(path, (self._clock(), path.stat().st_mtime))

    async def put(self, extractor: str, url: str, text: str) -> None:
        """Store non-empty ``text``; a disk error is logged, never raised."""
        if not self.enabled or not text:
            return
        data = text.encode("utf-8", errors="replace")
        if self.max_bytes is not None and len(data) > self.max_bytes * _PRUNE_TO:
            return  # an entry that would evict (nearly) everything else is not worth it
        grown = await asyncio.to_thread(self._write, self._path(self.key(extractor, url)), data)
        if self.max_bytes is None:
            return
        if self._size is None:
            self._size = await asyncio.to_thread(self._disk_bytes)
        else:
            self._size += grown
        if self._size > self.max_bytes:
            # Evicting scans the directory, so it runs once per 10 % of the cap written.
            async with self._evicting:
                if self._size > self.max_bytes:
                    await self._evict()

    def _disk_bytes(self) -> int:
        total = 0
        for path in _entries(self.directory):
            with contextlib.suppress(OSError):
                total += path.stat().st_size
        return total

    def _write(self, path: Path, data: bytes) -> int:
        """Write the entry; returns how many bytes the cache grew by."""
        temp: str | None = None
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            try:
                replaced = path.stat().st_size
            except FileNotFoundError:
                replaced = 0
            fd, temp = tempfile.mkstemp(dir=path.parent, prefix=_TEMP_PREFIX)
            with os.fdopen(fd, "wb") as handle:
                handle.write(data)
            now = self._clock()
            # The entry's age is measured with the cache's clock, so it is stamped with it.
            os.utime(temp, (now, now))
            os.replace(temp, path)
            temp = None
            return len(data) - replaced
        except OSError as exc:
            log.warning("extraction cache: cannot write %s: %s", path, exc)
            return 0
        finally:
            if temp is not None:
                _unlink(Path(temp))

    async def clear(self) -> int:
        """Remove every entry; returns how many were removed."""
        removed = await asyncio.to_thread(self._remove, lambda _path: True)
        self._size = None
        return removed

    async def prune(self) -> int:
        """Remove expired entries, then the least recently used ones until the cache is
        within ``max_bytes`` (down to 90 % of it); returns how many entries were removed."""
        expired = await self.sweep()
        return expired + await self._evict()

    async def _evict(self) -> int:
        evicted, self._size = await asyncio.to_thread(self._evict_to_cap)
        self._evicted += evicted
        if evicted:
            log.info("extraction cache: evicted %d least recently used entries", evicted)
        return evicted

    def _evict_to_cap(self) -> tuple[int, int]:
        """(entries evicted, bytes left) after evicting the least recently used entries."""
        entries = []
        for path in _entries(self.directory):
            try:
                info = path.stat()
            except OSError:
                continue
            entries.append((info.st_atime, path.name, info.st_size, path))
        size = sum(e[2] for e in entries)
        if self.max_bytes is None or size <= self.max_bytes:
            return 0, size
        target = self.max_bytes * _PRUNE_TO
        evicted = 0
        for _atime, _name, entry_size, path in sorted(entries):
            if size <= target:
                break
            if _unlink(path):
                evicted += 1
            size -= entry_size
        return evicted, size

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
        return {
            "entries": entries,
            "bytes": size,
            "hits": self._hits,
            "misses": self._misses,
            "evicted": self._evicted,
        }

    async def run_sweeper(self, interval_s: float) -> None:
        """Prune every ``interval_s`` seconds, forever; run it as a background task."""
        while True:
            await asyncio.sleep(interval_s)
            removed = await self.prune()
            if removed:
                log.info("extraction cache: pruned %d entries", removed)
