"""Our exceptions -> HTTP responses, in exactly one place. No response carries a traceback."""

from __future__ import annotations

import logging
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.types import Send

from searcher.errors import (
    AllBackendsFailed,
    InvalidRequest,
    JobNotFound,
    SearcherError,
    TooManyJobs,
    field_problems,
)

log = logging.getLogger("searcher.api")


def error_response(status: int, type_: str, message: str, **extra: Any) -> JSONResponse:
    body: dict[str, Any] = {"type": type_, "message": message}
    body.update({k: v for k, v in extra.items() if v is not None})
    return JSONResponse({"error": body}, status_code=status)


async def send_error(
    send: Send, status: int, type_: str, message: str, headers: dict[str, str] | None = None
) -> None:
    """The same JSON error body, sent straight to ASGI ``send`` (for middleware that
    refuses a request before the app, and its exception handlers, see it)."""
    body = orjson.dumps({"error": {"type": type_, "message": message}})
    raw = [
        (b"content-type", b"application/json"),
        (b"content-length", str(len(body)).encode()),
    ] + [(k.lower().encode(), v.encode()) for k, v in (headers or {}).items()]
    await send({"type": "http.response.start", "status": status, "headers": raw})
    await send({"type": "http.response.body", "body": body})


def validation_error(exc: RequestValidationError) -> JSONResponse:
    """The first problem, naming its field; every problem listed under ``errors``."""
    problems = [{"field": p.field, "message": p.text} for p in field_problems(exc.errors())]
    first = problems[0] if problems else {"field": "body", "message": "invalid request"}
    return error_response(
        422, "invalid_request", f"{first['field']}: {first['message']}",
        field=first["field"], errors=problems,
    )  # fmt: skip


def install_error_handlers(app: FastAPI) -> None:
    """Register the mapping once, at start-up."""

    @app.exception_handler(RequestValidationError)
    async def _on_validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_error(exc)

    @app.exception_handler(InvalidRequest)
    async def _on_invalid(_: Request, exc: InvalidRequest) -> JSONResponse:
        return error_response(422, "invalid_request", str(exc), field=exc.field)

    @app.exception_handler(AllBackendsFailed)
    async def _on_all_failed(_: Request, exc: AllBackendsFailed) -> JSONResponse:
        backends = [
            {"backend": f.backend, "reason": f.reason, "kind": f.kind} for f in exc.failures
        ]
        return error_response(502, "all_backends_failed", str(exc), backends=backends)

    @app.exception_handler(JobNotFound)
    async def _on_no_job(_: Request, exc: JobNotFound) -> JSONResponse:
        return error_response(404, "not_found", str(exc))

    @app.exception_handler(TooManyJobs)
    async def _on_too_many_jobs(_: Request, exc: TooManyJobs) -> JSONResponse:
        response = error_response(429, "too_many_jobs", str(exc))
        response.headers["Retry-After"] = str(exc.retry_after_s)
        return response

    @app.exception_handler(SearcherError)
    async def _on_ours(_: Request, exc: SearcherError) -> JSONResponse:
        log.error("unhandled searcher error", exc_info=exc)
        return error_response(500, "internal_error", str(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _on_http(_: Request, exc: StarletteHTTPException) -> JSONResponse:
        return error_response(exc.status_code, "http_error", str(exc.detail))

    @app.exception_handler(Exception)
    async def _on_crash(_: Request, exc: Exception) -> JSONResponse:
        log.error("internal error", exc_info=exc)
        return error_response(500, "internal_error", "internal error; see the server log")
