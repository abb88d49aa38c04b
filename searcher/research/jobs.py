"""Research jobs: each runs the loop in the background, its typed events numbered and kept,
so that a client can follow them live, drop the connection, and resume after the last
event it saw (``Last-Event-ID``); finished jobs stay readable for ``research.retention_s``.

Jobs are kept in this process (``JobBook``); the events are the job's whole story, so a
store that outlives the process can hold them by the same interface later.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import secrets
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from searcher.config import ResearchSettings
from searcher.contract import (
    EventType,
    JobStatus,
    ResearchEvent,
    ResearchJob,
    ResearchRequest,
    ResearchResult,
)
from searcher.errors import JobNotFound, ResearchFailed, TooManyJobs
from searcher.pipeline.parts import Parts
from searcher.research.loop import Research
from searcher.research.presets import resolve

log = logging.getLogger("searcher.research")
FINISHED: frozenset[JobStatus] = frozenset({"done", "failed", "cancelled"})
# Beyond its own deadline a job gets this long to write its report before it is stopped.
GRACE_S = 5.0


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
    """The research jobs of this process: submit, look up, follow, cancel."""

    def __init__(self, parts: Parts, settings: ResearchSettings) -> None:
        self._parts = parts
        self._settings = settings
        self._jobs: dict[str, Job] = {}

    def running(self) -> int:
        return sum(1 for job in self._jobs.values() if job.status not in FINISHED)

    def submit(self, request: ResearchRequest) -> Job:
        """Start a job; ``TooManyJobs`` when ``max_concurrent_jobs`` are running."""
        self._expire()
        if self.running() >= self._settings.max_concurrent_jobs:
            deadline_s = resolve(request.preset, request.budget).max_total_time_ms / 1000
            raise TooManyJobs(self._settings.max_concurrent_jobs, max(1, int(deadline_s / 4)))
        job = Job(secrets.token_urlsafe(12), request)
        self._jobs[job.id] = job
        job.task = asyncio.create_task(self._run(job), name=f"research-{job.id}")
        return job

    def get(self, job_id: str) -> Job:
        self._expire()
        job = self._jobs.get(job_id)
        if job is None:
            raise JobNotFound(job_id)
        return job

    async def cancel(self, job_id: str) -> Job:
        """Stop a job (a finished one stays as it is)."""
        job = self.get(job_id)
        if job.task is not None and not job.task.done():
            job.task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await job.task
        return job

    async def follow(
        self, job_id: str, after: int = 0, heartbeat_s: float | None = None
    ) -> AsyncIterator[ResearchEvent | None]:
        """The job's events after event ``after``, as they come, until its last one;
        ``None`` every ``heartbeat_s`` of silence (for a keep-alive)."""
        job = self.get(job_id)
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
        """Stop every running job (they end ``cancelled``)."""
        for job in list(self._jobs.values()):
            if job.task is not None and not job.task.done():
                job.task.cancel()
        tasks = [j.task for j in self._jobs.values() if j.task is not None]
        await asyncio.gather(*tasks, return_exceptions=True)

    # --- running ----------------------------------------------------------------------

    async def _emit(self, job: Job, kind: EventType, data: dict[str, Any]) -> None:
        async with job.changed:
            job.events.append(
                ResearchEvent(id=len(job.events) + 1, type=kind, ts=_now(), data=data)
            )
            job.updated_utc = _now()
            _progress(job.progress, kind, data)
            job.changed.notify_all()

    async def _set(self, job: Job, status: JobStatus, error: str | None = None) -> None:
        async with job.changed:
            job.status, job.error, job.updated_utc = status, error, _now()
            if status in FINISHED:
                job.finished_at = time.monotonic()
            job.changed.notify_all()

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
            status, error = "cancelled", "cancelled"
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
        await self._emit(job, "done", done)
        await self._set(job, status, error)

    def _expire(self) -> None:
        """Forget finished jobs older than ``retention_s``."""
        now = time.monotonic()
        keep = self._settings.retention_s
        for job_id, job in list(self._jobs.items()):
            if job.finished_at is not None and now - job.finished_at > keep:
                del self._jobs[job_id]
