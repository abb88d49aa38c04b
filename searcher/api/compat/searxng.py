"""SearXNG-compatible ``/search``: SearXNG's query parameters in, its JSON answer out.

Clients written for SearXNG (Open WebUI, Perplexica, LangChain's SearxSearchWrapper,
mcp-searxng, ...) can point their SearXNG URL at searcher. Parameters follow SearXNG's
search API: ``q``, ``format`` (json only), ``categories``, ``engines``, ``language``,
``pageno``, ``time_range``, ``safesearch``; plus one of ours, ``max_results`` (SearXNG has
no result count). Unknown parameters are ignored, as SearXNG does.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import urlsplit

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import RedirectResponse, Response

from searcher.api.auth import collection_access
from searcher.api.compat.common import runtime_of
from searcher.api.compat.searxng_format import searxng_envelope
from searcher.api.json_body import json_response
from searcher.api.observe import client_identity
from searcher.contract import (
    MAX_QUERY_CHARS,
    NOT_BLANK,
    ErrorResponse,
    Item,
    SearchRequest,
    SearchResponse,
    is_blank,
)
from searcher.errors import AllBackendsFailed, BackendFailure, InvalidRequest

# SearXNG answers ~10 results a page and has no count parameter; its clients cut the list
# themselves (LangChain's num_results, Open WebUI's count), so give them at least a page.
MIN_DEFAULT_RESULTS = 10
MAX_RESULTS = 100
MAX_PAGENO = 50
MAX_LANG_CHARS = 35
TIME_RANGES = ("day", "week", "month", "year")
# Values SearXNG clients send to mean "no filter" (Open WebUI sends empty strings,
# mcp-searxng and others "all" for the language).
_UNSET = frozenset({"", "none", "all", "auto"})


# --- SearXNG parameters -> SearchRequest ---------------------------------------------


def default_max_results(configured: int) -> int:
    """Results per answer when the client does not say: the configured default, raised
    to one SearXNG page."""
    return max(configured, MIN_DEFAULT_RESULTS)


def _given(params: Mapping[str, str], name: str) -> str | None:
    value = params.get(name)
    if value is None or value.strip().lower() in _UNSET:
        return None
    return value.strip()


def _comma_list(params: Mapping[str, str], name: str) -> list[str] | None:
    value = _given(params, name)
    if value is None:
        return None
    parts = [part.strip() for part in value.split(",") if part.strip()]
    return parts or None


_WHOLE_NUMBER = re.compile(r"\s*[+-]?[0-9]+\s*", re.ASCII)


def _int_in(params: Mapping[str, str], name: str, low: int, high: int) -> int | None:
    value = _given(params, name)
    if value is None:
        return None
    # ASCII digits only: int() also reads "1_0" as 10 and full-width digits.
    if _WHOLE_NUMBER.fullmatch(value) is None:
        raise InvalidRequest(name, f"must be a whole number from {low} to {high}")
    number = int(value)
    if not low <= number <= high:
        raise InvalidRequest(name, f"must be from {low} to {high}, not {number}")
    return number


def _query(params: Mapping[str, str]) -> str:
    text = params.get("q") or ""
    if len(text) > MAX_QUERY_CHARS:  # as sent: the schema's maxLength
        raise InvalidRequest("q", f"must be at most {MAX_QUERY_CHARS} characters")
    if is_blank(text):
        raise InvalidRequest("q", "a non-empty query is required")
    return text.strip()


def _check_format(params: Mapping[str, str]) -> None:
    # SearXNG's default format is HTML; we have only JSON, so a missing format means JSON.
    value = (params.get("format") or "json").strip().lower()
    if value != "json":
        raise InvalidRequest("format", f"only format=json is supported, not {value!r}")


def _language(params: Mapping[str, str]) -> str | None:
    value = _given(params, "language")
    if value is not None and len(value) > MAX_LANG_CHARS:
        raise InvalidRequest("language", f"must be at most {MAX_LANG_CHARS} characters")
    return value


def _time_range(params: Mapping[str, str]) -> str | None:
    value = _given(params, "time_range")
    if value is not None and value not in TIME_RANGES:
        raise InvalidRequest("time_range", f"must be one of {', '.join(TIME_RANGES)}")
    return value


def searxng_request(params: Mapping[str, str], max_results: int) -> SearchRequest:
    """The ``SearchRequest`` for SearXNG query parameters; ``max_results`` applies unless
    the non-standard ``max_results`` parameter says otherwise. Raises ``InvalidRequest``
    naming the SearXNG parameter."""
    _check_format(params)
    query = _query(params)
    constraints: dict[str, Any] = {
        "lang": _language(params),
        "categories": _comma_list(params, "categories"),
        "engines": _comma_list(params, "engines"),
        "pageno": _int_in(params, "pageno", 1, MAX_PAGENO) or 1,
        "time_range": _time_range(params),
        "safesearch": _int_in(params, "safesearch", 0, 2),
    }
    count = _int_in(params, "max_results", 1, MAX_RESULTS) or max_results
    # Every value was checked above against the contract's limits, with the SearXNG
    # parameter's name in the message; this cannot fail on client input.
    return SearchRequest.model_validate(
        {
            "query": query,
            "constraints": constraints,
            "budget": {"max_results": count},
            # Only the items become the answer: skip rendering the context pack.
            "want": {"rendered_text": False},
        }
    )


# --- SearchResponse -> SearXNG JSON --------------------------------------------------


def _engines_and_positions(item: Item) -> tuple[list[str], list[int]]:
    engines: list[str] = []
    positions: list[int] = []
    for source in item.provenance:
        name = source.engine or source.backend
        if name not in engines:
            engines.append(name)
            positions.append(source.rank)
    if not engines:
        engines = list(item.engines) or [item.engine]
        positions = [item.score.rank] * len(engines)
    return engines, positions


def searxng_result(item: Item) -> dict[str, Any]:
    """One item as a SearXNG result (``content`` is the snippet, ``score`` the relevance)."""
    engines, positions = _engines_and_positions(item)
    parts = urlsplit(item.url)
    return {
        "url": item.url,
        "title": item.title,
        "content": item.snippet,
        "engine": engines[0],
        "engines": engines,
        "positions": positions,
        "score": item.score.relevance,
        "category": item.category or "general",
        "publishedDate": item.published_utc,
        "parsed_url": [parts.scheme, parts.netloc, parts.path, "", parts.query, parts.fragment],
        "template": "default.html",
    }


def searxng_answer(query: str, response: SearchResponse) -> dict[str, Any]:
    """SearXNG's JSON answer for a response; search errors become ``unresponsive_engines``
    as ``[name, reason]`` pairs."""
    results = [searxng_result(item) for item in response.items or []]
    unresponsive = [
        (error.source, error.reason)
        for error in response.meta.errors
        if error.stage == "search" and error.kind != "no_results"  # empty: no engine failed
    ]
    return searxng_envelope(query, results, _once(unresponsive))


def failed_answer(query: str, failures: Sequence[BackendFailure]) -> dict[str, Any]:
    """The answer when every backend failed: like SearXNG when all its engines fail, no
    results and each failure listed as unresponsive (HTTP 200)."""
    return searxng_envelope(query, [], _once([(f.backend, f.reason) for f in failures]))


def _once(pairs: Sequence[tuple[str, str]]) -> list[list[str]]:
    """``[name, reason]`` pairs, each once (a retried attempt that failed alike is one)."""
    return [list(pair) for pair in dict.fromkeys(pairs)]


# --- routes ---------------------------------------------------------------------------

router = APIRouter(tags=["compat: SearXNG"])

# The parameters, for the OpenAPI document only: the route reads them itself, because a
# POST may carry them as form fields instead.
_PARAMETER_DOCS = {
    "q": "The query (required).",
    "format": "json (the default here; other formats are refused).",
    "categories": "Comma-separated SearXNG categories.",
    "engines": "Comma-separated SearXNG engines.",
    "language": "Language code, e.g. de or en-US.",
    "pageno": "Result page, 1-50.",
    "time_range": "day, week, month or year.",
    "safesearch": "0 off, 1 moderate, 2 strict.",
    "max_results": f"Not SearXNG's: results wanted, 1-{MAX_RESULTS}.",
}
# What each parameter accepts, as the checks above apply it ("" and the _UNSET words mean
# "not given").
_UNSET_WORDS = sorted(_UNSET)
_PARAMETER_SCHEMAS: dict[str, dict[str, Any]] = {
    "q": {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS, "pattern": NOT_BLANK},
    "format": {"type": "string", "enum": ["json", ""]},
    "language": {"type": "string", "maxLength": MAX_LANG_CHARS},
    "pageno": {"type": "integer", "minimum": 1, "maximum": MAX_PAGENO},
    "time_range": {"type": "string", "enum": [*TIME_RANGES, *_UNSET_WORDS]},
    "safesearch": {"type": "integer", "minimum": 0, "maximum": 2},
    "max_results": {"type": "integer", "minimum": 1, "maximum": MAX_RESULTS},
}
_OPENAPI_PARAMETERS = [
    {"name": name, "in": "query", "required": name == "q",
     "schema": _PARAMETER_SCHEMAS.get(name, {"type": "string"}), "description": text}
    for name, text in _PARAMETER_DOCS.items()
]  # fmt: skip


async def _params(request: Request) -> dict[str, str]:
    """Query parameters, and for POST the form fields on top (SearXNG takes both)."""
    params = dict(request.query_params)
    if request.method == "POST":
        form = await request.form()
        params.update({k: v for k, v in form.items() if isinstance(v, str)})
    return params


_SEARCH_ROUTE: dict[str, Any] = {
    "summary": "SearXNG-compatible search (format=json)",
    "openapi_extra": {"parameters": _OPENAPI_PARAMETERS},
    "responses": {
        413: {"model": ErrorResponse, "description": "Form body over the size limit."},
        422: {"model": ErrorResponse, "description": "Invalid parameter; `error.field` names it."},
    },
}


# GET and POST are two routes so that each has its own OpenAPI operation id.
@router.get("/search", operation_id="searxng_search_get", **_SEARCH_ROUTE)
@router.post("/search", operation_id="searxng_search_post", **_SEARCH_ROUTE)
async def search(request: Request) -> Response:
    runtime = runtime_of(request)
    body = searxng_request(
        await _params(request), default_max_results(runtime.settings.budget.max_results)
    )
    try:
        response = await runtime.service.search(
            body, client=client_identity(request.scope), access=collection_access(request.scope)
        )
    except AllBackendsFailed as exc:
        return json_response(failed_answer(body.query_text, exc.failures))
    return json_response(searxng_answer(body.query_text, response))


@router.api_route("/", methods=["GET", "POST"], include_in_schema=False)
async def index(request: Request) -> Response:
    """SearXNG sends ``/?q=...`` on to ``/search`` (LangChain calls the bare host)."""
    if "q" not in await _params(request):
        raise HTTPException(
            404,
            "nothing here: SearXNG-compatible search is at /search?q=...&format=json, "
            "the API at /v1/search, its documentation at /docs",
        )
    query = request.url.query
    # Relative, so that it still works behind a reverse proxy that adds a path prefix.
    return RedirectResponse("search" + (f"?{query}" if query else ""), status_code=308)
