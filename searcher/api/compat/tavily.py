"""Tavily-compatible ``POST /tavily/search`` and ``POST /tavily/extract``.

Clients written for Tavily (tavily-python with ``api_base_url``, LangChain's Tavily tools,
anything that can change Tavily's base URL) work against searcher unchanged. The wire
format follows Tavily's API reference, errors included: ``{"detail": {"error": ...}}``
with 400 for a bad body and 401 for a missing or wrong key. The translation functions are
plain; the routes only wire them to the service.
"""

from __future__ import annotations

import hmac
import re
import time
import uuid
from collections.abc import Callable, Coroutine, Sequence
from datetime import date
from typing import Annotated, Any, Literal, get_args

import orjson
from fastapi import APIRouter, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import Response
from fastapi.routing import APIRoute
from pydantic import (
    ConfigDict,
    Field,
    StrictBool,
    StrictFloat,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)
from starlette.exceptions import HTTPException as StarletteHTTPException

from searcher.api.auth import collection_access, key_of
from searcher.api.compat.common import bearer_token, runtime_of
from searcher.api.errors import body_parse_problem
from searcher.api.json_body import json_response
from searcher.api.observe import client_identity
from searcher.api.site_routes import run_map
from searcher.contract import (
    HTTP_URL,
    MAX_MAP_TIMEOUT_S,
    MAX_QUERY_CHARS,
    NOT_BLANK,
    WHOLE,
    CrawlRequest,
    Domain,
    ErrorResponse,
    EvidencePassage,
    Item,
    MapPattern,
    MapRequest,
    Preset,
    Query,
    ResearchJob,
    ResearchRequest,
    SearchRequest,
    SearchResponse,
    TimeRange,
    WireSafe,
    is_blank,
    query_text,
)
from searcher.errors import (
    AllBackendsFailed,
    InvalidRequest,
    JobNotFound,
    TooManyJobs,
    field_problems,
)
from searcher.fetch.page_reader import PageOutcome
from searcher.fetch.plain_text import plain_text
from searcher.pack.passages import top_chunks

# Tavily's own defaults and limits (API reference, /search and /extract).
DEFAULT_CHUNKS = 3
CHUNK_CHARS = 500
CHUNK_JOINER = " [...] "
MAX_EXTRACT_URLS = 20
UNAUTHORIZED = "Unauthorized: missing or invalid API key."
BODY = "body"  # the field a problem with the body as a whole is reported on

TavilyRange = Literal["day", "week", "month", "year", "d", "w", "m", "y"]
AnswerDepth = Literal["basic", "advanced"]
RawFormat = Literal["markdown", "text"]
_RANGES: dict[str, TimeRange] = {"day": "day", "week": "week", "month": "month", "year": "year"}
_RANGES.update({"d": "day", "w": "week", "m": "month", "y": "year"})  # Tavily's short forms
# Upper bound in days of each time range, for days / start_date, which Tavily also takes.
_RANGE_DAYS: tuple[tuple[int, TimeRange], ...] = (
    (1, "day"),
    (7, "week"),
    (31, "month"),
    (366, "year"),
)


# --- request bodies (the boundary) -------------------------------------------------------


_SAID = ("title", "description", "default")  # what is said of an option, not its type


def _null_allowed(schema: dict[str, Any]) -> None:
    """Every option of a body's schema also takes null (its default: ``_null_is_unset``)."""
    required = set(schema.get("required", ()))
    properties = schema.get("properties", {})
    for name, option in properties.items():
        kinds = [option, *option.get("anyOf", ())]
        if name in required or any(kind.get("type") == "null" for kind in kinds):
            continue
        said = {key: option.pop(key) for key in _SAID if key in option}
        kinds = option["anyOf"] if set(option) == {"anyOf"} else [option]
        properties[name] = {"anyOf": [*kinds, {"type": "null"}], **said}


class _Body(WireSafe):
    # Tavily clients send fields searcher has no use for (country, auto_parameters,
    # include_usage, ...) and add new ones over time: ignore them rather than refuse.
    model_config = ConfigDict(extra="ignore", json_schema_extra=_null_allowed)

    api_key: str | None = Field(default=None, description="Or `Authorization: Bearer <key>`.")

    @model_validator(mode="before")
    @classmethod
    def _null_is_unset(cls, data: Any) -> Any:
        # Clients write every option, unset ones as null (as Tavily takes them): null is
        # the field's default, for fields whose default is not null too.
        if isinstance(data, dict):
            return {key: value for key, value in data.items() if value is not None}
        return data


# The words each true-false-or-word field of the search body takes besides true and false.
_FLAG_WORDS: dict[str, Any] = {"include_answer": AnswerDepth, "include_raw_content": RawFormat}


class TavilySearchBody(_Body):
    """Tavily's search request."""

    query: str = Field(
        json_schema_extra={"minLength": 1, "maxLength": MAX_QUERY_CHARS, "pattern": NOT_BLANK}
    )
    search_depth: Literal["basic", "advanced", "fast", "ultra-fast"] = "basic"
    topic: Literal["general", "news", "finance"] = "general"
    time_range: TavilyRange | None = None
    days: Annotated[int, Field(ge=1, le=36_600), WHOLE] | None = Field(
        default=None, description="Days back (topic news only), rounded up to a time range."
    )
    start_date: date | None = Field(
        default=None, description="Rounded to the smallest time range that reaches it."
    )
    end_date: date | None = Field(default=None, description="Accepted; not applied.")
    max_results: Annotated[int, Field(ge=0, le=100), WHOLE] | None = None
    chunks_per_source: Annotated[int, Field(ge=1, le=5), WHOLE] | None = None
    include_domains: list[Domain] | None = None
    exclude_domains: list[Domain] | None = None
    include_answer: StrictBool | AnswerDepth = False
    include_raw_content: StrictBool | RawFormat = False
    include_images: StrictBool = False
    include_image_descriptions: StrictBool = False

    @field_validator("query")
    @classmethod
    def _query_not_blank(cls, value: str) -> str:
        return query_text(value)

    @field_validator("include_answer", "include_raw_content", mode="before")
    @classmethod
    def _flag_or_word(cls, value: Any, info: ValidationInfo) -> Any:
        # Checked whole, so that the error names the field: pydantic reports each member
        # of the union apart, under the field's name and a tag ("include_answer.bool").
        words = get_args(_FLAG_WORDS[info.field_name or ""])
        if isinstance(value, bool) or value in words:
            return value
        raise ValueError(f"must be true, false, {' or '.join(map(repr, words))}")

    @field_validator("start_date", "end_date", mode="before")
    @classmethod
    def _date_as_text(cls, value: Any) -> Any:
        # pydantic would also take a number (a Unix time); the schema says a date string.
        if value is not None and not isinstance(value, str | date):
            raise ValueError("must be a date string, YYYY-MM-DD")
        return value


class TavilyExtractBody(_Body):
    """Tavily's extract request."""

    urls: str | list[str] = Field(
        description=f"One URL or a list of at most {MAX_EXTRACT_URLS}.",
        json_schema_extra=lambda schema: schema.update(
            anyOf=[
                {"type": "string", "pattern": NOT_BLANK},
                {
                    "type": "array",
                    "items": {"type": "string"},
                    "minItems": 1,
                    "maxItems": MAX_EXTRACT_URLS,
                    "contains": {"type": "string", "pattern": NOT_BLANK},
                },
            ]
        ),
    )
    query: str | None = Field(default=None, description="Rank chunks of each page by this.")
    chunks_per_source: Annotated[int, Field(ge=1, le=5), WHOLE] | None = None
    extract_depth: Literal["basic", "advanced"] = "basic"
    format: Literal["markdown", "text"] = "markdown"
    include_images: StrictBool = False
    timeout: Annotated[StrictFloat, Field(ge=1, le=60)] | None = Field(
        default=None, description="Accepted; searcher's fetch limits apply."
    )

    @field_validator("urls", mode="before")
    @classmethod
    def _url_or_urls(cls, value: Any) -> Any:
        # Checked whole, so that the error names the field, not a member of the union.
        if isinstance(value, str) or (
            isinstance(value, list) and all(isinstance(url, str) for url in value)
        ):
            return value
        raise ValueError("must be a URL or a list of URLs")

    @field_validator("urls")
    @classmethod
    def _urls_listed(cls, value: str | list[str]) -> list[str]:
        urls = [value] if isinstance(value, str) else value
        if len(urls) > MAX_EXTRACT_URLS:  # as sent: the schema's maxItems
            raise ValueError(f"Max {MAX_EXTRACT_URLS} URLs are allowed.")
        urls = list(dict.fromkeys(u.strip() for u in urls if not is_blank(u)))
        if not urls:
            raise ValueError("at least one URL is required")
        return urls

    @property
    def url_list(self) -> list[str]:
        # The validator made it a list; this keeps the type checker in the loop.
        return [self.urls] if isinstance(self.urls, str) else self.urls


# --- translation ---------------------------------------------------------------------------


def time_range_of(body: TavilySearchBody, today: date) -> TimeRange | None:
    """The time range a Tavily body asks for: ``time_range`` (long or short form), else the
    smallest range reaching back to ``start_date``, else ``days`` (topic news only)."""
    if body.time_range is not None:
        return _RANGES[body.time_range]
    days: int | None = None
    if body.start_date is not None:
        days = max((today - body.start_date).days, 1)
    elif body.days is not None and body.topic == "news":
        days = body.days
    if days is None:
        return None
    return next((name for limit, name in _RANGE_DAYS if days <= limit), None)


def search_request(
    body: TavilySearchBody,
    default_max_results: int,
    today: date | None = None,
    max_fetch_pages: int = 50,
) -> SearchRequest:
    """The searcher request for a Tavily search body. ``default_max_results`` is the
    configured result count, used when the body names none; ``max_fetch_pages`` the most
    pages the server reads for one request (``limits.max_fetch_pages``)."""
    wanted = max(body.max_results if body.max_results is not None else default_max_results, 1)
    advanced = body.search_depth == "advanced"
    full = advanced or bool(body.include_raw_content)
    constraints: dict[str, Any] = {
        "search_mode": "full" if full else "simple",
        "include_domains": body.include_domains or None,
        "exclude_domains": body.exclude_domains or None,
        "time_range": time_range_of(body, today or date.today()),
    }
    if advanced:
        # Tavily's advanced content is the page's best chunks, 3 unless asked otherwise.
        constraints["chunks_per_source"] = body.chunks_per_source or DEFAULT_CHUNKS
    if body.topic == "news":
        constraints["categories"] = ["news"]
    budget: dict[str, Any] = {"max_results": wanted}
    if full:
        # Tavily reads every result it returns, not only the first few; as many as the
        # server allows (the client never named this count, so it is not refused).
        budget["max_fetch_pages"] = min(wanted, max_fetch_pages)
    return SearchRequest.model_validate(
        {
            "query": body.query,
            "constraints": constraints,
            "want": {"items": True, "rendered_text": False, "answer": bool(body.include_answer)},
            "budget": budget,
        }
    )


def _result(item: Item, body: TavilySearchBody) -> dict[str, Any]:
    advanced = body.search_depth == "advanced"
    content = CHUNK_JOINER.join(item.chunks) if advanced and item.chunks else item.snippet
    result: dict[str, Any] = {
        "title": item.title,
        "url": item.url,
        "content": content,
        "score": item.score.relevance,
        "raw_content": _raw_content(item.content, body.include_raw_content),
    }
    if body.topic == "news" and item.published_utc:
        result["published_date"] = item.published_utc
    return result


def _raw_content(content: str | None, wanted: bool | str) -> str | None:
    """A page's text as the search body asked for it: markdown (``true`` too), text, none."""
    if not wanted or content is None:
        return None
    return plain_text(content) if wanted == "text" else content


def search_response(
    body: TavilySearchBody, response: SearchResponse, request_id: str
) -> dict[str, Any]:
    """Tavily's search response for a searcher response."""
    items = response.items or []
    if body.max_results is not None:
        items = items[: body.max_results]
    return {
        "query": body.query,
        "follow_up_questions": None,
        "answer": response.answer if body.include_answer else None,
        "images": [],
        "results": [_result(item, body) for item in items],
        "response_time": round(response.meta.timing_ms.get("total", 0) / 1000, 3),
        "request_id": request_id,
    }


def _failure(outcome: PageOutcome) -> str | None:
    """Why a page gave no text, or None when it did."""
    if outcome.status == "fetched" and outcome.content:
        return None
    if outcome.status == "fetched":
        return "no main text found on the page"
    reason = outcome.skip_reason or outcome.status
    return f"{reason}: {outcome.error}" if outcome.error else reason


def extract_response(
    body: TavilyExtractBody,
    outcomes: Sequence[PageOutcome],
    elapsed_s: float,
    request_id: str,
) -> dict[str, Any]:
    """Tavily's extract response for the pages read, one outcome per URL in order."""
    results: list[dict[str, Any]] = []
    failed: list[dict[str, str]] = []
    for url, outcome in zip(body.url_list, outcomes, strict=True):
        error = _failure(outcome)
        if error is not None:
            failed.append({"url": url, "error": error})
            continue
        text = outcome.content or ""
        if body.format == "text":
            text = plain_text(text)
        if body.query:
            chunks = top_chunks(
                body.query, text, body.chunks_per_source or DEFAULT_CHUNKS, CHUNK_CHARS
            )
            text = CHUNK_JOINER.join(chunks)
        results.append({"url": url, "raw_content": text, "images": []})
    return {
        "results": results,
        "failed_results": failed,
        "response_time": round(elapsed_s, 3),
        "request_id": request_id,
    }


def key_accepted(expected: str | None, authorization: str | None, body_key: str | None) -> bool:
    """Whether a request may pass: no key configured, or the bearer token or the body's
    ``api_key`` equals it."""
    if not expected:
        return True
    offered = [key for key in (bearer_token(authorization), body_key) if key]
    return any(hmac.compare_digest(key.encode(), expected.encode()) for key in offered)


# --- HTTP ----------------------------------------------------------------------------------


class TavilyHTTPError(Exception):
    """An error to answer in Tavily's shape."""

    def __init__(
        self,
        status: int,
        message: str,
        field: str | None = None,
        headers: dict[str, str] | None = None,
    ) -> None:
        super().__init__(message)
        self.status = status
        self.message = message
        self.field = field
        self.headers = headers or {}


def tavily_error(status: int, message: str, field: str | None = None) -> Response:
    """Tavily's error body: ``{"detail": {"error": message}}`` (plus the field, if known)."""
    detail: dict[str, str] = {"error": message}
    if field:
        detail["field"] = field
    return json_response({"detail": detail}, status)


def _first_problem(errors: Sequence[Any]) -> tuple[str, str]:
    """The field and message of the first validation problem (Tavily's errors carry no
    parser detail)."""
    problems = field_problems(errors)
    return (problems[0].field, problems[0].message) if problems else (BODY, "invalid request")


class _TavilyRoute(APIRoute):
    """Checks the key first, then answers every failure of these routes in Tavily's error
    shape, not searcher's."""

    def get_route_handler(self) -> Callable[[Request], Coroutine[Any, Any, Response]]:
        handler = super().get_route_handler()

        async def handle(request: Request) -> Response:
            try:
                # Here, not as a dependency: FastAPI parses the body before it runs any,
                # so a body it cannot parse would be answered before the key was checked.
                await _require_key(request)
                return await handler(request)
            except TavilyHTTPError as exc:
                response = tavily_error(exc.status, exc.message, exc.field)
                response.headers.update(exc.headers)
                return response
            except StarletteHTTPException as exc:
                problem = body_parse_problem(exc)
                if problem is None:
                    raise
                return tavily_error(400, f"{BODY}: {problem}", BODY)
            except (RequestValidationError, ValidationError) as exc:
                field, message = _first_problem(exc.errors())
                return tavily_error(400, f"{field}: {message}", field)
            except InvalidRequest as exc:
                return tavily_error(400, str(exc), exc.field)
            except AllBackendsFailed as exc:
                return tavily_error(502, str(exc))

        return handle


async def _require_key(request: Request) -> None:
    """Refuse the request (401) unless it carries the configured key, if one is set."""
    expected = runtime_of(request).settings.compat.tavily_api_key
    if not expected:
        return
    body_key = None
    try:
        # The body is cached for FastAPI, which reads it next; a bad one is refused there
        # (400) once the key is known to be good.
        data = orjson.loads(await request.body())
        if isinstance(data, dict) and isinstance(data.get("api_key"), str):
            body_key = data["api_key"]
    except orjson.JSONDecodeError:
        pass
    if not key_accepted(expected, request.headers.get("authorization"), body_key):
        raise TavilyHTTPError(401, UNAUTHORIZED)


router = APIRouter(prefix="/tavily", tags=["tavily"], route_class=_TavilyRoute)


# Tavily's own error statuses and shape (``{"detail": {"error": ...}}``), not searcher's.
_TAVILY_ERRORS: dict[int | str, dict[str, Any]] = {
    400: {"description": "Invalid body: `detail.error` says why, `detail.field` where."},
    401: {"description": "Missing or wrong key (when compat.tavily_api_key is set)."},
    413: {"model": ErrorResponse, "description": "Body over the size limit."},
}


@router.post(
    "/search",
    summary="Tavily-compatible search",
    responses={**_TAVILY_ERRORS, 502: {"description": "Every backend failed."}},
)
async def tavily_search(body: TavilySearchBody, request: Request) -> Response:
    runtime = runtime_of(request)
    settings = runtime.settings
    search = search_request(
        body, settings.budget.max_results, max_fetch_pages=settings.limits.max_fetch_pages
    )
    response = await runtime.service.search(
        search, client=client_identity(request.scope), access=collection_access(request.scope)
    )
    return json_response(search_response(body, response, str(uuid.uuid4())))


@router.post("/extract", summary="Tavily-compatible page extraction", responses=_TAVILY_ERRORS)
async def tavily_extract(body: TavilyExtractBody, request: Request) -> Response:
    started = time.perf_counter()
    outcomes = await runtime_of(request).service.read_pages(
        body.url_list, client=client_identity(request.scope)
    )
    elapsed = time.perf_counter() - started
    return json_response(extract_response(body, outcomes, elapsed, str(uuid.uuid4())))


# --- map (POST /tavily/map) ---------------------------------------------------------------


# Tavily's map and crawl take a site without its scheme ("docs.tavily.com", as its own
# examples write it) and read it over https.
_SCHEME = re.compile(r"\s*[A-Za-z][A-Za-z0-9+.-]*://")
_HTTPS = "https://"
MAX_SITE_URL_CHARS = 2048  # the root's limit (SiteFilters.url), https:// included
BARE_SITE = HTTP_URL.replace("^[Hh][Tt][Tt][Pp][Ss]?://", "^", 1)


def _site_url_schema(schema: dict[str, Any]) -> None:
    schema.pop("maxLength", None)
    schema["anyOf"] = [
        {"type": "string", "maxLength": MAX_SITE_URL_CHARS, "pattern": HTTP_URL},
        {"type": "string", "maxLength": MAX_SITE_URL_CHARS - len(_HTTPS), "pattern": BARE_SITE},
    ]


class TavilyMapBody(_Body):
    """Tavily's map request; ``instructions`` and ``categories`` are accepted and unused."""

    url: str = Field(
        min_length=1,
        max_length=MAX_SITE_URL_CHARS,
        description="The root URL; without a scheme (docs.example.org), https.",
        json_schema_extra=_site_url_schema,
    )
    max_depth: Annotated[int, Field(ge=0, le=5), WHOLE] = 1
    max_breadth: Annotated[int, Field(ge=1, le=500), WHOLE] = 20
    limit: Annotated[int, Field(ge=1, le=5000), WHOLE] = 50
    instructions: str | None = None
    select_paths: list[MapPattern] | None = Field(default=None, max_length=20)
    select_domains: list[MapPattern] | None = Field(default=None, max_length=20)
    exclude_paths: list[MapPattern] | None = Field(default=None, max_length=20)
    exclude_domains: list[MapPattern] | None = Field(default=None, max_length=20)
    allow_external: StrictBool = False
    categories: list[str] | None = None
    # Tavily's range (tavily-python sends 150 unless told otherwise); held to our map's.
    timeout: float | None = Field(default=None, gt=0, le=150)

    @field_validator("url", mode="before")
    @classmethod
    def _https_by_default(cls, value: Any) -> Any:
        if isinstance(value, str) and value.strip() and not _SCHEME.match(value):
            return _HTTPS + value.strip()
        return value


@router.post("/map", summary="Tavily-compatible site map", responses=_TAVILY_ERRORS)
async def tavily_map(body: TavilyMapBody, request: Request) -> Response:
    mapped = await run_map(
        runtime_of(request),
        MapRequest(
            url=body.url, max_depth=body.max_depth, max_breadth=body.max_breadth,
            limit=body.limit, select_paths=body.select_paths or [],
            exclude_paths=body.exclude_paths or [], select_domains=body.select_domains or [],
            exclude_domains=body.exclude_domains or [], allow_external=body.allow_external,
            timeout_s=min(body.timeout or 30, MAX_MAP_TIMEOUT_S),
        ),
    )  # fmt: skip
    return json_response(
        {
            "base_url": mapped.base_url,
            "results": mapped.results,
            "response_time": mapped.response_time,
            "request_id": str(uuid.uuid4()),
        }
    )


# --- crawl (POST /tavily/crawl) ------------------------------------------------------------


class TavilyCrawlBody(TavilyMapBody):
    """Tavily's crawl request; ``instructions`` ranks the links followed first (BM25) and,
    with ``chunks_per_source``, cuts each page to its passages best for them; ``format``
    text gives plain text; ``include_images``, ``extract_depth`` and ``include_favicon``
    are accepted (no images or favicons)."""

    timeout: float | None = Field(default=None, gt=0, le=150)
    include_images: StrictBool = False
    include_favicon: StrictBool = False
    extract_depth: Literal["basic", "advanced"] | None = None
    format: Literal["markdown", "text"] | None = None
    chunks_per_source: Annotated[int, Field(ge=1, le=5), WHOLE] | None = Field(
        default=None,
        description="With `instructions`: each page's content is its that many passages "
        "(<= 500 characters) best for them, joined by ` [...] `.",
    )


def crawled_content(content: str, body: TavilyCrawlBody) -> str:
    """A crawled page's text as Tavily gives it: plain with ``format: text``; with
    ``instructions`` and ``chunks_per_source``, only the passages best for them (Tavily
    offers the chunks so that a crawl does not flood an agent's context)."""
    text = plain_text(content) if body.format == "text" else content
    if body.instructions and body.chunks_per_source:
        chunks = top_chunks(body.instructions, text, body.chunks_per_source, CHUNK_CHARS)
        text = CHUNK_JOINER.join(chunks)
    return text


@router.post(
    "/crawl",
    summary="Tavily-compatible crawl (synchronous)",
    responses={**_TAVILY_ERRORS, 429: {"description": "Too many crawl jobs running."}},
)
async def tavily_crawl(body: TavilyCrawlBody, request: Request) -> Response:
    from searcher.api.crawl_routes import crawl_book, crawl_plan

    started = time.perf_counter()
    runtime = runtime_of(request)
    crawl = CrawlRequest(
        url=body.url, max_depth=body.max_depth, max_breadth=body.max_breadth,
        limit=min(body.limit, runtime.settings.crawl.max_pages),
        instructions=body.instructions or None,  # Tavily's clients send "" for none
        select_paths=body.select_paths or [], exclude_paths=body.exclude_paths or [],
        select_domains=body.select_domains or [], exclude_domains=body.exclude_domains or [],
        allow_external=body.allow_external,
        timeout_s=min(body.timeout or 150, runtime.settings.crawl.max_time_s),
    )  # fmt: skip
    key = key_of(request.scope)
    try:
        job = await crawl_book(request).submit(
            crawl_plan(crawl, runtime.settings), crawl.max_chars_per_page,
            client=client_identity(request.scope), key=key,
        )  # fmt: skip
    except TooManyJobs as exc:
        retry = {"Retry-After": str(exc.retry_after_s)}
        raise TavilyHTTPError(429, str(exc), headers=retry) from exc
    if job.task is not None:
        await job.task  # a client gone cancels the request, and so the job
    results: list[dict[str, Any]] = [
        {"url": p.url, "raw_content": crawled_content(p.content, body), "images": []}
        for p in job.pages
    ]
    if body.include_favicon:
        results = [r | {"favicon": None} for r in results]
    return json_response(
        {
            "base_url": job.plan.root,
            "results": results,
            "response_time": round(time.perf_counter() - started, 3),
            "request_id": job.id,
        }
    )


# --- research (POST /tavily/research, GET /tavily/research/{request_id}) ------------------

# Tavily's research models, as searcher's presets: "mini" is quick, "pro" goes deeper.
TAVILY_PRESETS: dict[str, Preset] = {"mini": "balanced", "auto": "balanced", "pro": "enhanced"}


class TavilyResearchBody(_Body):
    input: str = Field(
        json_schema_extra={"minLength": 1, "maxLength": MAX_QUERY_CHARS, "pattern": NOT_BLANK}
    )
    model: Literal["mini", "pro", "auto"] | None = None
    citation_format: Literal["numbered", "mla", "apa", "chicago"] = "numbered"
    output_schema: dict[str, Any] | None = Field(
        default=None,
        description="A JSON Schema the answer (`content`) must follow; needs an LLM "
        "(`llm.base_url`). Each field's sources are in `citations` (JSON pointer -> URLs).",
    )
    stream: StrictBool = False

    @field_validator("input")
    @classmethod
    def _input(cls, value: str) -> str:
        return query_text(value)


def research_created(job: ResearchJob, model: str) -> dict[str, Any]:
    """Tavily's answer to a new research task."""
    return {
        "request_id": job.id,
        "created_at": job.created_utc,
        "status": "pending",
        "input": job.query,
        "model": model,
    }


def _sources(evidence: Sequence[EvidencePassage]) -> list[dict[str, Any]]:
    """Each page the evidence quotes, once, in the order first numbered: Tavily lists the
    sources of a report, and one page often gives it several passages."""
    pages: dict[str, dict[str, Any]] = {}
    for passage in evidence:
        pages.setdefault(passage.url, {"title": passage.title, "url": passage.url, "favicon": None})
    return list(pages.values())


def research_status(job: ResearchJob) -> tuple[int, dict[str, Any]]:
    """Tavily's answer to a status request: 202 while running, 200 when over."""
    base = {"request_id": job.id, "created_at": job.created_utc}
    if job.status in ("queued", "running"):
        return 202, {**base, "status": "in_progress" if job.status == "running" else "pending"}
    result = job.result
    if job.status != "done" or result is None:
        return 200, {**base, "status": "failed", "error": job.error or job.status}
    done: dict[str, Any] = {
        **base,
        "status": "completed",
        "content": result.report or "",
        "sources": _sources(result.evidence or []),
        "response_time": round(result.usage.elapsed_ms / 1000, 2),
    }
    if result.structured is not None:  # as Tavily: the object itself is the content
        done["content"] = result.structured.data
        done["citations"] = result.structured.citation_urls
    return 200, done


@router.post(
    "/research",
    summary="Tavily-compatible research task",
    responses={
        200: {
            "description": "The task (JSON), or with stream: true searcher's event stream.",
            "content": {"application/json": {}, "text/event-stream": {}},
        },
        **_TAVILY_ERRORS,
        429: {"description": "Too many research jobs running."},
    },
)
async def tavily_research(body: TavilyResearchBody, request: Request) -> Response:
    model = body.model or "auto"
    research = ResearchRequest(
        query=Query(text=body.input),
        preset=TAVILY_PRESETS[model],
        stream=body.stream,
        output_schema=body.output_schema,
    )
    jobs = request.app.state.jobs
    try:
        job = await jobs.submit(
            research,
            client=client_identity(request.scope),
            key=key_of(request.scope),
            access=collection_access(request.scope),
        )
    except TooManyJobs as exc:
        retry = {"Retry-After": str(exc.retry_after_s)}
        raise TavilyHTTPError(429, str(exc), headers=retry) from exc
    if body.stream:  # searcher's own event stream (not Tavily's chunk format)
        from searcher.api.research import event_stream

        return await event_stream(request, job.id, 0)
    return json_response(research_created(job.view(), model))


@router.get(
    "/research/{request_id}",
    summary="Tavily-compatible research task status",
    responses={
        202: {"description": "Still running."},
        401: _TAVILY_ERRORS[401],
        404: {"description": "No task with that id (or it expired)."},
    },
)
async def tavily_research_status(request_id: str, request: Request) -> Response:
    try:
        job = await request.app.state.jobs.view(request_id, key_of(request.scope))
    except JobNotFound as exc:
        raise TavilyHTTPError(404, str(exc)) from exc
    status, body = research_status(job)
    return json_response(body, status)
