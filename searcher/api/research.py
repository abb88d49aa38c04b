"""Research jobs over HTTP: start one (202, or its events streamed in the response), read
its status and result, follow its events as Server-Sent Events (resumable with
``Last-Event-ID``), cancel it."""

from __future__ import annotations

import asyncio
import contextlib
import functools
import signal
from collections.abc import AsyncIterator, Callable
from types import FrameType
from typing import Annotated, Any

import orjson
from fastapi import APIRouter, Header, Query, Request
from fastapi.responses import Response, StreamingResponse
from pydantic import BeforeValidator, Field

from searcher.api.auth import collection_access, key_of
from searcher.api.json_body import json_response
from searcher.api.observe import client_identity
from searcher.contract import ErrorResponse, JobView, ResearchAccepted, ResearchJob, ResearchRequest
from searcher.research.job_runner import JobRunner
from searcher.research.jobs import JobBook

router = APIRouter(tags=["research"])
SSE = "text/event-stream"
SSE_RESPONSE: dict[int | str, dict[str, Any]] = {
    200: {"content": {SSE: {}}, "description": "The job's events, as Server-Sent Events."}
}
_NOT_FOUND: dict[int | str, dict[str, Any]] = {
    404: {
        "model": ErrorResponse,
        "description": "No job with that id (or it expired, or another API key started it).",
    },
    503: {
        "model": ErrorResponse,
        "description": "The job is another worker's and the state store cannot be reached "
        "now; see Retry-After.",
    },
}


def _end_soon(loop: asyncio.AbstractEventLoop, jobs: JobRunner[Any, Any, Any]) -> None:
    loop.create_task(jobs.end_running())


def end_jobs_when_stopping(*books: JobRunner[Any, Any, Any]) -> Callable[[], None]:
    """Make the server's stop signal (SIGTERM, SIGINT) end the running jobs at once, each
    with its ``error`` and ``done`` events, so that the streams following them end before
    the server waits for open connections (which it would, for the whole grace period, then
    cut them). Chains to the handler the server installed; returns the undo. Does nothing
    outside the main thread or when no handler is installed (a signal keeps its default)."""
    loop = asyncio.get_running_loop()
    previous: dict[int, Any] = {}

    def stopping(signum: int, frame: FrameType | None) -> None:
        for jobs in books:
            loop.call_soon_threadsafe(functools.partial(_end_soon, loop, jobs))
        previous[signum](signum, frame)

    for signum in (signal.SIGTERM, signal.SIGINT):
        handler = signal.getsignal(signum)
        if callable(handler):
            try:
                signal.signal(signum, stopping)
            except ValueError:  # not the main thread: an embedded server; leave it
                continue
            previous[signum] = handler

    def undo() -> None:
        for signum, handler in previous.items():
            with contextlib.suppress(ValueError):
                signal.signal(signum, handler)

    return undo


def _event_id_schema(schema: dict[str, Any]) -> None:
    # Optional, but when sent an integer: "null" is no event id.
    schema.clear()
    schema.update({"type": "integer", "minimum": 0, "maximum": 1_000_000})


def _header_event_id_schema(schema: dict[str, Any]) -> None:
    # The header may also be sent empty: no event seen yet (``_blank_is_none``).
    schema.clear()
    schema["anyOf"] = [
        {"type": "integer", "minimum": 0, "maximum": 1_000_000},
        {"type": "string", "pattern": "^\\s*$"},
    ]


def _blank_is_none(value: object) -> object:
    # The SSE spec: an empty Last-Event-ID means the client saw no event yet.
    return None if isinstance(value, str) and not value.strip() else value


# Where a stream resumes: the ``Last-Event-ID`` header, or ``?after=`` (which wins).
LastEventId = Annotated[
    Annotated[int, Field(ge=0, le=1_000_000)] | None,
    BeforeValidator(_blank_is_none),
    Header(json_schema_extra=_header_event_id_schema),
]
AfterEvent = Annotated[
    int | None,
    Query(
        ge=0, le=1_000_000, description="Events after this id.",
        json_schema_extra=_event_id_schema,
    ),
]  # fmt: skip


def _jobs(request: Request) -> JobBook:
    jobs: JobBook = request.app.state.jobs
    return jobs


async def _event_stream(
    jobs: JobRunner[Any, Any, Any], job: JobView, after: int, heartbeat_s: float, key: str | None
) -> AsyncIterator[bytes]:
    async for event in jobs.follow(job.id, after, heartbeat_s, seen=job, key=key):
        if event is None:
            yield b": keep-alive\n\n"
            continue
        data = orjson.dumps(event.model_dump(mode="json"))
        yield b"id: %d\nevent: %s\ndata: %s\n\n" % (event.id, event.type.encode(), data)


async def event_stream(
    request: Request, job_id: str, after: int, jobs: JobRunner[Any, Any, Any] | None = None
) -> StreamingResponse:
    """A job's events after ``after`` as an SSE response (404 before it starts, also to
    a key that did not start the job). ``jobs``: the book of its kind (research's when
    None)."""
    jobs, key = jobs or _jobs(request), key_of(request.scope)
    job = await jobs.view(job_id, key)  # 404 before the stream starts, not inside it
    heartbeat = request.app.state.runtime.settings.research.heartbeat_s
    return StreamingResponse(
        _event_stream(jobs, job, after, heartbeat, key),
        media_type=SSE,
        headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no", "X-Job-ID": job_id},
    )


@router.post(
    "/v1/research",
    status_code=202,
    summary="Start a research job",
    responses={
        202: {"model": ResearchAccepted, "description": "Started; follow events_url."},
        **SSE_RESPONSE,
        413: {"model": ErrorResponse, "description": "Body over the size limit."},
        422: {"model": ErrorResponse, "description": "Invalid request; `error.field`."},
        429: {
            "model": ErrorResponse,
            "description": "Too many jobs running, or this key runs its share "
            "(research.max_jobs_per_key); see Retry-After.",
        },
    },
)
async def start_research(body: ResearchRequest, request: Request) -> Response:
    job = await _jobs(request).submit(
        body,
        client=client_identity(request.scope),
        key=key_of(request.scope),
        access=collection_access(request.scope),
    )
    if body.stream:
        return await event_stream(request, job.id, 0)
    accepted = ResearchAccepted(
        id=job.id,
        status=job.status,
        status_url=f"/v1/research/{job.id}",
        events_url=f"/v1/research/{job.id}/events",
    )
    return json_response(accepted.model_dump(), 202, {"Location": accepted.status_url})


@router.get(
    "/v1/research/{job_id}",
    response_model=ResearchJob,
    summary="A research job's status, progress and (when done) result",
    responses=_NOT_FOUND,
)
async def research_status(job_id: str, request: Request) -> Response:
    job = await _jobs(request).view(job_id, key_of(request.scope))
    return json_response(job.model_dump(mode="json"))


@router.get(
    "/v1/research/{job_id}/events",
    summary="A research job's events as Server-Sent Events (resumable)",
    response_class=StreamingResponse,
    responses={
        **SSE_RESPONSE,
        **_NOT_FOUND,
        422: {"model": ErrorResponse, "description": "Invalid `after` or `Last-Event-ID`."},
    },
)
async def research_events(
    job_id: str, request: Request, last_event_id: LastEventId = None, after: AfterEvent = None
) -> StreamingResponse:
    start = after if after is not None else (last_event_id or 0)
    return await event_stream(request, job_id, start)


@router.delete(
    "/v1/research/{job_id}",
    response_model=ResearchJob,
    summary="Cancel a research job",
    responses=_NOT_FOUND,
)
async def cancel_research(job_id: str, request: Request) -> Response:
    job = await _jobs(request).cancel(job_id, key_of(request.scope))
    return json_response(job.model_dump(mode="json"))
