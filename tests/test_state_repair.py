"""A corrupt SQLite state file heals, over real HTTP: a real file whose pages are
overwritten with garbage, before searcher starts and while it serves. It is moved aside
(``state.sqlite3.corrupt-<time>``), a fresh one starts, the API keys that can still be
read are carried over, and the log says what was lost."""

from __future__ import annotations

import logging
import sqlite3
import time
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.test_auth import bearer, create_key

FILLER = b"FILLER-" * 400  # a value that fills most of a page: one or two rows a leaf
GARBAGE = bytes(range(256)) * 64


def fill(path: Path, rows: int = 300) -> None:
    """Cached answers (under ``results:``, beside the keys under ``auth:``), all written
    into the main file (the WAL checkpointed and emptied)."""
    db = sqlite3.connect(path, isolation_level=None, timeout=10)
    db.executemany(
        "INSERT OR REPLACE INTO kv (key, value, expires_at) VALUES (?, ?, ?)",
        [(f"results:{i * 7919:040x}", FILLER, 1e12) for i in range(rows)],
    )
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    db.close()


INTERIOR_PAGES = (0x02, 0x05)  # b-tree pages that lead to others (their first byte)


def corrupt(path: Path) -> int:
    """Overwrite with garbage every leaf and overflow page that holds only cached answers;
    the pages of the keys, and the interior pages that lead to them, are left as they
    are. The number of pages overwritten."""
    data = bytearray(path.read_bytes())
    page_size = int.from_bytes(data[16:18], "big")
    hit = 0
    for start in range(page_size, len(data), page_size):  # page 1 is the header
        page = data[start : start + page_size]
        if FILLER[:70] in page and b"auth:" not in page and page[0] not in INTERIOR_PAGES:
            data[start : start + page_size] = GARBAGE[:page_size]
            hit += 1
    path.write_bytes(bytes(data))
    return hit


def corrupt_copies(state_dir: Path) -> list[Path]:
    return sorted(state_dir.glob("state.sqlite3.corrupt-*[0-9]Z"))


def search(base: str, secret: str, query: str = "cloud gaming") -> httpx.Response:
    return httpx.post(
        f"{base}/v1/search", json={"query": query}, headers=bearer(secret), timeout=30
    )


def repair_messages(caplog: pytest.LogCaptureFixture) -> list[str]:
    return [r.getMessage() for r in caplog.records if "moved it aside" in r.getMessage()]


def test_a_file_corrupt_before_start_is_moved_aside_and_its_keys_kept(
    make_settings, serve_searcher, config_file, tmp_path, caplog
):
    caplog.set_level(logging.ERROR, logger="searcher.state")
    config = config_file()  # shares the state directory with make_settings
    state = tmp_path / "state"
    secrets = [create_key(config, name) for name in ("alice", "bob")]
    fill(state / "state.sqlite3")
    assert corrupt(state / "state.sqlite3") > 10
    with sqlite3.connect(state / "state.sqlite3") as db:  # really damaged
        assert db.execute("PRAGMA quick_check").fetchone()[0] != "ok"

    base = serve_searcher(make_settings(auth={"enabled": True}))
    # Before: every request got 503 "the key store cannot be reached", for ever.
    for secret in secrets:
        answer = search(base, secret)
        assert answer.status_code == 200, answer.text
    assert len(corrupt_copies(state)) == 1
    with sqlite3.connect(state / "state.sqlite3") as db:
        assert db.execute("PRAGMA quick_check").fetchone()[0] == "ok"
    health = httpx.get(f"{base}/v1/health")
    assert health.status_code == 200 and health.json()["state"]["ok"] is True
    [message] = repair_messages(caplog)
    assert "all 2 API keys were recovered" in message
    assert "cached answers" in message and "corrupt-" in message


def test_a_file_corrupted_while_serving_heals_on_the_next_call(
    make_settings, serve_searcher, config_file, tmp_path, caplog
):
    caplog.set_level(logging.ERROR, logger="searcher.state")
    config = config_file()
    state = tmp_path / "state"
    secret = create_key(config, "carol")
    base = serve_searcher(make_settings(auth={"enabled": True, "key_check_s": 0}))
    assert search(base, secret).status_code == 200
    fill(state / "state.sqlite3")
    assert corrupt(state / "state.sqlite3") > 10

    # The result cache's lookup walks into the damaged pages: the file is repaired and
    # the lookup runs again on the fresh one (a miss), and the answer is computed.
    answer = search(base, secret, "a question asked after the damage")
    assert answer.status_code == 200, answer.text
    assert len(corrupt_copies(state)) == 1  # before: served on, the file never repaired
    health = httpx.get(f"{base}/v1/health")
    assert health.status_code == 200 and health.json()["status"] == "ok"  # before: degraded
    assert search(base, secret).status_code == 200  # the key came across
    again = search(base, secret, "a question asked after the damage").json()
    assert again["meta"]["cache"]["kind"] == "exact"  # the fresh file caches again
    [message] = repair_messages(caplog)
    assert "1 API keys were recovered" in message or "all 1 API keys" in message


def test_keys_that_cannot_be_read_are_named_as_lost(
    make_settings, serve_searcher, config_file, tmp_path, caplog
):
    caplog.set_level(logging.ERROR, logger="searcher.state")
    config = config_file()
    state = tmp_path / "state"
    secret = create_key(config, "dave")
    path = state / "state.sqlite3"
    data = bytearray(path.read_bytes())
    data[:100] = GARBAGE[:100]  # the header: nothing of the file can be read
    path.write_bytes(bytes(data))

    base = serve_searcher(make_settings(auth={"enabled": True}))
    refused = search(base, secret)
    assert refused.status_code == 401  # the key is gone, and the log says so
    assert len(corrupt_copies(state)) == 1
    [message] = repair_messages(caplog)
    assert "no API key could be recovered" in message
    assert "searcher keys create" in message
    assert httpx.get(f"{base}/v1/health").status_code == 200
    fresh: Any = create_key(config, "dave")  # the operator re-creates it: it works
    assert search(base, fresh).status_code == 200


def test_another_worker_finds_the_file_replaced_and_reopens_it(
    make_settings, serve_searcher, config_file, tmp_path
):
    # Two app instances over one state directory stand for two workers of one machine.
    config = config_file()
    state = tmp_path / "state"
    settings = make_settings(auth={"enabled": True, "key_check_s": 0})
    first, second = serve_searcher(settings), serve_searcher(settings)
    before = create_key(config, "erin")
    assert search(first, before).status_code == 200
    assert search(second, before).status_code == 200
    fill(state / "state.sqlite3")
    corrupt(state / "state.sqlite3")
    assert search(first, before, "after the damage").status_code == 200  # the first repairs
    assert len(corrupt_copies(state)) == 1
    after = create_key(config, "frank")  # written into the fresh file
    # The second still has the old file open; it looks at the path once a second.
    deadline = time.monotonic() + 20
    answer = search(second, after)
    while answer.status_code != 200 and time.monotonic() < deadline:
        answer = search(second, after)
    assert answer.status_code == 200, answer.text
    assert search(second, before).status_code == 200  # the key carried over, seen there
    assert len(corrupt_copies(state)) == 1  # repaired once, not once per worker
