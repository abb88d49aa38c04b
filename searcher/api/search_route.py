"""``POST /v1/search``: one search through the service, and its fast path for valid
bodies."""

from __future__ import annotations

import json
from collections.abc import Awaitable
from typing import Any

import orjson
from fastapi import APIRouter, FastAPI, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from starlette.types import Message, Receive, Scope, Send

from searcher.api.auth import collection_access, key_of
from searcher.api.feedback import record_search
from searcher.api.observe import client_identity
from searcher.api.replayed_body import read_body, replaying
from searcher.contract import ErrorResponse, SearchRequest, SearchResponse
from searcher.recording.recorder import check_recordable, recorded_search
from searcher.runtime import Runtime

router = APIRouter()
SEARCH_PATH = "/v1/search"

_ERRORS: dict[int | str, dict[str, Any]] = {
    413: {"model": ErrorResponse, "description": "Body over the size limit."},
    422: {"model": ErrorResponse, "description": "Invalid request; `error.field` names the field."},
    502: {"model": ErrorResponse, "description": "Every backend failed; each is listed."},
}


@router.post(
    SEARCH_PATH,
    response_model=SearchResponse,
    responses=_ERRORS,
    summary="Search the web and return a UCP-1 context pack",
)
async def search(body: SearchRequest, request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    state = request.scope["state"]  # what ``request.state`` wraps (a wrapper per request)

    def run() -> Awaitable[SearchResponse]:
        return runtime.service.search(
            body, client=client_identity(request.scope), access=collection_access(request.scope)
        )

    if body.constraints.record:
        book = check_recordable(runtime.settings.recording, runtime.state)
        key = key_of(request.scope)
        response = await recorded_search(book, state["request_id"], body, run, key)
    else:
        response = await run()
    await record_search(runtime, state["request_id"], body, response, key_of(request.scope))
    state["log"] = {
        "query": body.query_text,
        "mode": response.meta.mode_used,
        "backends": response.meta.backends_tried,
    }
    return Response(orjson.dumps(response.to_wire(body.want)), media_type="application/json")


def answer_valid_searches_directly(app: FastAPI) -> None:
    """Put a :class:`SearchFastPath` in front of FastAPI's handler of POST /v1/search."""
    for route in app.router.routes:
        if isinstance(route, APIRoute) and route.path == SEARCH_PATH:
            route.app = SearchFastPath(route.app, route.endpoint)


class SearchFastPath:
    """POST /v1/search, answered without FastAPI's request handling when the body is valid.

    FastAPI's handling of a body parameter (content-type sniffing, dependency solving,
    its exit stacks) costs about 50 us a request, a sixth of what the server adds to a
    simple search. A body sent as ``application/json`` that parses and validates is
    parsed and validated here as FastAPI does it (``json.loads``, then the model with
    ``from_attributes``, as its body field does) and handed to the endpoint. Anything
    else (another content type, bad JSON, an invalid request, a client gone, a failed
    read) goes to FastAPI's handler with what was received replayed, so every error
    answer stays FastAPI's own. The route itself is unchanged: the OpenAPI document and
    the route in metrics and logs stay the same (tests/test_api_search.py compares the two
    paths)."""

    def __init__(self, handler: Any, endpoint: Any) -> None:
        self.handler = handler  # FastAPI's ASGI app of the route
        self.endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        received: list[Message | BaseException] = []
        body = await read_body(receive, received)
        request = None if body is None else _valid_search(scope, body)
        if request is None:
            await self.handler(scope, replaying(received, receive), send)
            return
        response = await self.endpoint(request, Request(scope, receive, send))
        await response(scope, receive, send)


def _valid_search(scope: Scope, body: bytes) -> SearchRequest | None:
    """The request in ``body`` when FastAPI would take the body as JSON and it is valid."""
    content_type = next((v for k, v in scope["headers"] if k == b"content-type"), None)
    if content_type != b"application/json" or not body:
        return None
    try:
        return SearchRequest.model_validate(json.loads(body), from_attributes=True)
    except Exception:  # bad JSON, too deep, invalid: FastAPI's handler answers it
        return None
