"""Background jobs, whatever they do (research, crawl): each runs in a task of the process
that accepted it, its events numbered and kept, so that a client can follow them live, drop
the connection, and resume after the last event it saw (``Last-Event-ID``); finished jobs
stay readable for ``research.retention_s``. A kind of job is a subclass saying what its job
does (``_work``), how it is shown (``_view``) and how long it may take (``_deadline_s``);
this class does the bookkeeping: starting, status, streams, cancelling, the state store
(``research/job_store.py``), stopping with the server.

A job runs in the process that accepted it; its record and every event are also written
to the state store, so that any worker or replica can show its status and stream its
events, and a job whose process died (its owner stopped renewing its heartbeat) reads as
``failed: interrupted``, with its events so far. A job that ends while the store cannot be
reached is written again until the store takes it.

With API keys, a job is its key's: to any other key it does not exist.

Lifetimes in the store: a running job's record and events live for its own deadline plus
``GRACE_S`` plus ``retention_s``, renewed as it goes; when it ends, its record lives
``retention_s`` from then and its events a little longer, so a job that can be read can
always be streamed whole. Finished jobs are read from the store; this process keeps only
the last ``KEEP_FINISHED`` of them in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Generic, TypeVar, cast, get_args

from searcher.auth.access import EVERY, CollectionAccess
from searcher.config import ResearchSettings
from searcher.contract import JobEvent, JobFailure, JobStatus, JobView
from searcher.errors import JobFailed, SearcherError, StateUnavailable
from searcher.research.job_store import (
    EVENTS_OUTLIVE_S,
    FINISHED,
    INTERRUPTED,
    JobKind,
    JobStore,
    Record,
    now_utc,
    written,
)
from searcher.state.failsoft import FailSoftStore

log = logging.getLogger("searcher.jobs")
# Beyond its own deadline a job gets this long to end cleanly before it is stopped.
GRACE_S = 5.0
# Finished jobs kept in memory (the newest); older ones are read from the state store.
KEEP_FINISHED = 8
ENDING: frozenset[str] = frozenset({"error", "done"})
# A finished job whose record the store did not take is written again, first this soon,
# then twice as long each time up to REWRITE_MAX_S: a stream on another worker ends within
# about that much of the store's return.
REWRITE_FIRST_S = 0.1
REWRITE_MAX_S = 2.0

V = TypeVar("V", bound=JobView)
E = TypeVar("E", bound=JobEvent)


class CancelledElsewhere(SearcherError):
    """A DELETE reached another process: the job stops at its next event."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"job {job_id!r} was cancelled")
        self.job_id = job_id


@dataclass(kw_only=True)
class Job(Generic[E]):
    """One job's bookkeeping; a kind of job adds what it was asked and what it found."""

    id: str
    status: JobStatus = "queued"
    created_utc: str = field(default_factory=now_utc)
    updated_utc: str = field(default_factory=now_utc)
    events: list[E] = field(default_factory=list)
    progress: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    error_kind: JobFailure | None = None  # why it failed, typed (``error`` says it in words)
    finished_at: float | None = None  # monotonic
    owner: str = ""  # the book (process) running it
    # Who started it: the pages it reads count against that caller's share of the
    # extraction workers, as the pages of its searches do (``None``: a local caller).
    client: str | None = None
    # The id of the API key that started it: only that key sees, follows or cancels it.
    # None (no keys, or MCP over stdio): anyone holding its id does.
    key: str | None = None
    access: CollectionAccess = EVERY  # the collections of own documents it may search
    task: asyncio.Task[None] | None = None
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)
    recorded_at: float = float("-inf")  # monotonic: its record last written while running


J = TypeVar("J", bound=Job[Any])


class JobRunner(Generic[J, V, E]):
    """The jobs of one kind this process runs, and the door to those other processes run:
    start, look up, follow, cancel. ``store`` (the state store) makes jobs outlive the
    process and visible to every worker and replica; without it they live here only."""

    def __init__(
        self, settings: ResearchSettings, store: FailSoftStore | None, kind: JobKind[V, E]
    ) -> None:
        self._settings = settings
        self._kind = kind
        self._jobs: dict[str, J] = {}  # running (or about to)
        self._finished: OrderedDict[str, J] = OrderedDict()  # the newest, oldest first
        self.owner = uuid.uuid4().hex
        self._store: JobStore[V, E] = JobStore(store, settings, self.owner, kind)
        self._rewrites: dict[str, asyncio.Task[None]] = {}  # finished jobs not yet stored
        self._closing = False

    # A running job's record is written after every event, or at most this often.
    record_every_s: float = 0.0

    # --- what a kind of job says --------------------------------------------------------

    def _view(self, job: J) -> V:
        """The job as its status route shows it."""
        raise NotImplementedError

    def _deadline_s(self, job: J) -> float:
        """How long the job may run (``GRACE_S`` more and it is stopped)."""
        raise NotImplementedError

    async def _work(self, job: J) -> None:
        """What the job does; ``JobFailed`` ends it ``failed`` with the message."""
        raise NotImplementedError

    def _progress(self, progress: dict[str, Any], kind: str, data: dict[str, Any]) -> None:
        """What the status of a running job shows, updated as an event is added."""
        progress["last_event"] = kind

    def _done_data(self, job: J) -> dict[str, Any]:
        """What the ``done`` event says beyond the status."""
        return {}

    # --- the jobs -----------------------------------------------------------------------

    def running(self, key: str | None = None) -> int:
        """Jobs running in this process; with ``key``, those that key started."""
        return sum(
            1
            for job in self._jobs.values()
            if job.status not in FINISHED and (key is None or job.key == key)
        )

    def held(self) -> int:
        """Jobs this process holds in memory: those running and the newest finished."""
        return len(self._jobs) + len(self._finished)

    async def _start(self, job: J) -> J:
        """Run ``job`` in the background (its id handed out once this returns)."""
        job.owner = self.owner
        self._jobs[job.id] = job
        await self._store.start_heart()
        # Readable everywhere before its id is handed out (if the store is away, from the
        # job's next event on: it runs here either way).
        await written(self._save(job))
        job.task = asyncio.create_task(self._run(job), name=f"{self._kind.what}-{job.id}")
        return job

    async def view(self, job_id: str, key: str | None = None) -> V:
        """The job's status (``JobNotFound`` if no process knows it, or another ``key``
        started it: to that key it does not exist)."""
        self._expire()
        job = self._local(job_id, key)
        if job is not None:
            return self._view(job)
        await self._store.start_heart()
        return (await self._store.stored(job_id, key)).view

    async def cancel(self, job_id: str, key: str | None = None) -> V:
        """Stop a job of ``key`` (a finished one stays as it is). A job of another process
        is asked to stop through the store; it ends ``cancelled`` at its next step."""
        job = self._local(job_id, key)
        if job is None:
            await self._store.start_heart()
            seen = await self._store.stored(job_id, key)
            await self._store.ask_cancel(seen)
            return seen.view
        if job.task is not None and not job.task.done():
            job.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await job.task
        if job.status not in FINISHED:  # cancelled before its task began: it ends here
            await self._finish(job, "cancelled", "cancelled")
        return self._view(job)

    async def follow(
        self,
        job_id: str,
        after: int = 0,
        heartbeat_s: float | None = None,
        seen: V | None = None,
        key: str | None = None,
    ) -> AsyncIterator[E | None]:
        """The job's events after event ``after``, as they come, until its last one;
        ``None`` every ``heartbeat_s`` of silence (for a keep-alive). An ``after`` beyond
        the events a running job has so far counts from its last one: the stream must
        still end with the job's ``done``. ``seen``: the job as just read (``view``), so
        that a job expiring right after it is still streamed whole. ``key``: as for
        ``view``."""
        job = self._local(job_id, key)
        if job is None:
            await self._store.start_heart()
            async for event in self._store.follow(job_id, after, heartbeat_s, seen, key):
                yield event
            return
        sent = min(max(0, after), len(job.events))
        while True:
            async with job.changed:
                if sent >= len(job.events) and job.status not in FINISHED:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(job.changed.wait(), heartbeat_s)
            fresh = job.events[sent:]
            for event in fresh:
                yield event
            sent += len(fresh)
            if job.status in FINISHED and sent >= len(job.events):
                return
            if not fresh:
                yield None

    async def end_running(self) -> None:
        """Stop every running job: each ends ``failed: interrupted`` with its ``error`` and
        ``done`` events, so that the streams following it end too (the server stops)."""
        self._closing = self._store.closing = True
        tasks = [j.task for j in self._jobs.values() if j.task is not None]
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
        for job in list(self._jobs.values()):
            if job.status not in FINISHED:  # stopped before its task began
                await self._finish(job, "failed", INTERRUPTED)

    async def close(self) -> None:
        """End the running jobs (``end_running``), then the writes still waiting for the
        store, then this process's heartbeat."""
        await self.end_running()
        rewrites = list(self._rewrites.values())
        for task in rewrites:
            task.cancel()
        await asyncio.gather(*rewrites, return_exceptions=True)
        if rewrites:
            log.warning(
                "%d finished %s job(s) never reached the state store: other workers "
                "will show them as their owner last wrote them", len(rewrites), self._kind.what,
            )  # fmt: skip
        await self._store.stop_heart()

    # --- the store ----------------------------------------------------------------------

    def _local(self, job_id: str, key: str | None) -> J | None:
        job = self._jobs.get(job_id) or self._finished.get(job_id)
        return job if job is not None and job.key == key else None

    def _ttl(self, job: J) -> float:
        """How long a running job's record and events live: its own deadline (which the
        request's budget may raise far beyond the preset's), then ``retention_s``."""
        return self._deadline_s(job) + GRACE_S + self._settings.retention_s

    async def _save(self, job: J) -> None:
        """The job's record; once it is finished, for ``retention_s`` from now."""
        await self._store.save_record(Record(self._view(job), job.owner, self._ttl(job), job.key))

    async def _emit(
        self, job: J, kind: str, data: dict[str, Any], final: JobStatus | None = None
    ) -> None:
        """Add an event; with ``final``, the job ends with it (the same step, so nobody
        sees the last event without the final status, or the status without the event)."""
        if kind not in ENDING and await self._store.cancel_asked(job.id):
            raise CancelledElsewhere(job.id)  # before the event: nothing runs after it
        async with job.changed:
            if job.status in FINISHED:  # a step that outlived its job: nothing after done
                return
            event = self._kind.event_type(
                id=len(job.events) + 1, type=kind, ts=now_utc(), data=data
            )
            job.events.append(event)
            job.updated_utc = now_utc()
            self._progress(job.progress, kind, data)
            if final is not None:
                job.status = final
                job.finished_at = time.monotonic()
            job.changed.notify_all()
        # The job goes on without the store: what it missed, its next event's record and
        # its final writes (``_keep_final``) put right.
        ttl_s = self._ttl(job) + EVENTS_OUTLIVE_S
        if await written(self._store.save_event(job.id, event, ttl_s)) and self._record_due(job):
            await written(self._save(job))

    def _record_due(self, job: J) -> bool:
        """Whether a running job's record is written again after this event: always, or
        at most every ``record_every_s`` (a record that grows with every event, as a
        crawl's pages, would otherwise cost the square of its size; readers elsewhere
        see its events at once, and the count and status at most that late)."""
        now = time.monotonic()
        if now - job.recorded_at < self.record_every_s:
            return False
        job.recorded_at = now
        return True

    async def _set(self, job: J, status: JobStatus, error: str | None = None) -> None:
        async with job.changed:
            job.status, job.error, job.updated_utc = status, error, now_utc()
            if status in FINISHED:
                job.finished_at = time.monotonic()
            job.changed.notify_all()
        await written(self._save(job))

    async def _run(self, job: J) -> None:
        limit_s = self._deadline_s(job)
        status: JobStatus = "done"
        error = None
        try:
            await self._set(job, "running")
            async with asyncio.timeout(limit_s + GRACE_S):
                await self._work(job)
        except asyncio.CancelledError:
            status, error = ("failed", INTERRUPTED) if self._closing else ("cancelled", "cancelled")
            job.error_kind = "interrupted" if self._closing else None
        except CancelledElsewhere:
            status, error = "cancelled", "cancelled"
        except JobFailed as exc:
            status, error = "failed", str(exc)
            job.error_kind = _failure(exc.kind)
        except TimeoutError:
            status, error = "failed", f"did not finish within {limit_s + GRACE_S:.0f} s"
            job.error_kind = "timed_out"
        except Exception as exc:  # a bug must end the job, not leave it running for ever
            log.exception("%s job %s crashed", self._kind.what, job.id)
            status, error = "failed", f"internal error: {type(exc).__name__}"
            job.error_kind = "internal_error"
        await self._finish(job, status, error)

    async def _finish(self, job: J, status: JobStatus, error: str | None) -> None:
        """End the job (``_end``) and retire it. The ending runs to its end whatever
        cancels the caller meanwhile: a DELETE landing during its writes left the job
        ``running`` for ever, its stream open and its slot taken."""
        ending = asyncio.ensure_future(self._end(job, status, error))
        try:
            while not ending.done():
                with contextlib.suppress(asyncio.CancelledError):
                    await asyncio.shield(ending)
        finally:
            self._retire(job)
        ending.result()  # its own failure (the store's), if any

    async def _end(self, job: J, status: JobStatus, error: str | None) -> None:
        """The job's last events; then its events get its record's lifetime."""
        if error is not None:
            await self._emit(job, "error", {"status": status, "message": error})
        done: dict[str, Any] = {"status": status} | self._done_data(job)
        job.error = error
        await self._emit(job, "done", done, final=status)
        await self._keep_final(job)

    async def _keep_final(self, job: J) -> None:
        """Store the finished job, or keep trying (``_rewrite``) until the store takes it:
        until then other workers show it running, and streams there cannot end."""
        if not await self._store_final(job):
            self._rewrites[job.id] = asyncio.create_task(
                self._rewrite(job), name=f"{self._kind.what}-rewrite-{job.id}"
            )

    async def _store_final(self, job: J) -> bool:
        """Every event with its record's lifetime (no longer the running job's), then the
        record; False if the store did not take them all."""
        try:
            for event in job.events:
                await self._store.save_event(job.id, event, self._store.finished_event_ttl())
            await self._save(job)
        except StateUnavailable:
            return False
        return True

    async def _rewrite(self, job: J) -> None:
        """Write a finished job again, backing off up to ``REWRITE_MAX_S``, until the store
        takes it (or its record would have expired by now anyway)."""
        wait, give_up = REWRITE_FIRST_S, time.monotonic() + self._settings.retention_s
        try:
            while time.monotonic() < give_up:
                await asyncio.sleep(wait)
                if await self._store_final(job):
                    log.info(
                        "%s job %s: its final record is stored at last", self._kind.what, job.id
                    )
                    return
                wait = min(wait * 2, REWRITE_MAX_S)
        finally:
            self._rewrites.pop(job.id, None)

    def _retire(self, job: J) -> None:
        """Move a finished job among the newest finished; the oldest beyond
        ``KEEP_FINISHED`` are forgotten here (the store serves them)."""
        self._jobs.pop(job.id, None)
        self._finished[job.id] = job
        while len(self._finished) > KEEP_FINISHED:
            self._finished.popitem(last=False)

    def _expire(self) -> None:
        """Forget finished jobs older than ``retention_s`` (the store expires its own)."""
        now = time.monotonic()
        keep = self._settings.retention_s
        for job_id, job in list(self._finished.items()):
            if job.finished_at is not None and now - job.finished_at > keep:
                del self._finished[job_id]


def _failure(kind: str) -> JobFailure:
    """``kind`` as a ``JobFailure`` (one not listed is ``failed``)."""
    return cast(JobFailure, kind) if kind in get_args(JobFailure) else "failed"
