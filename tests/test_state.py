"""The state layer: one interface, two engines (SQLite file, real Redis), the same tests."""

from __future__ import annotations

import asyncio
import multiprocessing
import sqlite3
from collections.abc import AsyncIterator
from pathlib import Path

import numpy as np
import pytest
import redis.asyncio as aioredis

from searcher.auth.keys import KeyBook, hash_secret
from searcher.config import StateSettings
from searcher.errors import StateUnavailable
from searcher.state import (
    FailSoftStore,
    RedisStore,
    SqliteStore,
    StateStore,
    get_json,
    open_store,
    set_json,
)
from tests.redis_server import RedisServer, closed_port_url


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(params=["sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StateStore]:
    engine: StateStore
    if request.param == "sqlite":
        engine = SqliteStore(tmp_path / "state.sqlite3")
    else:
        # A generous timeout: these tests are about behaviour, on a busy machine.
        engine = RedisStore(request.getfixturevalue("redis_url"), prefix="t:", timeout_s=10)
    yield engine
    await engine.aclose()


async def test_set_get_delete_round_trip(store: StateStore) -> None:
    assert await store.get("k") is None
    await store.set("k", b"\x00bytes\xff", ttl_s=60)
    assert await store.get("k") == b"\x00bytes\xff"
    assert await store.delete("k") is True
    assert await store.get("k") is None
    assert await store.delete("k") is False


async def test_delete_removes_a_counter_and_a_bucket_too(store: StateStore) -> None:
    # A breaker's shared failure count is a counter, reset by a success with delete.
    assert await store.incr("c", ttl_s=60) == 1
    assert await store.delete("c") is True
    assert await store.incr("c", ttl_s=60) == 1
    assert (await store.take("b", rate_per_s=0.0, burst=1.0)).allowed
    assert not (await store.take("b", rate_per_s=0.0, burst=1.0)).allowed
    assert await store.delete("b") is True
    assert (await store.take("b", rate_per_s=0.0, burst=1.0)).allowed


async def test_zero_ttl_stores_nothing(store: StateStore) -> None:
    await store.set("k", b"v", ttl_s=0)
    assert await store.get("k") is None


async def test_json_values_and_a_corrupt_entry_is_a_miss(store: StateStore) -> None:
    await set_json(store, "j", {"a": [1, 2], "b": "é"}, ttl_s=60)
    assert await get_json(store, "j") == {"a": [1, 2], "b": "é"}
    await store.set("j", b"\x80not json{", ttl_s=60)
    assert await get_json(store, "j") is None


async def test_counters_add_atomically(store: StateStore) -> None:
    results = await asyncio.gather(*(store.incr("c", ttl_s=60) for _ in range(50)))
    assert sorted(results) == list(range(1, 51))
    assert await store.incr("c", amount=10) == 60


async def test_swaps_each_see_the_value_they_replace(store: StateStore) -> None:
    assert await store.swap("s", b"first", 60) is None
    # Many at once: each gets the value of exactly one other, none is seen twice.
    written = [str(n).encode() for n in range(20)]
    held = await asyncio.gather(*(store.swap("s", value, 60) for value in written))
    assert len(set(held)) == 20 and set(held) <= {b"first", *written} and b"first" in held
    (last,) = {b"first", *written} - set(held)  # the one value no swap replaced
    assert await store.get("s") == last


async def test_token_bucket_allows_the_burst_then_says_when(store: StateStore) -> None:
    grants = [await store.take("b", rate_per_s=0.001, burst=3) for _ in range(4)]
    assert [g.allowed for g in grants] == [True, True, True, False]
    # One token comes back every 1000 s at this rate.
    assert 900 < grants[3].retry_after_s <= 1000
    assert (await store.take("other", rate_per_s=0.001, burst=3)).allowed


async def test_token_bucket_with_no_refill_never_allows_again(store: StateStore) -> None:
    assert (await store.take("z", rate_per_s=0, burst=1)).allowed
    denied = await store.take("z", rate_per_s=0, burst=1)
    assert not denied.allowed and denied.retry_after_s == float("inf")


async def test_vectors_are_appended_and_read_after_a_cursor(store: StateStore) -> None:
    rows = [np.arange(4, dtype=np.float32) + i for i in range(5)]
    for i, row in enumerate(rows):
        await store.add_vector("space", f"id{i}", row, f"m{i}".encode(), ttl_s=60)
    await store.add_vector("elsewhere", "x", rows[0], b"", ttl_s=60)
    first = await store.vectors_after("space", None, limit=3)
    assert [r.item_id for r in first] == ["id0", "id1", "id2"]
    rest = await store.vectors_after("space", first[-1].cursor)
    assert [r.item_id for r in rest] == ["id3", "id4"]
    assert np.array_equal(rest[1].vector, rows[4]) and rest[1].meta == b"m4"
    assert await store.vectors_after("space", rest[-1].cursor) == []


async def test_clear_by_prefix_leaves_the_rest(store: StateStore) -> None:
    await store.set("results:a", b"1", 60)
    await store.set("results:b", b"2", 60)
    await store.set("keys:a", b"3", 60)
    await store.add_vector("results:sem", "a", np.ones(2, dtype=np.float32), b"", 60)
    assert await store.clear("results:") >= 3
    assert await store.get("results:a") is None
    assert await store.vectors_after("results:sem", None) == []
    assert await store.get("keys:a") == b"3"
    stats = await store.stats()
    assert stats.entries == 1


async def test_stats_count_only_what_starts_with_the_prefix(store: StateStore) -> None:
    await store.set("results:a", b"1", 60)
    await store.set("auth:key:a", b"2", 60)
    await store.set("auth:keys", b"3", 60)
    await store.incr("auth:quota:a", ttl_s=60)
    await store.add_vector("results:sem", "a", np.ones(2, dtype=np.float32), b"", 60)
    await store.add_vector("other", "b", np.ones(2, dtype=np.float32), b"", 60)
    results = await store.stats("results:")
    assert (results.entries, results.counters, results.vectors) == (1, 0, 1)
    assert (await store.stats("auth:")).entries >= 2


async def test_ping_answers(store: StateStore) -> None:
    await store.ping()


# --- SQLite: expiry with an injected clock, sharing between processes ------------------


async def test_sqlite_expiry_follows_the_clock(tmp_path: Path) -> None:
    clock = Clock()
    store = SqliteStore(tmp_path / "s.sqlite3", clock=clock)
    await store.set("k", b"v", ttl_s=10)
    assert await store.incr("c", ttl_s=10) == 1
    await store.add_vector("s", "a", np.ones(2, dtype=np.float32), b"", ttl_s=10)
    clock.now += 9.9
    assert await store.get("k") == b"v"
    assert await store.incr("c", ttl_s=10) == 2
    clock.now += 0.2
    assert await store.get("k") is None
    assert await store.incr("c", ttl_s=10) == 1  # a new window
    assert await store.prune() >= 2  # the value and the vector
    assert (await store.stats()).vectors == 0
    await store.aclose()


async def test_sqlite_bucket_refills_with_time(tmp_path: Path) -> None:
    clock = Clock()
    store = SqliteStore(tmp_path / "s.sqlite3", clock=clock)
    assert (await store.take("b", rate_per_s=2, burst=1)).allowed
    assert not (await store.take("b", rate_per_s=2, burst=1)).allowed
    clock.now += 0.5
    assert (await store.take("b", rate_per_s=2, burst=1)).allowed
    await store.aclose()


def _count_in_process(path: str, n: int) -> None:
    async def run() -> None:
        store = SqliteStore(Path(path))
        for _ in range(n):
            await store.incr("shared")
            await store.take("bucket", rate_per_s=0, burst=1000)
        await store.aclose()

    asyncio.run(run())


async def test_sqlite_file_is_shared_safely_by_processes(tmp_path: Path) -> None:
    path = tmp_path / "shared.sqlite3"
    ctx = multiprocessing.get_context("spawn")
    workers = [ctx.Process(target=_count_in_process, args=(str(path), 100)) for _ in range(3)]
    for w in workers:
        w.start()
    for w in workers:
        w.join(timeout=120)
        assert w.exitcode == 0
    store = SqliteStore(path)
    assert await store.incr("shared", amount=0) == 300  # no lost update
    left = await store.take("bucket", rate_per_s=0, burst=1000)
    assert left.allowed and left.remaining == 1000 - 300 - 1
    await store.aclose()


async def test_sqlite_a_write_lock_held_elsewhere_is_waited_for_not_failed(tmp_path: Path) -> None:
    # Small calls run on the loop's own connection, which never waits; a lock held by
    # another process must send them to the store's thread, which waits for it.
    import sqlite3

    path = tmp_path / "locked.sqlite3"
    store = SqliteStore(path)
    assert await store.incr("n") == 1  # the schema exists, and the quick path is open
    other = sqlite3.connect(path, isolation_level=None)
    other.execute("BEGIN IMMEDIATE")  # another process's write lock
    pending = asyncio.ensure_future(store.incr("n"))
    await asyncio.sleep(0.3)
    assert not pending.done()  # waiting for the lock, not failed
    other.execute("COMMIT")
    assert await asyncio.wait_for(pending, 10) == 2
    other.close()
    await store.aclose()


async def test_sqlite_quick_writes_are_checkpointed(tmp_path: Path) -> None:
    from searcher.state.sqlite_store import CHECKPOINT_EVERY

    path = tmp_path / "wal.sqlite3"
    store = SqliteStore(path)
    await store.ping()
    wal = Path(f"{path}-wal")
    sizes = []
    for i in range(CHECKPOINT_EVERY * 4):
        await store.set(f"k{i % 50}", b"x" * 2000, ttl_s=60)
        if (i + 1) % CHECKPOINT_EVERY == 0:
            await store.checkpointed()  # each checkpoint runs on the store's thread
            sizes.append(wal.stat().st_size)
    # The WAL is reused after each checkpoint instead of growing with every write.
    assert sizes[0] > 0 and max(sizes) <= sizes[0] * 1.1
    assert await store.get("k7") == b"x" * 2000
    await store.aclose()


async def test_sqlite_unusable_file_is_state_unavailable(tmp_path: Path) -> None:
    blocker = tmp_path / "file"
    blocker.write_text("not a directory")
    store = SqliteStore(blocker / "state.sqlite3")
    with pytest.raises(StateUnavailable, match="state file"):
        await store.ping()
    await store.aclose()


# --- Redis: unreachable at start, lost while serving ------------------------------------


async def test_redis_unreachable_at_start_is_a_clear_error() -> None:
    url = closed_port_url()
    with pytest.raises(StateUnavailable, match=r"Redis at redis://127\.0\.0\.1"):
        await open_store(StateSettings(redis_url=url, redis_timeout_s=0.3))


async def test_redis_expiry_is_set_on_creation(redis_url: str) -> None:
    store = RedisStore(redis_url, prefix="t:")
    await store.set("k", b"v", ttl_s=30)
    await store.incr("c", ttl_s=30)
    raw = aioredis.Redis.from_url(redis_url)
    assert 0 < await raw.pttl("t:k") <= 30_000
    first = await raw.pttl("t:c")
    await store.incr("c", ttl_s=300)  # later increments keep the window
    assert 0 < await raw.pttl("t:c") <= first
    await raw.aclose()
    await store.aclose()


async def test_redis_lost_while_serving_fails_soft_and_recovers(tmp_path: Path) -> None:
    clock = Clock()
    with RedisServer() as server:
        store = FailSoftStore(RedisStore(server.url, timeout_s=2.0), cooldown_s=5, clock=clock)
        await store.set("k", b"v", 60)
        assert await store.get("k") == b"v"
        assert store.health().ok
        server.kill()
        assert await store.get("k") is None  # a miss, not an error
        await store.set("k", b"w", 60)
        assert (await store.take("b", 1, 1)).allowed  # rate limits allow
        assert await store.incr("c") == 0
        assert await store.vectors_after("s", None) == []
        health = store.health()
        assert not health.ok and health.failures >= 5 and "Redis at" in (health.last_error or "")
        await store.aclose()


async def test_failsoft_tries_again_after_the_cooldown(tmp_path: Path) -> None:
    clock = Clock()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    inner = SqliteStore(blocker / "state.sqlite3")
    store = FailSoftStore(inner, cooldown_s=5, clock=clock)
    assert await store.get("k") is None
    assert not store.health().ok
    blocker.unlink()  # the directory can now be made
    assert await store.get("k") is None  # within the cooldown: not tried
    assert store.health().failures == 2
    clock.now += 5
    await store.set("k", b"v", 60)
    assert await store.get("k") == b"v"
    assert store.health().ok
    await store.aclose()


async def test_failsoft_strict_view_raises_and_says_how_long_the_store_has_answered(
    tmp_path: Path,
) -> None:
    # A research job must tell an absent record from a store it cannot reach, and how
    # long the store has answered since it last failed (issue 24, defect 4).
    clock = Clock()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    store = FailSoftStore(SqliteStore(blocker / "state.sqlite3"), cooldown_s=5, clock=clock)
    clock.now += 7
    assert store.up_for() == 7  # answered when opened, and never failed since
    with pytest.raises(StateUnavailable):
        await store.strict.get("k")
    assert store.up_for() == 0 and store.health().failures == 1
    blocker.unlink()
    with pytest.raises(StateUnavailable):  # within the cooldown: not tried, still down
        await store.strict.get("k")
    clock.now += 5
    assert await store.strict.get("k") is None  # absent: an answer, not an outage
    clock.now += 2
    assert store.up_for() == 2
    await store.aclose()


async def test_failsoft_health_check_asks_a_failed_store_again_after_the_cooldown(
    tmp_path: Path,
) -> None:
    # A worker that no request sends to the store must not report it down for ever.
    clock = Clock()
    blocker = tmp_path / "file"
    blocker.write_text("x")
    store = FailSoftStore(SqliteStore(blocker / "state.sqlite3"), cooldown_s=5, clock=clock)
    assert await store.get("k") is None
    blocker.unlink()
    assert not (await store.check()).ok  # within the cooldown: not asked
    assert store.health().failures == 1
    clock.now += 5
    health = await store.check()
    assert health.ok and health.last_error is None
    await store.aclose()


async def test_sqlite_rows_another_program_wrote_are_read_or_skipped(tmp_path: Path) -> None:
    path = tmp_path / "state.sqlite3"
    store = SqliteStore(path)
    await store.set("k", b"v", 60)
    await store.add_vector("s", "good", np.ones(4, dtype=np.float32), b"{}", 60)
    db = sqlite3.connect(path)
    with db:
        db.execute("UPDATE kv SET value = ? WHERE key = 'k'", ('{"v": 1}',))  # TEXT
        for item, blob, meta, expires in [
            ("short", b"\x00\x01\x02", b"{}", 1e18),  # not a whole float32
            ("text-meta", np.ones(4, dtype=np.float32).tobytes(), "{}", 1e18),
            ("odd-expiry", np.ones(4, dtype=np.float32).tobytes(), b"{}", "soon"),
        ]:
            db.execute(
                "INSERT INTO vectors (space, item_id, vector, meta, expires_at) "
                "VALUES ('s', ?, ?, ?, ?)",
                (item, blob, meta, expires),
            )
    db.close()
    assert await store.get("k") == b'{"v": 1}'
    rows = await store.vectors_after("s", None)
    assert [r.item_id for r in rows] == ["good", "text-meta"]
    assert rows[1].meta == b"{}"
    await store.aclose()


async def test_redis_prune_drops_vector_rows_whose_expiry_cannot_be_read(redis_url: str) -> None:
    store = RedisStore(redis_url, prefix="t-prune:", timeout_s=10)
    await store.add_vector("s", "kept", np.ones(4, dtype=np.float32), b"{}", 600)
    raw = aioredis.from_url(redis_url)
    await raw.xadd("t-prune:vec:s", {"id": "bad", "v": b"\x00" * 16, "m": b"{}", "exp": "x"})
    assert await store.prune() == 1
    assert [r.item_id for r in await store.vectors_after("s", None)] == ["kept"]
    await raw.aclose()
    await store.clear()
    await store.aclose()


async def test_redis_a_key_of_another_type_is_a_miss_not_an_outage(redis_url: str) -> None:
    # Another program wrote a list under one of our keys: that entry is a miss, the store
    # stays up (no cooldown: other keys are read at once) and health says it is fine.
    store = FailSoftStore(RedisStore(redis_url, prefix="t-type:", timeout_s=10), cooldown_s=60)
    raw = aioredis.from_url(redis_url)
    await raw.rpush("t-type:k", "x")
    await store.set("other", b"v", 60)
    assert await store.get("k") is None
    assert await store.get("other") == b"v"
    assert store.health().ok
    await raw.delete("t-type:k", "t-type:other")
    await raw.aclose()
    await store.aclose()


async def test_keys_created_at_once_are_all_listed_and_revocable(store: StateStore) -> None:
    book = KeyBook(store)
    created = await asyncio.gather(*(book.create(f"agent-{i}") for i in range(8)))
    assert sorted(k.name for k in await book.list()) == sorted(k.name for k, _ in created)
    for key, secret in created:
        assert (await book.revoke(key.name)).revoked
        assert (await book.lookup(secret)).revoked


async def test_keys_of_the_old_single_index_still_count(store: StateStore) -> None:
    # A state store written before slots holds the hashes in one list.
    book = KeyBook(store)
    old, secret = await book.create("old")
    await store.clear("auth:slot:")
    await store.clear("auth:created")
    await set_json(store, "auth:index", [hash_secret(secret)], 3600)
    await book.create("new")
    assert [k.name for k in await book.list()] == ["old", "new"]
    assert (await book.revoke("old")).id == old.id


def test_health_never_shows_a_redis_password_given_in_the_query(make_settings, serve_searcher):
    """redis-py reads ``?password=`` (the form unix socket URLs need); /v1/health, open
    to callers without a key, names the store by its URL with the password masked."""
    import httpx
    import redis as sync_redis

    with RedisServer() as server:
        sync_redis.Redis(port=server.port).config_set("requirepass", "hunter2pw")
        url = f"{server.url}?password=hunter2pw"
        base = serve_searcher(make_settings(state={"redis_url": url}))
        health = httpx.get(f"{base}/v1/health")
        assert health.status_code == 200 and health.json()["state"]["ok"] is True
        assert health.json()["state"]["location"] == f"{server.url}?password=***"
        assert "hunter2pw" not in health.text
