"""Our exceptions -> HTTP responses, in exactly one place. No response carries a traceback."""

from __future__ import annotations

import logging
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.routing import Match
from starlette.types import Scope, Send

from searcher.errors import (
    AccessDenied,
    AllBackendsFailed,
    AnswerJobFailed,
    AnswerUnavailable,
    DocumentNotFound,
    EmbedderUnavailable,
    InvalidRequest,
    JobNotFound,
    LlmRequired,
    SearcherError,
    StateUnavailable,
    StructuredOutputFailed,
    TooManyJobs,
    UnknownRequest,
    UploadsOff,
    field_problems,
)

log = logging.getLogger("searcher.api")

# Routes whose clients speak OpenAI's API: their errors come in OpenAI's shape.
OPENAI_PATHS = ("/v1/chat/completions", "/v1/models")


def speaks_openai(scope: Scope) -> bool:
    """Whether the request is for a route OpenAI's clients call."""
    path = scope.get("path", "")
    return path in OPENAI_PATHS or path.startswith("/v1/models/")


def openai_error(body: dict[str, Any]) -> dict[str, Any]:
    """Our error body's ``error`` in OpenAI's shape: ``message``, ``type``, ``param``
    (the field at fault, if one is) and ``code``; our other details kept beside them."""
    error = dict(body)
    return {
        "message": error.pop("message"),
        "type": error.pop("type"),
        "param": error.pop("field", None),
        "code": body["type"],
        **error,
    }


def in_openai_shape(response: JSONResponse) -> JSONResponse:
    """The same error response, its body in OpenAI's shape, its headers kept."""
    body = orjson.loads(bytes(response.body))
    return _reshaped(response, {"error": openai_error(body["error"])})


def _reshaped(response: JSONResponse, body: dict[str, Any]) -> JSONResponse:
    """``response`` with ``body`` instead of its own, its status and headers kept."""
    shaped = JSONResponse(body, status_code=response.status_code)
    for name, value in response.headers.items():
        if name not in ("content-length", "content-type"):
            shaped.headers[name] = value
    return shaped


TAVILY_PREFIX = "/tavily/"


def speaks_tavily(scope: Scope) -> bool:
    """Whether the request is for a route Tavily's clients call (``/tavily/*``)."""
    return str(scope.get("path", "")).startswith(TAVILY_PREFIX)


def in_tavily_shape(response: JSONResponse) -> JSONResponse:
    """The same error response, its body in Tavily's shape (``{"detail": {"error":
    message}}``), its headers kept: what a Tavily client reads on every error."""
    error = orjson.loads(bytes(response.body))["error"]
    return _reshaped(response, {"detail": {"error": error["message"]}})


MCP_PATH = "/mcp"
# JSON-RPC's codes for a message refused (the client's doing) and for the server's failure.
_JSONRPC_INVALID_REQUEST = -32600
_JSONRPC_INTERNAL_ERROR = -32603


def speaks_mcp(scope: Scope) -> bool:
    """Whether the request is for the MCP endpoint (streamable HTTP)."""
    return scope.get("path", "") == MCP_PATH


def mcp_error(error: dict[str, Any], status: int) -> dict[str, Any]:
    """Our error body's ``error`` as a JSON-RPC error (id null: the message was not read),
    ours kept as its ``data``. MCP clients show a JSON-RPC error's message whatever the
    status; any other body reaches the user as "Server returned an error response"."""
    code = _JSONRPC_INTERNAL_ERROR if status >= 500 else _JSONRPC_INVALID_REQUEST
    return {"jsonrpc": "2.0", "id": None,
            "error": {"code": code, "message": error["message"], "data": error}}  # fmt: skip


def in_mcp_shape(response: JSONResponse) -> JSONResponse:
    """The same error response, its body a JSON-RPC error, its status and headers kept."""
    error = orjson.loads(bytes(response.body))["error"]
    return _reshaped(response, mcp_error(error, response.status_code))


def in_route_shape(scope: Scope, response: JSONResponse) -> JSONResponse:
    """An error response of ours in the shape the route's clients read: OpenAI's, Tavily's,
    JSON-RPC on ``/mcp``, else ours."""
    if speaks_openai(scope):
        return in_openai_shape(response)
    if speaks_tavily(scope):
        return in_tavily_shape(response)
    return in_mcp_shape(response) if speaks_mcp(scope) else response


def error_response(status: int, type_: str, message: str, **extra: Any) -> JSONResponse:
    body: dict[str, Any] = {"type": type_, "message": message}
    body.update({k: v for k, v in extra.items() if v is not None})
    return JSONResponse({"error": body}, status_code=status)


def shaped_for(scope: Scope, error: dict[str, Any], status: int) -> dict[str, Any]:
    """The error body for the route asked: OpenAI's shape on the routes OpenAI's clients
    call, Tavily's on Tavily's, JSON-RPC on ``/mcp``, ours elsewhere."""
    if speaks_openai(scope):
        return {"error": openai_error(error)}
    if speaks_tavily(scope):
        return {"detail": {"error": error["message"]}}
    return mcp_error(error, status) if speaks_mcp(scope) else {"error": error}


async def send_error(
    send: Send, status: int, type_: str, message: str, headers: dict[str, str] | None = None,
    scope: Scope | None = None, field: str | None = None,
) -> None:  # fmt: skip
    """The same JSON error body, sent straight to ASGI ``send`` (for middleware that
    refuses a request before the app, and its exception handlers, see it); in the shape
    of the route ``scope`` asked for, when given."""
    error = {"type": type_, "message": message} | ({"field": field} if field else {})
    body = orjson.dumps(shaped_for(scope, error, status) if scope is not None else {"error": error})
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


def body_parse_problem(exc: StarletteHTTPException) -> str | None:
    """What was wrong with a body FastAPI could not parse (it answers those with a bare
    400), or None for any other HTTP error. Such a body is bad input: a 422 naming it."""
    if exc.status_code != 400 or exc.detail != "There was an error parsing the body":
        return None
    cause = exc.__cause__
    if isinstance(cause, UnicodeDecodeError):
        return "not valid UTF-8"
    if isinstance(cause, RecursionError):
        return "JSON nested too deeply"
    if isinstance(cause, ValueError) and "integer string conversion" in str(cause):
        # Python refuses to read an integer of over 4,300 digits (sys.int_info).
        return "a number too long to read (over 4,300 digits)"
    return "not readable as JSON"


_METHODS = ("GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS")


def allowed_methods(app: FastAPI, scope: Scope) -> list[str]:
    """The methods some route of ``app`` answers at the request's path (one path may have
    a route per method), found by asking the routes themselves."""
    return [
        method
        for method in _METHODS
        if any(route.matches({**scope, "method": method})[0] == Match.FULL
               for route in app.router.routes)
    ]  # fmt: skip


def _install_collection_handlers(app: FastAPI) -> None:
    """Collections of own documents: what a key may not use, uploads switched off, an
    uploaded document that is not there, an embedder not loaded yet."""

    @app.exception_handler(AccessDenied)
    async def _on_denied(_: Request, exc: AccessDenied) -> JSONResponse:
        return error_response(403, "forbidden", str(exc), field=exc.field)

    @app.exception_handler(UploadsOff)
    async def _on_uploads_off(_: Request, exc: UploadsOff) -> JSONResponse:
        return error_response(403, "forbidden", str(exc), field="corpus.uploads.enabled")

    @app.exception_handler(DocumentNotFound)
    async def _on_no_document(_: Request, exc: DocumentNotFound) -> JSONResponse:
        return error_response(404, "not_found", str(exc))

    @app.exception_handler(EmbedderUnavailable)
    async def _on_no_embedder(_: Request, exc: EmbedderUnavailable) -> JSONResponse:
        response = error_response(503, "unavailable", str(exc))
        response.headers["Retry-After"] = "5"
        return response


def _install_llm_handlers(app: FastAPI) -> None:
    """What needs the LLM: none configured, or one that wrote nothing (valid)."""

    @app.exception_handler(LlmRequired)
    async def _on_llm_required(_: Request, exc: LlmRequired) -> JSONResponse:
        # The server's configuration, not the request, lacks it: 503, naming the setting.
        return error_response(503, "llm_required", str(exc), field=exc.field)

    @app.exception_handler(StructuredOutputFailed)
    async def _on_no_structure(_: Request, exc: StructuredOutputFailed) -> JSONResponse:
        problems = [{"field": "response_format", "message": p} for p in exc.problems]
        return error_response(502, "structured_output_failed", str(exc), errors=problems)

    @app.exception_handler(AnswerUnavailable)
    async def _on_no_answer(_: Request, exc: AnswerUnavailable) -> JSONResponse:
        return error_response(502, _answer_failure(exc), str(exc))


def install_error_handlers(app: FastAPI) -> None:
    """Register the mapping once, at start-up."""

    @app.exception_handler(RequestValidationError)
    async def _on_validation(_: Request, exc: RequestValidationError) -> JSONResponse:
        return validation_error(exc)

    @app.exception_handler(InvalidRequest)
    async def _on_invalid(_: Request, exc: InvalidRequest) -> JSONResponse:
        return error_response(
            422, "invalid_request", str(exc), field=exc.field,
            errors=[{"field": exc.field, "message": exc.message}],
        )  # fmt: skip

    _install_collection_handlers(app)
    _install_llm_handlers(app)

    @app.exception_handler(AllBackendsFailed)
    async def _on_all_failed(_: Request, exc: AllBackendsFailed) -> JSONResponse:
        # A retry that failed as the attempt before it is listed once, as in the message.
        failures = dict.fromkeys((f.backend, f.reason, f.kind) for f in exc.failures)
        backends = [
            {"backend": backend, "reason": reason, "kind": kind}
            for backend, reason, kind in failures
        ]
        return error_response(502, "all_backends_failed", str(exc), backends=backends)

    @app.exception_handler(JobNotFound)
    async def _on_no_job(_: Request, exc: JobNotFound) -> JSONResponse:
        return error_response(404, "not_found", str(exc))

    @app.exception_handler(UnknownRequest)
    async def _on_unknown_request(_: Request, exc: UnknownRequest) -> JSONResponse:
        return error_response(404, "not_found", str(exc), field="request_id")

    @app.exception_handler(TooManyJobs)
    async def _on_too_many_jobs(_: Request, exc: TooManyJobs) -> JSONResponse:
        response = error_response(429, "too_many_jobs", str(exc))
        response.headers["Retry-After"] = str(exc.retry_after_s)
        return response

    @app.exception_handler(StateUnavailable)
    async def _on_state_unavailable(_: Request, exc: StateUnavailable) -> JSONResponse:
        # What the store holds cannot be told: "unavailable", never "not found". The detail
        # (an address of the internal network) stays in the log.
        log.warning("state store unavailable: %s", exc)
        response = error_response(
            503, "unavailable", "the state store is unavailable; retry shortly"
        )
        response.headers["Retry-After"] = "5"
        return response

    @app.exception_handler(SearcherError)
    async def _on_ours(_: Request, exc: SearcherError) -> JSONResponse:
        log.error("unhandled searcher error", exc_info=exc)
        return error_response(500, "internal_error", str(exc))

    @app.exception_handler(StarletteHTTPException)
    async def _on_http(request: Request, exc: StarletteHTTPException) -> JSONResponse:
        unreadable = body_parse_problem(exc)
        if unreadable is not None:
            return error_response(
                422, "invalid_request", f"body: {unreadable}", field="body",
                errors=[{"field": "body", "message": unreadable}],
            )  # fmt: skip
        response = error_response(exc.status_code, "http_error", str(exc.detail))
        # 405 carries Allow, 401 WWW-Authenticate: the headers the exception came with.
        response.headers.update(exc.headers or {})
        if exc.status_code == 405:  # every method of the path, not just one route's
            response.headers["Allow"] = ", ".join(allowed_methods(app, request.scope))
        return response

    @app.exception_handler(Exception)
    async def _on_crash(_: Request, exc: Exception) -> JSONResponse:
        log.error("internal error", exc_info=exc)
        return error_response(500, "internal_error", "internal error; see the server log")

    _answer_compat_clients_in_their_shape(app)


def _answer_compat_clients_in_their_shape(app: FastAPI) -> None:
    """Every handler above answers the OpenAI routes in OpenAI's error shape, the Tavily
    routes in Tavily's and ``/mcp`` in JSON-RPC's (a 404, 405, 413, 503 or 500 there
    included)."""
    for kind, handler in list(app.exception_handlers.items()):
        if getattr(handler, "__module__", None) == __name__:
            app.exception_handlers[kind] = _compat_shaped(handler)


def _compat_shaped(handler: Any) -> Any:
    async def answer(request: Request, exc: Exception) -> JSONResponse:
        return in_route_shape(request.scope, await handler(request, exc))

    return answer


# A chat answer's research job that failed for one of these reasons says so in the error's
# type, as a search failing so does; any other failure is the LLM's (``llm_failed``).
_JOB_FAILURES_SAID = frozenset({"all_backends_failed", "structured_output_failed"})


def _answer_failure(exc: AnswerUnavailable) -> str:
    kind = exc.kind if isinstance(exc, AnswerJobFailed) else None
    return kind if kind in _JOB_FAILURES_SAID else "llm_failed"


def stream_error(exc: Exception) -> dict[str, Any]:
    """A failure after a chat stream began, in OpenAI's shape (its status was sent)."""
    if isinstance(exc, AllBackendsFailed):
        kind = "all_backends_failed"
    elif isinstance(exc, AnswerUnavailable):
        kind = _answer_failure(exc)
    elif isinstance(exc, StructuredOutputFailed):
        kind = "structured_output_failed"
    elif isinstance(exc, StateUnavailable):
        return openai_error({"type": "unavailable", "message": "the state store is unavailable"})
    elif isinstance(exc, SearcherError):
        kind = "internal_error"
    else:
        log.error("internal error in a chat stream", exc_info=exc)
        return openai_error({"type": "internal_error", "message": "internal error"})
    return openai_error({"type": kind, "message": str(exc)})
