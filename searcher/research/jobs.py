"""Research jobs: each runs the loop in the background, its typed events numbered and kept,
so that a client can follow them live, drop the connection, and resume after the last
event it saw (``Last-Event-ID``); finished jobs stay readable for ``research.retention_s``.

A job runs in the process that accepted it; its record and every event are also written
to the state store (the SQLite file, or Redis), so that any worker or replica can show
its status and stream its events, and a job whose process died (its owner stopped
renewing its heartbeat) reads as ``failed: interrupted``, with its events so far. A store
that cannot be reached is no death: nothing is said of other processes' jobs then (the
store raises), nobody is marked interrupted until this process has seen the store answer
for longer than ``owner_ttl_s``, and a job that ends meanwhile is written again until the
store takes it.

With API keys, a job is its key's: to any other key it does not exist.

Lifetimes in the store: a running job's record and events live for its own deadline (the
preset's, or the request's budget) plus ``GRACE_S`` plus ``retention_s``, renewed as it
goes; when it ends, its record lives ``retention_s`` from then and its events a little
longer, so a job that can be read can always be streamed whole. Finished jobs are read
from the store; this process keeps only the last ``KEEP_FINISHED`` of them in memory.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
import uuid
from collections import OrderedDict
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from searcher.backends.policy import plan_backends
from searcher.config import ResearchSettings
from searcher.contract import (
    EventType,
    JobStatus,
    ResearchEvent,
    ResearchJob,
    ResearchRequest,
    ResearchResult,
)
from searcher.errors import (
    JobNotFound,
    ResearchFailed,
    SearcherError,
    StateUnavailable,
    TooManyJobs,
    TooManyJobsForKey,
)
from searcher.pipeline.parts import Parts
from searcher.research.loop import Research
from searcher.research.presets import Bounded, resolve_within, within_time
from searcher.state.base import StateStore, get_json, set_json
from searcher.state.failsoft import FailSoftStore

log = logging.getLogger("searcher.research")
FINISHED: frozenset[JobStatus] = frozenset({"done", "failed", "cancelled"})
# Beyond its own deadline a job gets this long to write its report before it is stopped.
GRACE_S = 5.0
NAMESPACE = "research:"
INTERRUPTED = "interrupted: the server running the job stopped"
EXPIRED = "expired: the job's record is gone from the state store"
POLL_S = 0.25  # how often a stream of another process's job looks for new events
# A finished job's events outlive its record by this much: whoever can read the job can
# stream all of it.
EVENTS_OUTLIVE_S = 5.0
# Finished jobs kept in memory (the newest); older ones are read from the state store.
KEEP_FINISHED = 8
ENDING: frozenset[EventType] = frozenset({"error", "done"})
# A finished job whose record the store did not take is written again, first this soon,
# then twice as long each time up to REWRITE_MAX_S: a stream on another worker ends within
# about that much of the store's return.
REWRITE_FIRST_S = 0.1
REWRITE_MAX_S = 2.0


class CancelledElsewhere(SearcherError):
    """A DELETE reached another process: the job stops at its next event."""

    def __init__(self, job_id: str) -> None:
        super().__init__(f"research job {job_id!r} was cancelled")
        self.job_id = job_id


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass(frozen=True)
class _Record:
    """A job as the state store holds it: its view, the process running it, and the
    lifetime of its record and events while it runs."""

    view: ResearchJob
    owner: str
    ttl_s: float
    key: str | None = None  # the API key that started it (its id); None: anonymous


@dataclass
class Job:
    id: str
    request: ResearchRequest
    bounded: Bounded  # its limits, within the server's ceilings
    status: JobStatus = "queued"
    created_utc: str = field(default_factory=_now)
    updated_utc: str = field(default_factory=_now)
    events: list[ResearchEvent] = field(default_factory=list)
    progress: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    result: ResearchResult | None = None
    finished_at: float | None = None  # monotonic
    owner: str = ""  # the JobBook (process) running it
    # Who started it: the pages it reads count against that caller's share of the
    # extraction workers, as the pages of its searches do (``None``: a local caller).
    client: str | None = None
    # The id of the API key that started it: only that key sees, follows or cancels it.
    # None (no keys, or MCP over stdio): anyone holding its id does.
    key: str | None = None
    task: asyncio.Task[None] | None = None
    changed: asyncio.Condition = field(default_factory=asyncio.Condition)

    def view(self) -> ResearchJob:
        """The job as ``GET /v1/research/{id}`` shows it."""
        return ResearchJob(
            id=self.id, status=self.status, query=self.request.query_text,
            preset=self.request.preset, created_utc=self.created_utc,
            updated_utc=self.updated_utc, progress=dict(self.progress),
            events=len(self.events), error=self.error, result=self.result,
        )  # fmt: skip


def _progress(progress: dict[str, Any], kind: EventType, data: dict[str, Any]) -> None:
    """What ``GET /v1/research/{id}`` shows of a running job."""
    progress["last_event"] = kind
    if "round" in data:
        progress["round"] = data["round"]
    if kind == "plan":
        progress["sub_questions"] = progress.get("sub_questions", 0) + len(data["sub_questions"])
    elif kind == "search":
        progress["searches"] = progress.get("searches", 0) + 1
    elif kind == "read":
        progress["pages_read"] = progress.get("pages_read", 0) + 1
    elif kind == "evidence":
        progress["passages"] = data["passages"]


class JobBook:
    """The research jobs this process runs, and the door to those other processes run:
    submit, look up, follow, cancel. ``store`` (the state store) makes jobs outlive the
    process and visible to every worker and replica; without it they live here only."""

    def __init__(
        self, parts: Parts, settings: ResearchSettings, store: FailSoftStore | None = None
    ) -> None:
        self._parts = parts
        self._settings = settings
        # Jobs must tell an absent record from a store that cannot be reached (a worker
        # that read "absent" during an outage marked other workers' jobs interrupted).
        self._watched = store
        self._store: StateStore | None = store.strict if store is not None else None
        self._jobs: dict[str, Job] = {}  # running (or about to)
        self._finished: OrderedDict[str, Job] = OrderedDict()  # the newest, oldest first
        self.owner = uuid.uuid4().hex
        self._heart: asyncio.Task[None] | None = None
        self._watching_since: float | None = None  # monotonic: when the heartbeat began
        self._rewrites: dict[str, asyncio.Task[None]] = {}  # finished jobs not yet stored
        self._closing = False

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

    async def submit(
        self,
        request: ResearchRequest,
        max_time_ms: int | None = None,
        client: str | None = None,
        key: str | None = None,
    ) -> Job:
        """Start a job owned by ``key`` (an API key's id, None when anonymous);
        ``TooManyJobs`` when ``max_concurrent_jobs`` run in this process,
        ``TooManyJobsForKey`` when ``key`` runs its share of them already, ``InvalidRequest``
        for a budget above the server's ceilings under ``limits.strict``. ``max_time_ms``:
        a deadline the caller itself cannot outlast (an MCP exchange's), lowering the
        job's with a note, never refusing it. ``client``: who asks
        (``searcher.api.observe.client_identity``), whose share of the extraction
        workers the job's page reads count against."""
        self._expire()
        bounded = resolve_within(
            request.preset,
            request.budget,
            self._parts.settings.research,
            self._parts.settings.limits.strict,
        )
        if max_time_ms is not None:
            bounded = within_time(bounded, max_time_ms)
        retry_s = max(1, int(bounded.limits.max_total_time_ms / 1000 / 4))
        share = self._settings.jobs_per_key()
        if key is not None and self.running(key) >= share:
            raise TooManyJobsForKey(share, retry_s)
        if self.running() >= self._settings.max_concurrent_jobs:
            raise TooManyJobs(self._settings.max_concurrent_jobs, retry_s)
        # Unknown backend names are the caller's mistake (422 now), not the job's failure.
        plan_backends(
            request.constraints.backend, None, self._parts.settings, self._parts.pool.backends
        )
        job = Job(
            secrets.token_urlsafe(12), request, bounded, owner=self.owner, client=client, key=key
        )
        self._jobs[job.id] = job
        await self._start_heart()
        # Readable everywhere before its id is handed out (if the store is away, from the
        # job's next event on: it runs here either way).
        await _written(self._save(job))
        job.task = asyncio.create_task(self._run(job), name=f"research-{job.id}")
        return job

    async def view(self, job_id: str, key: str | None = None) -> ResearchJob:
        """The job's status (``JobNotFound`` if no process knows it, or another ``key``
        started it: to that key it does not exist)."""
        self._expire()
        job = self._local(job_id, key)
        if job is not None:
            return job.view()
        await self._start_heart()
        return (await self._stored(job_id, key)).view

    async def cancel(self, job_id: str, key: str | None = None) -> ResearchJob:
        """Stop a job of ``key`` (a finished one stays as it is). A job of another process
        is asked to stop through the store; it ends ``cancelled`` at its next step."""
        job = self._local(job_id, key)
        if job is None:
            await self._start_heart()
            seen = await self._stored(job_id, key)
            if seen.view.status not in FINISHED and self._store is not None:
                await self._store.set(self._key("cancel", job_id), b"1", seen.ttl_s)
            return seen.view
        if job.task is not None and not job.task.done():
            job.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await job.task
        if job.status not in FINISHED:  # cancelled before its task began: it ends here
            await self._finish(job, "cancelled", "cancelled")
        return job.view()

    async def follow(
        self,
        job_id: str,
        after: int = 0,
        heartbeat_s: float | None = None,
        seen: ResearchJob | None = None,
        key: str | None = None,
    ) -> AsyncIterator[ResearchEvent | None]:
        """The job's events after event ``after``, as they come, until its last one;
        ``None`` every ``heartbeat_s`` of silence (for a keep-alive). An ``after`` beyond
        the events a running job has so far counts from its last one: the stream must
        still end with the job's ``done``. ``seen``: the job as just read (``view``), so
        that a job expiring right after it is still streamed whole. ``key``: as for
        ``view``."""
        job = self._local(job_id, key)
        if job is None:
            await self._start_heart()
            async for event in self._follow_stored(job_id, after, heartbeat_s, seen, key):
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
        self._closing = True
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
                "%d finished research job(s) never reached the state store: other workers "
                "will show them as their owner last wrote them", len(rewrites),
            )  # fmt: skip
        if self._heart is not None:
            self._heart.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heart
            if self._store is not None:
                await _written(self._store.delete(self._key("alive", self.owner)))

    # --- the store ----------------------------------------------------------------------

    def _key(self, kind: str, *parts: str | int) -> str:
        return NAMESPACE + ":".join([kind, *(str(p) for p in parts)])

    def _local(self, job_id: str, key: str | None) -> Job | None:
        job = self._jobs.get(job_id) or self._finished.get(job_id)
        return job if job is not None and job.key == key else None

    def _ttl(self, job: Job) -> float:
        """How long a running job's record and events live: its own deadline (which the
        request's budget may raise far beyond the preset's), then ``retention_s``."""
        deadline_s = job.bounded.limits.max_total_time_ms / 1000
        return deadline_s + GRACE_S + self._settings.retention_s

    async def _start_heart(self) -> None:
        """Beat from this process's first look at the store on: the beats tell other
        processes it is alive, and keep this one watching the store (``_may_interrupt``)."""
        if self._store is None or self._heart is not None or self._closing:
            return
        self._watching_since = time.monotonic()
        await self._beat()
        self._heart = asyncio.create_task(self._keep_beating(), name="research-heartbeat")

    async def _beat(self) -> None:
        if self._store is not None:
            alive = self._store.set(
                self._key("alive", self.owner), b"1", self._settings.owner_ttl_s
            )
            await _written(alive)

    async def _keep_beating(self) -> None:
        while True:
            await asyncio.sleep(self._settings.owner_ttl_s / 3)
            await self._beat()

    def _may_interrupt(self) -> bool:
        """Whether an absent heartbeat means a dead owner. Only once this process has seen
        the store answer for longer than ``owner_ttl_s`` (its own beats, a third of that
        apart, would have seen an outage long enough to expire a heartbeat): right after an
        outage a live owner may not have beaten again yet."""
        if self._watched is None or self._watching_since is None:
            return False
        watched_s = time.monotonic() - self._watching_since
        return min(watched_s, self._watched.up_for()) > self._settings.owner_ttl_s

    async def _save(self, job: Job) -> None:
        """The job's record; once it is finished, for ``retention_s`` from now."""
        if self._store is not None:
            await self._save_record(_Record(job.view(), job.owner, self._ttl(job), job.key))

    async def _save_record(self, record: _Record) -> None:
        assert self._store is not None
        raw = {"owner": record.owner, "key": record.key,
               "view": record.view.model_dump(mode="json"), "ttl_s": record.ttl_s}  # fmt: skip
        finished = record.view.status in FINISHED
        ttl = self._settings.retention_s if finished else record.ttl_s
        await set_json(self._store, self._key("job", record.view.id), raw, ttl)

    async def _save_event(self, job_id: str, event: ResearchEvent, ttl_s: float) -> None:
        if self._store is not None:
            key = self._key("event", job_id, event.id)
            await set_json(self._store, key, event.model_dump(mode="json"), ttl_s)

    def _finished_event_ttl(self) -> float:
        return self._settings.retention_s + EVENTS_OUTLIVE_S

    async def _stored_event(self, job_id: str, n: int) -> ResearchEvent | None:
        """Event ``n`` of a job from the store (None if absent, expired or corrupt)."""
        raw = await get_json(self._store, self._key("event", job_id, n)) if self._store else None
        try:
            return ResearchEvent.model_validate(raw) if raw is not None else None
        except ValueError:
            return None

    async def _keep_events(self, job_id: str, count: int) -> int:
        """Give a finished job's stored events its record's lifetime (plus a little);
        returns the id of its last stored event, which may be beyond ``count``: the
        record is saved after the event, and a process can die between the two."""
        ttl = self._finished_event_ttl()
        last = 0
        for n in range(1, count + 1):
            event = await self._stored_event(job_id, n)
            if event is not None:
                await self._save_event(job_id, event, ttl)
                last = n
        while (event := await self._stored_event(job_id, max(last, count) + 1)) is not None:
            await self._save_event(job_id, event, ttl)
            last = event.id
        return max(last, count)

    async def _stored(self, job_id: str, key: str | None) -> _Record:
        """A job of ``key`` from the store; one whose owner stopped beating is
        ``interrupted`` (``_may_interrupt``). Another key's job is not found, as an unknown
        one. ``StateUnavailable`` when the store cannot be reached: nothing can be said."""
        raw = await get_json(self._store, self._key("job", job_id)) if self._store else None
        if not isinstance(raw, dict) or raw.get("key") != key:
            raise JobNotFound(job_id)
        try:
            view = ResearchJob.model_validate(raw["view"])
            ttl_s = float(raw.get("ttl_s", self._settings.retention_s))
        except (KeyError, TypeError, ValueError) as exc:
            raise JobNotFound(job_id) from exc
        record = _Record(view, str(raw.get("owner")), ttl_s, key)
        if view.status in FINISHED or self._store is None:
            return record
        if await self._store.get(self._key("alive", record.owner)) is not None:
            return record
        if not self._may_interrupt():
            return record  # as its owner last wrote it: the owner may be about to beat
        return await self._interrupt(record)

    async def _interrupt(self, record: _Record) -> _Record:
        """Mark a job whose process died as failed; the first reader to see it writes the
        last events (a counter decides who, so they are written once)."""
        assert self._store is not None
        view = record.view
        failed = view.model_copy(update={"status": "failed", "error": INTERRUPTED,
                                         "updated_utc": _now()})  # fmt: skip
        if await self._store.incr(self._key("interrupt", view.id), 1, record.ttl_s) == 1:
            last_id = await self._keep_events(view.id, view.events)
            last: list[tuple[EventType, dict[str, Any]]] = [
                ("error", {"status": "failed", "message": INTERRUPTED}),
                ("done", {"status": "failed"}),
            ]
            for n, (kind, data) in enumerate(last, start=last_id + 1):
                event = ResearchEvent(id=n, type=kind, ts=_now(), data=data)
                await self._save_event(view.id, event, self._finished_event_ttl())
            failed = failed.model_copy(update={"events": last_id + 2})
            await self._save_record(_Record(failed, record.owner, record.ttl_s, record.key))
        else:
            failed = failed.model_copy(update={"events": view.events + 2})
        return _Record(failed, record.owner, record.ttl_s, record.key)

    async def _follow_stored(
        self,
        job_id: str,
        after: int,
        heartbeat_s: float | None,
        seen: ResearchJob | None,
        key: str | None,
    ) -> AsyncIterator[ResearchEvent | None]:
        """Another process's job: its stored events, polled until its last one. The
        stream always ends cleanly: events no longer stored are skipped, and the job's
        ``error`` and ``done`` events rebuilt from its record if they are gone too."""
        if seen is not None and seen.id == job_id:
            view = seen
        else:
            try:
                view = (await self._stored(job_id, key)).view
            except JobNotFound:
                return  # expired just now: nothing to stream
        sent, quiet = await self._start_after(job_id, view, after), 0.0
        while True:
            # While the store is away nothing is known: the stream waits (keep-alives),
            # neither ending the job nor skipping its events.
            away = False
            try:
                event = await self._stored_event(job_id, sent + 1)
            except StateUnavailable:
                event, away = None, True
            if event is not None:
                sent, quiet = event.id, 0.0
                yield event
                continue
            if view.status in FINISHED and not away:
                async for event in self._rest_of(job_id, view, sent):
                    yield event
                return
            await asyncio.sleep(POLL_S)
            quiet += POLL_S
            if heartbeat_s is not None and quiet >= heartbeat_s:
                quiet = 0.0
                yield None
            try:
                view = (await self._stored(job_id, key)).view
            except StateUnavailable:
                continue
            except JobNotFound:  # its process died and nobody read it for its lifetime
                gone = view.model_copy(update={"status": "failed", "error": EXPIRED,
                                               "events": max(view.events, sent) + 2})  # fmt: skip
                for event in _last_events(gone, sent):
                    yield event
                return

    async def _start_after(self, job_id: str, view: ResearchJob, after: int) -> int:
        """Where a stream of a stored job starts: ``after``, or for a running job, at
        most its last event so far (so that the stream still ends with its ``done``)."""
        sent = max(0, after)
        if view.status in FINISHED or sent <= view.events:
            return sent
        last = view.events  # events are saved before the record that counts them
        with contextlib.suppress(StateUnavailable):  # then from the last one counted
            while last < sent and await self._stored_event(job_id, last + 1) is not None:
                last += 1
        return last

    async def _rest_of(
        self, job_id: str, view: ResearchJob, sent: int
    ) -> AsyncIterator[ResearchEvent]:
        """A finished job's events after ``sent`` once one is missing from the store:
        those still stored, then its last events rebuilt if they are gone."""
        for n in range(sent + 1, view.events + 1):
            try:
                event = await self._stored_event(job_id, n)
            except StateUnavailable:  # gone with the store: as if evicted
                event = None
            if event is not None:
                sent = n
                yield event
        for event in _last_events(view, sent):
            yield event

    # --- running ----------------------------------------------------------------------

    async def _emit(
        self, job: Job, kind: EventType, data: dict[str, Any], final: JobStatus | None = None
    ) -> None:
        """Add an event; with ``final``, the job ends with it (the same step, so nobody
        sees the last event without the final status, or the status without the event)."""
        if kind not in ENDING and await self._cancelled_elsewhere(job):
            raise CancelledElsewhere(job.id)  # before the event: nothing runs after it
        async with job.changed:
            if job.status in FINISHED:  # a step that outlived its job: nothing after done
                return
            event = ResearchEvent(id=len(job.events) + 1, type=kind, ts=_now(), data=data)
            job.events.append(event)
            job.updated_utc = _now()
            _progress(job.progress, kind, data)
            if final is not None:
                job.status = final
                job.finished_at = time.monotonic()
            job.changed.notify_all()
        # The job goes on without the store: what it missed, its next event's record and
        # its final writes (``_keep_final``) put right.
        if await _written(self._save_event(job.id, event, self._ttl(job) + EVENTS_OUTLIVE_S)):
            await _written(self._save(job))

    async def _cancelled_elsewhere(self, job: Job) -> bool:
        """Whether a DELETE reached another process (it leaves a key in the store)."""
        if self._store is None:
            return False
        try:
            return bool(await self._store.get(self._key("cancel", job.id)))
        except StateUnavailable:
            return False  # asked again at its next event

    async def _set(self, job: Job, status: JobStatus, error: str | None = None) -> None:
        async with job.changed:
            job.status, job.error, job.updated_utc = status, error, _now()
            if status in FINISHED:
                job.finished_at = time.monotonic()
            job.changed.notify_all()
        await _written(self._save(job))

    async def _run(self, job: Job) -> None:
        async def emit(kind: EventType, data: dict[str, Any]) -> None:
            await self._emit(job, kind, data)

        limit_s = job.bounded.limits.max_total_time_ms / 1000
        status: JobStatus = "done"
        error = None
        try:
            await self._set(job, "running")
            async with asyncio.timeout(limit_s + GRACE_S):
                research = Research(job.request, self._parts, emit, job.bounded, job.client)
                job.result = await research.run()
        except asyncio.CancelledError:
            status, error = ("failed", INTERRUPTED) if self._closing else ("cancelled", "cancelled")
        except CancelledElsewhere:
            status, error = "cancelled", "cancelled"
        except ResearchFailed as exc:
            status, error = "failed", str(exc)
        except TimeoutError:
            status, error = "failed", f"did not finish within {limit_s + GRACE_S:.0f} s"
        except Exception as exc:  # a bug must end the job, not leave it running for ever
            log.exception("research job %s crashed", job.id)
            status, error = "failed", f"internal error: {type(exc).__name__}"
        await self._finish(job, status, error)

    async def _finish(self, job: Job, status: JobStatus, error: str | None) -> None:
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

    async def _end(self, job: Job, status: JobStatus, error: str | None) -> None:
        """The job's last events; then its events get its record's lifetime."""
        if error is not None:
            await self._emit(job, "error", {"status": status, "message": error})
        done: dict[str, Any] = {"status": status}
        if job.result is not None:
            done |= {
                "confidence": job.result.confidence,
                "verification_status": job.result.verification_status,
                "stopped": job.result.stopped,
            }
        job.error = error
        await self._emit(job, "done", done, final=status)
        await self._keep_final(job)

    async def _keep_final(self, job: Job) -> None:
        """Store the finished job, or keep trying (``_rewrite``) until the store takes it:
        until then other workers show it running, and streams there cannot end."""
        if not await self._store_final(job):
            self._rewrites[job.id] = asyncio.create_task(
                self._rewrite(job), name=f"research-rewrite-{job.id}"
            )

    async def _store_final(self, job: Job) -> bool:
        """Every event with its record's lifetime (no longer the running job's), then the
        record; False if the store did not take them all."""
        try:
            for event in job.events:
                await self._save_event(job.id, event, self._finished_event_ttl())
            await self._save(job)
        except StateUnavailable:
            return False
        return True

    async def _rewrite(self, job: Job) -> None:
        """Write a finished job again, backing off up to ``REWRITE_MAX_S``, until the store
        takes it (or its record would have expired by now anyway)."""
        wait, give_up = REWRITE_FIRST_S, time.monotonic() + self._settings.retention_s
        try:
            while time.monotonic() < give_up:
                await asyncio.sleep(wait)
                if await self._store_final(job):
                    log.info("research job %s: its final record is stored at last", job.id)
                    return
                wait = min(wait * 2, REWRITE_MAX_S)
        finally:
            self._rewrites.pop(job.id, None)

    def _retire(self, job: Job) -> None:
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


def _last_events(view: ResearchJob, sent: int) -> list[ResearchEvent]:
    """A finished job's last events rebuilt from its record (for a stream whose stored
    events are gone): its ``error`` when it did not succeed, then its ``done``, with the
    ids they had, those after ``sent``."""
    last: list[tuple[EventType, dict[str, Any]]] = [("done", {"status": view.status})]
    if view.status != "done":
        message = view.error or view.status
        last.insert(0, ("error", {"status": view.status, "message": message}))
    first = view.events - len(last) + 1
    return [
        ResearchEvent(id=n, type=kind, ts=view.updated_utc, data=data)
        for n, (kind, data) in enumerate(last, start=first)
        if n > sent
    ]


async def _written(write: Awaitable[object]) -> bool:
    """Run a store write whose loss the job survives; False if the store was away."""
    try:
        await write
    except StateUnavailable:
        return False
    return True
