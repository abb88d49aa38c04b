"""Open WebUI's "external" web search and "external" web loader.

Open WebUI (``retrieval/web/external.py`` and ``retrieval/loaders/external_web.py``) POSTs
``{"query", "count"}`` to its External Search URL and expects ``[{"link", "title",
"snippet"}]``; it POSTs ``{"urls": [...]}`` (batches of 20) to its External Web Loader URL
and expects ``[{"page_content", "metadata"}]``. Both send ``Authorization: Bearer <key>``.
"""

from __future__ import annotations

import logging
from collections.abc import Callable, Coroutine, Sequence
from typing import Annotated, Any

from fastapi import APIRouter, Request
from fastapi.responses import Response
from fastapi.routing import APIRoute
from pydantic import BaseModel, ConfigDict, Field, field_validator

from searcher.api.auth import collection_access
from searcher.api.compat.common import check_bearer, runtime_of
from searcher.api.json_body import json_response
from searcher.api.observe import client_identity
from searcher.contract import (
    MAX_INT,
    MAX_QUERY_CHARS,
    NOT_BLANK,
    WHOLE,
    Budget,
    ErrorResponse,
    Query,
    SearchRequest,
    SearchResponse,
    Want,
    WireSafe,
    query_text,
)
from searcher.fetch.page_reader import PageOutcome

log = logging.getLogger("searcher.api")

MAX_COUNT = 100
MAX_URLS = 50


class _OpenWebUIBody(WireSafe):
    # Open WebUI may add fields in later versions; ignoring them keeps it working.
    model_config = ConfigDict(extra="ignore")


class ExternalSearchBody(_OpenWebUIBody):
    """What Open WebUI's external web search sends."""

    query: str = Field(
        max_length=MAX_QUERY_CHARS, json_schema_extra={"minLength": 1, "pattern": NOT_BLANK}
    )
    count: Annotated[int, Field(ge=1, le=MAX_INT), WHOLE] = Field(
        default=5, description=f"Results wanted; more than {MAX_COUNT} gives {MAX_COUNT}."
    )

    @field_validator("query")
    @classmethod
    def _query_not_blank(cls, value: str) -> str:
        return query_text(value)


class ExternalLoaderBody(_OpenWebUIBody):
    """What Open WebUI's external web loader sends."""

    urls: Annotated[list[str], Field(min_length=1, max_length=MAX_URLS)]


class SearchResult(BaseModel):
    link: str
    title: str
    snippet: str


class LoadedPage(BaseModel):
    page_content: str
    metadata: dict[str, Any]


# --- translation ----------------------------------------------------------------------


def search_request(body: ExternalSearchBody, max_results: int = MAX_COUNT) -> SearchRequest:
    """The ``SearchRequest`` for an external-search call: ``count`` results, capped at
    ``max_results`` (the server's limit; Open WebUI treats ``count`` as a suggestion)."""
    return SearchRequest(
        query=Query(text=body.query),
        budget=Budget(max_results=min(body.count, MAX_COUNT, max_results)),
        want=Want(rendered_text=False),
    )


def search_results(response: SearchResponse) -> list[dict[str, str]]:
    """Items as Open WebUI's ``[{"link", "title", "snippet"}]``, in rank order."""
    return [
        {"link": item.url, "title": item.title, "snippet": item.snippet}
        for item in response.items or []
    ]


def loaded_pages(urls: Sequence[str], outcomes: Sequence[PageOutcome]) -> list[dict[str, Any]]:
    """Pages that were read, as LangChain-style documents; pages that could not be read
    are left out, as Open WebUI's own loaders do."""
    return [
        {
            "page_content": outcome.content,
            "metadata": {
                "source": url,
                "content_type": outcome.content_type,
                "cached": outcome.cached,
                "truncated": outcome.truncated,
            },
        }
        for url, outcome in zip(urls, outcomes, strict=True)
        if outcome.status == "fetched" and outcome.content
    ]


def _log_unread(urls: Sequence[str], outcomes: Sequence[PageOutcome]) -> None:
    for url, outcome in zip(urls, outcomes, strict=True):
        if outcome.status != "fetched" or not outcome.content:
            reason = outcome.error or outcome.skip_reason or outcome.status
            log.info("open webui loader: %s not read (%s)", url, reason)


# --- routes ---------------------------------------------------------------------------


async def require_key(request: Request) -> None:
    """401 unless the request carries ``compat.openwebui_api_key`` (when one is set)."""
    check_bearer(request, runtime_of(request).settings.compat.openwebui_api_key)


class _KeyFirstRoute(APIRoute):
    """Checks the key before anything else. Not a dependency: FastAPI parses the body
    before it runs any, so a body it cannot parse would be answered (422) before the key
    was checked, telling a caller without the key about the body's shape."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            await require_key(request)
            return await handler(request)

        return handle


router = APIRouter(prefix="/openwebui", tags=["compat: Open WebUI"], route_class=_KeyFirstRoute)
_ERRORS: dict[int | str, dict[str, Any]] = {
    401: {"description": "Missing or wrong bearer key (when compat.openwebui_api_key is set)."},
    413: {"model": ErrorResponse, "description": "Body over the size limit."},
    422: {"model": ErrorResponse, "description": "Invalid body; `error.field` names the field."},
}


@router.post(
    "/search",
    response_model=list[SearchResult],
    responses={**_ERRORS, 502: {"model": ErrorResponse, "description": "Every backend failed."}},
    summary="Open WebUI external web search",
)
async def external_search(body: ExternalSearchBody, request: Request) -> Response:
    runtime = runtime_of(request)
    search = search_request(body, runtime.settings.limits.max_results)
    response = await runtime.service.search(
        search, client=client_identity(request.scope), access=collection_access(request.scope)
    )
    return json_response(search_results(response))


@router.post(
    "/loader",
    response_model=list[LoadedPage],
    responses=_ERRORS,
    summary="Open WebUI external web loader",
)
async def external_loader(body: ExternalLoaderBody, request: Request) -> Response:
    outcomes = await runtime_of(request).service.read_pages(
        body.urls, client=client_identity(request.scope)
    )
    _log_unread(body.urls, outcomes)
    return json_response(loaded_pages(body.urls, outcomes))
