"""Research jobs: each runs the loop in the background (``research/job_runner.py`` keeps
its events, status, stream, cancelling and state-store records, as for every kind of job).
"""

from __future__ import annotations

import logging
import secrets
from dataclasses import dataclass
from typing import Any

from searcher.auth.access import EVERY, CollectionAccess
from searcher.backends.policy import plan_backends, within_access
from searcher.config import ResearchSettings
from searcher.contract import ResearchEvent, ResearchJob, ResearchRequest, ResearchResult
from searcher.errors import (
    InvalidRequest,
    SearcherError,
    TooManyJobs,
    TooManyJobsForKey,
)
from searcher.feedback.book import FeedbackBook, research_record
from searcher.llm.output_schema import SchemaRefused, checked_schema
from searcher.pipeline.parts import Parts
from searcher.research.job_runner import (
    ENDING,
    GRACE_S,
    KEEP_FINISHED,
    CancelledElsewhere,
    Job,
    JobRunner,
)
from searcher.research.job_store import NAMESPACE, JobKind
from searcher.research.loop import Research
from searcher.research.presets import Bounded, resolve_within, within_time
from searcher.state.failsoft import FailSoftStore
from searcher.state.sessions import SessionBook

__all__ = ["ENDING", "GRACE_S", "KEEP_FINISHED", "CancelledElsewhere", "JobBook"]

log = logging.getLogger("searcher.research")
RESEARCH = JobKind(NAMESPACE.rstrip(":"), ResearchJob, ResearchEvent)


@dataclass(kw_only=True)
class ResearchJobState(Job[ResearchEvent]):
    """A research job: what it was asked, within which limits, and its result."""

    request: ResearchRequest
    bounded: Bounded  # its limits, within the server's ceilings
    result: ResearchResult | None = None
    # Page keys shown before (its session's, a conversation's): demoted unless the best.
    shown: frozenset[str] = frozenset()

    def view(self) -> ResearchJob:
        """The job as ``GET /v1/research/{id}`` shows it."""
        return ResearchJob(
            id=self.id, status=self.status, query=self.request.query_text,
            preset=self.request.preset, created_utc=self.created_utc,
            updated_utc=self.updated_utc, progress=dict(self.progress),
            events=len(self.events), error=self.error, error_kind=self.error_kind,
            result=self.result,
        )  # fmt: skip


def _progress(progress: dict[str, Any], kind: str, data: dict[str, Any]) -> None:
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


class JobBook(JobRunner[ResearchJobState, ResearchJob, ResearchEvent]):
    """The research jobs this process runs, and the door to those other processes run:
    submit, look up, follow, cancel. ``store`` (the state store) makes jobs outlive the
    process and visible to every worker and replica; without it they live here only."""

    def __init__(
        self,
        parts: Parts,
        settings: ResearchSettings,
        store: FailSoftStore | None = None,
        sessions: SessionBook | None = None,
    ) -> None:
        super().__init__(settings, store, RESEARCH)
        self._parts = parts
        self._feedback_store = store  # fail-soft: a lost store costs feedback, not the job
        self._sessions = sessions  # what each constraints.session_id was shown

    async def submit(
        self,
        request: ResearchRequest,
        max_time_ms: int | None = None,
        client: str | None = None,
        key: str | None = None,
        access: CollectionAccess = EVERY,
        shown: frozenset[str] = frozenset(),
    ) -> ResearchJobState:
        """Start a job owned by ``key`` (an API key's id, None when anonymous);
        ``TooManyJobs`` when ``max_concurrent_jobs`` run in this process,
        ``TooManyJobsForKey`` when ``key`` runs its share of them already, ``InvalidRequest``
        for a budget above the server's ceilings under ``limits.strict`` or an
        ``output_schema`` that is no usable JSON Schema. ``max_time_ms``:
        a deadline the caller itself cannot outlast (an MCP exchange's), lowering the
        job's with a note, never refusing it. ``client``: who asks
        (``searcher.api.observe.client_identity``), whose share of the extraction
        workers the job's page reads count against; ``access``: the collections of own
        documents its searches may reach (``AccessDenied`` when the request names a
        ``local`` instance beyond them); ``shown``: page keys shown before (a
        conversation's), demoted in its searches unless ranked first, as are those of
        ``constraints.session_id``'s session, which its evidence's pages then join."""
        self._expire()
        bounded = resolve_within(
            request.preset,
            request.budget,
            self._parts.settings.research,
            self._parts.settings.limits.strict,
        )
        if max_time_ms is not None:
            bounded = within_time(bounded, max_time_ms)
        # Unknown backend names are the caller's mistake (422 now), not the job's failure;
        # a request that can never run is refused as such before any "try again later".
        planned = plan_backends(
            request.constraints.backend, None, self._parts.settings, self._parts.pool.backends
        )
        within_access(planned, access, self._parts.settings)
        self._check_schema(request)
        session = request.constraints.session_id
        if session is not None and self._sessions is not None:
            shown = shown | await self._sessions.shown(client, session)
        # Counted after the last await: no other submit can start a job between the count
        # and this one's start (which holds its slot at once).
        retry_s = max(1, int(bounded.limits.max_total_time_ms / 1000 / 4))
        share = self._settings.jobs_per_key()
        if key is not None and self.running(key) >= share:
            raise TooManyJobsForKey(share, retry_s)
        if self.running() >= self._settings.max_concurrent_jobs:
            raise TooManyJobs(self._settings.max_concurrent_jobs, retry_s)
        job = ResearchJobState(
            id=secrets.token_urlsafe(12), request=request, bounded=bounded, client=client,
            key=key, access=access, shown=shown,
        )  # fmt: skip
        return await self._start(job)

    def _check_schema(self, request: ResearchRequest) -> None:
        """``InvalidRequest`` naming ``output_schema`` for a schema searcher cannot use:
        before the job starts, not as its failure (one asked of a server without a model
        fails the job at once: ``Research.run``)."""
        if request.output_schema is None:
            return
        try:
            checked_schema(request.output_schema)
        except SchemaRefused as exc:
            raise InvalidRequest("output_schema", str(exc)) from None

    # --- what a research job is --------------------------------------------------------

    def _view(self, job: ResearchJobState) -> ResearchJob:
        return job.view()

    def _deadline_s(self, job: ResearchJobState) -> float:
        return job.bounded.limits.max_total_time_ms / 1000

    def _progress(self, progress: dict[str, Any], kind: str, data: dict[str, Any]) -> None:
        _progress(progress, kind, data)

    def _done_data(self, job: ResearchJobState) -> dict[str, Any]:
        if job.result is None:
            return {}
        return {
            "confidence": job.result.confidence,
            "verification_status": job.result.verification_status,
            "stopped": job.result.stopped,
        }

    async def _work(self, job: ResearchJobState) -> None:
        async def emit(kind: str, data: dict[str, Any]) -> None:
            await self._emit(job, kind, data)

        research = Research(
            job.request, self._parts, emit, job.bounded, job.client, job.access, job.shown
        )
        job.result = await research.run()
        await self._report_citations(job.id, job.result, job.key)
        session = job.request.constraints.session_id
        if session is not None and self._sessions is not None:
            # What the session was shown: the pages of the job's evidence.
            pages = [passage.url for passage in job.result.evidence or ()]
            await self._sessions.add(job.client, session, pages)

    async def _report_citations(self, job_id: str, result: ResearchResult, key: str | None) -> None:
        """With feedback on, the job reports the passages its report cited itself, as
        ``key``'s (kept fail-soft: a lost store costs the record, not the job)."""
        found = research_record(job_id, result, key)
        if (
            self._feedback_store is None
            or not self._parts.settings.feedback.enabled
            or found is None
        ):
            return
        book = FeedbackBook(self._feedback_store, self._parts.settings.feedback)
        record, cited = found
        try:
            kept = await book.record_search(record)
            cited = {n: outcome for n, outcome in cited.items() if n in kept.items}
            if cited:
                await book.give(job_id, cited, key)
        except SearcherError as exc:  # the record lost to a store outage meanwhile
            log.warning("research job %s: its citations were not recorded: %s", job_id, exc)
