"""Research jobs: each runs the loop in the background, its typed events numbered and kept,
so that a client can follow them live, drop the connection, and resume after the last
event it saw (``Last-Event-ID``); finished jobs stay readable for ``research.retention_s``.

A job runs in the process that accepted it; its record and every event are also written
to the state store (the SQLite file, or Redis), so that any worker or replica can show
its status and stream its events, and a job whose process died (its owner stopped
renewing its heartbeat) reads as ``failed: interrupted``, with its events so far.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from searcher.backends.policy import plan_backends
from searcher.config import ResearchSettings
from searcher.contract import (
    EventType,
    JobStatus,
    Preset,
    ResearchEvent,
    ResearchJob,
    ResearchRequest,
    ResearchResult,
)
from searcher.errors import JobNotFound, ResearchFailed, TooManyJobs
from searcher.pipeline.parts import Parts
from searcher.research.loop import Research
from searcher.research.presets import PRESETS, resolve
from searcher.state.base import StateStore, get_json, set_json

log = logging.getLogger("searcher.research")
FINISHED: frozenset[JobStatus] = frozenset({"done", "failed", "cancelled"})
# Beyond its own deadline a job gets this long to write its report before it is stopped.
GRACE_S = 5.0
NAMESPACE = "research:"
INTERRUPTED = "interrupted: the server running the job stopped"
POLL_S = 0.25  # how often a stream of another process's job looks for new events


def _now() -> str:
    return datetime.now(UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")


@dataclass
class Job:
    id: str
    request: ResearchRequest
    status: JobStatus = "queued"
    created_utc: str = field(default_factory=_now)
    updated_utc: str = field(default_factory=_now)
    events: list[ResearchEvent] = field(default_factory=list)
    progress: dict[str, Any] = field(default_factory=dict)
    error: str | None = None
    result: ResearchResult | None = None
    finished_at: float | None = None  # monotonic
    owner: str = ""  # the JobBook (process) running it
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
        self, parts: Parts, settings: ResearchSettings, store: StateStore | None = None
    ) -> None:
        self._parts = parts
        self._settings = settings
        self._store = store
        self._jobs: dict[str, Job] = {}
        self.owner = uuid.uuid4().hex
        self._heart: asyncio.Task[None] | None = None
        self._closing = False

    def running(self) -> int:
        return sum(1 for job in self._jobs.values() if job.status not in FINISHED)

    async def submit(self, request: ResearchRequest) -> Job:
        """Start a job; ``TooManyJobs`` when ``max_concurrent_jobs`` run in this process."""
        self._expire()
        if self.running() >= self._settings.max_concurrent_jobs:
            deadline_s = resolve(request.preset, request.budget).max_total_time_ms / 1000
            raise TooManyJobs(self._settings.max_concurrent_jobs, max(1, int(deadline_s / 4)))
        # Unknown backend names are the caller's mistake (422 now), not the job's failure.
        plan_backends(
            request.constraints.backend, None, self._parts.settings, self._parts.pool.backends
        )
        job = Job(secrets.token_urlsafe(12), request, owner=self.owner)
        self._jobs[job.id] = job
        if self._store is not None and self._heart is None:
            await self._beat()
            self._heart = asyncio.create_task(self._keep_beating(), name="research-heartbeat")
        await self._save(job)  # readable everywhere before its id is handed out
        job.task = asyncio.create_task(self._run(job), name=f"research-{job.id}")
        return job

    async def view(self, job_id: str) -> ResearchJob:
        """The job's status (``JobNotFound`` if no process knows it)."""
        self._expire()
        job = self._jobs.get(job_id)
        if job is not None:
            return job.view()
        return await self._stored(job_id)

    async def cancel(self, job_id: str) -> ResearchJob:
        """Stop a job (a finished one stays as it is). A job of another process is asked
        to stop through the store; it ends ``cancelled`` at its next step."""
        job = self._jobs.get(job_id)
        if job is None:
            seen = await self._stored(job_id)
            if seen.status not in FINISHED and self._store is not None:
                await self._store.set(self._key("cancel", job_id), b"1", self._ttl(seen.preset))
            return seen
        if job.task is not None and not job.task.done():
            job.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await job.task
        return job.view()

    async def follow(
        self, job_id: str, after: int = 0, heartbeat_s: float | None = None
    ) -> AsyncIterator[ResearchEvent | None]:
        """The job's events after event ``after``, as they come, until its last one;
        ``None`` every ``heartbeat_s`` of silence (for a keep-alive)."""
        job = self._jobs.get(job_id)
        if job is None:
            async for event in self._follow_stored(job_id, after, heartbeat_s):
                yield event
            return
        sent = max(0, after)
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

    async def close(self) -> None:
        """Stop every running job: they end ``failed: interrupted`` (the server stops)."""
        self._closing = True
        for job in list(self._jobs.values()):
            if job.task is not None and not job.task.done():
                job.task.cancel()
        tasks = [j.task for j in self._jobs.values() if j.task is not None]
        await asyncio.gather(*tasks, return_exceptions=True)
        if self._heart is not None:
            self._heart.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._heart
            if self._store is not None:
                await self._store.delete(self._key("alive", self.owner))

    # --- the store ----------------------------------------------------------------------

    def _key(self, kind: str, *parts: str | int) -> str:
        return NAMESPACE + ":".join([kind, *(str(p) for p in parts)])

    def _ttl(self, preset: Preset) -> float:
        limits = PRESETS[preset]
        return limits.max_total_time_ms / 1000 + GRACE_S + self._settings.retention_s

    async def _beat(self) -> None:
        if self._store is not None:
            await self._store.set(self._key("alive", self.owner), b"1", self._settings.owner_ttl_s)

    async def _keep_beating(self) -> None:
        while True:
            await asyncio.sleep(self._settings.owner_ttl_s / 3)
            await self._beat()

    async def _save(self, job: Job) -> None:
        if self._store is not None:
            record = {"owner": job.owner, "view": job.view().model_dump(mode="json")}
            await set_json(
                self._store, self._key("job", job.id), record, self._ttl(job.request.preset)
            )

    async def _save_event(self, job: Job, event: ResearchEvent) -> None:
        if self._store is not None:
            key = self._key("event", job.id, event.id)
            await set_json(
                self._store, key, event.model_dump(mode="json"), self._ttl(job.request.preset)
            )

    async def _stored(self, job_id: str) -> ResearchJob:
        """A job from the store; one whose owner stopped beating is ``interrupted``."""
        record = await get_json(self._store, self._key("job", job_id)) if self._store else None
        if not isinstance(record, dict):
            raise JobNotFound(job_id)
        try:
            view = ResearchJob.model_validate(record["view"])
        except (KeyError, ValueError) as exc:
            raise JobNotFound(job_id) from exc
        if view.status in FINISHED or self._store is None:
            return view
        if await self._store.get(self._key("alive", str(record.get("owner")))) is not None:
            return view
        return await self._interrupt(view, str(record.get("owner")))

    async def _interrupt(self, view: ResearchJob, owner: str) -> ResearchJob:
        """Mark a job whose process died as failed; the first reader to see it writes the
        last events (a counter decides who, so they are written once)."""
        assert self._store is not None
        ttl = self._ttl(view.preset)
        failed = view.model_copy(update={"status": "failed", "error": INTERRUPTED,
                                         "updated_utc": _now()})  # fmt: skip
        if await self._store.incr(self._key("interrupt", view.id), 1, ttl) == 1:
            last: list[tuple[EventType, dict[str, Any]]] = [
                ("error", {"status": "failed", "message": INTERRUPTED}),
                ("done", {"status": "failed"}),
            ]
            for n, (kind, data) in enumerate(last, start=view.events + 1):
                event = ResearchEvent(id=n, type=kind, ts=_now(), data=data)
                key = self._key("event", view.id, n)
                await set_json(self._store, key, event.model_dump(mode="json"), ttl)
            failed = failed.model_copy(update={"events": view.events + 2})
            record = {"owner": owner, "view": failed.model_dump(mode="json")}
            await set_json(self._store, self._key("job", view.id), record, ttl)
        return failed

    async def _follow_stored(
        self, job_id: str, after: int, heartbeat_s: float | None
    ) -> AsyncIterator[ResearchEvent | None]:
        """Another process's job: its stored events, polled until its last one."""
        view = await self._stored(job_id)
        sent, quiet = max(0, after), 0.0
        while True:
            raw = (
                await get_json(self._store, self._key("event", job_id, sent + 1))
                if self._store
                else None
            )
            if raw is not None:
                event = ResearchEvent.model_validate(raw)
                sent, quiet = event.id, 0.0
                yield event
                continue
            if view.status in FINISHED and sent >= view.events:
                return
            await asyncio.sleep(POLL_S)
            quiet += POLL_S
            if heartbeat_s is not None and quiet >= heartbeat_s:
                quiet = 0.0
                yield None
            view = await self._stored(job_id)

    # --- running ----------------------------------------------------------------------

    async def _emit(
        self, job: Job, kind: EventType, data: dict[str, Any], final: JobStatus | None = None
    ) -> None:
        """Add an event; with ``final``, the job ends with it (the same step, so nobody
        sees the last event without the final status, or the status without the event)."""
        async with job.changed:
            event = ResearchEvent(id=len(job.events) + 1, type=kind, ts=_now(), data=data)
            job.events.append(event)
            job.updated_utc = _now()
            _progress(job.progress, kind, data)
            if final is not None:
                job.status = final
                job.finished_at = time.monotonic()
            job.changed.notify_all()
        await self._save_event(job, event)
        await self._save(job)
        cancel = self._key("cancel", job.id)
        if self._store and kind not in ("error", "done") and await self._store.get(cancel):
            raise asyncio.CancelledError  # DELETE reached another process

    async def _set(self, job: Job, status: JobStatus, error: str | None = None) -> None:
        async with job.changed:
            job.status, job.error, job.updated_utc = status, error, _now()
            if status in FINISHED:
                job.finished_at = time.monotonic()
            job.changed.notify_all()
        await self._save(job)

    async def _run(self, job: Job) -> None:
        await self._set(job, "running")

        async def emit(kind: EventType, data: dict[str, Any]) -> None:
            await self._emit(job, kind, data)

        limit_s = resolve(job.request.preset, job.request.budget).max_total_time_ms / 1000
        status: JobStatus = "done"
        error = None
        try:
            async with asyncio.timeout(limit_s + GRACE_S):
                job.result = await Research(job.request, self._parts, emit).run()
        except asyncio.CancelledError:
            status, error = ("failed", INTERRUPTED) if self._closing else ("cancelled", "cancelled")
        except ResearchFailed as exc:
            status, error = "failed", str(exc)
        except TimeoutError:
            status, error = "failed", f"did not finish within {limit_s + GRACE_S:.0f} s"
        except Exception as exc:  # a bug must end the job, not leave it running for ever
            log.exception("research job %s crashed", job.id)
            status, error = "failed", f"internal error: {type(exc).__name__}"
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

    def _expire(self) -> None:
        """Forget finished jobs older than ``retention_s`` (the store expires its own)."""
        now = time.monotonic()
        keep = self._settings.retention_s
        for job_id, job in list(self._jobs.items()):
            if job.finished_at is not None and now - job.finished_at > keep:
                del self._jobs[job_id]
