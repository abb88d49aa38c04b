"""Routes for tool-calling clients: ``POST /v1/fetch`` (fetch_page over HTTP) and
``GET /v1/tools/openai`` (the tool definitions for OpenAI-style function calling)."""

from __future__ import annotations

import re
from typing import Any

from fastapi import APIRouter, Request

from searcher.api.observe import client_identity
from searcher.contract import (
    HTTP_URL,
    HTTP_URL_RULE,
    ErrorResponse,
    FetchBatchResponse,
    FetchPageResponse,
    FetchRequest,
)
from searcher.errors import InvalidRequest
from searcher.runtime import Runtime
from searcher.tools.fetch_page import check_url, fetch_page, fetch_pages
from searcher.tools.specs import openai_tools

router = APIRouter()


def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


@router.post(
    "/v1/fetch",
    response_model=FetchPageResponse | FetchBatchResponse,
    responses={
        413: {"model": ErrorResponse, "description": "Body over the size limit."},
        422: {"model": ErrorResponse, "description": "Invalid body; `error.field`."},
    },
    summary="Read one page (`url`) or several (`urls`): guarded fetch, extraction, a slice of each",
)
async def fetch(body: FetchRequest, request: Request) -> FetchPageResponse | FetchBatchResponse:
    runtime = _runtime(request)
    max_chars = body.max_chars or runtime.settings.mcp.max_output_chars
    client = client_identity(request.scope)  # its share of the extraction workers
    if not body.url and not body.urls:
        raise InvalidRequest("url", "Field required (or `urls`, for several pages)")
    if body.url and body.urls:
        raise InvalidRequest("urls", "give `url` (one page) or `urls` (several), not both")
    if body.urls:
        urls = [_checked(url, f"urls.{i}") for i, url in enumerate(body.urls)]
        pages = await fetch_pages(
            runtime.service, urls, max_chars, body.start_char, client, body.render
        )
        return FetchBatchResponse(results=pages)
    url = _checked(body.url, "url")
    return await fetch_page(runtime.service, url, max_chars, body.start_char, client, body.render)


def _checked(url: str, field: str) -> str:
    """``url`` as sent, or ``InvalidRequest`` naming ``field``."""
    try:
        check_url(url)  # the friendliest reason first (scheme, host, syntax)
    except InvalidRequest as exc:
        raise InvalidRequest(field, exc.message) from exc
    # Then the OpenAPI pattern, exactly, on the URL as sent (check_url strips it): fullmatch,
    # since the pattern's "$" also matches before a final newline.
    if re.fullmatch(HTTP_URL, url) is None:
        raise InvalidRequest(field, HTTP_URL_RULE)
    return url


@router.get(
    "/v1/tools/openai",
    summary="web_search and fetch_page as OpenAI chat-completions tool definitions",
)
async def tools_openai(request: Request) -> list[dict[str, Any]]:
    settings = _runtime(request).settings
    return openai_tools(settings.mcp.max_output_chars, settings.limits.max_results)
