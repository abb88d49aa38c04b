"""Brave Search through its web search API (``/res/v1/web/search``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from pydantic import Field

from searcher.backends.base import (
    BackendAnswer,
    BackendQuery,
    BackendSpec,
    BuildContext,
    Capabilities,
    Hit,
    HttpBackend,
    RequestParts,
    json_object,
)
from searcher.backends.failures import http_failure
from searcher.backends.normalise import http_url, iso_utc, plain_text
from searcher.config_sections import ANSWER_SETTINGS, HttpUrl, InstanceSettings

NAME = "brave"
MAX_COUNT = 20  # the API refuses more per call
MAX_PAGENO = 10  # the API serves offsets 0..9 and refuses more (422)


@dataclass(frozen=True)
class PagedCapabilities(Capabilities):
    """Capabilities with the last page the backend serves: a later page is not asked for
    (the pool searches this one and says so in a plan note); and the results one call
    gives at most (more asked for: said in a plan note)."""

    max_pageno: int | None = None
    max_results: int | None = None


CAPABILITIES = PagedCapabilities(
    paging=True, result_count=True, time_range=True, safesearch=True, language=True,
    max_pageno=MAX_PAGENO, max_results=MAX_COUNT,
)  # fmt: skip
_FRESHNESS = {"day": "pd", "week": "pw", "month": "pm", "year": "py"}
_SAFESEARCH = {0: "off", 1: "moderate", 2: "strict"}


class BraveSettings(InstanceSettings):
    """A Brave Search API account (``adapter: brave``)."""

    base_url: HttpUrl = Field(
        default="https://api.search.brave.com", description="Brave API base URL"
    )
    api_key: str | None = Field(
        default=None, description="Brave Search API key; unset = Brave not configured"
    )


def build_request(base_url: str, api_key: str, query: BackendQuery) -> RequestParts:
    """The GET request for one page of Brave web results."""
    params = {
        "q": query.text,
        "count": str(min(MAX_COUNT, max(1, query.max_results))),
        "offset": str(max(0, min(query.pageno, MAX_PAGENO) - 1)),
    }
    if query.lang:
        params["search_lang"] = query.lang.split("-")[0].lower()
    if query.time_range in _FRESHNESS:
        params["freshness"] = _FRESHNESS[query.time_range]
    if query.safesearch is not None:
        params["safesearch"] = _SAFESEARCH[query.safesearch]
    headers = {"Accept": "application/json", "X-Subscription-Token": api_key}
    return RequestParts("GET", base_url.rstrip("/") + "/res/v1/web/search", params, headers)


def _hit(raw: Mapping[str, Any], instance: str) -> Hit | None:
    url = http_url(raw.get("url"))
    if url is None:
        return None
    return Hit(
        url=url,
        title=plain_text(raw.get("title")) or url,
        snippet=plain_text(raw.get("description")),
        backend=instance,
        engines=(NAME,),
        published=iso_utc(raw.get("page_age")),
    )


def parse_response(
    status: int, headers: Mapping[str, str], body: bytes, instance: str = NAME
) -> BackendAnswer:
    """Hits from a Brave answer; Brave leaves out ``web`` entirely when nothing matched.
    A redirect is no answer: its failure names where it points."""
    if 300 <= status < 400:
        raise http_failure(instance, status, headers, body)
    data = json_object(instance, headers, body)
    web = data.get("web")
    raw_results = web.get("results") if isinstance(web, dict) else None
    if not isinstance(raw_results, list):
        raw_results = []
    hits = [hit for raw in raw_results if isinstance(raw, dict) and (hit := _hit(raw, instance))]
    return BackendAnswer(instance, hits)


def _missing(settings: BraveSettings) -> str | None:
    return None if settings.api_key else "no api_key (set BRAVE_API_KEY)"


def _build(name: str, settings: BraveSettings, context: BuildContext) -> HttpBackend:
    base, key = settings.base_url, settings.api_key or ""

    def request(query: BackendQuery) -> RequestParts:
        return build_request(base, key, query)

    return HttpBackend(name, CAPABILITIES, request, parse_response, context.client)


# Which account asks (api_key) and how long it waits do not change what Brave answers.
SPEC = BackendSpec(
    NAME, CAPABILITIES, BraveSettings, _build, _missing, ANSWER_SETTINGS | {"base_url"}
)
