"""What the SQLite state file's check at start costs, and what a repair costs (issue 24).

Each process's first connection runs ``PRAGMA quick_check`` over the whole file; this
fills state files of growing size with cached-answer-sized rows (and a few API keys),
then times, for each, opening a store (connect + check) against a plain connect, and the
repair of the same file with its cached-answer pages overwritten (move aside, salvage
the keys, fresh file). Medians of a few runs.

    python -m bench.state_check [--sizes 10,100,300] [--runs 3]
"""

from __future__ import annotations

import argparse
import asyncio
import shutil
import sqlite3
import statistics
import tempfile
import time
from pathlib import Path

from searcher.state import SqliteStore

ROW = b"x" * 3000  # about a cached answer of a few results


def make_file(path: Path, megabytes: int) -> None:
    asyncio.run(_ping_and_close(SqliteStore(path)))  # the schema, as searcher makes it
    db = sqlite3.connect(path, isolation_level=None)
    rows = megabytes * 1_000_000 // len(ROW)
    db.execute("BEGIN")
    db.executemany(
        "INSERT INTO kv (key, value, expires_at) VALUES (?, ?, ?)",
        [(f"results:{i:040x}", ROW, 1e12) for i in range(rows)]
        + [(f"auth:key:{i:064x}", b"{}", 1e12) for i in range(20)],
    )
    db.execute("COMMIT")
    db.execute("PRAGMA wal_checkpoint(TRUNCATE)").fetchall()
    db.close()


async def _ping_and_close(store: SqliteStore) -> None:
    await store.ping()
    await store.aclose()


def timed_open(path: Path) -> float:
    started = time.perf_counter()
    asyncio.run(_ping_and_close(SqliteStore(path)))
    return time.perf_counter() - started


def timed_plain_connect(path: Path) -> float:
    started = time.perf_counter()
    db = sqlite3.connect(path)
    db.execute("SELECT 1 FROM kv LIMIT 1").fetchall()
    db.close()
    return time.perf_counter() - started


def damage(path: Path) -> None:
    data = bytearray(path.read_bytes())
    size = int.from_bytes(data[16:18], "big")
    for start in range(size * 10, len(data), size * 50):  # every 50th page past the 10th
        if data[start] not in (0x02, 0x05):  # interior pages kept: keys stay reachable
            data[start : start + size] = b"\xa5" * size
    path.write_bytes(bytes(data))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--sizes", default="10,100,300", help="state file sizes, MB")
    parser.add_argument("--runs", type=int, default=3)
    args = parser.parse_args()
    print(f"{'size':>8} {'plain connect':>14} {'open + check':>13} {'repair':>9}")
    for megabytes in (int(s) for s in args.sizes.split(",")):
        with tempfile.TemporaryDirectory() as tmp:
            original = Path(tmp) / "original.sqlite3"
            make_file(original, megabytes)
            size_mb = original.stat().st_size / 1e6
            plain, checked, repaired = [], [], []
            for run in range(args.runs):
                path = Path(tmp) / f"run{run}" / "state.sqlite3"
                path.parent.mkdir()
                shutil.copy(original, path)
                plain.append(timed_plain_connect(path))
                checked.append(timed_open(path))
                damage(path)
                repaired.append(timed_open(path))
        print(
            f"{size_mb:>6.0f}MB {statistics.median(plain) * 1000:>11.1f} ms"
            f" {statistics.median(checked) * 1000:>10.1f} ms"
            f" {statistics.median(repaired) * 1000:>6.1f} ms"
        )


if __name__ == "__main__":
    main()
