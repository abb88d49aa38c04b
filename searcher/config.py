"""Settings from ``searcher.yaml`` and the environment (the environment wins).

Every setting has a default, so searcher works on a fresh machine with no configuration:
DuckDuckGo only, extraction cache in the user's cache directory. Settings are read once,
validated strictly (a typo in a key is an error, not a silent default) and passed down
explicitly; nothing below this module reads ``os.environ``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import platformdirs
import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError

from searcher.errors import ConfigError

BackendName = Literal["searxng", "duckduckgo", "brave"]
BACKEND_NAMES: tuple[BackendName, ...] = ("searxng", "duckduckgo", "brave")
SECRET_KEYS = frozenset({"api_key", "openwebui_api_key", "tavily_api_key"})


class _Section(BaseModel):
    model_config = ConfigDict(extra="forbid")


class BreakerSettings(_Section):
    failure_threshold: int = Field(default=5, ge=1, description="Consecutive failures to open.")
    recovery_timeout: float = Field(default=60.0, gt=0, description="Seconds open before a trial.")
    half_open_max_calls: int = Field(default=3, ge=1, description="Trial successes to close.")


class BackendSettings(_Section):
    enabled: bool = True
    base_url: str | None = None
    api_key: str | None = None
    timeout_s: float = Field(default=8.0, gt=0)
    weight: float = Field(default=1.0, ge=0)
    breaker: BreakerSettings = Field(default_factory=BreakerSettings)


class FetchSettings(_Section):
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Hosts (host or host:port) exempt from the private-address guard.",
    )
    user_agent: str = "Mozilla/5.0 (compatible; searcher/0.1; +https://github.com/searcher)"
    max_concurrency: int = Field(default=8, ge=1, description="Pages fetched at once.")
    extract_workers: int = Field(
        default=0, ge=0, description="Extraction processes; 0 means one per CPU core."
    )


class CacheSettings(_Section):
    enabled: bool = True
    dir: str | None = Field(default=None, description="Default: the user's cache directory.")
    ttl_s: int = Field(default=7 * 24 * 3600, ge=1)
    sweep_interval_s: int = Field(default=3600, ge=1)


class ServiceSettings(_Section):
    host: str = "127.0.0.1"
    port: int = Field(default=8080, ge=0, le=65535)
    max_body_bytes: int = Field(default=64 * 1024, ge=1024)
    cache: CacheSettings = Field(default_factory=CacheSettings)


class BudgetDefaults(_Section):
    """Defaults for every ``budget`` field a request leaves out."""

    max_tool_calls: int = Field(default=10, ge=0)
    max_search_retries: int = Field(default=1, ge=0)
    max_results: int = Field(default=5, ge=1, le=100)
    max_fetch_pages: int = Field(default=3, ge=0, le=50)
    max_download_bytes_per_page: int = Field(default=2_000_000, ge=0)
    max_extract_chars_per_page: int = Field(default=300_000, ge=0)
    allowed_content_types: list[str] = Field(
        default_factory=lambda: ["text/html", "application/xhtml+xml", "text/plain"]
    )
    max_redirects: int = Field(default=5, ge=0, le=30)
    max_context_chars: int = Field(default=8000, ge=0)
    max_total_time_ms: int = Field(default=12_000, ge=0)
    search_timeout_ms: int = Field(default=8000, ge=0)
    fetch_timeout_ms: int = Field(default=8000, ge=0)


def _default_backends() -> dict[str, BackendSettings]:
    return {
        "searxng": BackendSettings(),
        "duckduckgo": BackendSettings(timeout_s=10.0),
        "brave": BackendSettings(base_url="https://api.search.brave.com"),
    }


class IntentPolicy(_Section):
    """The backends an intent fans out to, and their weights in fusion."""

    backends: list[BackendName] = Field(min_length=1)
    weights: dict[BackendName, float] = Field(default_factory=dict)


class BackendsSettings(_Section):
    order: list[BackendName] = Field(
        default_factory=lambda: list(BACKEND_NAMES),
        description="Fallback order; backends that are not configured are skipped.",
    )
    auto: Literal["fallback", "fanout"] = Field(
        default="fallback",
        description='What "auto" does: try `order` one by one, or query all at once and fuse.',
    )
    intents: dict[str, IntentPolicy] = Field(
        default_factory=dict, description="Per-intent backend sets (fan-out) and weights."
    )
    engine_weights: dict[str, float] = Field(
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

    def get(self, name: str) -> BackendSettings:
        settings: BackendSettings = getattr(self, name)
        return settings


class FusionSettings(_Section):
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


class EmbeddingSettings(_Section):
    provider: Literal["model2vec", "openai", "none"] = "model2vec"
    model: str = Field(
        default="minishlab/potion-base-8M",
        description="model2vec: hub name or local path; openai: the model name.",
    )
    base_url: str | None = Field(default=None, description="OpenAI-compatible /v1 base URL.")
    api_key: str | None = None
    timeout_s: float = Field(default=5.0, gt=0)


class RouteGroup(_Section):
    patterns: list[str] = Field(default_factory=list, description="Regexes (case-insensitive).")
    engines: list[str] = Field(default_factory=list, description="SearXNG engines.")
    categories: list[str] = Field(default_factory=list, description="SearXNG categories.")


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


class RoutingSettings(_Section):
    default_group: str = "general"
    groups: dict[str, RouteGroup] = Field(default_factory=_default_groups)


class ScoringSettings(_Section):
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


class RerankSettings(_Section):
    """An optional reranking model after fusion (TEI / Jina / Cohere / llama.cpp shape)."""

    enabled: bool = Field(default=False, description="Rerank every search (per request: "
                          "constraints.rerank).")  # fmt: skip
    base_url: str | None = Field(default=None, description="e.g. http://127.0.0.1:8080")
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


LlmStep = Literal["rewrite", "route", "multi_query", "rank", "crag", "answer", "answer_check"]


class LlmStepSettings(_Section):
    """Per-step overrides of the LLM client's model and generation settings."""

    model: str | None = Field(default=None, description="Default: llm.model.")
    max_tokens: int | None = Field(default=None, ge=1)
    temperature: float | None = Field(default=None, ge=0, le=2)
    timeout_s: float | None = Field(default=None, gt=0)


class RankStepSettings(LlmStepSettings):
    top_k: int = Field(default=10, ge=1, le=50, description="Candidates shown to the model.")
    want_n: int = Field(default=3, ge=1, le=20, description="Results kept.")


def _step(max_tokens: int, temperature: float) -> Any:
    return lambda: LlmStepSettings(max_tokens=max_tokens, temperature=temperature)


class LlmStepsSettings(_Section):
    rewrite: LlmStepSettings = Field(default_factory=_step(64, 0.1))
    route: LlmStepSettings = Field(default_factory=_step(8, 0.0))
    multi_query: LlmStepSettings = Field(default_factory=_step(300, 0.3))
    rank: RankStepSettings = Field(
        default_factory=lambda: RankStepSettings(max_tokens=96, temperature=0.0)
    )
    crag: LlmStepSettings = Field(default_factory=_step(128, 0.0))
    answer: LlmStepSettings = Field(default_factory=_step(600, 0.2))
    answer_check: LlmStepSettings = Field(default_factory=_step(96, 0.0))

    def get(self, step: LlmStep) -> LlmStepSettings:
        settings: LlmStepSettings = getattr(self, step)
        return settings


class LlmSettings(_Section):
    """One OpenAI-compatible chat-completions endpoint for every LLM step."""

    base_url: str | None = Field(
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


class McpSettings(_Section):
    http: bool = Field(default=True, description="Mount the MCP server at /mcp on serve.")
    max_output_chars: int = Field(
        default=20_000, ge=1000, description="Cap on one tool result (MCP clients refuse more)."
    )


class CompatSettings(_Section):
    """Drop-in endpoints for clients that speak another search API."""

    openwebui_api_key: str | None = Field(
        default=None, description="Bearer key Open WebUI must send; unset: not checked."
    )
    tavily_api_key: str | None = Field(
        default=None, description="Key Tavily clients must send; unset: not checked."
    )


class Settings(_Section):
    backends: BackendsSettings = Field(default_factory=BackendsSettings)
    routing: RoutingSettings = Field(default_factory=RoutingSettings)
    fusion: FusionSettings = Field(default_factory=FusionSettings)
    embeddings: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    scoring: ScoringSettings = Field(default_factory=ScoringSettings)
    rerank: RerankSettings = Field(default_factory=RerankSettings)
    fetch: FetchSettings = Field(default_factory=FetchSettings)
    service: ServiceSettings = Field(default_factory=ServiceSettings)
    budget: BudgetDefaults = Field(default_factory=BudgetDefaults)
    llm: LlmSettings = Field(default_factory=LlmSettings)
    mcp: McpSettings = Field(default_factory=McpSettings)
    compat: CompatSettings = Field(default_factory=CompatSettings)

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
    "SEARCHER_HOST": "service.host",
    "SEARCHER_PORT": "service.port",
    "SEARCHER_LLM_BASE_URL": "llm.base_url",
    "SEARCHER_LLM_MODEL": "llm.model",
    "SEARCHER_LLM_API_KEY": "llm.api_key",
    "SEARCHER_OPENWEBUI_API_KEY": "compat.openwebui_api_key",
    "SEARCHER_TAVILY_API_KEY": "compat.tavily_api_key",
}
CONFIG_ENV_VAR = "SEARCHER_CONFIG"


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
    tree: dict[str, Any] = _read_yaml(Path(config_path)) if config_path else {}
    for var, dotted in ENV_VARS.items():
        value = env.get(var)
        if value is not None and value != "":
            _set_dotted(tree, dotted, value)
    try:
        return Settings.model_validate(tree)
    except ValidationError as exc:
        problems = "; ".join(
            f"{'.'.join(str(p) for p in err['loc'])}: {err['msg']}" for err in exc.errors()
        )
        source = f" (file {config_path})" if config_path else ""
        raise ConfigError(f"invalid configuration{source}: {problems}") from exc


def masked(settings: Settings) -> dict[str, Any]:
    """The settings as a plain dict with secrets replaced by ``***``."""

    def mask(node: Any) -> Any:
        if isinstance(node, dict):
            return {
                key: ("***" if key in SECRET_KEYS and value else mask(value))
                for key, value in node.items()
            }
        if isinstance(node, list):
            return [mask(v) for v in node]
        return node

    result: dict[str, Any] = mask(settings.model_dump(mode="json"))
    return result
