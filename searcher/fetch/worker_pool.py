"""A small process pool whose tasks can be stopped: a task over its time limit, or whose
caller gave up, has its worker process killed, and the pool starts a new one.

Why our own pool: ``concurrent.futures.ProcessPoolExecutor`` cannot stop one running task
(cancelling a running future does nothing; the only way out is to break the whole pool),
so one page that takes trafilatura minutes held a worker for minutes after its request had
given up. Libraries that can kill a task (pebble) run their own manager threads and know
nothing of our callers; here every worker is one process and one pipe, driven from the
event loop, and the same scheduler that hands out workers enforces each client's share.

Scheduling: at most ``workers`` tasks run at once. Each client is guaranteed
``client_share`` of them, and may borrow more while no other client waits (a lone request
on an idle pool gets every worker). When a task within its client's share must wait
because workers run borrowed tasks, the most recently started borrowed task is preempted:
its worker is killed and the task queued again, to run later from scratch (after
``MAX_PREEMPTIONS`` it waits for a worker within its share instead of borrowing). So a
caller sending hostile pages holds only its share while anyone else waits. Waiting tasks
are served by fewest running tasks per client, then in arrival order. ``client=None`` is
the anonymous caller: its share is every worker.

Memory: with ``memory_limit_bytes`` each worker bounds its own address space before it
runs anything (``searcher.fetch.memory_bound``); a task that runs into the bound (a
``MemoryError``, or the worker ended by the abort or kill that failed allocations bring)
raises ``WorkerOutOfMemory``, and its worker is replaced.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import multiprocessing
import pickle
import signal
from collections import Counter
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from multiprocessing.connection import Connection, wait
from multiprocessing.process import BaseProcess
from typing import Any

from searcher.fetch.memory_bound import bound_address_space, ended_by_memory

log = logging.getLogger(__name__)

Job = tuple[Callable[..., Any], tuple[Any, ...]]
# A worker's reply status for a job that raised MemoryError (the others: "ok", "error").
_OUT_OF_MEMORY = "out_of_memory"
# How long a dead worker's exit code may take to arrive (the fork server reports it).
_EXIT_CODE_WAIT_S = 5.0
# How often one task may be preempted before it stops borrowing (so it is not starved).
MAX_PREEMPTIONS = 3


class TaskKilled(Exception):
    """The task ran past its time limit (or its caller left) and its worker was killed."""


class WorkerDied(Exception):
    """The worker process died while running the task (crash, out of memory, signal)."""


class WorkerOutOfMemory(WorkerDied):
    """The task ran into the worker's memory bound; the worker was replaced."""


class WorkerWontStart(Exception):
    """No worker process could be started; the message says why, in our words."""


def _why_no_start(exc: Exception) -> str:
    if "bootstrapping phase" in str(exc):
        # multiprocessing's own words for a script that starts work when it is imported.
        return (
            "extraction workers cannot start: a script that runs searcher must do so under "
            '`if __name__ == "__main__":` (each worker process imports it again)'
        )
    return f"extraction workers cannot start ({type(exc).__name__})"


class _Preempted(Exception):
    """The task ran on a borrowed worker that a client within its share needed."""


class TaskFailed(Exception):
    """The task raised; ``error`` is the exception (re-created in this process)."""

    def __init__(self, error: BaseException) -> None:
        super().__init__(f"{type(error).__name__}: {error}")
        self.error = error


def _worker_main(
    conn: Connection,
    initializer: Callable[[], None] | None = None,
    memory_limit_bytes: int | None = None,
) -> None:
    """A worker's life: bound its memory, get ready (``initializer``), then run one job at
    a time until the pipe closes, or until a job runs out of memory (a heap that failed
    an allocation halfway through a C library is not trusted with the next job)."""
    # Ctrl-C reaches the whole process group; the parent decides when workers stop.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    if memory_limit_bytes is not None:
        bound_address_space(memory_limit_bytes)  # before anything else is allocated
    if initializer is not None:
        with contextlib.suppress(Exception):  # a failed warm-up costs the first job time only
            initializer()
    while True:
        try:
            fn, args = conn.recv()
        except (EOFError, OSError):
            return
        try:
            reply: tuple[str, Any] = ("ok", fn(*args))
        except MemoryError as exc:
            reply = (_OUT_OF_MEMORY, str(exc))
        except Exception as exc:  # reported to the caller, who decides what it means
            reply = ("error", exc)
        try:
            conn.send(reply)
        except (pickle.PicklingError, TypeError, AttributeError):
            conn.send(("error", RuntimeError(f"{type(reply[1]).__name__}: {reply[1]}")))
        if reply[0] == _OUT_OF_MEMORY:
            return  # the parent sees the process end and starts another when needed


class _NotDelivered(Exception):
    """The worker never read the job: it had ended while idle (before the forkserver, its
    parent, told us, so it still looked alive). The job never ran."""


def _round_trip(conn: Connection, sentinel: int, job: Job) -> tuple[str, Any]:
    """Send a job and wait for its reply (in a thread: both can block on a full pipe).
    Raises ``EOFError`` when the worker process ends first: its sentinel, not the pipe,
    says so, since a copy of the pipe's far end may live on elsewhere; ``_NotDelivered``
    when it had ended without reading the job (a broken pipe, or a reset: a socket closed
    with unread data in it is reset, one whose reader had read everything is not)."""
    try:
        conn.send(job)
        ready = wait([conn, sentinel])
        if conn not in ready:
            raise EOFError("the worker process ended")
        reply: tuple[str, Any] = conn.recv()
    except (BrokenPipeError, ConnectionResetError) as exc:
        raise _NotDelivered from exc
    except EOFError:
        # The pipe closes as the process dies, a moment before its exit code is known;
        # the caller reads that code (was it out of memory?), so wait for it.
        wait([sentinel], timeout=_EXIT_CODE_WAIT_S)
        raise
    return reply


@dataclass(eq=False)
class _Worker:
    process: BaseProcess
    conn: Connection
    jobs: int = 0

    def kill(self) -> None:
        # SIGKILL: a worker stuck in C code (lxml) does not run Python signal handlers.
        with contextlib.suppress(OSError, ValueError):
            self.process.kill()

    def reap(self) -> None:
        """Close our end of the pipe and collect the process (it was killed or exited)."""
        with contextlib.suppress(OSError):
            self.conn.close()
        with contextlib.suppress(OSError, ValueError, AssertionError):
            self.process.join(timeout=5)


@dataclass(eq=False)
class _Slot:
    """One task's claim on a worker: waiting until ``granted``, then running; a borrowed
    slot (beyond its client's share) can be told to give its worker back (``preempt``)."""

    client: str | None
    granted: asyncio.Future[None]
    preempt: asyncio.Future[None]
    order: int
    may_borrow: bool
    borrowed: bool = False


@dataclass
class PoolStats:
    """What the pool has done since it started."""

    workers: int
    running: int  # tasks holding a worker slot
    waiting: int
    busy: int = 0  # workers running a task now
    started: int = 0
    killed: int = 0
    died: int = 0
    out_of_memory: int = 0  # of those that died, ran into their memory bound
    borrowing: int = 0  # running tasks beyond their client's share now
    borrowed: int = 0  # tasks ever started beyond their client's share
    preempted: int = 0  # borrowed tasks stopped for a client within its share, re-queued
    by_client: dict[str, int] = field(default_factory=dict)


class WorkerPool:
    """Runs picklable module-level functions in worker processes, each task under a time
    limit; see the module docstring for why and how it schedules."""

    def __init__(
        self,
        workers: int,
        client_share: int | None = None,
        *,
        preload: Sequence[str] = (),
        initializer: Callable[[], None] | None = None,
        memory_limit_bytes: int | None = None,
    ) -> None:
        """``memory_limit_bytes``: each worker's address-space bound (``None``: none)."""
        if workers < 1:
            raise ValueError("a pool needs at least one worker")
        self.workers = workers
        self.client_share = max(1, min(client_share or workers, workers))
        self._initializer = initializer
        self.memory_limit_bytes = memory_limit_bytes
        # "forkserver": forking a process that runs threads (ours do) is unsafe.
        self._context = multiprocessing.get_context("forkserver")
        if preload:
            # Workers fork from a server that has imported these already, so a replacement
            # worker is ready in milliseconds instead of re-importing trafilatura and lxml.
            self._context.set_forkserver_preload(list(preload))
        # One thread per running task (blocking pipe I/O) plus one for starting workers.
        self._threads = ThreadPoolExecutor(workers + 1, thread_name_prefix="worker-pool")
        self._idle: list[_Worker] = []
        self._busy: set[_Worker] = set()
        self._running: Counter[str | None] = Counter()
        self._waiters: list[_Slot] = []
        self._held: list[_Slot] = []  # granted slots, in the order they started
        self._arrivals = 0
        self._stats = PoolStats(workers=workers, running=0, waiting=0)
        self._closed = False

    # --- scheduling ----------------------------------------------------------------------

    def _cap(self, client: str | None) -> int:
        return self.workers if client is None else self.client_share

    def _within_share(self, client: str | None) -> bool:
        return self._running[client] < self._cap(client)

    async def _acquire(self, client: str | None, may_borrow: bool) -> _Slot:
        loop = asyncio.get_running_loop()
        self._arrivals += 1
        slot = _Slot(client, loop.create_future(), loop.create_future(), self._arrivals, may_borrow)
        self._waiters.append(slot)
        self._grant_waiting()
        try:
            await slot.granted
        except BaseException:
            if slot.granted.done() and not slot.granted.cancelled():
                self._release(slot)  # granted just as the caller gave up: pass it on
            elif slot in self._waiters:
                self._waiters.remove(slot)
            raise
        return slot

    def _release(self, slot: _Slot) -> None:
        self._held.remove(slot)
        self._running[slot.client] -= 1
        if self._running[slot.client] <= 0:
            del self._running[slot.client]
        if not slot.borrowed:
            # The client is below its share again: its oldest borrowed task now counts
            # within it, and is no longer one to preempt.
            own = [s for s in self._held if s.client == slot.client and s.borrowed]
            if own:
                own[0].borrowed = False
        self._grant_waiting()

    def _grant(self, slot: _Slot, borrowed: bool) -> None:
        self._waiters.remove(slot)
        slot.borrowed = borrowed
        if borrowed:
            self._stats.borrowed += 1
        self._running[slot.client] += 1
        self._held.append(slot)
        slot.granted.set_result(None)

    def _grant_waiting(self) -> None:
        # A waiter whose caller was cancelled has a cancelled future: it gets nothing.
        self._waiters = [w for w in self._waiters if not w.granted.done()]
        while self._running.total() < self.workers:
            within = [w for w in self._waiters if self._within_share(w.client)]
            # Borrowing only once nobody within their share waits (none do, here).
            chosen_from = within or [w for w in self._waiters if w.may_borrow]
            if not chosen_from:
                break
            chosen = min(chosen_from, key=lambda w: (self._running[w.client], w.order))
            self._grant(chosen, borrowed=not within)
        self._preempt_for_waiting()

    def _preempt_for_waiting(self) -> None:
        """Ask as many borrowed tasks to give their workers back (most recently started
        first) as there are waiting tasks within their clients' share."""
        owed: Counter[str | None] = Counter()
        for w in self._waiters:
            room = max(0, self._cap(w.client) - self._running[w.client])
            owed[w.client] = min(owed[w.client] + 1, room)
        needed = owed.total() - sum(1 for s in self._held if s.preempt.done())
        for slot in reversed(self._held):
            if needed <= 0:
                return
            if slot.borrowed and not slot.preempt.done():
                slot.preempt.set_result(None)
                needed -= 1

    # --- workers -------------------------------------------------------------------------

    def _spawn(self) -> _Worker:
        ours, theirs = self._context.Pipe(duplex=True)
        process = self._context.Process(
            target=_worker_main,
            args=(theirs, self._initializer, self.memory_limit_bytes),
            daemon=True,
        )
        process.start()
        theirs.close()  # the worker holds its end; when it dies, our recv() sees EOF
        return _Worker(process, ours)

    async def _worker(self) -> _Worker:
        while self._idle:
            worker = self._idle.pop()
            if worker.process.is_alive():
                return worker
            worker.reap()
        loop = asyncio.get_running_loop()
        starting = loop.run_in_executor(self._threads, self._spawn)
        try:
            worker = await asyncio.shield(starting)
        except asyncio.CancelledError:
            # The caller left while the worker was starting: keep the worker for the next.
            starting.add_done_callback(self._keep_started)
            raise
        except Exception as exc:
            log.warning("an extraction worker could not start: %r", exc)
            raise WorkerWontStart(_why_no_start(exc)) from exc
        self._stats.started += 1
        return worker

    def _keep_started(self, starting: asyncio.Future[_Worker]) -> None:
        if not starting.cancelled() and starting.exception() is None:
            self._stats.started += 1
            self._idle.append(starting.result())

    # --- running -------------------------------------------------------------------------

    async def run(
        self,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        *,
        timeout_s: float,
        client: str | None = None,
    ) -> Any:
        """``fn(*args)`` in a worker. Raises ``TaskKilled`` past ``timeout_s`` (the worker is
        killed), ``WorkerDied`` if the worker crashed, ``TaskFailed`` if ``fn`` raised. If
        the caller is cancelled, the worker running its task is killed too."""
        if self._closed:
            raise RuntimeError("the worker pool is closed")
        preemptions = 0
        while True:
            slot = await self._acquire(client, may_borrow=preemptions < MAX_PREEMPTIONS)
            try:
                return await self._run_acquired(fn, args, timeout_s, slot)
            except _Preempted:
                preemptions += 1  # not a failure: it queues again and runs from scratch
            finally:
                self._release(slot)

    async def _run_acquired(
        self, fn: Callable[..., Any], args: tuple[Any, ...], timeout_s: float, slot: _Slot
    ) -> Any:
        try:
            return await self._run_on(await self._worker(), fn, args, timeout_s, slot)
        except _NotDelivered:
            pass  # it died while idle; the job never ran: a fresh worker takes it
        try:
            return await self._run_on(await self._worker(), fn, args, timeout_s, slot)
        except _NotDelivered as exc:
            raise WorkerDied("no worker process could take the task") from exc

    async def _run_on(
        self,
        worker: _Worker,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        timeout_s: float,
        slot: _Slot,
    ) -> Any:
        # Time spent starting a worker does not count against the task.
        deadline = asyncio.get_running_loop().time() + max(0.0, timeout_s)
        self._busy.add(worker)
        try:
            return await self._call(worker, fn, args, deadline, timeout_s, slot)
        finally:
            self._busy.discard(worker)

    async def _call(
        self,
        worker: _Worker,
        fn: Callable[..., Any],
        args: tuple[Any, ...],
        deadline: float,
        timeout_s: float,
        slot: _Slot,
    ) -> Any:
        loop = asyncio.get_running_loop()
        client = slot.client
        pending = loop.run_in_executor(
            self._threads, _round_trip, worker.conn, worker.process.sentinel, (fn, args)
        )
        try:
            async with asyncio.timeout_at(deadline):
                # asyncio.wait leaves ``pending`` running when it times out or is cancelled.
                either: list[asyncio.Future[Any]] = [pending, slot.preempt]
                await asyncio.wait(either, return_when=asyncio.FIRST_COMPLETED)
            if not pending.done():
                self._stop(worker, pending, "preempted", client)
                raise _Preempted
            status, value = pending.result()
        except TimeoutError as exc:
            self._stop(worker, pending, "killed", client)
            raise TaskKilled(f"still running after {timeout_s:g} s; its worker was killed") from exc
        except asyncio.CancelledError:
            self._stop(worker, pending, "killed", client)
            raise
        except _Preempted:
            raise
        except _NotDelivered:
            self._stop(worker, pending, "died", client)
            raise
        except (EOFError, OSError) as exc:
            out_of_memory = self._out_of_memory(worker)  # its exit code, before any kill
            self._stop(worker, pending, "died", client)
            if out_of_memory:
                raise WorkerOutOfMemory(self._over_bound()) from exc
            raise WorkerDied("the worker process died while running the task") from exc
        except Exception as exc:
            # The job or its reply did not survive pickling (an exception whose constructor
            # takes two arguments pickles in the worker but not back here): what is left in
            # the pipe is unknown, so the worker goes rather than back to the idle list.
            self._stop(worker, pending, "unreadable", client)
            raise TaskFailed(exc) from exc
        worker.jobs += 1
        if status == _OUT_OF_MEMORY:
            self._stop(worker, pending, "out_of_memory", client)  # it is ending itself
            raise WorkerOutOfMemory(self._over_bound())
        self._idle.append(worker)
        if status == "error":
            raise TaskFailed(value)
        return value

    def _stop(
        self, worker: _Worker, pending: asyncio.Future[Any], why: str, client: str | None
    ) -> None:
        worker.kill()
        if why == "killed":
            self._stats.killed += 1
            log.warning("worker pool: killed a task of client %r (over time or abandoned)", client)
        elif why == "unreadable":
            self._stats.killed += 1
            log.warning(
                "worker pool: a reply to client %r could not be read; killed its worker", client
            )
        elif why == "preempted":
            self._stats.preempted += 1
        else:
            self._stats.died += 1
        if why == "out_of_memory":
            self._stats.out_of_memory += 1
            log.warning("worker pool: a task of client %r ran out of memory", client)
        # The thread blocked in recv() wakes with EOF once the process is gone; reap then.
        pending.add_done_callback(lambda done: self._reap_after(worker, done))

    def _reap_after(self, worker: _Worker, done: asyncio.Future[Any]) -> None:
        if not done.cancelled():
            done.exception()  # EOFError, expected: the worker is gone
        if not self._closed:
            self._threads.submit(worker.reap)
        else:
            worker.reap()

    def _out_of_memory(self, worker: _Worker) -> bool:
        """Whether a worker that died under a task ran into its memory bound (counted
        as such); a pool closing kills its workers itself."""
        if self.memory_limit_bytes is None or self._closed:
            return False
        if not ended_by_memory(worker.process.exitcode):
            return False
        self._stats.out_of_memory += 1
        log.warning(
            "worker pool: a worker ran out of memory (exit code %s)", worker.process.exitcode
        )
        return True

    def _over_bound(self) -> str:
        limit_mb = (self.memory_limit_bytes or 0) >> 20
        return f"the task needed more than the worker's {limit_mb} MB; its worker was replaced"

    def stats(self) -> PoolStats:
        """Counts since start, and what is running and waiting now."""
        stats = PoolStats(
            workers=self.workers,
            running=self._running.total(),
            waiting=len(self._waiters),
            busy=len(self._busy),
            started=self._stats.started,
            killed=self._stats.killed,
            died=self._stats.died,
            out_of_memory=self._stats.out_of_memory,
            borrowing=sum(1 for s in self._held if s.borrowed),
            borrowed=self._stats.borrowed,
            preempted=self._stats.preempted,
            by_client={str(k): v for k, v in self._running.items()},
        )
        return stats

    def close(self) -> None:
        """Stop every worker; running tasks end with ``WorkerDied`` or ``TaskKilled``."""
        self._closed = True
        idle, self._idle = self._idle, []
        for worker in idle:
            with contextlib.suppress(OSError):
                worker.conn.close()  # the worker's recv() sees EOF and it exits
        for worker in idle:
            with contextlib.suppress(OSError, ValueError, AssertionError):
                worker.process.join(timeout=2)
            worker.kill()
        for worker in list(self._busy):
            worker.kill()
        self._threads.shutdown(wait=False, cancel_futures=True)
