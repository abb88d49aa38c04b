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
    FetchPageRequest,
    FetchPageResponse,
)
from searcher.errors import InvalidRequest
from searcher.runtime import Runtime
from searcher.tools.fetch_page import check_url, fetch_page
from searcher.tools.specs import openai_tools

router = APIRouter()


def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


@router.post(
    "/v1/fetch",
    response_model=FetchPageResponse,
    responses={
        413: {"model": ErrorResponse, "description": "Body over the size limit."},
        422: {"model": ErrorResponse, "description": "Invalid body; `error.field`."},
    },
    summary="Read one page (guarded fetch, extraction) and return a slice of its text",
)
async def fetch(body: FetchPageRequest, request: Request) -> FetchPageResponse:
    runtime = _runtime(request)
    max_chars = body.max_chars or runtime.settings.mcp.max_output_chars
    check_url(body.url)  # the friendliest reason first (scheme, host, syntax)
    # Then the OpenAPI pattern, exactly: fullmatch, since the pattern's "$" also matches
    # before a final newline.
    if re.fullmatch(HTTP_URL, body.url) is None:
        raise InvalidRequest("url", HTTP_URL_RULE)
    client = client_identity(request.scope)  # its share of the extraction workers
    return await fetch_page(runtime.service, body.url, max_chars, body.start_char, client)


@router.get(
    "/v1/tools/openai",
    summary="web_search and fetch_page as OpenAI chat-completions tool definitions",
)
async def tools_openai(request: Request) -> list[dict[str, Any]]:
    settings = _runtime(request).settings
    return openai_tools(settings.mcp.max_output_chars, settings.limits.max_results)
