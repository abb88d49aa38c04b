"""The worker pool: tasks over their time limit or abandoned by their caller have their
worker process killed and replaced; one client cannot hold more than its share."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from searcher.fetch.worker_pool import TaskFailed, TaskKilled, WorkerDied, WorkerPool

pytestmark = pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs /proc")


def square(n: int) -> int:
    return n * n


def fail(message: str) -> None:
    raise ValueError(message)


class TwoArgumentError(Exception):
    """Pickles in the worker (as its class and ``args``) but cannot be re-created from them."""

    def __init__(self, first: str, second: str) -> None:
        super().__init__(first)
        self.second = second


def fail_unreadably(path: str) -> None:
    """Write this worker's pid to ``path``, then raise an error that cannot come back."""
    Path(path).write_text(str(os.getpid()))
    raise TwoArgumentError("one", "two")


def die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def announce_and_wait(path: str, seconds: float) -> None:
    """Write this worker's pid to ``path``, then run (sleep) for ``seconds``."""
    Path(path).write_text(str(os.getpid()))
    time.sleep(seconds)


def _alive(pid: int) -> bool:
    try:
        state = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return False
    return state != "Z"


async def _wait_for(condition, timeout_s: float = 30.0) -> None:  # type: ignore[no-untyped-def]
    """Wait for a condition the test cannot be told about by an event (another process)."""
    async with asyncio.timeout(timeout_s):
        while not condition():
            await asyncio.sleep(0.01)


async def _started_pid(path: Path) -> int:
    await _wait_for(lambda: path.exists() and path.read_text())
    return int(path.read_text())


@pytest.fixture
async def pool():  # type: ignore[no-untyped-def]
    pool = WorkerPool(2, client_share=1)
    yield pool
    pool.close()


async def test_round_trip_and_errors_from_the_task(pool: WorkerPool) -> None:
    assert await pool.run(square, (7,), timeout_s=30) == 49
    with pytest.raises(TaskFailed) as info:
        await pool.run(fail, ("bad input",), timeout_s=30)
    assert isinstance(info.value.error, ValueError) and str(info.value.error) == "bad input"
    assert await pool.run(square, (3,), timeout_s=30) == 9  # the worker survived


async def test_a_reply_that_cannot_be_read_back_fails_the_task_and_kills_its_worker(
    tmp_path: Path,
) -> None:
    pool = WorkerPool(1)
    try:
        pids = []
        for attempt in range(3):
            marker = tmp_path / f"pid-{attempt}"
            with pytest.raises(TaskFailed) as info:
                await pool.run(fail_unreadably, (str(marker),), timeout_s=30)
            assert isinstance(info.value.error, TypeError)  # the unpickling's own error
            pids.append(int(marker.read_text()))
        for pid in pids:  # each worker was stopped, not left running or idle
            await _wait_for(lambda pid=pid: not _alive(pid))  # type: ignore[misc]
        assert len(set(pids)) == 3 and pool.stats().killed == 3
        assert await pool.run(square, (4,), timeout_s=30) == 16  # a fresh worker serves
    finally:
        pool.close()


async def test_a_task_over_its_time_limit_is_killed_and_its_worker_replaced(
    pool: WorkerPool, tmp_path: Path
) -> None:
    marker = tmp_path / "pid"
    with pytest.raises(TaskKilled):
        await pool.run(announce_and_wait, (str(marker), 600), timeout_s=1)
    pid = int(marker.read_text())
    await _wait_for(lambda: not _alive(pid))
    assert pool.stats().killed == 1
    assert await pool.run(square, (4,), timeout_s=30) == 16


async def test_a_caller_that_gives_up_kills_its_task(pool: WorkerPool, tmp_path: Path) -> None:
    marker = tmp_path / "pid"
    task = asyncio.create_task(pool.run(announce_and_wait, (str(marker), 600), timeout_s=600))
    pid = await _started_pid(marker)
    assert _alive(pid)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    await _wait_for(lambda: not _alive(pid))
    assert pool.stats().running == 0
    assert await pool.run(square, (5,), timeout_s=30) == 25


async def test_a_worker_dying_during_a_task_is_reported(pool: WorkerPool) -> None:
    with pytest.raises(WorkerDied):
        await pool.run(die, (), timeout_s=30)
    assert await pool.run(square, (6,), timeout_s=30) == 36


async def test_a_lone_client_gets_every_worker(pool: WorkerPool, tmp_path: Path) -> None:
    hogs = [
        asyncio.create_task(
            pool.run(
                announce_and_wait, (str(tmp_path / f"hog{i}"), 600), timeout_s=600, client="hog"
            )
        )
        for i in range(2)
    ]
    # Share 1 of 2, but nobody else waits: the second task borrows the idle worker.
    await _started_pid(tmp_path / "hog0")
    await _started_pid(tmp_path / "hog1")
    stats = pool.stats()
    assert stats.by_client == {"hog": 2} and stats.borrowing == 1 and stats.borrowed == 1
    for hog in hogs:
        hog.cancel()
    await asyncio.gather(*hogs, return_exceptions=True)


async def test_a_client_within_its_share_preempts_a_borrowed_task(
    pool: WorkerPool, tmp_path: Path
) -> None:
    marker = tmp_path / "hog1"
    hog0 = asyncio.create_task(
        pool.run(announce_and_wait, (str(tmp_path / "hog0"), 600), timeout_s=600, client="hog")
    )
    await _started_pid(tmp_path / "hog0")
    hog1 = asyncio.create_task(
        pool.run(announce_and_wait, (str(marker), 600), timeout_s=600, client="hog")
    )
    first_pid = await _started_pid(marker)
    marker.unlink()
    # The borrowed worker is taken back at once: the other client does not wait for it.
    assert await pool.run(square, (7,), timeout_s=30, client="other") == 49
    assert pool.stats().preempted == 1 and pool.stats().killed == 0
    # Re-queued, the preempted task runs again from scratch in a fresh worker.
    assert await _started_pid(marker) != first_pid and not hog1.done()
    for hog in (hog0, hog1):
        hog.cancel()
    await asyncio.gather(hog0, hog1, return_exceptions=True)


async def test_one_client_holds_at_most_its_share(pool: WorkerPool, tmp_path: Path) -> None:
    hogs = [
        asyncio.create_task(
            pool.run(
                announce_and_wait, (str(tmp_path / f"hog{i}"), 600), timeout_s=600, client="hog"
            )
        )
        for i in range(3)
    ]
    await _started_pid(tmp_path / "hog0")
    await _wait_for(lambda: pool.stats().borrowing == 1)
    # The hog borrows the second worker while it is idle, but gives it back whenever
    # anyone else needs it: the other client runs at once, repeatedly, and holds it.
    for n in range(3):
        other = asyncio.create_task(pool.run(square, (n,), timeout_s=30, client="other"))
        assert await other == n * n
    stats = pool.stats()
    assert stats.preempted >= 3 and stats.killed == 0
    blocker = asyncio.create_task(
        pool.run(announce_and_wait, (str(tmp_path / "o"), 600), timeout_s=600, client="other")
    )
    await _started_pid(tmp_path / "o")
    stats = pool.stats()
    assert stats.by_client == {"hog": 1, "other": 1} and stats.waiting == 2
    assert stats.borrowing == 0
    for task in [*hogs, blocker]:
        task.cancel()
    await asyncio.gather(*hogs, blocker, return_exceptions=True)
    assert pool.stats().running == 0 and pool.stats().waiting == 0


async def test_waiting_clients_are_served_fewest_running_first(tmp_path: Path) -> None:
    pool = WorkerPool(1)
    try:
        first = asyncio.create_task(
            pool.run(announce_and_wait, (str(tmp_path / "a0"), 600), timeout_s=600, client="a")
        )
        await _started_pid(tmp_path / "a0")
        order: list[str] = []

        async def job(client: str, n: int) -> None:
            await pool.run(square, (n,), timeout_s=30, client=client)
            order.append(client)

        queued = [asyncio.create_task(job("a", 1)), asyncio.create_task(job("b", 2))]
        await _wait_for(lambda: pool.stats().waiting == 2)
        first.cancel()
        await asyncio.gather(first, *queued, return_exceptions=True)
        assert order == ["a", "b"]  # both had none running when the worker freed: arrival
    finally:
        pool.close()


UNGUARDED_SCRIPT = """
import asyncio
from searcher.fetch.worker_pool import WorkerPool

async def main():
    pool = WorkerPool(1, client_share=1)
    try:
        print("result", await pool.run(len, ("abc",), timeout_s=10))
    except Exception as exc:
        print("error", type(exc).__name__, exc)
    finally:
        pool.close()

asyncio.run(main())  # no `if __name__ == "__main__":`
"""


def test_a_script_without_the_main_guard_is_told_what_to_do(tmp_path: Path) -> None:
    # Worker processes import the script again; there it cannot start workers of its own,
    # and what it is told must be the fix, not multiprocessing's internals.
    script = tmp_path / "script.py"
    script.write_text(UNGUARDED_SCRIPT)
    repo = Path(__file__).resolve().parents[1]
    env = {**os.environ, "PYTHONPATH": str(repo)}
    done = subprocess.run(
        [sys.executable, str(script)], cwd=tmp_path, env=env, capture_output=True, text=True,
        timeout=120, check=False,
    )  # fmt: skip
    errors = [line for line in done.stdout.splitlines() if line.startswith("error")]
    assert errors, done.stdout + done.stderr
    for line in errors:
        assert line.startswith("error WorkerWontStart extraction workers cannot start: a script")
        assert "bootstrapping" not in line
