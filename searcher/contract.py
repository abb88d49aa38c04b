"""The wire contract: the search request, its budget, and the UCP-1 response.

Field for field the contract of Search API v1 (request sections 4-5, response sections
6-7). These pydantic models are used at the boundary only (HTTP, CLI, client); the pipeline
works on plain dataclasses.
"""

from __future__ import annotations

from typing import Annotated, Any, Literal

from pydantic import BaseModel, ConfigDict, Field, StrictInt, field_validator

MAX_QUERY_CHARS = 2000
SCHEMA: Literal["ucp-1"] = "ucp-1"

SearchMode = Literal["simple", "full"]
FetchStatus = Literal["skipped", "fetched", "failed"]
SkipReason = Literal["content_type", "too_large", "timeout", "budget", "blocked", "error"]
TimeRange = Literal["day", "week", "month", "year"]
CragGrade = Literal["CORRECT", "AMBIGUOUS", "INCORRECT"]
CragAction = Literal["none", "refined", "switched", "skipped"]
GradeMethod = Literal["llm", "heuristic"]  # who graded: the model, or the fallback
PerspectiveSource = Literal["llm", "templates", "original"]

NonNegInt = Annotated[StrictInt, Field(ge=0)]


class _Strict(BaseModel):
    # Unknown fields are refused so that a typo ("serch_mode") is a clear 422, not ignored.
    model_config = ConfigDict(extra="forbid")


def query_text(value: str) -> str:
    """A query's text, stripped; ``ValueError`` if blank or longer than the limit (the rule
    every endpoint that takes a query shares)."""
    value = value.strip()
    if not value:
        raise ValueError("must not be empty")
    if len(value) > MAX_QUERY_CHARS:
        raise ValueError(f"must be at most {MAX_QUERY_CHARS} characters")
    return value


class Query(_Strict):
    """Object form of the query: ``{"text": "...", "lang": "en"}``."""

    text: str
    lang: str | None = Field(default=None, max_length=35)

    @field_validator("text")
    @classmethod
    def _text_not_blank(cls, value: str) -> str:
        return query_text(value)


class Constraints(_Strict):
    """How to search: backend choice, mode, language and backend filters."""

    backend: str | list[str] | None = Field(
        default=None,
        description='A backend name, a list of names (tried in that order), or "auto" '
        "(the configured order). Default: auto.",
    )
    search_mode: SearchMode = "simple"
    lang: str | None = Field(default=None, max_length=35)
    pick_ids: list[StrictInt] | None = Field(
        default=None,
        description="0-based indices into the backend-ordered result list; invalid and "
        "duplicate indices are ignored, order is kept.",
    )
    engines: list[str] | None = Field(default=None, description="SearXNG engines to use.")
    categories: list[str] | None = Field(default=None, description="SearXNG categories.")
    time_range: TimeRange | None = None
    safesearch: Annotated[StrictInt, Field(ge=0, le=2)] | None = Field(
        default=None, description="0 off, 1 moderate, 2 strict."
    )
    pageno: Annotated[StrictInt, Field(ge=1, le=50)] = 1
    chunks_per_source: Annotated[StrictInt, Field(ge=1, le=5)] | None = Field(
        default=None,
        description="Passages (<= 500 chars each) most relevant to the query per result; "
        "implies fetching the pages, also in simple mode.",
    )
    include_domains: list[str] | None = Field(
        default=None, description="Keep only results on these domains (or their subdomains)."
    )
    exclude_domains: list[str] | None = Field(
        default=None, description="Drop results on these domains (or their subdomains)."
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
    multi_query: Annotated[StrictInt, Field(ge=1, le=5)] | None = Field(
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
    want_n: Annotated[StrictInt, Field(ge=1, le=20)] | None = Field(
        default=None, description='Results kept by rank="llm" (default: llm.steps.rank.want_n).'
    )
    cache: Literal["on", "off"] = Field(
        default="on",
        description='"off": neither read nor write the result cache for this request.',
    )

    @field_validator("engines", "categories", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        # SearXNG users write "google,bing"; accept that as well as a list.
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("backend")
    @classmethod
    def _backend_not_empty(cls, value: str | list[str] | None) -> str | list[str] | None:
        if isinstance(value, list) and not value:
            raise ValueError("must name at least one backend")
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
    search: NonNegInt | None = None
    fetch: NonNegInt | None = None


class Budget(_Strict):
    """Execution limits. Unset fields take the configured defaults; every field is enforced."""

    max_tool_calls: NonNegInt | None = None
    max_search_retries: NonNegInt | None = None
    max_results: Annotated[StrictInt, Field(ge=1, le=100)] | None = None
    max_fetch_pages: Annotated[StrictInt, Field(ge=0, le=50)] | None = None
    max_download_bytes_per_page: NonNegInt | None = None
    max_extract_chars_per_page: NonNegInt | None = None
    allowed_content_types: list[str] | None = None
    max_redirects: Annotated[StrictInt, Field(ge=0, le=30)] | None = None
    max_context_chars: NonNegInt | None = None
    max_total_time_ms: NonNegInt | None = None
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


class SearchRequest(_Strict):
    """``POST /v1/search`` body."""

    query: Query = Field(description='A string, or {"text": ..., "lang": ...}.')
    intent: str | None = Field(
        default=None,
        max_length=64,
        description="A hint: fact_check, fresh_data, background, verification. Echoed.",
    )
    constraints: Constraints = Field(default_factory=Constraints)
    want: Want = Field(default_factory=Want)
    context_hint: dict[str, Any] | None = None
    budget: Budget = Field(default_factory=Budget)

    @field_validator("query", mode="before")
    @classmethod
    def _query_shape(cls, value: Any) -> Any:
        return query_shape(value)

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
    status: FetchStatus = "skipped"
    skip_reason: SkipReason | None = None
    error: str | None = Field(default=None, description="Why the fetch failed or was skipped.")
    http_status: int | None = None
    content_type: str | None = None
    downloaded_bytes: int = 0
    truncated: bool = False
    extracted_chars: int = 0
    cached: bool = False


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
    diversity: float | None = Field(
        default=None, description="1 - mean pairwise cosine of the perspective embeddings."
    )
    queries: list[PerspectiveInfo]
    degraded: str | None = Field(default=None, description="The degradation rung, if any.")


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


class ErrorEntry(BaseModel):
    stage: str = Field(description="search, fetch, extract, render, ...")
    source: str = Field(description="The backend name or page URL concerned.")
    reason: str


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
    crag: CragInfo | None = None
    answer_check: AnswerCheck | None = None
    llm: list[LlmCall] = Field(default_factory=list, description="Every LLM step, in order.")
    cache: CacheInfo | None = Field(default=None, description="The result cache's part.")


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
        data = self.model_dump(mode="json", by_alias=True)
        if not want.items:
            data.pop("items", None)
        if not want.rendered_text:
            data.pop("rendered_text", None)
        if not want.answer:
            data.pop("answer", None)
            data.pop("answer_citations", None)
        return data


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
    problem: str | None


class LlmHealth(BaseModel):
    configured: bool = Field(description="False: every LLM step takes its fallback.")
    base_url: str | None = None
    model: str | None = None


class StateInfo(BaseModel):
    """The shared state store: its engine and whether it is answering."""

    engine: Literal["sqlite", "redis"]
    location: str = Field(description="The SQLite file, or the Redis URL without password.")
    ok: bool = Field(description="False: requests go on without the shared caches.")
    failures: int = Field(description="Operations that failed (or were skipped) so far.")
    last_error: str | None = None


class Health(BaseModel):
    status: str
    version: str
    backends: dict[str, BackendHealth]
    adapter_problems: dict[str, str] = Field(
        default_factory=dict, description="Backend plugins that could not be loaded, and why."
    )
    embedder: EmbedderHealth
    llm: LlmHealth
    state: StateInfo | None = None


class CacheStats(BaseModel):
    enabled: bool
    dir: str
    entries: int
    bytes: int
    hits: int
    misses: int


class CacheCleared(BaseModel):
    removed: int


# --- fetch_page (POST /v1/fetch) --------------------------------------------------------


class FetchPageRequest(_Strict):
    """``POST /v1/fetch`` body: one page's extracted text, a slice at a time."""

    url: str = Field(min_length=1, max_length=8192, description="An http or https URL.")
    max_chars: Annotated[StrictInt, Field(ge=1, le=200_000)] | None = Field(
        default=None, description="Characters to return at most (default: mcp.max_output_chars)."
    )
    start_char: NonNegInt = Field(default=0, description="Offset into the page's text.")


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


# --- research (POST /v1/research, GET /v1/research/{id}, .../events) ---------------------

Preset = Literal["minimal", "balanced", "enhanced", "research", "full"]
JobStatus = Literal["queued", "running", "done", "failed", "cancelled"]
EventType = Literal["plan", "search", "read", "evidence", "verify", "draft", "done", "error"]
VerificationStatus = Literal["verified", "partially_verified", "conflicting", "unverified"]
ReportMethod = Literal["llm", "evidence"]


class ResearchBudget(_Strict):
    """Limits of one research job; unset fields take the preset's values."""

    max_iterations: Annotated[StrictInt, Field(ge=1, le=10)] | None = Field(
        default=None, description="Search rounds at most."
    )
    max_tool_calls: Annotated[StrictInt, Field(ge=1, le=500)] | None = Field(
        default=None, description="Searches and LLM calls at most."
    )
    max_pages: Annotated[StrictInt, Field(ge=0, le=50)] | None = Field(
        default=None, description="Pages read at most."
    )
    max_total_time_ms: Annotated[StrictInt, Field(ge=1000, le=900_000)] | None = Field(
        default=None, description="Deadline of the whole job."
    )
    max_llm_tokens: Annotated[StrictInt, Field(ge=0, le=2_000_000)] | None = Field(
        default=None, description="Prompt + completion tokens at most; then the fallbacks."
    )
    max_report_chars: Annotated[StrictInt, Field(ge=500, le=100_000)] | None = Field(
        default=None, description="Size of the report."
    )


class ResearchWant(_Strict):
    report: bool = True
    evidence: bool = Field(default=True, description="The evidence passages, numbered.")
    trace: bool = Field(default=True, description="search_trace: every search of the job.")


class ResearchRequest(_Strict):
    """``POST /v1/research`` body."""

    query: Query = Field(description='A string, or {"text": ..., "lang": ...}.')
    preset: Preset = "balanced"
    budget: ResearchBudget = Field(default_factory=ResearchBudget)
    constraints: Constraints = Field(
        default_factory=Constraints,
        description="Passed to every search (backend, lang, engines, domains, time_range…).",
    )
    want: ResearchWant = Field(default_factory=ResearchWant)
    stream: bool = Field(default=False, description="Stream the job's events in the response.")

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


class ResearchEvent(BaseModel):
    id: int
    type: EventType
    ts: str
    data: dict[str, Any]


class ResearchJob(BaseModel):
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
    result: ResearchResult | None = None


class ResearchAccepted(BaseModel):
    """``POST /v1/research`` (202)."""

    id: str
    status: JobStatus
    status_url: str
    events_url: str
