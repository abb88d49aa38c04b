"""Crawl jobs over HTTP: ``POST /v1/crawl`` starts one (202), ``GET /v1/crawl/{id}`` shows
its status and the pages so far, ``.../events`` streams its events (SSE, resumable with
``Last-Event-ID``), ``DELETE`` cancels it — the routes of research jobs, for crawls."""

from __future__ import annotations

from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import Response, StreamingResponse

from searcher.api.auth import key_of
from searcher.api.json_body import json_response
from searcher.api.observe import client_identity
from searcher.api.research import SSE_RESPONSE, AfterEvent, LastEventId, event_stream
from searcher.api.site_routes import root_and_scope
from searcher.config import Settings
from searcher.contract import CrawlAccepted, CrawlJob, CrawlRequest, ErrorResponse
from searcher.errors import InvalidRequest
from searcher.site.crawl import CrawlPlan
from searcher.site.crawl_jobs import CrawlBook

router = APIRouter(tags=["crawl"])
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {
        "model": ErrorResponse,
        "description": "No crawl job with that id (or it expired, or another API key started it).",
    },
}


def _within(field: str, value: float | None, ceiling: float, setting: str, strict: bool) -> float:
    """``value`` (the ceiling when absent), lowered to the ceiling, as a research budget
    is; under ``limits.strict`` a value above it is ``InvalidRequest`` naming ``field``."""
    if value is None:
        return ceiling
    if value > ceiling:
        if strict:
            raise InvalidRequest(field, f"must be at most {ceiling:g} (crawl.{setting})")
        return ceiling
    return value


def crawl_plan(body: CrawlRequest, settings: Settings) -> CrawlPlan:
    """The plan of a crawl request within the server's ceilings (``crawl.*``: lowered to
    them, or 422 under ``limits.strict``); ``InvalidRequest`` naming the field for a bad
    URL or pattern."""
    root, scope = root_and_scope(body)
    crawl, strict = settings.crawl, settings.limits.strict
    delay_s = (
        crawl.politeness_delay_s if body.politeness_delay_s is None else body.politeness_delay_s
    )
    return CrawlPlan(
        root=root, scope=scope, max_depth=body.max_depth, max_breadth=body.max_breadth,
        limit=int(_within("limit", body.limit, crawl.max_pages, "max_pages", strict)),
        max_bytes=int(_within("max_bytes", body.max_bytes, crawl.max_bytes, "max_bytes", strict)),
        query=body.ranking_text(), delay_s=delay_s,
        per_host=int(_within("per_host_concurrency", body.per_host_concurrency,
                             crawl.per_host_concurrency, "per_host_concurrency", strict)),
        concurrency=crawl.concurrency,
        timeout_s=_within("timeout_s", body.timeout_s, crawl.max_time_s, "max_time_s", strict),
        user_agent=settings.fetch.user_agent,
    )  # fmt: skip


def crawl_book(request: Request) -> CrawlBook:
    """The app's crawl jobs."""
    crawls: CrawlBook = request.app.state.crawls
    return crawls


@router.post(
    "/v1/crawl",
    status_code=202,
    summary="Start a crawl job",
    responses={
        202: {"model": CrawlAccepted, "description": "Started; follow events_url."},
        413: {"model": ErrorResponse, "description": "Body over the size limit."},
        422: {"model": ErrorResponse, "description": "Invalid request; `error.field`."},
        429: {"model": ErrorResponse, "description": "Too many crawl jobs; see Retry-After."},
    },
)
async def start_crawl(body: CrawlRequest, request: Request) -> Response:
    settings: Settings = request.app.state.runtime.settings
    job = await crawl_book(request).submit(
        crawl_plan(body, settings),
        body.max_chars_per_page,
        client=client_identity(request.scope),
        key=key_of(request.scope),
    )
    accepted = CrawlAccepted(
        id=job.id, status=job.status, status_url=f"/v1/crawl/{job.id}",
        events_url=f"/v1/crawl/{job.id}/events",
    )  # fmt: skip
    return json_response(accepted.model_dump(), 202, {"Location": accepted.status_url})


@router.get(
    "/v1/crawl/{job_id}",
    response_model=CrawlJob,
    summary="A crawl job's status and the pages read so far",
    responses=_NOT_FOUND,
)
async def crawl_status(job_id: str, request: Request) -> Response:
    job = await crawl_book(request).view(job_id, key_of(request.scope))
    return json_response(job.model_dump(mode="json"))


@router.get(
    "/v1/crawl/{job_id}/events",
    summary="A crawl job's events as Server-Sent Events (resumable)",
    response_class=StreamingResponse,
    responses={
        **SSE_RESPONSE,
        **_NOT_FOUND,
        422: {"model": ErrorResponse, "description": "Invalid `after` or `Last-Event-ID`."},
    },
)
async def crawl_events(
    job_id: str, request: Request, last_event_id: LastEventId = None, after: AfterEvent = None
) -> StreamingResponse:
    start = after if after is not None else (last_event_id or 0)
    return await event_stream(request, job_id, start, crawl_book(request))


@router.delete(
    "/v1/crawl/{job_id}",
    response_model=CrawlJob,
    summary="Cancel a crawl job",
    responses=_NOT_FOUND,
)
async def cancel_crawl(job_id: str, request: Request) -> Response:
    job = await crawl_book(request).cancel(job_id, key_of(request.scope))
    return json_response(job.model_dump(mode="json"))
