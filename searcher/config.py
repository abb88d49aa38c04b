"""Settings from ``searcher.yaml`` and the environment (the environment wins).

Every setting has a default, so searcher works on a fresh machine with no configuration:
DuckDuckGo only, extraction cache in the user's cache directory. Settings are read once,
validated strictly (a typo in a key is an error, not a silent default) and passed down
explicitly; nothing below this module reads ``os.environ``.
"""

from __future__ import annotations

import os
import types
import typing
from collections.abc import Mapping
from pathlib import Path
from typing import Annotated, Any, Literal
from urllib.parse import urlsplit

import platformdirs
import yaml
from pydantic import (
    AfterValidator,
    BaseModel,
    BeforeValidator,
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from searcher.errors import ConfigError, InvalidRequest, field_problems
from searcher.fetch.urls import without_password

# The instances that exist without configuration, one per built-in adapter, named after
# it; today's ``backends.searxng`` / ``SEARXNG_BASE_URL`` and friends configure them.
LEGACY_INSTANCES: tuple[str, ...] = ("searxng", "duckduckgo", "brave")


def _http_url(value: str) -> str:
    # Checked at load time: a typo here would otherwise fail every call, with the HTTP
    # client's own words. Empty is unset (SEARXNG_BASE_URL= in an environment file).
    if not value:
        return value
    try:
        parts = urlsplit(value)
        parts.port  # noqa: B018 - raises ValueError on a port that is not a number
    except ValueError as exc:
        raise ValueError(f"not a URL ({exc})") from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise ValueError("must be an http:// or https:// URL with a host")
    return value


HttpUrl = Annotated[str, AfterValidator(_http_url)]
SECRET_KEYS = frozenset({"api_key", "openwebui_api_key", "tavily_api_key", "redis_url"})


def _numbers_only(annotation: Any) -> bool:
    """Whether a field of this type takes numbers and no booleans."""
    if annotation is bool:
        return False
    if annotation in (int, float):
        return True
    if typing.get_origin(annotation) not in (typing.Union, types.UnionType, Annotated):
        return False  # a list, a dict, a literal...: pydantic refuses a boolean itself
    args = typing.get_args(annotation)
    return any(_numbers_only(a) for a in args) and not any(a is bool for a in args)


class ConfigSection(BaseModel):
    """A section of the configuration: unknown keys are errors, and so is a boolean given
    for a number (YAML reads yes/no/on/off as booleans, which pydantic would take as 1/0:
    ``timeout_s: yes`` was a one-second timeout)."""

    model_config = ConfigDict(extra="forbid")

    @field_validator("*", mode="before")
    @classmethod
    def _no_boolean_for_a_number(cls, value: Any, info: ValidationInfo) -> Any:
        field = cls.model_fields.get(info.field_name or "")
        if field is not None and _numbers_only(field.annotation):
            return _refuse_boolean(value)
        return value


def _refuse_boolean(value: Any) -> Any:
    if isinstance(value, bool):
        raise ValueError(f"must be a number, not {str(value).lower()}")
    return value


class BreakerSettings(ConfigSection):
    failure_threshold: int = Field(default=5, ge=1, description="Consecutive failures to open.")
    recovery_timeout: float = Field(default=60.0, gt=0, description="Seconds open before a trial.")
    half_open_max_calls: int = Field(default=3, ge=1, description="Trial successes to close.")


# A weight in fusion: NaN, an infinity or a negative one would turn the order upside down.
FusionWeight = Annotated[float, BeforeValidator(_refuse_boolean), Field(ge=0, allow_inf_nan=False)]


class BackendSettings(ConfigSection):
    """A built-in instance as configured before named instances (``backends.searxng``
    etc.); it becomes the instance of that name, checked by its adapter's model (which
    also checks the adapter's own keys, e.g. SearXNG's ``engine_health``)."""

    model_config = ConfigDict(extra="allow")

    enabled: bool = True
    base_url: HttpUrl | None = None
    api_key: str | None = None
    timeout_s: float = Field(default=8.0, gt=0)
    weight: FusionWeight = 1.0
    breaker: BreakerSettings = Field(default_factory=BreakerSettings)


class InstanceSettings(ConfigSection):
    """What every backend instance has; an adapter's config model (declared in its
    module, ``searcher/backends/<adapter>.py``) adds its own keys."""

    adapter: str = Field(description="The adapter: searxng, brave, duckduckgo or a plugin's.")
    enabled: bool = True
    timeout_s: float = Field(default=8.0, gt=0, description="One call to this instance.")
    weight: FusionWeight = Field(default=1.0, description="Its lists' weight in fusion.")
    breaker: BreakerSettings = Field(default_factory=BreakerSettings)
    rate: str | None = Field(
        default=None,
        description="searcher's own pace for this instance, e.g. 1/s (Brave's free tier): "
        "shared by all workers; a request waits for its turn within its deadline.",
    )

    @field_validator("rate")
    @classmethod
    def _rate(cls, value: str | None) -> str | None:
        if value is not None:
            from searcher.auth.rates import Rate

            try:
                Rate.parse(value)
            except InvalidRequest as exc:
                raise ValueError(exc.message) from exc
        return value


class FetchSettings(ConfigSection):
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Hosts (host or host:port) exempt from the private-address guard.",
    )
    user_agent: str = "Mozilla/5.0 (compatible; searcher/0.1; +https://github.com/searcher)"
    max_concurrency: int = Field(default=8, ge=1, description="Pages fetched at once.")
    extract_workers: int = Field(
        default=0, ge=0, description="Extraction processes; 0 means one per CPU core."
    )
    # --- extraction limits (issue 11): a page cannot hold a worker for long -----------
    extract_timeout_s: float = Field(
        default=10.0, gt=0, le=600, description="Wall time one extraction may take; past it "
        "its worker process is killed and replaced.",
    )  # fmt: skip
    extract_client_share: float = Field(
        default=0.5, gt=0, le=1, description="Share of the extraction workers one client "
        "may occupy at once (at least one worker).",
    )  # fmt: skip
    max_page_elements: int = Field(
        default=50_000, ge=1, description="Pages with more elements are 'page too complex'."
    )
    max_page_depth: int = Field(
        default=2_000, ge=1, description="Deepest nesting of container elements allowed."
    )
    max_page_depth_sum: int = Field(
        default=5_000_000, ge=1, description="Every element's depth, summed, at most."
    )
    max_element_attributes: int = Field(
        default=1_000, ge=1, description="Attributes one element may have."
    )
    max_table_row_cells: int = Field(
        default=2_000, ge=1, description="Cells one table row may have."
    )
    pdf_max_pages: int = Field(default=200, ge=1, description="PDF pages read at most.")


class CacheSettings(ConfigSection):
    enabled: bool = True
    dir: str | None = Field(default=None, description="Default: the user's cache directory.")
    ttl_s: int = Field(default=7 * 24 * 3600, ge=1)
    sweep_interval_s: int = Field(default=3600, ge=1)
    max_bytes: int = Field(
        default=512 * 1024 * 1024, ge=0, description="Size cap of the page cache on disk; "
        "least recently used entries are evicted beyond it. 0: no cap.",
    )  # fmt: skip


class ServiceSettings(ConfigSection):
    cache: CacheSettings = Field(default_factory=CacheSettings)


# --- the HTTP server: where it listens and what it lets in (README "Security") ---------

# Names a browser may use for a loopback server; with the bound address, the default of
# server.allowed_hosts (any port).
LOOPBACK_NAMES = ("localhost", "127.0.0.1", "[::1]")
# service.* keys that moved to server.*; the old names are still read.
LEGACY_SERVER_KEYS = ("host", "port", "max_body_bytes")


class CorsSettings(ConfigSection):
    allow_origins: list[str] = Field(
        default_factory=list,
        description='Browser origins allowed to call the API (e.g. "https://chat.example.com"); '
        '"*" any. Empty: no CORS headers, and cross-site POSTs are refused.',
    )
    allow_headers: list[str] = Field(
        default_factory=lambda: [
            "Authorization", "Content-Type", "Mcp-Protocol-Version", "Mcp-Session-Id",
            "Last-Event-ID",
        ],
        description="Request headers those origins may send.",
    )  # fmt: skip
    max_age_s: int = Field(default=600, ge=0, description="How long browsers cache a preflight.")


class ServerSettings(ConfigSection):
    """``searcher serve``: the listener, request size and time limits, Host/Origin checks."""

    host: str = Field(default="127.0.0.1", description="Interface to bind.")
    port: int = Field(default=8080, ge=0, le=65535)
    max_body_bytes: int = Field(default=64 * 1024, ge=1024, description="Larger bodies: 413.")
    allowed_hosts: list[str] | None = Field(
        default=None,
        description="Host header values served (host: any port; host:port; *.domain; *). "
        "Unset: the bound address, localhost, 127.0.0.1 and [::1]. Others get 421.",
    )
    cors: CorsSettings = Field(default_factory=CorsSettings)
    forwarded_allow_ips: list[str] = Field(
        default_factory=lambda: ["127.0.0.1"],
        description="Proxies whose X-Forwarded-For/-Proto are trusted.",
    )
    max_header_bytes: int = Field(
        default=16 * 1024, ge=1024, description="Request line + headers; more: 431."
    )
    header_timeout_s: float = Field(
        default=10.0, gt=0, description="Request line + headers must arrive within this."
    )
    body_timeout_s: float = Field(
        default=30.0, gt=0, description="A request body must arrive within this."
    )
    max_connections: int = Field(
        default=1000, ge=1, description="Open connections (and requests) at once; more: 503."
    )
    keep_alive_s: int = Field(default=5, ge=1, description="Idle keep-alive connections close.")

    @field_validator("allowed_hosts", mode="before")
    @classmethod
    def _comma_list(cls, value: Any) -> Any:
        # From the environment: "searcher,localhost,127.0.0.1".
        if isinstance(value, str):
            return [part.strip() for part in value.split(",") if part.strip()]
        return value

    @field_validator("allowed_hosts")
    @classmethod
    def _hosts_read(cls, value: list[str] | None) -> list[str] | None:
        # Read here, so that a malformed entry is a ConfigError, not a failure at start-up.
        from searcher.api.host_check import split_host

        for entry in value or []:
            if entry.strip() != "*":
                split_host(entry)  # ValueError names the entry
        return value

    def served_hosts(self) -> list[str]:
        """``allowed_hosts``, or its default: the bound address and the loopback names."""
        if self.allowed_hosts is not None:
            return self.allowed_hosts
        bound = f"[{self.host}]" if ":" in self.host else self.host
        return list(dict.fromkeys([bound, *LOOPBACK_NAMES]))


# --- ceilings on what one request may ask for ------------------------------------------


class LimitsSettings(ConfigSection):
    """Server ceilings on the ``budget`` fields of a request: a larger value is clamped
    (and said so in ``meta.errors``), or refused with 422 when ``strict``."""

    strict: bool = Field(default=False, description="Refuse (422) instead of clamping.")
    max_tool_calls: int = Field(default=20, ge=0)
    max_search_retries: int = Field(default=3, ge=0)
    max_results: int = Field(default=50, ge=1, le=100)
    max_fetch_pages: int = Field(
        default=20, ge=0, le=50, description="Also: URLs one extract/loader request may read."
    )
    max_download_bytes_per_page: int = Field(default=10_000_000, ge=0)
    max_extract_chars_per_page: int = Field(default=1_000_000, ge=0)
    max_redirects: int = Field(default=10, ge=0, le=30)
    max_context_chars: int = Field(default=100_000, ge=0)
    max_total_time_ms: int = Field(
        default=30_000, ge=0, description="Also caps per_request_timeout_ms.search and .fetch."
    )


class BudgetDefaults(ConfigSection):
    """Defaults for every ``budget`` field a request leaves out."""

    max_tool_calls: int = Field(default=10, ge=0)
    max_search_retries: int = Field(default=1, ge=0)
    max_results: int = Field(default=5, ge=1, le=100)
    max_fetch_pages: int = Field(default=3, ge=0, le=50)
    max_download_bytes_per_page: int = Field(default=2_000_000, ge=0)
    max_extract_chars_per_page: int = Field(default=300_000, ge=0)
    allowed_content_types: list[str] = Field(
        default_factory=lambda: [
            "text/html",
            "application/xhtml+xml",
            "text/plain",
            "application/pdf",
        ]
    )
    max_redirects: int = Field(default=5, ge=0, le=30)
    max_context_chars: int = Field(default=8000, ge=0)
    max_total_time_ms: int = Field(default=12_000, ge=0)
    search_timeout_ms: int = Field(default=8000, ge=0)
    fetch_timeout_ms: int = Field(default=8000, ge=0)


# Budget fields with a ceiling of the same name in ``limits`` (the per-request timeouts are
# capped by limits.max_total_time_ms).
LIMITED_BUDGET_FIELDS: tuple[str, ...] = (
    "max_tool_calls",
    "max_search_retries",
    "max_results",
    "max_fetch_pages",
    "max_download_bytes_per_page",
    "max_extract_chars_per_page",
    "max_redirects",
    "max_context_chars",
    "max_total_time_ms",
)


def _default_backends() -> dict[str, BackendSettings]:
    return {
        "searxng": BackendSettings(),
        "duckduckgo": BackendSettings(timeout_s=10.0),
        "brave": BackendSettings(base_url="https://api.search.brave.com"),
    }


class IntentPolicy(ConfigSection):
    """The backend instances an intent fans out to, and their weights in fusion."""

    backends: list[str] = Field(min_length=1)
    weights: dict[str, FusionWeight] = Field(default_factory=dict)


class BackendsSettings(ConfigSection):
    order: list[str] = Field(
        default_factory=list,
        description="Fallback order of instance names; instances that are not configured "
        "are skipped. Empty (default): the `instances` in their order, then searxng, "
        "duckduckgo, brave.",
    )
    auto: Literal["fallback", "fanout"] = Field(
        default="fallback",
        description='What "auto" does: try `order` one by one, or query all at once and fuse.',
    )
    intents: dict[str, IntentPolicy] = Field(
        default_factory=dict, description="Per-intent instance sets (fan-out) and weights."
    )
    instances: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description="Named backend instances: {name: {adapter: searxng, base_url: ...}}; "
        "each is checked by its adapter's config model.",
    )
    engine_weights: dict[str, FusionWeight] = Field(
        default_factory=dict,
        description="Weights of engines inside SearXNG answers (e.g. wikipedia: 1.2); default 1.",
    )
    hedge_delay_ms: int | None = Field(
        default=None,
        ge=0,
        description="In a fallback chain, start the next backend when the current one has "
        "not answered after this long; unset: the backend's observed p90 latency.",
    )
    hedge: bool = Field(default=True, description="Hedged requests in fallback chains.")
    max_pages: int = Field(
        default=3, ge=1, le=10, description="SearXNG pages fetched at most to reach max_results."
    )
    searxng: BackendSettings = Field(default_factory=lambda: _default_backends()["searxng"])
    duckduckgo: BackendSettings = Field(default_factory=lambda: _default_backends()["duckduckgo"])
    brave: BackendSettings = Field(default_factory=lambda: _default_backends()["brave"])
    _resolved: dict[str, InstanceSettings] = PrivateAttr(default_factory=dict)

    @field_validator(*LEGACY_INSTANCES, mode="before")
    @classmethod
    def _adapter_defaults(cls, value: Any, info: ValidationInfo) -> Any:
        # A section given in part keeps its adapter's own defaults for the rest
        # (DuckDuckGo's 10 s timeout, Brave's API root), as the instance it builds does:
        # else `searcher config` would print the general ones, and a config saved from
        # that printout would change them.
        if isinstance(value, Mapping) and info.field_name is not None:
            adapter = _default_backends()[info.field_name]
            return {**adapter.model_dump(exclude_defaults=True), **value}
        return value

    @model_validator(mode="after")
    def _resolve_instances(self) -> BackendsSettings:
        # Imported here: the registry imports the adapters, whose config models import this
        # module. Validation needs it so that a typo in an instance fails at start-up.
        from searcher.backends.registry import resolve_instances

        legacy = {
            # Unset and None keys left out: the adapter's defaults apply, and a dumped
            # config (``api_key: null`` for SearXNG) stays valid.
            name: {
                "adapter": name,
                **getattr(self, name).model_dump(exclude_unset=True, exclude_none=True),
            }
            for name in LEGACY_INSTANCES
        }
        self._resolved = resolve_instances(legacy, self.instances)
        if not self.order:
            declared = [n for n in self.instances if n not in LEGACY_INSTANCES]
            self.order = declared + list(LEGACY_INSTANCES)
        _check_names("backends.order", self.order, self._resolved)
        for intent, policy in self.intents.items():
            where = f"backends.intents.{intent}"
            _check_names(f"{where}.backends", policy.backends, self._resolved)
            _check_names(f"{where}.weights", list(policy.weights), self._resolved)
        return self

    @property
    def names(self) -> list[str]:
        """Every instance name, configured or not."""
        return list(self._resolved)

    def fallback_order(self) -> list[str]:
        """``order``, filled in (validation always fills it)."""
        return list(self.order)

    def get(self, name: str) -> InstanceSettings:
        """The settings of instance ``name``; ``KeyError`` if there is none."""
        return self._resolved[name]


def _check_names(where: str, names: list[str], known: Mapping[str, object]) -> None:
    for name in names:
        if name not in known:
            raise ValueError(
                f"{where}: unknown backend instance {name!r} (known: {', '.join(known)})"
            )


class FusionSettings(ConfigSection):
    rrf_k: int = Field(default=1, ge=1, description="Reciprocal rank fusion constant.")
    method: Literal["answer_order", "engine_rrf"] = Field(
        default="engine_rrf",
        description="answer_order: each backend's own order, fused across backends by RRF; "
        "engine_rrf: RRF over every SearXNG engine's list.",
    )
    engine_agreement: bool = Field(
        default=False,
        description="Re-weigh a SearXNG answer's engines by how often another engine "
        "returned their results too.",
    )
    near_duplicate_threshold: float = Field(
        default=0.88, gt=0, le=1, description="Cosine of title+snippet embeddings that merges."
    )


class EmbeddingSettings(ConfigSection):
    provider: Literal["model2vec", "openai", "none"] = "model2vec"
    model: str = Field(
        default="minishlab/potion-base-8M",
        description="model2vec: hub name or local path; openai: the model name.",
    )
    base_url: HttpUrl | None = Field(default=None, description="OpenAI-compatible /v1 base URL.")
    api_key: str | None = None
    timeout_s: float = Field(default=5.0, gt=0)
    load_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description="Loading the model (a hub download included) may take this long; it "
        "runs in the background, and near-duplicate removal is off until it is done.",
    )


class RouteGroup(ConfigSection):
    patterns: list[str] = Field(default_factory=list, description="Regexes (case-insensitive).")
    engines: list[str] = Field(default_factory=list, description="SearXNG engines.")
    categories: list[str] = Field(default_factory=list, description="SearXNG categories.")

    @field_validator("patterns")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        # Checked here, so that a bad regex is a ConfigError from every command (the
        # router compiles them again at start-up, when it would be too late to say so).
        from searcher.pipeline.routing import pattern_problem

        for pattern in patterns:
            problem = pattern_problem(pattern)
            if problem is not None:
                raise ValueError(problem)  # it quotes the pattern, which says which one
        return patterns


def _default_groups() -> dict[str, RouteGroup]:
    return {
        "academic": RouteGroup(
            patterns=[r"\bresearch\s+on\b", r"\bpaper\s+(about|on)\b", r"\bstudy\s+of\b",
                      r"\bliterature\s+review\b", r"\barxiv\b", r"\bscientific\b",
                      r"\bclinical\s+trial", r"\bmeta-analysis\b"],
            engines=["arxiv", "semantic scholar", "pubmed", "crossref", "google scholar"],
            categories=["science"],
        ),
        "technical": RouteGroup(
            patterns=[r"\bhow\s+to\s+implement\b", r"\bcode\s+for\b",
                      r"\b(python|javascript|typescript|rust|golang|java|c\+\+)\b",
                      r"\b(api|sdk|library|framework)\b", r"\b(docker|kubernetes|linux)\b",
                      r"\b(error|exception|traceback)\b"],
            engines=["github", "stackoverflow", "pypi", "npm", "dockerhub", "brave", "bing"],
            categories=["it"],
        ),
        "news": RouteGroup(
            patterns=[r"\b(latest|breaking|today'?s?)\s+news\b", r"\bnews\s+(about|on)\b",
                      r"\bheadlines\b"],
            engines=["bing news", "reddit"],
            categories=["news"],
        ),
        "general": RouteGroup(engines=[], categories=["general"]),
    }  # fmt: skip


class RoutingSettings(ConfigSection):
    default_group: str = "general"
    groups: dict[str, RouteGroup] = Field(default_factory=_default_groups)


class ScoringSettings(ConfigSection):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    premium_boost: float = Field(default=0.25, ge=0)
    trusted_boost: float = Field(default=0.15, ge=0)
    category_boost: float = Field(default=0.30, ge=0)
    multi_engine_bonus: float = Field(default=0.05, ge=0, description="Per extra engine.")
    keyword_weight: float = Field(
        default=0.02,
        ge=0,
        description="Soft score: this times the share of query keywords a result contains.",
    )
    hybrid_share: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description="Share of seed 004's hybrid relevance (BM25 + embedding cosine + entity "
        "overlap of title and snippet) in the final order; 0 = off.",
    )
    min_keyword_overlap: float = Field(
        default=0.0, ge=0, le=1, description="Share of query keywords a result must contain."
    )
    premium_domains: list[str] = Field(
        default_factory=list, description="Added to the shipped list."
    )
    trusted_domains: dict[str, list[str]] = Field(
        default_factory=dict, description="category -> domains, added to the shipped lists."
    )


class RerankSettings(ConfigSection):
    """An optional reranking model after fusion (TEI / Jina / Cohere / llama.cpp shape)."""

    enabled: bool = Field(default=False, description="Rerank every search (per request: "
                          "constraints.rerank).")  # fmt: skip
    base_url: HttpUrl | None = Field(default=None, description="e.g. http://127.0.0.1:8080")
    path: str = Field(
        default="/rerank", pattern=r"^/", description="llama.cpp --reranking: /v1/rerank."
    )
    model: str | None = Field(default=None, description="Sent as 'model' when set.")
    api_key: str | None = Field(default=None, description="Sent as a Bearer token when set.")
    timeout_s: float = Field(default=3.0, gt=0, description="One call, capped by the deadline.")
    top_n: int = Field(default=20, ge=2, le=100, description="Results sent to the model.")
    request_shape: Literal["documents", "texts"] = Field(
        default="documents", description="Key of the texts: Cohere/Jina/llama.cpp "
        "'documents', TEI 'texts'.",
    )  # fmt: skip


LlmStep = Literal[
    "rewrite",
    "route",
    "multi_query",
    "rank",
    "crag",
    "answer",
    "answer_check",
    "research_plan",
    "research_report",
]


class LlmStepSettings(ConfigSection):
    """Per-step overrides of the LLM client's model and generation settings."""

    model: str | None = Field(default=None, description="Default: llm.model.")
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    timeout_s: float | None = Field(default=None, gt=0)


class RankStepSettings(LlmStepSettings):
    top_k: int = Field(default=10, ge=1, le=50, description="Candidates shown to the model.")
    want_n: int = Field(default=3, ge=1, le=20, description="Results kept.")


class MultiQueryStepSettings(LlmStepSettings):
    min_diversity: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description="With an embedder: LLM perspectives whose diversity (1 - mean pairwise "
        "cosine) is below this are replaced by the templates.",
    )
    min_lexical_diversity: float = Field(
        default=0.25,
        ge=0,
        le=1,
        description="Without an embedder: the same, for the lexical diversity (1 - mean "
        "pairwise Jaccard overlap of the perspectives' topical words).",
    )


def _step(max_tokens: int, temperature: float) -> Any:
    return lambda: LlmStepSettings(max_tokens=max_tokens, temperature=temperature)


class LlmStepsSettings(ConfigSection):
    rewrite: LlmStepSettings = Field(default_factory=_step(64, 0.1))
    route: LlmStepSettings = Field(default_factory=_step(8, 0.0))
    multi_query: MultiQueryStepSettings = Field(
        default_factory=lambda: MultiQueryStepSettings(max_tokens=300, temperature=0.3)
    )
    rank: RankStepSettings = Field(
        default_factory=lambda: RankStepSettings(max_tokens=96, temperature=0.0)
    )
    crag: LlmStepSettings = Field(default_factory=_step(128, 0.0))
    answer: LlmStepSettings = Field(default_factory=_step(600, 0.2))
    answer_check: LlmStepSettings = Field(default_factory=_step(96, 0.0))
    research_plan: LlmStepSettings = Field(default_factory=_step(300, 0.2))
    research_report: LlmStepSettings = Field(default_factory=_step(1200, 0.2))

    def get(self, step: LlmStep) -> LlmStepSettings:
        settings: LlmStepSettings = getattr(self, step)
        return settings


class LlmSettings(ConfigSection):
    """One OpenAI-compatible chat-completions endpoint for every LLM step."""

    base_url: HttpUrl | None = Field(
        default=None, description="e.g. http://localhost:11434/v1; unset = no LLM (fallbacks)."
    )
    api_key: str | None = None
    model: str | None = Field(default=None, description="Default model of every step.")
    timeout_s: float = Field(default=30.0, gt=0, description="One call, capped by the deadline.")
    max_tokens: int = Field(default=256, ge=1)
    temperature: float = Field(default=0.1, ge=0, le=2)
    response_format: Literal["text", "json_object", "json_schema", "json_object_schema"] = Field(
        default="text",
        description="How JSON steps ask for JSON: prompt only, json_object, a JSON schema "
        "(OpenAI, vLLM, Ollama, llama.cpp enforce it; small models need it), or json_object "
        "with the schema inside (llama-cpp-python's server).",
    )
    steps: LlmStepsSettings = Field(default_factory=LlmStepsSettings)

    @property
    def configured(self) -> bool:
        return bool(self.base_url and self.model)


class McpSettings(ConfigSection):
    http: bool = Field(default=True, description="Mount the MCP server at /mcp on serve.")
    max_output_chars: int = Field(
        default=20_000, ge=1000, description="Cap on one tool result (MCP clients refuse more)."
    )


class CompatSettings(ConfigSection):
    """Drop-in endpoints for clients that speak another search API."""

    openwebui_api_key: str | None = Field(
        default=None, description="Bearer key Open WebUI must send; unset: not checked."
    )
    tavily_api_key: str | None = Field(
        default=None, description="Key Tavily clients must send; unset: not checked."
    )


class ResearchSettings(ConfigSection):
    # A job's ceilings, as limits.* are a search's: a request's budget chooses within them
    # (refused with 422 above one when limits.strict), a preset above one is lowered. The
    # defaults hold the largest preset (full); a search's limits are shorter on purpose.
    max_total_time_ms: int = Field(
        default=180_000, ge=1000, le=900_000, description="Ceiling on a job's deadline."
    )
    max_tool_calls: int = Field(
        default=60, ge=1, le=500, description="Ceiling on a job's searches and LLM calls."
    )
    max_pages: int = Field(default=15, ge=0, le=50, description="Ceiling on a job's page reads.")
    max_concurrent_jobs: int = Field(
        default=2, ge=1, le=64, description="Research jobs running at once; more get 429."
    )
    retention_s: int = Field(
        default=3600, ge=1, description="How long a finished job stays readable."
    )
    heartbeat_s: float = Field(
        default=15.0, gt=0, le=300, description="Keep-alive comment on a quiet event stream."
    )
    owner_ttl_s: float = Field(
        default=15.0, gt=0, le=600,
        description="A process running jobs renews its heartbeat in the state store every "
        "third of this; a job whose process is silent this long reads as interrupted.",
    )  # fmt: skip


class LoggingSettings(ConfigSection):
    access: bool = Field(
        default=True, description="One JSON line per HTTP request on stderr (searcher serve)."
    )
    queries: bool = Field(default=False, description="Put the query text in that line.")


class MetricsSettings(ConfigSection):
    enabled: bool = Field(default=True, description="Serve Prometheus metrics at GET /metrics.")


# --- shared state and result caches (issue 13) -------------------------------------------


class AuthSettings(ConfigSection):
    """API keys (``searcher keys create``) and their limits on every route."""

    enabled: bool = Field(
        default=False, description="Require Authorization: Bearer <key> on every route."
    )
    open_paths: list[str] = Field(
        default_factory=lambda: ["/v1/health", "/metrics"],
        description="Paths that need no key (health checks, the metrics scraper).",
    )
    default_rate: str | None = Field(
        default="60/min", description="Rate of keys created without --rate; null: no limit."
    )

    @field_validator("default_rate")
    @classmethod
    def _rate(cls, value: str | None) -> str | None:
        if value is not None:
            from searcher.auth.rates import Rate  # the one parser of rates

            try:
                Rate.parse(value)
            except InvalidRequest as exc:
                raise ValueError(exc.message) from exc
        return value


class StateSettings(ConfigSection):
    """Where shared state lives: SQLite files on this machine, or Redis for many."""

    redis_url: str | None = Field(
        default=None,
        description="redis://[:password@]host:port/db; set: every cache and counter lives "
        "in Redis, shared by all workers and replicas. Unset: SQLite files in state.dir.",
    )

    @field_validator("redis_url")
    @classmethod
    def _redis_url(cls, value: str | None) -> str | None:
        if value is None:
            return value
        try:
            parts = urlsplit(value)
            parts.port  # noqa: B018 - raises ValueError for a port that is no number
        except ValueError as exc:
            raise ValueError(f"not a Redis URL ({exc})") from None
        if parts.scheme not in ("redis", "rediss", "unix") or not (parts.hostname or parts.path):
            raise ValueError("must be redis://[:password@]host:port/db, rediss://... or unix://")
        return value

    dir: str | None = Field(
        default=None,
        description="Directory of the SQLite state file; default: the user "
        "cache directory (…/searcher/state).",
    )
    qdrant_url: str | None = Field(
        default=None,
        description="Qdrant for the semantic cache's vectors (cache.semantic): "
        "http://host:6333 (shared by replicas), or its embedded mode, ':memory:' or a "
        "directory (one process). Unset: vectors in the state store, scanned in memory.",
    )
    redis_prefix: str = Field(default="searcher:", description="Prefix of every Redis key.")
    redis_timeout_s: float = Field(
        default=0.5, gt=0, description="Connect and command timeout of each Redis call."
    )
    sqlite_busy_timeout_ms: int = Field(
        default=5000, ge=0, description="How long a SQLite writer waits for another process."
    )
    retry_after_failure_s: float = Field(
        default=1.0,
        ge=0,
        description="After a state failure, skip the store this long "
        "(requests go on without the cache) before trying again.",
    )

    def directory(self) -> Path:
        if self.dir:
            return Path(self.dir).expanduser()
        return Path(platformdirs.user_cache_dir("searcher")) / "state"


def _default_intent_ttls() -> dict[str, int]:
    return {"fresh_data": 300, "background": 7 * 86_400}


class SemanticCacheSettings(ConfigSection):
    enabled: bool = Field(
        default=False,
        description="Serve a cached answer to a query close in meaning (same numbers, "
        "dates and proper nouns, same negations, shared words in the same order).",
    )
    threshold: float = Field(
        default=0.965,
        gt=0,
        le=1,
        description="Cosine at or above which queries match "
        "(chosen on QQP for <= 1 % false hits with minilm-static-256; "
        "see bench/semantic_cache.py).",
    )
    max_entries: int = Field(
        default=100_000, ge=1, description="Queries kept in each process's in-memory index."
    )


class ResultCacheSettings(ConfigSection):
    """The cache of whole search answers (``meta.cache`` says when one was used)."""

    enabled: bool = Field(default=True, description="Cache complete search answers.")
    ttl_s: int = Field(default=3600, ge=0, description="How long an answer stays fresh.")
    ttl_by_intent: dict[str, int] = Field(
        default_factory=_default_intent_ttls,
        description="Fresh time per request intent, overriding ttl_s.",
    )
    fresh_ttl_s: int = Field(
        default=300,
        ge=0,
        description="Fresh time for time_range: day and for the routes in fresh_routes (news).",
    )
    fresh_routes: list[str] = Field(
        default_factory=lambda: ["news"], description="Engine groups whose answers age fast."
    )
    stale_if_error_s: int = Field(
        default=86_400,
        ge=0,
        description="When every backend fails, serve an answer this "
        "long past its fresh time, marked stale.",
    )
    semantic: SemanticCacheSettings = Field(default_factory=SemanticCacheSettings)


class Settings(ConfigSection):
    backends: BackendsSettings = Field(default_factory=BackendsSettings)
    routing: RoutingSettings = Field(default_factory=RoutingSettings)
    fusion: FusionSettings = Field(default_factory=FusionSettings)
    embeddings: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    scoring: ScoringSettings = Field(default_factory=ScoringSettings)
    rerank: RerankSettings = Field(default_factory=RerankSettings)
    fetch: FetchSettings = Field(default_factory=FetchSettings)
    service: ServiceSettings = Field(default_factory=ServiceSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    budget: BudgetDefaults = Field(default_factory=BudgetDefaults)
    limits: LimitsSettings = Field(default_factory=LimitsSettings)
    llm: LlmSettings = Field(default_factory=LlmSettings)
    mcp: McpSettings = Field(default_factory=McpSettings)
    compat: CompatSettings = Field(default_factory=CompatSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    research: ResearchSettings = Field(default_factory=ResearchSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    state: StateSettings = Field(default_factory=StateSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    cache: ResultCacheSettings = Field(default_factory=ResultCacheSettings)

    @model_validator(mode="before")
    @classmethod
    def _legacy_server_keys(cls, data: Any) -> Any:
        return with_legacy_keys_moved(data)

    @model_validator(mode="after")
    def _defaults_within_limits(self) -> Settings:
        # A configured default above its ceiling would be clamped on every request.
        limits, budget = self.limits, self.budget
        pairs = [(name, name) for name in LIMITED_BUDGET_FIELDS] + [
            ("search_timeout_ms", "max_total_time_ms"),
            ("fetch_timeout_ms", "max_total_time_ms"),
        ]
        for field, ceiling in pairs:
            value, limit = getattr(budget, field), getattr(limits, ceiling)
            if value > limit:
                raise ValueError(f"budget.{field}={value} is above limits.{ceiling}={limit}")
        return self

    def cache_dir(self) -> Path:
        """Where the extraction cache lives."""
        if self.service.cache.dir:
            return Path(self.service.cache.dir).expanduser()
        return Path(platformdirs.user_cache_dir("searcher")) / "extract"


# Environment variables -> dotted setting keys. Kept as data so the README table and the
# loader cannot drift apart.
ENV_VARS: dict[str, str] = {
    "SEARXNG_BASE_URL": "backends.searxng.base_url",
    "BRAVE_API_KEY": "backends.brave.api_key",
    "BRAVE_BASE_URL": "backends.brave.base_url",
    "ENABLE_SEARXNG": "backends.searxng.enabled",
    "ENABLE_DUCKDUCKGO": "backends.duckduckgo.enabled",
    "ENABLE_BRAVE": "backends.brave.enabled",
    "SEARCHER_CACHE_DIR": "service.cache.dir",
    "SEARCHER_HOST": "server.host",
    "SEARCHER_PORT": "server.port",
    "SEARCHER_ALLOWED_HOSTS": "server.allowed_hosts",
    "SEARCHER_LLM_BASE_URL": "llm.base_url",
    "SEARCHER_LLM_MODEL": "llm.model",
    "SEARCHER_LLM_API_KEY": "llm.api_key",
    "SEARCHER_OPENWEBUI_API_KEY": "compat.openwebui_api_key",
    "SEARCHER_TAVILY_API_KEY": "compat.tavily_api_key",
    "SEARCHER_REDIS_URL": "state.redis_url",
    "SEARCHER_STATE_DIR": "state.dir",
}
CONFIG_ENV_VAR = "SEARCHER_CONFIG"


def with_legacy_keys_moved(data: Any) -> Any:
    """``data`` with service.host/port/max_body_bytes (the first home of these settings)
    moved to ``server``; ``ValueError`` when both name a key, differently."""
    if not isinstance(data, dict) or not isinstance(data.get("service"), dict):
        return data
    service = dict(data["service"])
    moved = {k: service.pop(k) for k in LEGACY_SERVER_KEYS if k in service}
    if not moved:
        return data
    given = data.get("server")
    server: dict[str, Any] = given if isinstance(given, dict) else {}
    for key, value in moved.items():
        if key in server and server[key] != value:
            raise ValueError(
                f"service.{key} is the old name of server.{key}; set only server.{key}"
            )
    return {**data, "service": service, "server": {**moved, **server}}


def _masked_values(node: Any, path: str = "") -> list[str]:
    """Where a tree holds what ``masked`` prints for a secret (``***``, or a URL whose
    password is ``***``): a printout saved as a config, whose secrets are gone."""
    if isinstance(node, dict):
        return [f for k, v in node.items() for f in _masked_values(v, f"{path}{k}.")]
    if isinstance(node, list):
        return [f for i, v in enumerate(node) for f in _masked_values(v, f"{path}{i}.")]
    if isinstance(node, str) and (node == "***" or ":***@" in node):
        return [path.rstrip(".")]
    return []


def _set_dotted(tree: dict[str, Any], dotted: str, value: Any) -> None:
    *parents, leaf = dotted.split(".")
    node = tree
    for key in parents:
        child = node.get(key)
        if not isinstance(child, dict):
            child = {}
            node[key] = child
        node = child
    node[leaf] = value


def _read_yaml(path: Path) -> dict[str, Any]:
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(f"cannot read config file {path}: {exc.strerror or exc}") from exc
    except UnicodeDecodeError as exc:
        raise ConfigError(
            f"config file {path} is not UTF-8 text ({exc.reason} at byte {exc.start})"
        ) from exc
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    return data


def load_settings(
    path: str | Path | None = None, environ: Mapping[str, str] | None = None
) -> Settings:
    """Read settings from a YAML file (``path`` or ``$SEARCHER_CONFIG``) and the environment."""
    env = os.environ if environ is None else environ
    config_path = path or env.get(CONFIG_ENV_VAR)
    source = f" (file {config_path})" if config_path else ""
    tree: dict[str, Any] = _read_yaml(Path(config_path)) if config_path else {}
    masked_keys = _masked_values(tree)
    if masked_keys:
        raise ConfigError(
            f"invalid configuration{source}: {', '.join(masked_keys)}: '***' is how "
            "`searcher config` hides a secret; write the secret itself (or unset the key)"
        )
    try:
        # Before the environment is laid over it: an old key in the file and its variable
        # ($SEARCHER_PORT) are not two names given at once.
        tree = with_legacy_keys_moved(tree)
    except ValueError as exc:
        raise ConfigError(f"invalid configuration{source}: {exc}") from exc
    from_env: dict[str, str] = {}
    for var, dotted in ENV_VARS.items():
        value = env.get(var)
        if value is not None and value != "":
            _set_dotted(tree, dotted, value)
            from_env[dotted] = var
    try:
        return Settings.model_validate(tree)
    except ValidationError as exc:
        problems = "; ".join(
            # A rule over several keys has no field of its own (field_problems says "body").
            p.text if p.field == "body"
            else f"{p.field} (from ${from_env[p.field]}): {p.text}" if p.field in from_env
            else f"{p.field}: {p.text}"
            for p in field_problems(exc.errors())
        )  # fmt: skip
        raise ConfigError(f"invalid configuration{source}: {problems}") from exc


def masked(settings: Settings) -> dict[str, Any]:
    """The settings as a plain dict with secrets replaced by ``***``: the secret keys'
    values, and passwords written into URLs (``http://user:pass@host``)."""

    def mask(node: Any) -> Any:
        if isinstance(node, str) and "@" in node:
            return without_password(node)
        if isinstance(node, dict):
            return {
                key: ("***" if key in SECRET_KEYS and value else mask(value))
                for key, value in node.items()
            }
        if isinstance(node, list):
            return [mask(v) for v in node]
        return node

    plain = settings.model_dump(mode="json")
    for name in LEGACY_INSTANCES:
        # As the instance runs: its adapter's keys too (rate, SearXNG's engine_health),
        # which the section itself holds only when the config sets them.
        section = settings.backends.get(name).model_dump(mode="json", exclude={"adapter"})
        plain["backends"][name] = {**plain["backends"][name], **section}
    result: dict[str, Any] = mask(plain)
    return result
