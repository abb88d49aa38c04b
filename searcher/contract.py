"""The wire contract: the search request, its budget, and the UCP-1 response.

Field for field the contract of Search API v1 (request sections 4-5, response sections
6-7). These pydantic models are used at the boundary only (HTTP, CLI, client); the pipeline
works on plain dataclasses.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Iterator
from typing import Annotated, Any, Literal

from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    StrictBool,
    StrictInt,
    ValidationError,
    field_validator,
    model_validator,
)
from pydantic_core import InitErrorDetails, PydanticCustomError
from typing_extensions import TypeAliasType

from searcher.corpus.readers import SkipReason as FileSkipReason
from searcher.errors import FailureKind
from searcher.fetch.urls import DOMAIN_ENTRY, domain_of

MAX_QUERY_CHARS = 2000
SCHEMA: Literal["ucp-1"] = "ucp-1"
# What every request body may hold (README, "Input limits"): integers within 64 bits
# (the response echoes the request, and JSON encoders and clients stop there), finite
# numbers, well-formed Unicode, at most MAX_JSON_DEPTH levels of nesting.
INT64_MIN, INT64_MAX = -(2**63), 2**63 - 1
MAX_JSON_DEPTH = 32
# A deadline shorter than this cannot reach any backend and back: refused, not a 502.
MIN_TIME_MS = 100
MAX_TIME_MS = 3_600_000
# What /v1/fetch takes: http(s), an ASCII host, an optional port, printable ASCII after it.
_PORT = r"([0-9]{1,4}|[1-5][0-9]{4}|6[0-4][0-9]{3}|65[0-4][0-9]{2}|655[0-2][0-9]|6553[0-5])"
HTTP_URL = rf"^[Hh][Tt][Tt][Pp][Ss]?://[A-Za-z0-9][A-Za-z0-9.-]*(:{_PORT})?([/?#][!-~]*)?$"
HTTP_URL_RULE = (
    "an http or https URL with an ASCII host name (IDN hosts in punycode), an optional port "
    "and printable ASCII after it (no spaces)"
)
# A query must hold a character that is neither whitespace nor a control character (the
# OpenAPI pattern says so too). The class is spelled out because Python's re and ECMA-262,
# the pattern's dialect, disagree on what a bare \s covers (\x1c-\x1f, \x85, \ufeff).
_BLANK_CHARS = r"\s\x00-\x1f\x7f-\x9f\ufeff"
NOT_BLANK = rf"[^{_BLANK_CHARS}]"
# A session's name (constraints.session_id, MCP web_search's session_id).
SESSION_ID = r"^[A-Za-z0-9._:-]+$"
MAX_SESSION_ID_CHARS = 128
_NOT_BLANK = re.compile(NOT_BLANK)
_BLANK_RUN = re.compile(rf"[{_BLANK_CHARS}]+")

SearchMode = Literal["simple", "full"]
FetchStatus = Literal["skipped", "fetched", "failed"]
SkipReason = Literal["content_type", "too_large", "timeout", "budget", "blocked", "error"]
# Whether a page may be rendered in the headless browser: "auto" when static extraction
# finds a JavaScript shell, "always" for every HTML page, "never".
RenderMode = Literal["auto", "always", "never"]
RENDER_DESCRIPTION = (
    'Headless-browser rendering: "auto" (default) when the static read finds a page only '
    'JavaScript fills, "always" for every HTML page, "never". Needs a browser on the server '
    "(`/v1/health` says under `browser`)."
)
TimeRange = Literal["day", "week", "month", "year"]
CragGrade = Literal["CORRECT", "AMBIGUOUS", "INCORRECT"]
CragAction = Literal["none", "refined", "switched", "skipped"]
GradeMethod = Literal["llm", "heuristic"]  # who graded: the model, or the fallback
PerspectiveSource = Literal["llm", "templates", "original"]

# Integer fields stop at 2**53 - 1: every JSON library (JavaScript's too) reads them exactly.
MAX_INT = 2**53 - 1


def _whole_number(value: Any) -> Any:
    # JSON Schema's "integer" is any whole number, 5.0 included; a string or a boolean is not.
    if isinstance(value, float) and value.is_integer():
        return int(value)
    if isinstance(value, bool) or not isinstance(value, int):
        raise PydanticCustomError("int_type", "Input should be a valid integer (a whole number)")
    return value


# A request's integer: a whole JSON number (5 or 5.0), never "5" or true.
WHOLE = BeforeValidator(_whole_number)  # last in Annotated, so the schema keeps the limits
# A domain filter entry: a URL, ``host:port`` or ``*.example.com`` is read as its host, so
# that it matches as the user meant instead of silently never matching.
Domain = Annotated[
    str, AfterValidator(domain_of), Field(json_schema_extra={"pattern": f"^{DOMAIN_ENTRY}$"})
]
WholeInt = Annotated[int, WHOLE]
NonNegInt = Annotated[int, Field(ge=0, le=MAX_INT), WHOLE]
# A free-form JSON value (context_hint): what wire_problem lets through, said as a schema.
# Its numbers stay within ±(2^53-1), what every JSON reader holds exactly, so the echo is
# the number sent (``SearchRequest`` refuses others where they sit).
HintValue = TypeAliasType(
    "HintValue",
    "StrictBool | Annotated[StrictInt, Field(ge=-MAX_INT, le=MAX_INT)] "
    "| Annotated[float, Field(allow_inf_nan=False, ge=-MAX_INT, le=MAX_INT)] | str "
    "| list[HintValue] | dict[str, HintValue] | None",
)
TimeMs = Annotated[int, Field(ge=MIN_TIME_MS, le=MAX_TIME_MS), WHOLE]


JsonPath = tuple[str | int, ...]


def json_nodes(value: Any) -> Iterator[tuple[JsonPath, Any]]:
    """Every value in a parsed JSON value with its path, depth first, each container
    before what it holds."""
    stack: list[tuple[JsonPath, Any]] = [((), value)]
    while stack:
        path, node = stack.pop()
        yield path, node
        if isinstance(node, dict):
            stack.extend(((*path, key), child) for key, child in node.items())
        elif isinstance(node, list | tuple):
            stack.extend(((*path, i), child) for i, child in enumerate(node))


def wire_problem(value: Any) -> tuple[JsonPath, str] | None:
    """Where in a parsed JSON value something searcher cannot carry sits, and what: an
    integer beyond 64 bits, NaN or an infinity, a lone surrogate in a string or key, or
    nesting deeper than ``MAX_JSON_DEPTH``. None when there is nothing of the kind."""
    for path, node in json_nodes(value):
        if len(path) > MAX_JSON_DEPTH:  # named by its top-level field: the rest is noise
            return path[:1], f"nested more than {MAX_JSON_DEPTH} levels deep"
        if isinstance(node, bool):
            continue
        if isinstance(node, int) and not INT64_MIN <= node <= INT64_MAX:
            return path, "integer out of range (beyond 64 bits)"
        if isinstance(node, float) and not math.isfinite(node):
            return path, "must be a finite number (not NaN or Infinity)"
        if isinstance(node, str) and not _encodable(node):
            return path, "string holds a lone surrogate (invalid Unicode)"
        if isinstance(node, dict) and not all(
            _encodable(key) for key in node if isinstance(key, str)
        ):
            return path, "object key holds a lone surrogate (invalid Unicode)"
    return None


def number_beyond(value: Any, limit: int) -> JsonPath | None:
    """Where in a parsed JSON value the first number beyond ``±limit`` sits, or None."""
    return next(
        (
            path
            for path, node in json_nodes(value)
            if isinstance(node, int | float) and not isinstance(node, bool) and abs(node) > limit
        ),
        None,
    )


def refused_at(model: str, path: JsonPath, kind: str, message: str) -> ValidationError:
    """A validation error of ``model`` that names ``path`` (a place inside a field, which
    a field validator cannot name) and says ``message``."""
    details = InitErrorDetails(type=PydanticCustomError(kind, message), loc=path, input=None)
    return ValidationError.from_exception_data(model, [details])


def _encodable(text: str) -> bool:
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return False
    return True


class WireSafe(BaseModel):
    """A request body whose every value can be carried (see ``wire_problem``): checked
    before any field, so that the 422 names the exact place."""

    @model_validator(mode="before")
    @classmethod
    def _carriable(cls, data: Any) -> Any:
        if isinstance(data, dict) and cls.model_config.get("extra") != "forbid":
            # Fields this model ignores are dropped unseen (compat bodies: clients send more).
            data = {key: value for key, value in data.items() if key in cls.model_fields}
        found = wire_problem(data)
        if found is None:
            return data
        path, message = found
        raise refused_at(cls.__name__, path, "wire_value", message)


class _Strict(BaseModel):
    # Unknown fields are refused so that a typo ("serch_mode") is a clear 422, not ignored;
    # strict: "yes" is no boolean and "5" no integer, as the OpenAPI types say.
    model_config = ConfigDict(extra="forbid", strict=True)


def query_text(value: str) -> str:
    """A query's text, stripped; ``ValueError`` if blank or longer than the limit (the rule
    every endpoint that takes a query shares). The limit counts the text as sent, so that
    it is the ``maxLength`` the OpenAPI document states."""
    if len(value) > MAX_QUERY_CHARS:
        raise ValueError(f"must be at most {MAX_QUERY_CHARS} characters")
    if is_blank(value):
        raise ValueError("must not be empty")
    return value.strip()


def is_blank(text: str) -> bool:
    """Whether ``text`` holds nothing but whitespace and control characters (``NOT_BLANK``)."""
    return _NOT_BLANK.search(text) is None


def squeezed(text: str) -> str:
    """``text`` on one line: each run of whitespace and control characters one space,
    none at either end ("" for blank text)."""
    return _BLANK_RUN.sub(" ", text).strip()


def _query_schema(schema: dict[str, Any]) -> None:
    # The query is a string or an object: the schema says both (the model alone says only
    # the object).
    ref = {key: schema.pop(key) for key in ("$ref", "allOf", "anyOf") if key in schema}
    schema["anyOf"] = [
        {"type": "string", "minLength": 1, "maxLength": MAX_QUERY_CHARS, "pattern": NOT_BLANK},
        (ref.get("$ref") and {"$ref": ref["$ref"]}) or next(iter(ref.values()), {}),
    ]


def _list_or_commas(schema: dict[str, Any]) -> None:
    # A list, or "google,bing" (what SearXNG users write), or null.
    schema["anyOf"] = [
        {"type": "array", "items": {"type": "string"}},
        {"type": "string"},
        {"type": "null"},
    ]


def _backend_schema(schema: dict[str, Any]) -> None:
    # Instance names are configuration (backends.instances), so the schema cannot list
    # them; the plan checks them (an unknown name is a 422 naming constraints.backend).
    name = {"type": "string", "minLength": 1, "maxLength": 64}
    schema["anyOf"] = [
        name,
        {"type": "array", "items": name, "minItems": 1, "maxItems": 16},
        {"type": "null"},
    ]


class Query(_Strict):
    """Object form of the query: ``{"text": "...", "lang": "en"}``."""

    # The limits are checked by query_text (with friendlier messages); the schema says them.
    text: str = Field(
        json_schema_extra={"minLength": 1, "maxLength": MAX_QUERY_CHARS, "pattern": NOT_BLANK}
    )
    lang: str | None = Field(default=None, max_length=35)

    @field_validator("text")
    @classmethod
    def _text_not_blank(cls, value: str) -> str:
        return query_text(value)


class Constraints(_Strict):
    """How to search: backend choice, mode, language and backend filters."""

    backend: str | list[str] | None = Field(
        default=None,
        json_schema_extra=_backend_schema,
        description="A backend name (used alone), a list of names (asked at once and "
        'fused; no other backend is asked), or "auto" (the configured policy). Default: auto.',
    )
    search_mode: SearchMode = "simple"
    lang: str | None = Field(default=None, max_length=35)
    pick_ids: list[Annotated[int, Field(ge=-MAX_INT, le=MAX_INT), WHOLE]] | None = Field(
        default=None,
        max_length=1000,
        description="0-based indices into the results the same request returns without "
        "them (its first max_results); others and duplicates are ignored, order is kept.",
    )
    engines: list[str] | None = Field(
        default=None, description="SearXNG engines to use.", json_schema_extra=_list_or_commas
    )
    categories: list[str] | None = Field(
        default=None, description="SearXNG categories.", json_schema_extra=_list_or_commas
    )
    time_range: TimeRange | None = None
    safesearch: Annotated[int, Field(ge=0, le=2), WHOLE] | None = Field(
        default=None, description="0 off, 1 moderate, 2 strict."
    )
    pageno: Annotated[int, Field(ge=1, le=50), WHOLE] = 1
    chunks_per_source: Annotated[int, Field(ge=1, le=5), WHOLE] | None = Field(
        default=None,
        description="Passages (<= 500 chars each) most relevant to the query per result; "
        "implies fetching the pages, also in simple mode.",
    )
    include_domains: list[Domain] | None = Field(
        default=None,
        description="Keep only results on these domains (or their subdomains); a URL or "
        "host:port counts as its host.",
    )
    exclude_domains: list[Domain] | None = Field(
        default=None,
        description="Drop results on these domains (or their subdomains); a URL or "
        "host:port counts as its host.",
    )
    rewrite: bool = Field(
        default=False,
        description="LLM query rewrite before searching (search operators are kept); "
        "fallback: the original query.",
    )
    route: Literal["patterns", "llm"] = Field(
        default="patterns",
        description='Engine-group routing; "llm" asks the LLM when no pattern matches.',
    )
    render: RenderMode = Field(default="auto", description=RENDER_DESCRIPTION)
    multi_query: Annotated[int, Field(ge=1, le=5), WHOLE] | None = Field(
        default=None,
        description="Search N perspectives of the query in parallel and fuse them (1-5).",
    )
    crag: bool = Field(
        default=False,
        description="Grade the evidence and re-search when it is ambiguous or wrong.",
    )
    rank: Literal["heuristic", "llm"] = Field(
        default="heuristic", description='"llm": snippet ranking picks the best want_n.'
    )
    rerank: bool | None = Field(
        default=None,
        description="Reorder the fused results with the configured reranking model "
        "(rerank.*); default: rerank.enabled.",
    )
    want_n: Annotated[int, Field(ge=1, le=20), WHOLE] | None = Field(
        default=None, description='Results kept by rank="llm" (default: llm.steps.rank.want_n).'
    )
    cache: Literal["on", "off"] = Field(
        default="on",
        description='"off": neither read nor write the result cache for this request.',
    )
    record: bool = Field(
        default=False,
        description="Keep what this search got (backend answers, pages, LLM replies) "
        "under its `meta.request_id`, for `searcher replay` and `searcher freeze`; "
        "never served from the result cache.",
    )
    session_id: str | None = Field(
        default=None,
        min_length=1,
        max_length=MAX_SESSION_ID_CHARS,
        pattern=SESSION_ID,
        description="Session novelty (POST /v1/search): results shown by this session's "
        "earlier searches (of the same API key) move below results not shown yet, unless "
        "ranked first; remembered for sessions.ttl_s.",
    )

    @field_validator("engines", "categories", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        # SearXNG users write "google,bing"; accept that as well as a list, whose entries
        # are cleaned alike (" bing " is bing, "" nothing).
        if isinstance(value, str):
            value = value.split(",")
        if isinstance(value, list) and all(isinstance(part, str) for part in value):
            return [part.strip() for part in value if part.strip()]
        return value

    @field_validator("backend")
    @classmethod
    def _backend_known(cls, value: str | list[str] | None) -> str | list[str] | None:
        # Names are checked against the configured instances when the search (or a
        # research job) is planned; here only the shape.
        if isinstance(value, list) and not value:
            raise ValueError("must name at least one backend")
        names = [value] if isinstance(value, str) else value or []
        if any(not name or len(name) > 64 for name in names) or len(names) > 16:
            raise ValueError("backend names are 1-64 characters, at most 16 of them")
        return value


class Want(_Strict):
    """Which parts of the response to include."""

    items: bool = True
    rendered_text: bool = True
    answer: bool = Field(default=False, description="An LLM answer with [n] citations.")
    answer_check: bool = Field(
        default=False, description="Grade the answer (relevance, support, usefulness)."
    )


class PerRequestTimeouts(_Strict):
    search: TimeMs | None = Field(default=None, description="One backend call, in ms.")
    fetch: TimeMs | None = Field(default=None, description="One page fetch, in ms.")


class Budget(_Strict):
    """Execution limits. Unset fields take the configured defaults; every field is enforced."""

    max_tool_calls: NonNegInt | None = None
    max_search_retries: NonNegInt | None = None
    max_results: Annotated[int, Field(ge=1, le=100), WHOLE] | None = None
    max_fetch_pages: Annotated[int, Field(ge=0, le=50), WHOLE] | None = None
    max_download_bytes_per_page: NonNegInt | None = None
    max_extract_chars_per_page: NonNegInt | None = None
    allowed_content_types: list[str] | None = None
    max_redirects: Annotated[int, Field(ge=0, le=30), WHOLE] | None = None
    max_context_chars: NonNegInt | None = None
    max_total_time_ms: TimeMs | None = Field(
        default=None,
        description=f"Deadline of the whole request, {MIN_TIME_MS}-{MAX_TIME_MS} ms.",
    )
    per_request_timeout_ms: PerRequestTimeouts | None = None
    max_age_s: NonNegInt | None = Field(
        default=None,
        description="Oldest cached answer accepted, in seconds; 0: fresh only (no cache).",
    )


def query_shape(value: Any) -> Any:
    """The short form of a query (a string) as the object form; both validate as Query."""
    if isinstance(value, str):
        return {"text": value}
    if isinstance(value, dict | Query):
        return value
    raise ValueError("must be a string or an object with 'text'")


class SearchRequest(_Strict, WireSafe):
    """``POST /v1/search`` body."""

    query: Query = Field(
        description='A string, or {"text": ..., "lang": ...}.', json_schema_extra=_query_schema
    )
    intent: str | None = Field(
        default=None,
        max_length=64,
        description="A hint: fact_check, fresh_data, background, verification. Echoed.",
    )
    constraints: Constraints = Field(default_factory=Constraints)
    want: Want = Field(default_factory=Want)
    context_hint: dict[str, HintValue] | None = Field(
        default=None,
        description=f"Free-form, echoed; at most {MAX_JSON_DEPTH} levels deep in all.",
    )
    budget: Budget = Field(default_factory=Budget)

    @field_validator("query", mode="before")
    @classmethod
    def _query_shape(cls, value: Any) -> Any:
        return query_shape(value)

    @model_validator(mode="before")
    @classmethod
    def _hint_numbers_exact(cls, data: Any) -> Any:
        # One place and one message for a hint number past 2^53 (the schema's union would
        # list one complaint per JSON type); echoed, it would come back as another number.
        hint = data.get("context_hint") if isinstance(data, dict) else None
        at = number_beyond(hint, MAX_INT) if isinstance(hint, dict) else None
        if at is None:
            return data
        message = "number beyond ±(2^53-1), which JSON readers do not hold exactly"
        raise refused_at(cls.__name__, ("context_hint", *at), "hint_number", message)

    @property
    def query_text(self) -> str:
        return self.query.text

    @property
    def lang(self) -> str | None:
        """``query.lang`` wins over ``constraints.lang``."""
        return self.query.lang or self.constraints.lang


# --- response --------------------------------------------------------------------------


class Score(BaseModel):
    rank: int = Field(description="1-based position in the response.")
    relevance: float = Field(ge=0.0, le=1.0)
    method: str
    components: dict[str, float] | None = Field(
        default=None, description="What the relevance is made of (fusion, boosts, bonuses)."
    )


class Provenance(BaseModel):
    backend: str
    engine: str | None = None
    rank: int = Field(description="1-based rank in that backend's or engine's list.")
    perspective: str | None = Field(
        default=None, description="The multi-query perspective or corrective query that found it."
    )


class FetchInfo(BaseModel):
    # Frozen: one instance stands for every item whose page was not read (assemble.py).
    model_config = ConfigDict(frozen=True)

    status: FetchStatus = "skipped"
    skip_reason: SkipReason | None = None
    error: str | None = Field(default=None, description="Why the fetch failed or was skipped.")
    http_status: int | None = None
    content_type: str | None = None
    downloaded_bytes: int = 0
    truncated: bool = False
    extracted_chars: int = 0
    cached: bool = False
    rendered: bool = Field(
        default=False, description="The text was extracted from the page as a browser drew it."
    )
    render_ms: int | None = Field(
        default=None, description="Time the browser took, when the page was rendered."
    )


class Item(BaseModel):
    """One web result (UCP-1 section 7.1)."""

    id: str
    type: Literal["web_result"] = "web_result"
    title: str
    url: str
    retrieved_utc: str
    engine: str
    engines: list[str] = Field(default_factory=list, description="Engines inside the backend.")
    snippet: str
    published_utc: str | None = None
    category: str | None = None
    score: Score
    provenance: list[Provenance] = Field(default_factory=list)
    fetch: FetchInfo = Field(default_factory=FetchInfo)
    content: str | None = Field(default=None, description="Extracted text (full mode).")
    chunks: list[str] | None = Field(
        default=None, description="The passages most relevant to the query (chunks_per_source)."
    )

    def to_wire(self) -> dict[str, Any]:
        """``self.model_dump(mode="json")``, built by hand: items are most of a response, and
        this is about four times as fast as pydantic's serializer. Every field is plain JSON
        data already (validated str, int, float, bool, None), so it is copied as it is
        (tests/test_api_contract.py holds the two equal, key order included)."""
        # A pydantic model keeps its field values in ``__dict__``, in field order (the
        # order model_dump follows); copying those dicts in C is twice as fast as reading
        # the fields one by one. Nested models and containers are copied too, so the wire
        # form shares nothing mutable with the item.
        wire = dict(self.__dict__)
        score = wire["score"] = dict(self.score.__dict__)
        if score["components"] is not None:
            score["components"] = dict(score["components"])
        wire["engines"] = list(self.engines)
        wire["provenance"] = [dict(source.__dict__) for source in self.provenance]
        wire["fetch"] = dict(self.fetch.__dict__)
        if self.chunks is not None:
            wire["chunks"] = list(self.chunks)
        return wire


class LlmCall(BaseModel):
    """One LLM step of the request, whether it called the model or took its fallback."""

    step: str
    model: str | None = None
    latency_ms: int = 0
    prompt_tokens: int | None = None
    completion_tokens: int | None = None
    fallback_used: bool = False
    reason: str | None = Field(default=None, description="Why the fallback was used.")


class RankInfo(BaseModel):
    """What snippet ranking chose (``constraints.rank: "llm"``)."""

    candidates: int
    want_n: int
    picks: list[int] = Field(description="0-based indices into the candidates, best first.")
    urls: list[str]
    fallback_used: bool
    reason: str | None = None


class PerspectiveInfo(BaseModel):
    query: str
    type: str
    results: int
    error: str | None = None


class PerspectivesInfo(BaseModel):
    """Multi-query: the perspectives searched and how diverse they were."""

    source: PerspectiveSource
    diversity: float = Field(
        default=0.0,
        description="1 - mean pairwise cosine of the perspective embeddings (lexical: 1 - "
        "mean pairwise Jaccard overlap of their topical words); 0 for one perspective.",
    )
    diversity_method: Literal["embeddings", "lexical"] = Field(
        default="lexical", description="How diversity was measured: embeddings when loaded."
    )
    queries: list[PerspectiveInfo]
    degraded: str | None = Field(default=None, description="The degradation rung, if any.")


class PagePassages(BaseModel):
    """What one page gave to the context pack when passages were chosen across pages."""

    id: str = Field(description="The item's id.")
    url: str
    passages: int = Field(description="Passages of the page shown in rendered_text.")
    chars: int = Field(description="Characters of the page those passages hold.")


class CragInfo(BaseModel):
    """Corrective re-search: the grade of the evidence and what was done about it."""

    grade: CragGrade
    method: GradeMethod
    action: CragAction
    query: str | None = Field(default=None, description="The refined query, if one ran.")
    target: str | None = Field(default=None, description="Backends or engine group switched to.")
    results_added: int = 0
    reason: str | None = None


class AnswerCheck(BaseModel):
    """Self-RAG style grades of the answer."""

    method: GradeMethod
    isrel: Literal["relevant", "irrelevant"]
    issup: Literal["fully_supported", "partially_supported", "no_support"]
    isuse: int = Field(ge=1, le=5)
    reason: str | None = None


class Citation(BaseModel):
    ref: int = Field(description="The n of [n]: the item's 1-based position in items.")
    id: str
    url: str
    title: str


# What an entry of ``meta.errors`` is, in one word: a backend's failure kind (``no_results``
# for an instance that answered with nothing), a page's skip reason or fetch status, or an
# LLM step that took its fallback.
ErrorKind = Literal[FailureKind, SkipReason, FetchStatus, "fallback"]


class ErrorEntry(BaseModel):
    stage: str = Field(description="search, fetch, extract, render, ...")
    source: str = Field(description="The backend name or page URL concerned.")
    reason: str
    kind: ErrorKind | None = Field(
        default=None,
        description="What kind of problem, in one word: a backend failure's kind "
        "(timeout, http_status, rate_limited, no_results, ...), a page's skip reason or "
        "fetch status (budget, timeout, failed, ...), or fallback (an LLM step).",
    )


CacheKind = Literal["exact", "semantic", "stale"]


class CacheInfo(BaseModel):
    """Whether the answer came from the result cache, which kind of match, and its age."""

    hit: bool
    kind: CacheKind | None = None
    age_s: float | None = Field(default=None, description="Seconds since it was computed.")


class Meta(BaseModel):
    backend_used: str | None
    fallback_used: bool
    pick_applied: bool
    pick_ids: list[int]
    mode_used: SearchMode
    timing_ms: dict[str, int]
    errors: list[ErrorEntry] = Field(default_factory=list)
    backends_tried: list[str] = Field(default_factory=list)
    route: dict[str, str | None] | None = Field(
        default=None, description="Engine group chosen and the pattern that chose it."
    )
    hedged: dict[str, Any] | None = Field(
        default=None, description="When a hedged request ran: which backends raced, who won."
    )
    rewritten_query: str | None = Field(default=None, description="constraints.rewrite")
    rank: RankInfo | None = None
    perspectives: PerspectivesInfo | None = None
    passages: list[PagePassages] | None = Field(
        default=None, description="Full mode: how many passages each page gave to the pack."
    )
    crag: CragInfo | None = None
    answer_check: AnswerCheck | None = None
    llm: list[LlmCall] = Field(default_factory=list, description="Every LLM step, in order.")
    cache: CacheInfo | None = Field(default=None, description="The result cache's part.")
    request_id: str | None = Field(
        default=None,
        description="With feedback.enabled: the id to report its results with "
        "(POST /v1/feedback); with constraints.record: the recording's id (searcher "
        "replay); also the X-Request-ID header.",
    )


class Usage(BaseModel):
    results_returned: int
    context_chars: int
    fetch_pages_used: int


class Producer(BaseModel):
    name: str
    version: str


class SearchResponse(BaseModel):
    """The Universal Context Pack, version 1."""

    schema_: Literal["ucp-1"] = Field(default=SCHEMA, alias="schema")
    created_utc: str
    producer: Producer
    request: dict[str, Any]
    meta: Meta
    usage: Usage
    items: list[Item] | None = None
    rendered_text: str | None = None
    answer: str | None = Field(default=None, description="want.answer: text with [n] citations.")
    answer_citations: list[Citation] | None = None

    model_config = ConfigDict(populate_by_name=True)

    def to_wire(self, want: Want) -> dict[str, Any]:
        """The JSON-ready dict, leaving out the parts the request did not want."""
        # ``model_dump(mode="json", by_alias=True)``, but the items through Item.to_wire
        # (the faster way), put back in their place among the fields.
        data = self.model_dump(mode="json", by_alias=True, exclude=_ITEMS)
        if want.items:
            after = {name: data.pop(name) for name in _AFTER_ITEMS}
            data["items"] = None if self.items is None else [i.to_wire() for i in self.items]
            data.update(after)
        if not want.rendered_text:
            data.pop("rendered_text", None)
        if not want.answer:
            data.pop("answer", None)
            data.pop("answer_citations", None)
        return data


_ITEMS = {"items"}
# The response's fields after ``items``, in order (none of them has an alias).
_FIELDS = list(SearchResponse.model_fields)
_AFTER_ITEMS = tuple(_FIELDS[_FIELDS.index("items") + 1 :])


class FeedbackOutcome(enum.StrEnum):
    """What became of one result (``POST /v1/feedback``)."""

    used = "used"
    cited = "cited"
    not_relevant = "not_relevant"


class FeedbackRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    request_id: str = Field(
        min_length=1,
        max_length=128,
        pattern=r"^[A-Za-z0-9._:-]+$",
        description="The search's `meta.request_id` (its X-Request-ID header).",
    )
    items: dict[str, FeedbackOutcome] = Field(
        min_length=1,
        max_length=1_000,
        description="Item id -> `used`, `cited` or `not_relevant`; a later report for an "
        "item replaces an earlier one.",
    )


class FeedbackRecorded(BaseModel):
    request_id: str
    items: dict[str, FeedbackOutcome] = Field(description="Every outcome held for the search.")


class RouteUse(BaseModel):
    route: str = Field(description="The engine group searches were routed to.")
    preset: str = Field(description="The search mode (`simple`, `full`) or research preset.")
    searches: int
    with_feedback: int = Field(description="Searches some feedback was given for.")
    used_searches: int = Field(description="Of those, searches with a result used or cited.")
    used_rate: float = Field(description="used_searches / with_feedback.")
    used: int = Field(description="Results reported used or cited.")
    cited: int
    not_relevant: int


class RouteStatsResponse(BaseModel):
    routes: list[RouteUse]
    recommended: dict[str, str] = Field(
        description="Per route, the preset whose results were used most often (seed 000 "
        "§6.2), among presets with at least 5 searches given feedback."
    )


class ErrorBody(BaseModel):
    type: str
    message: str
    field: str | None = None
    backends: list[dict[str, str]] | None = None


class ErrorResponse(BaseModel):
    error: ErrorBody


# --- health and cache (GET /v1/health, /v1/cache/stats, POST /v1/cache/clear) ----------


class FailureSeen(BaseModel):
    kind: str = Field(description="timeout, connect, http_status, rate_limited, blocked, auth, ...")
    reason: str
    age_s: float = Field(description="Seconds ago.")


class EngineHealthEntry(BaseModel):
    """An engine of a meta-search instance (SearXNG) seen failing."""

    name: str
    state: str = Field(description="healthy, suspended (left out of requests) or probing.")
    consecutive_failures: int
    last_kind: str | None
    last_message: str | None
    retry_in_s: float | None = Field(description="Suspended: seconds until the next probe.")


class BackendHealth(BaseModel):
    adapter: str = Field(description="The adapter this instance runs on.")
    enabled: bool
    configured: bool
    note: str | None
    breaker: str | None
    consecutive_failures: int
    last_error: str | None
    retry_in_s: float | None = Field(default=None, description="Open: seconds to the trial.")
    failures_by_kind: dict[str, int] = Field(
        default_factory=dict, description="Failed attempts since start, by kind."
    )
    last_failures: list[FailureSeen] = Field(default_factory=list, description="Newest last.")
    engines: list[EngineHealthEntry] | None = Field(
        default=None, description="Meta-search instances: engines seen failing."
    )


class EmbedderHealth(BaseModel):
    name: str | None
    problem: str | None = Field(description="Why near-duplicate removal is off right now.")
    state: Literal["off", "loading", "ready", "failed"] = Field(
        default="ready", description="The embedding model loads in the background."
    )


class LlmHealth(BaseModel):
    configured: bool = Field(description="False: every LLM step takes its fallback.")
    base_url: str | None = None
    model: str | None = None
    structured_output: str | None = Field(
        default=None,
        description=(
            "How JSON steps ask for their schema (llm.structured_output, or with `auto` "
            "the form the endpoint accepted); null: `auto`, not probed yet."
        ),
    )
    context_tokens: int | None = Field(
        default=None,
        description="The model's context window (configured or read from the server); null: "
        "not known (yet).",
    )


class StateInfo(BaseModel):
    """The shared state store: its engine and whether it is answering."""

    engine: Literal["sqlite", "redis"]
    location: str = Field(description="The SQLite file, or the Redis URL without password.")
    ok: bool = Field(description="False: requests go on without the shared caches.")
    failures: int = Field(description="Operations that failed (or were skipped) so far.")
    last_error: str | None = None


class BrowserHealth(BaseModel):
    available: bool = Field(description="Pages that need JavaScript can be rendered.")
    executable: str | None = Field(default=None, description="The browser found, if any.")
    problem: str | None = Field(default=None, description="Why the tier is off.")
    running: bool = Field(
        default=False,
        description="The browser process is up (it starts with the first page to render).",
    )
    pages_open: int = 0
    max_pages: int = 0
    renders: int = Field(default=0, description="Pages rendered since start.")
    restarts: int = Field(default=0, description="Browser restarts (died, or past its memory cap).")
    refused_requests: int = Field(
        default=0, description="Requests of rendered pages the SSRF guard refused."
    )


class Health(BaseModel):
    status: str = Field(
        description="ok; degraded: requests are answered without something (the shared "
        "caches, a backend); unavailable (HTTP 503): requests cannot be served (API keys are "
        "on and the state store holding them cannot be reached)."
    )
    version: str
    backends: dict[str, BackendHealth]
    adapter_problems: dict[str, str] = Field(
        default_factory=dict, description="Backend plugins that could not be loaded, and why."
    )
    embedder: EmbedderHealth
    llm: LlmHealth
    state: StateInfo | None = None
    browser: BrowserHealth | None = None


class CacheStats(BaseModel):
    enabled: bool
    dir: str
    entries: int = Field(description="Pages in the cache directory now (shared by workers).")
    bytes: int
    hits: int = Field(
        description="Reads served from the cache by the worker that answers, since it "
        "started (each worker counts its own; /metrics sums them)."
    )
    misses: int = Field(description="Reads the same worker had to fetch, since it started.")
    evicted: int = Field(default=0, description="Entries evicted to stay within max_bytes.")
    max_bytes: int | None = Field(default=None, description="The size cap; null: no cap.")


class CacheCleared(BaseModel):
    removed: int


# --- fetch_page (POST /v1/fetch) --------------------------------------------------------


class FetchPageRequest(_Strict, WireSafe):
    """``POST /v1/fetch`` body: one page's extracted text, a slice at a time."""

    # The pattern is checked by the route, after the friendlier checks of check_url.
    url: str = Field(
        min_length=1,
        max_length=8192,
        description=HTTP_URL_RULE,
        json_schema_extra={"pattern": HTTP_URL},
    )
    max_chars: Annotated[int, Field(ge=1, le=200_000), WHOLE] | None = Field(
        default=None, description="Characters to return at most (default: mcp.max_output_chars)."
    )
    start_char: NonNegInt = Field(default=0, description="Offset into the page's text.")
    render: RenderMode = Field(default="auto", description=RENDER_DESCRIPTION)


class FetchPageResponse(BaseModel):
    url: str
    status: FetchStatus
    content: str = Field(description="The slice of the extracted text (markdown).")
    start_char: int
    next_start_char: int | None = Field(
        description="start_char of the next slice; null when this one reaches the end."
    )
    total_chars: int = Field(description="Length of the page's extracted text.")
    fetch: FetchInfo


MAX_FETCH_URLS = 20  # URLs one POST /v1/fetch may name
# The pattern is checked by the route, after the friendlier checks of check_url.
_FetchURL = Annotated[
    str, Field(min_length=1, max_length=8192, json_schema_extra={"pattern": HTTP_URL})
]


class FetchRequest(FetchPageRequest):
    """``POST /v1/fetch`` body: one page (``url``) or several (``urls``: read concurrently
    under one deadline, each with its own status; at most ``limits.max_fetch_pages`` are
    read). Exactly one of the two."""

    model_config = ConfigDict(
        json_schema_extra={
            "oneOf": [
                {"required": ["url"], "not": {"required": ["urls"]}},
                {"required": ["urls"], "not": {"required": ["url"]}},
            ]
        }
    )

    # Empty means absent (the defaults are not validated; a sent "" or [] is refused).
    url: _FetchURL = Field(default="", description=f"One page. {HTTP_URL_RULE}")
    urls: Annotated[list[_FetchURL], Field(min_length=1, max_length=MAX_FETCH_URLS)] = Field(
        default_factory=list,
        description=f"Several pages (1-{MAX_FETCH_URLS}), instead of `url`; the answer is then "
        "`{results: [...]}`, one per URL in the order asked.",
    )


class FetchBatchResponse(BaseModel):
    results: list[FetchPageResponse] = Field(description="One per URL, in the order asked.")


# --- site map (POST /v1/map) ----------------------------------------------------------------

MapPattern = Annotated[
    str, Field(min_length=1, max_length=200, json_schema_extra={"format": "regex"})
]


class SiteFilters(_Strict, WireSafe):
    """Which pages of a site a map or a crawl walks: from a root, within a depth and a
    breadth, under path and domain patterns."""

    url: str = Field(
        min_length=1, max_length=2048, description=f"The root. {HTTP_URL_RULE}",
        json_schema_extra={"pattern": HTTP_URL},
    )  # fmt: skip
    max_depth: Annotated[int, Field(ge=0, le=5), WHOLE] = Field(
        default=1, description="Link hops from the root followed (0: sitemaps and the root only)."
    )
    max_breadth: Annotated[int, Field(ge=1, le=500), WHOLE] = Field(
        default=20, description="Links followed per page at most."
    )
    select_paths: list[MapPattern] = Field(
        default_factory=list, max_length=20,
        description="Regular expressions; a URL's path (and query) must match one.",
    )  # fmt: skip
    exclude_paths: list[MapPattern] = Field(
        default_factory=list, max_length=20,
        description="Regular expressions; a URL whose path matches one is left out.",
    )  # fmt: skip
    select_domains: list[MapPattern] = Field(
        default_factory=list, max_length=20,
        description="Regular expressions; a URL's host must match one.",
    )  # fmt: skip
    exclude_domains: list[MapPattern] = Field(
        default_factory=list, max_length=20,
        description="Regular expressions; a URL whose host matches one is left out.",
    )  # fmt: skip
    allow_external: bool = Field(
        default=False,
        description="Follow links to other hosts (default: the root's host and its subdomains).",
    )


MAX_MAP_TIMEOUT_S = 120


class MapRequest(SiteFilters):
    """``POST /v1/map`` body: a site's URLs from its sitemaps and links, without reading
    page content beyond links."""

    limit: Annotated[int, Field(ge=1, le=5000), WHOLE] = Field(
        default=50, description="URLs returned at most."
    )
    sitemaps: bool = Field(
        default=True, description="Read the sitemaps robots.txt names (or /sitemap.xml)."
    )
    timeout_s: Annotated[float, Field(gt=0, le=MAX_MAP_TIMEOUT_S)] = Field(
        default=30, description="Deadline of the whole map; what was found by then is returned."
    )


class MapResponse(BaseModel):
    base_url: str
    results: list[str] = Field(description="URLs in the order found, the root first.")
    from_sitemaps: int = Field(description="Of them, found in sitemaps.")
    from_links: int = Field(description="Of them, found as links of pages.")
    sitemaps_read: int
    pages_read: int = Field(description="Pages whose links were read.")
    complete: bool = Field(description="False: cut short by `limit` or `timeout_s`.")
    response_time: float = Field(description="Seconds.")


# --- research (POST /v1/research, GET /v1/research/{id}, .../events) ---------------------

Preset = Literal["minimal", "balanced", "enhanced", "research", "full"]
JobStatus = Literal["queued", "running", "done", "failed", "cancelled"]
# Why a job failed, for a client to act on without reading ``error``'s words.
JobFailure = Literal[
    "all_backends_failed",  # every search failed
    "structured_output_failed",  # no answer validated against output_schema
    "llm_required",  # output_schema without an LLM configured
    "timed_out",  # past its time limit
    "interrupted",  # the server stopped
    "internal_error",
    "failed",  # anything else
]
EventType = Literal["plan", "search", "read", "evidence", "verify", "draft", "done", "error"]
VerificationStatus = Literal["verified", "partially_verified", "conflicting", "unverified"]
ReportMethod = Literal["llm", "evidence"]


class ResearchBudget(_Strict):
    """Limits of one research job; unset fields take the preset's values."""

    max_iterations: Annotated[int, Field(ge=1, le=10), WHOLE] | None = Field(
        default=None, description="Search rounds at most."
    )
    max_tool_calls: Annotated[int, Field(ge=1, le=500), WHOLE] | None = Field(
        default=None, description="Searches and LLM calls at most."
    )
    max_pages: Annotated[int, Field(ge=0, le=50), WHOLE] | None = Field(
        default=None, description="Pages read at most."
    )
    max_total_time_ms: Annotated[int, Field(ge=1000, le=900_000), WHOLE] | None = Field(
        default=None, description="Deadline of the whole job."
    )
    max_llm_tokens: Annotated[int, Field(ge=0, le=2_000_000), WHOLE] | None = Field(
        default=None, description="Prompt + completion tokens at most; then the fallbacks."
    )
    max_report_chars: Annotated[int, Field(ge=500, le=100_000), WHOLE] | None = Field(
        default=None, description="Size of the report."
    )


class ResearchWant(_Strict):
    report: bool = True
    evidence: bool = Field(default=True, description="The evidence passages, numbered.")
    trace: bool = Field(default=True, description="search_trace: every search of the job.")


class ResearchRequest(_Strict, WireSafe):
    """``POST /v1/research`` body."""

    query: Query = Field(
        description='A string, or {"text": ..., "lang": ...}.', json_schema_extra=_query_schema
    )
    preset: Preset = "balanced"
    budget: ResearchBudget = Field(default_factory=ResearchBudget)
    constraints: Constraints = Field(
        default_factory=Constraints,
        description="Passed to every search (backend, lang, engines, domains, time_range…); "
        "with `session_id`, pages that session was shown rank below the others in each "
        "search unless ranked first, and the job's evidence joins the session.",
    )
    want: ResearchWant = Field(default_factory=ResearchWant)
    stream: bool = Field(default=False, description="Stream the job's events in the response.")
    output_schema: dict[str, Any] | None = Field(
        default=None,
        description="A JSON Schema the result's `structured.data` must validate against "
        "(written by the LLM from the evidence, each field's sources in "
        "`structured.citations`); needs `llm.base_url`. See docs/structured-output.md.",
    )

    @field_validator("query", mode="before")
    @classmethod
    def _query_shape(cls, value: Any) -> Any:
        return query_shape(value)

    @property
    def query_text(self) -> str:
        return self.query.text


class SubQuestion(BaseModel):
    question: str
    source: Literal["question", "llm", "templates", "entities", "refined"]
    covered: bool
    coverage: float = Field(description="Share of its terms in its best passage (0-1).")
    evidence: list[int] = Field(description="The numbers of its evidence passages, best first.")


class EvidencePassage(BaseModel):
    n: int = Field(description="The number the report cites it by: [n].")
    url: str
    title: str
    text: str
    kind: Literal["page", "snippet"]
    score: float


class Conflict(BaseModel):
    sub_question: str
    what: Literal["numbers", "dates"]
    values: dict[str, list[str]] = Field(description="Source URL -> the values it states.")


class TraceEntry(BaseModel):
    round: int
    sub_question: str
    query: str
    results: int
    new_urls: int
    error: str | None = None


class ResearchUsage(BaseModel):
    rounds: int
    tool_calls: int
    pages_read: int
    llm_tokens: int
    elapsed_ms: int
    llm_prompt_tokens: int = Field(
        default=0, description="Prompt tokens the LLM server reported (part of llm_tokens)."
    )
    llm_completion_tokens: int = Field(
        default=0, description="Completion tokens the LLM server reported (part of llm_tokens)."
    )


class StructuredAnswer(BaseModel):
    """The answer shaped by the request's ``output_schema``."""

    data: Any = Field(description="Valid against the request's `output_schema`.")
    citations: dict[str, list[int]] = Field(
        description="JSON pointer of a field in `data` -> the numbers (`evidence[].n`) of "
        "the passages stating it."
    )
    citation_urls: dict[str, list[str]] = Field(
        description="The same citations as the passages' URLs."
    )
    unsupported_citations: dict[str, list[int]] = Field(
        default_factory=dict,
        description="Citations removed: their passage does not hold the field's value.",
    )
    repairs: int = Field(description="Replies sent back with validation errors first.")


class ResearchResult(BaseModel):
    question: str
    preset: Preset
    report: str | None
    report_method: ReportMethod
    confidence: float = Field(ge=0, le=1)
    verification_status: VerificationStatus
    sub_questions: list[SubQuestion]
    evidence: list[EvidencePassage] | None
    conflicts: list[Conflict]
    unsupported_citations: list[int] = Field(
        default_factory=list, description="Citations removed: their passage did not support."
    )
    search_trace: list[TraceEntry] | None
    stopped: str = Field(description="Why the loop stopped: covered, no_progress, budget…")
    errors: list[ErrorEntry] = Field(default_factory=list)
    usage: ResearchUsage
    structured: StructuredAnswer | None = Field(
        default=None, description="With `output_schema`: the answer shaped by it."
    )


class JobEvent(BaseModel):
    """One event of a background job (research, crawl), numbered from 1."""

    id: int
    type: str
    ts: str
    data: dict[str, Any]


class JobView(BaseModel):
    """What every background job's status shows (research, crawl)."""

    id: str
    status: JobStatus
    created_utc: str
    updated_utc: str
    progress: dict[str, Any] = Field(default_factory=dict)
    events: int = Field(description="Events so far; the stream resumes after any of them.")
    error: str | None = None
    error_kind: JobFailure | None = Field(default=None, description="Why it failed, if it did.")


class ResearchEvent(JobEvent):
    type: EventType


class ResearchJob(JobView):
    """``GET /v1/research/{id}``."""

    id: str
    status: JobStatus
    query: str
    preset: Preset
    created_utc: str
    updated_utc: str
    progress: dict[str, Any] = Field(default_factory=dict)
    events: int = Field(description="Events so far; the stream resumes after any of them.")
    error: str | None = None
    error_kind: JobFailure | None = Field(default=None, description="Why it failed, if it did.")
    result: ResearchResult | None = None


class ResearchAccepted(BaseModel):
    """``POST /v1/research`` (202)."""

    id: str
    status: JobStatus
    status_url: str
    events_url: str


# --- collections of own documents (/v1/collections) -----------------------------------


class CollectionInfo(BaseModel):
    name: str
    documents: int
    chunks: int
    bytes: int
    skipped: int = Field(description="Files recorded as skipped, each with its reason.")
    embedder: str | None = Field(description="The model of its vectors; null: keywords only.")


class CollectionList(BaseModel):
    collections: list[CollectionInfo]


class UploadedFile(BaseModel):
    name: str = Field(description="The name it is kept under (as sent, `\\` read as `/`).")
    status: str = Field(description="indexed, unchanged (same content as before) or skipped")
    reason: FileSkipReason | None = Field(default=None, description="Why it was skipped.")
    detail: str | None = None


class UploadAnswer(BaseModel):
    collection: str
    files: list[UploadedFile]


class Removed(BaseModel):
    collection: str
    name: str
    removed: bool


# --- crawl (POST /v1/crawl, GET /v1/crawl/{id}, .../events) ---------------------------------

CrawlSkipReason = Literal["robots", "duplicate", "near_duplicate", "out_of_scope", "failed"]
CrawlEventType = Literal["page", "skip", "done", "error"]


class CrawlRequest(SiteFilters):
    """``POST /v1/crawl`` body: read a site's pages breadth first from ``url``. Options left
    out take the server's defaults (``crawl.*``); a value above the server's ceiling is
    lowered to it (422 under ``limits.strict``)."""

    limit: Annotated[int, Field(ge=1, le=10_000), WHOLE] = Field(
        default=50,
        description="Pages read at most (duplicates and failures count; ceiling: "
        "`crawl.max_pages`).",
    )
    max_bytes: Annotated[int, Field(ge=1024, le=MAX_INT), WHOLE] | None = Field(
        default=None, description="Bytes downloaded at most, all pages together (default and "
        "ceiling: `crawl.max_bytes`).",
    )  # fmt: skip
    max_chars_per_page: Annotated[int, Field(ge=1, le=1_000_000), WHOLE] = Field(
        default=20_000, description="Characters of each page's text returned at most."
    )
    query: str | None = Field(
        default=None, min_length=1, max_length=500,
        description="Links whose anchor text and URL match it best are followed first "
        "(BM25; the LLM when configured).",
    )  # fmt: skip
    instructions: str | None = Field(
        default=None, min_length=1, max_length=2000,
        description="What to look for, in words (Tavily's `instructions`): ranks links as "
        "`query` does when `query` is absent.",
    )  # fmt: skip
    politeness_delay_s: Annotated[float, Field(ge=0, le=60)] | None = Field(
        default=None, description="Pause between two requests to one host (default "
        "`crawl.politeness_delay_s`; robots.txt's `Crawl-delay` raises it, up to 10 s).",
    )  # fmt: skip
    per_host_concurrency: Annotated[int, Field(ge=1, le=16), WHOLE] | None = Field(
        default=None, description="Requests to one host at once (default and ceiling: "
        "`crawl.per_host_concurrency`).",
    )  # fmt: skip
    timeout_s: Annotated[float, Field(gt=0, le=3600)] | None = Field(
        default=None, description="Deadline of the whole crawl (default and ceiling: "
        "`crawl.max_time_s`); the job ends `done` with what it read by then.",
    )  # fmt: skip

    def ranking_text(self) -> str | None:
        """What ranks the links: ``query``, else ``instructions``."""
        return self.query or self.instructions


class CrawledPage(BaseModel):
    url: str = Field(description="The URL read (after redirects).")
    depth: int = Field(description="Link hops from the root.")
    content: str = Field(description="The page's main text (markdown).")
    fetch: FetchInfo


class CrawlSkip(BaseModel):
    url: str
    depth: int
    reason: CrawlSkipReason
    error: str | None = None
    duplicate_of: str | None = Field(default=None, description="The page kept instead.")


class CrawlEvent(JobEvent):
    type: CrawlEventType


class CrawlJob(JobView):
    """``GET /v1/crawl/{id}``: the pages read so far (all of them once done)."""

    url: str
    query: str | None = None
    pages: list[CrawledPage] = Field(default_factory=list)
    skipped: list[CrawlSkip] = Field(default_factory=list)
    complete: bool | None = Field(
        default=None, description="Once done: False when cut short by a budget or the deadline."
    )


class CrawlAccepted(BaseModel):
    """``POST /v1/crawl`` (202)."""

    id: str
    status: JobStatus
    status_url: str
    events_url: str
