"""The on-disk extraction cache: keys, TTL by mtime, corruption, atomic writes, sweeping
(the size cap: tests/test_page_reading.py)."""

from __future__ import annotations

import asyncio
import hashlib
import os
from pathlib import Path

import pytest

from searcher.cache.extraction import ExtractionCache

EX = "trafilatura-2.3-md"
URL = "https://Example.com/article?utm_source=x&b=2&a=1#top"
TTL = 3600


class Clock:
    """A clock the test moves by hand."""

    def __init__(self, now: float = 1_700_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def clock() -> Clock:
    return Clock()


@pytest.fixture
def cache(tmp_path: Path, clock: Clock) -> ExtractionCache:
    return ExtractionCache(tmp_path / "extract", ttl_s=TTL, clock=clock)


def entry_path(cache: ExtractionCache, url: str = URL, extractor: str = EX) -> Path:
    key = ExtractionCache.key(extractor, url)
    return cache.directory / key[:2] / f"{key}.txt"


def all_files(root: Path) -> list[Path]:
    return sorted(p for p in root.rglob("*") if p.is_file())


def test_key_is_sha1_of_extractor_and_the_exact_url() -> None:
    exact = "v2:trafilatura-2.3-md:https://Example.com/article?utm_source=x&b=2&a=1"
    expected = hashlib.sha1(exact.encode()).hexdigest()
    assert ExtractionCache.key(EX, URL) == expected  # only the fragment is dropped
    assert ExtractionCache.key(EX, "https://example.com/article?a=1&b=2") != expected
    assert ExtractionCache.key("other", URL) != expected


async def test_round_trip(cache: ExtractionCache) -> None:
    assert await cache.get(EX, URL) is None
    await cache.put(EX, URL, "Main text — with ünïcödé.\n\nSecond paragraph.")
    assert await cache.get(EX, URL) == "Main text — with ünïcödé.\n\nSecond paragraph."
    # Another spelling may be another page (issue 11: tracking parameters can change it).
    assert await cache.get(EX, "https://example.com/article?a=1&b=2") is None
    assert await cache.get("other-extractor", URL) is None


async def test_directory_is_created_on_demand(tmp_path: Path, clock: Clock) -> None:
    cache = ExtractionCache(tmp_path / "a" / "b" / "c", ttl_s=TTL, clock=clock)
    assert await cache.get(EX, URL) is None
    assert cache.stats()["entries"] == 0
    await cache.put(EX, URL, "text")
    assert entry_path(cache).read_text(encoding="utf-8") == "text"


async def test_empty_text_is_not_stored(cache: ExtractionCache) -> None:
    await cache.put(EX, URL, "")
    assert await cache.get(EX, URL) is None
    assert not cache.directory.exists() or all_files(cache.directory) == []


async def test_expired_entry_is_a_miss(cache: ExtractionCache, clock: Clock) -> None:
    await cache.put(EX, URL, "text")
    clock.now += TTL - 1
    assert await cache.get(EX, URL) == "text"
    clock.now += 2
    assert await cache.get(EX, URL) is None


async def test_entry_aged_by_mtime_is_a_miss(tmp_path: Path) -> None:
    cache = ExtractionCache(tmp_path, ttl_s=TTL)  # the real clock
    await cache.put(EX, URL, "text")
    assert await cache.get(EX, URL) == "text"
    old = entry_path(cache).stat().st_mtime - TTL - 10
    os.utime(entry_path(cache), (old, old))
    assert await cache.get(EX, URL) is None


async def test_corrupt_entry_is_a_miss(cache: ExtractionCache) -> None:
    await cache.put(EX, URL, "text")
    entry_path(cache).write_bytes(b"\xff\xfe not utf-8 \xc3\x28")
    assert await cache.get(EX, URL) is None


async def test_unreadable_entry_is_a_miss(cache: ExtractionCache) -> None:
    await cache.put(EX, URL, "text")
    path = entry_path(cache)
    path.unlink()
    path.mkdir()  # reading a directory fails with an OSError
    assert await cache.get(EX, URL) is None


async def test_write_failure_is_logged_not_raised(
    tmp_path: Path, caplog: pytest.LogCaptureFixture
) -> None:
    blocker = tmp_path / "not-a-dir"
    blocker.write_text("a file where the cache directory should be")
    cache = ExtractionCache(blocker, ttl_s=TTL)
    await cache.put(EX, URL, "text")
    assert await cache.get(EX, URL) is None
    assert "cannot write" in caplog.text


async def test_writes_are_atomic_and_leave_no_temporary_files(cache: ExtractionCache) -> None:
    urls = [f"https://example.com/{i}" for i in range(20)]
    await asyncio.gather(*(cache.put(EX, u, f"text {i} " * 1000) for i, u in enumerate(urls)))
    await asyncio.gather(*(cache.put(EX, u, f"again {i}") for i, u in enumerate(urls)))
    files = all_files(cache.directory)
    assert len(files) == 20
    assert all(f.suffix == ".txt" and not f.name.startswith(".") for f in files)
    assert await cache.get(EX, urls[3]) == "again 3"


async def test_disabled_cache_stores_nothing(tmp_path: Path) -> None:
    cache = ExtractionCache(tmp_path / "off", ttl_s=TTL, enabled=False)
    await cache.put(EX, URL, "text")
    assert await cache.get(EX, URL) is None
    assert not (tmp_path / "off").exists()


async def test_stats_count_entries_bytes_hits_and_misses(cache: ExtractionCache) -> None:
    await cache.put(EX, "https://example.com/a", "aaaa")
    await cache.put(EX, "https://example.com/b", "ü")  # two bytes in UTF-8
    assert await cache.get(EX, "https://example.com/a") == "aaaa"
    assert await cache.get(EX, "https://example.com/missing") is None
    assert await cache.get(EX, "https://example.com/b") == "ü"
    assert cache.stats() == {"entries": 2, "bytes": 6, "hits": 2, "misses": 1, "evicted": 0}


async def test_clear_removes_every_entry(cache: ExtractionCache) -> None:
    for i in range(5):
        await cache.put(EX, f"https://example.com/{i}", "text")
    assert await cache.clear() == 5
    assert cache.stats()["entries"] == 0
    assert await cache.get(EX, "https://example.com/1") is None
    assert await cache.clear() == 0


async def test_clear_and_prune_touch_only_the_caches_own_files(tmp_path: Path) -> None:
    # The cache directory set to one holding the user's files (~, /tmp): they stay.
    home = tmp_path / "home"
    cache = ExtractionCache(home, ttl_s=TTL)
    await cache.put(EX, URL, "text")
    theirs = [
        home / "Documents" / "notes.txt",
        home / "ab" / "todo.txt",
        home / "cd" / ("ef" + "0" * 38 + ".txt"),  # an entry's name, in the wrong shard
        home / "ab" / ".tmp-theirs.txt",
    ]
    for path in theirs:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("mine")
        old = path.stat().st_mtime - TTL - 10
        os.utime(path, (old, old))  # older than any entry may live
    assert cache.stats()["entries"] == 1
    assert await cache.prune() == 0
    assert await cache.clear() == 1
    assert all(path.read_text() == "mine" for path in theirs[:3])


async def test_clear_of_a_missing_directory(tmp_path: Path) -> None:
    assert await ExtractionCache(tmp_path / "never", ttl_s=TTL).clear() == 0


async def test_sweep_removes_only_expired_entries(cache: ExtractionCache, clock: Clock) -> None:
    await cache.put(EX, "https://example.com/old", "old")
    clock.now += TTL / 2
    await cache.put(EX, "https://example.com/new", "new")
    clock.now += TTL / 2 + 1
    assert await cache.sweep() == 1
    assert cache.stats()["entries"] == 1
    assert await cache.get(EX, "https://example.com/new") == "new"


async def test_sweep_removes_stale_temporary_files(tmp_path: Path) -> None:
    cache = ExtractionCache(tmp_path, ttl_s=TTL)
    await cache.put(EX, URL, "text")
    leftover = entry_path(cache).parent / ".tmp-crashed"
    leftover.write_text("half a write")
    old = leftover.stat().st_mtime - TTL - 10
    os.utime(leftover, (old, old))
    assert await cache.sweep() == 0  # temporary files are not entries
    assert not leftover.exists()
    assert entry_path(cache).exists()


async def test_run_sweeper_sweeps_periodically(cache: ExtractionCache, clock: Clock) -> None:
    await cache.put(EX, URL, "text")
    clock.now += TTL + 1
    task = asyncio.create_task(cache.run_sweeper(0.01))
    deadline = asyncio.get_running_loop().time() + 10  # a loaded machine may be slow
    while cache.stats()["entries"] and asyncio.get_running_loop().time() < deadline:
        await asyncio.sleep(0.01)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert cache.stats()["entries"] == 0
