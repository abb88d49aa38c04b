"""Crawl jobs: each crawls a site in the background (``crawl.py``) as a job of the same
machinery as research (``research/job_runner.py``: 202 with an id, status, events resumable
with ``Last-Event-ID``, cancel, the state store). Each page read is a ``page`` event and
joins the job's ``pages``; a page left out is a ``skip`` event (robots, duplicate, failed).
"""

from __future__ import annotations

import secrets
from dataclasses import dataclass, field
from datetime import date
from typing import Any

from searcher.contract import Budget, CrawledPage, CrawlEvent, CrawlJob, CrawlSkip
from searcher.errors import TooManyJobs, TooManyJobsForKey
from searcher.fetch.page_reader import PageOutcome
from searcher.llm.runner import StepRunner
from searcher.pipeline.budget import effective_budget
from searcher.pipeline.limits import extract_chars_within_limit
from searcher.pipeline.parts import Parts
from searcher.pipeline.resilience import CallBudget, Deadline
from searcher.research.job_runner import GRACE_S, Job, JobRunner
from searcher.research.job_store import JobKind
from searcher.site.crawl import CrawlPlan, CrawlReport, crawl_site
from searcher.site.link_rank import RankLinks, bm25_ranked, llm_ranker
from searcher.site.mapping import Fetch
from searcher.state.failsoft import FailSoftStore

CRAWL = JobKind("crawl", CrawlJob, CrawlEvent)
MAX_LLM_CALLS = 20  # of one crawl's link ranking; BM25 ranks the rest


def link_ranker(parts: Parts, timeout_s: float) -> RankLinks:
    """How a crawl ranks links: by the LLM's ``rank`` step when one is configured (at most
    ``MAX_LLM_CALLS`` calls within the crawl's deadline), by BM25 otherwise."""
    if parts.llm is None or not parts.settings.llm.configured:
        return bm25_ranked
    runner = StepRunner(
        parts.llm, parts.settings.llm, Deadline(timeout_s), CallBudget(MAX_LLM_CALLS), date.today()
    )
    return llm_ranker(runner)


@dataclass(kw_only=True)
class CrawlJobState(Job[CrawlEvent]):
    """A crawl job: its plan and what it read so far."""

    plan: CrawlPlan
    max_chars: int
    pages: list[CrawledPage] = field(default_factory=list)
    skipped: list[CrawlSkip] = field(default_factory=list)
    complete: bool | None = None


class CrawlBook(JobRunner[CrawlJobState, CrawlJob, CrawlEvent]):
    """The crawl jobs this process runs, and the door to those other processes run."""

    # A crawl's record holds every page read so far: written after each page it would
    # cost the square of the crawl's size (bench/crawl.py).
    record_every_s = 1.0

    def __init__(self, parts: Parts, store: FailSoftStore | None) -> None:
        super().__init__(parts.settings.research, store, CRAWL)
        self._parts = parts
        self._reader = parts.reader
        self._all = parts.settings

    async def submit(
        self, plan: CrawlPlan, max_chars: int, client: str | None = None, key: str | None = None
    ) -> CrawlJobState:
        """Start crawling under ``plan``; ``TooManyJobs`` when ``crawl.max_concurrent_jobs``
        run in this process, ``TooManyJobsForKey`` when ``key`` runs half of them."""
        self._expire()
        limit = self._all.crawl.max_concurrent_jobs
        retry_s = max(1, int(plan.timeout_s / 4))
        share = max(1, limit // 2)
        if key is not None and self.running(key) >= share:
            raise TooManyJobsForKey(share, retry_s, "crawl", "half of crawl.max_concurrent_jobs")
        if self.running() >= limit:
            raise TooManyJobs(limit, retry_s, "crawl")
        max_chars = extract_chars_within_limit(max_chars, self._all.limits)
        job = CrawlJobState(
            id=secrets.token_urlsafe(12), plan=plan, max_chars=max_chars, client=client, key=key
        )
        return await self._start(job)

    def _view(self, job: CrawlJobState) -> CrawlJob:
        return CrawlJob(
            id=job.id, status=job.status, url=job.plan.root, query=job.plan.query,
            created_utc=job.created_utc, updated_utc=job.updated_utc,
            progress=dict(job.progress), events=len(job.events), error=job.error,
            error_kind=job.error_kind,
            pages=list(job.pages), skipped=list(job.skipped), complete=job.complete,
        )  # fmt: skip

    def _deadline_s(self, job: CrawlJobState) -> float:
        return job.plan.timeout_s + GRACE_S  # the crawl stops itself at its own deadline

    def _progress(self, progress: dict[str, Any], kind: str, data: dict[str, Any]) -> None:
        progress["last_event"] = kind
        if kind == "page":
            progress["pages"] = progress.get("pages", 0) + 1
            progress["bytes"] = progress.get("bytes", 0) + data["fetch"]["downloaded_bytes"]
            progress["depth"] = max(progress.get("depth", 0), data["depth"])
        elif kind == "skip":
            progress["skipped"] = progress.get("skipped", 0) + 1

    def _done_data(self, job: CrawlJobState) -> dict[str, Any]:
        return {"pages": len(job.pages), "skipped": len(job.skipped), "complete": job.complete}

    async def _work(self, job: CrawlJobState) -> None:
        limits = effective_budget(Budget(), self._all.budget).fetch_limits()

        async def read(url: str, fetch: Fetch) -> PageOutcome:
            return await self._reader.read_through(url, limits, job.max_chars, fetch, job.client)

        async def page(found: CrawledPage) -> None:
            job.pages.append(found)
            await self._emit(job, "page", found.model_dump(mode="json"))

        async def skip(left: CrawlSkip) -> None:
            job.skipped.append(left)
            await self._emit(job, "skip", left.model_dump(mode="json"))

        fetch = self._reader.fetcher.fetch
        rank = link_ranker(self._parts, job.plan.timeout_s)
        tally = await crawl_site(read, fetch, job.plan, CrawlReport(page, skip), rank)
        job.complete = tally.complete
