"""Routes for whole sites: ``POST /v1/map`` (a site's URLs from sitemaps and links)."""

from __future__ import annotations

import re
import time
from urllib.parse import urlsplit

from fastapi import APIRouter, Request

from searcher.contract import (
    HTTP_URL,
    HTTP_URL_RULE,
    ErrorResponse,
    MapRequest,
    MapResponse,
    SiteFilters,
)
from searcher.errors import InvalidRequest
from searcher.runtime import Runtime
from searcher.site.mapping import MapPlan, map_site
from searcher.site.scope import SiteScope, compile_patterns, normalised_url
from searcher.tools.fetch_page import check_url

router = APIRouter()


def root_and_scope(body: SiteFilters) -> tuple[str, SiteScope]:
    """The normalised root and the filters of a map or crawl request; ``InvalidRequest``
    naming the field for a bad URL or pattern."""
    url = check_url(body.url)
    root = normalised_url(url) if re.fullmatch(HTTP_URL, url) else None
    if root is None:
        raise InvalidRequest("url", HTTP_URL_RULE)
    scope = SiteScope(
        root_host=urlsplit(root).hostname or "",
        allow_external=body.allow_external,
        select_paths=compile_patterns(body.select_paths, "select_paths"),
        exclude_paths=compile_patterns(body.exclude_paths, "exclude_paths"),
        select_domains=compile_patterns(body.select_domains, "select_domains"),
        exclude_domains=compile_patterns(body.exclude_domains, "exclude_domains"),
    )
    return root, scope


def map_plan(body: MapRequest, user_agent: str) -> MapPlan:
    """The plan of a map request; ``InvalidRequest`` naming the field for a bad URL or
    pattern."""
    root, scope = root_and_scope(body)
    return MapPlan(
        root=root, scope=scope, max_depth=body.max_depth, max_breadth=body.max_breadth,
        limit=body.limit, use_sitemaps=body.sitemaps, timeout_s=body.timeout_s,
        user_agent=user_agent,
    )  # fmt: skip


async def run_map(runtime: Runtime, body: MapRequest) -> MapResponse:
    """Map the site ``body`` names through the guarded fetcher."""
    started = time.perf_counter()
    plan = map_plan(body, runtime.settings.fetch.user_agent)
    found = await map_site(runtime.service.parts.reader.fetcher.fetch, plan)
    return MapResponse(
        base_url=plan.root, results=found.urls, from_sitemaps=found.from_sitemaps,
        from_links=found.from_links, sitemaps_read=found.sitemaps_read,
        pages_read=found.pages_read, complete=found.complete,
        response_time=round(time.perf_counter() - started, 3),
    )  # fmt: skip


@router.post(
    "/v1/map",
    response_model=MapResponse,
    responses={
        413: {"model": ErrorResponse, "description": "Body over the size limit."},
        422: {"model": ErrorResponse, "description": "Invalid body; `error.field`."},
    },
    summary="A site's URLs from its sitemaps and links (no page content)",
)
async def site_map(body: MapRequest, request: Request) -> MapResponse:
    runtime: Runtime = request.app.state.runtime
    return await run_map(runtime, body)
