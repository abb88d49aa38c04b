"""Prometheus metrics of a running searcher (``GET /metrics``), on the official client.

One ``Metrics`` instance per app, with its own registry (no process-global state), so that
tests and several apps in one process never mix their counts. With ``searcher serve
--workers N`` the workers share a ``PROMETHEUS_MULTIPROC_DIR`` and a scrape sums them
(prometheus_client's multiprocess mode; set by the CLI before any worker starts).

What is counted comes from finished responses (stages, fetches, LLM steps), from the
backend pool (each backend call and its outcome), from the caches, and from the HTTP layer
(latency per route); breaker states are read at scrape time.
"""

from __future__ import annotations

import os
from collections.abc import Callable, Iterable, Mapping
from typing import Any

from prometheus_client import (
    CollectorRegistry,
    Counter,
    Gauge,
    Histogram,
    generate_latest,
    multiprocess,
)
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.metrics import MetricWrapperBase
from prometheus_client.registry import Collector

from searcher import __version__
from searcher.contract import SearchResponse

MULTIPROC_ENV = "PROMETHEUS_MULTIPROC_DIR"
CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
BREAKER_STATES = ("closed", "open", "half_open")

# The methods a route of ours can answer, as labels; any other a client sends (the HTTP
# parser takes some thirty: PROPFIND, MKCALENDAR, ...) is "other", or every route would
# grow a histogram per method a client cares to try.
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "PATCH", "OPTIONS"})
OTHER_METHOD = "other"

# Seconds; the service's own work is milliseconds, a search through a backend up to seconds.
LATENCY_BUCKETS = (0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)

BreakerStates = Callable[[], Mapping[str, str]]  # backend -> closed | open | half_open


class _BreakerCollector(Collector):
    """Breaker state per backend, read when scraped (1 for the state it is in)."""

    def __init__(self, states: BreakerStates) -> None:
        self._states = states

    def collect(self) -> Iterable[GaugeMetricFamily]:
        family = GaugeMetricFamily(
            "searcher_breaker_state", "Circuit breaker state per backend.",
            labels=["backend", "state"],
        )  # fmt: skip
        for backend, state in sorted(self._states().items()):
            for name in BREAKER_STATES:
                family.add_metric([backend, name], 1.0 if state == name else 0.0)
        yield family


class Metrics:
    """The instruments, and what feeds them."""

    def __init__(self) -> None:
        self.multiprocess = bool(os.environ.get(MULTIPROC_ENV))
        # In multiprocess mode values live in files and are summed at scrape time; the
        # instruments must then belong to no registry.
        self.registry = CollectorRegistry(auto_describe=True)
        own = None if self.multiprocess else self.registry
        self.http_seconds = Histogram(
            "searcher_http_request_duration_seconds", "HTTP request latency by route.",
            ["route", "method", "status"], buckets=LATENCY_BUCKETS, registry=own,
        )  # fmt: skip
        self.stage_seconds = Histogram(
            "searcher_stage_duration_seconds", "Time spent in each pipeline stage.",
            ["stage"], buckets=LATENCY_BUCKETS, registry=own,
        )  # fmt: skip
        self.searches = Counter(
            "searcher_searches", "Search requests answered, by mode.", ["mode"], registry=own
        )
        self.backend_calls = Counter(
            "searcher_backend_calls", "Backend calls by backend, engine and outcome.",
            ["backend", "engine", "outcome"], registry=own,
        )  # fmt: skip
        self.cache_lookups = Counter(
            "searcher_cache_lookups", "Cache lookups by cache, kind and result.",
            ["cache", "kind", "result"], registry=own,
        )  # fmt: skip
        self.fetches = Counter(
            "searcher_page_reads", "Page reads by status and reason.",
            ["status", "reason"], registry=own,
        )  # fmt: skip
        self.extract_seconds = Histogram(
            "searcher_extraction_duration_seconds", "Time to read pages (fetch and extract).",
            buckets=LATENCY_BUCKETS, registry=own,
        )  # fmt: skip
        self.llm_calls = Counter(
            "searcher_llm_calls", "LLM steps by step and whether the fallback was used.",
            ["step", "fallback"], registry=own,
        )  # fmt: skip
        self.llm_tokens = Counter(
            "searcher_llm_tokens", "LLM tokens by step and kind (prompt, completion).",
            ["step", "kind"], registry=own,
        )  # fmt: skip
        self.state_errors = Counter(
            "searcher_state_errors", "Shared-state operations that failed (served without).",
            ["engine"], registry=own,
        )  # fmt: skip
        self.up = Gauge(
            "searcher_info", "Always 1; labels carry the version.", ["version"],
            registry=own, multiprocess_mode="max",
        )  # fmt: skip
        self.up.labels(__version__).set(1)
        # Each request counts in a few labelled series: their children, looked up once.
        self._children: dict[tuple[object, ...], Any] = {}

    def _child(self, metric: MetricWrapperBase, *labels: str) -> Any:
        """``metric.labels(*labels)``, remembered: the client's look-up (label checks, a
        lock) costs more than the count itself, several times a request."""
        key = (id(metric), *labels)
        child = self._children.get(key)
        if child is None:
            child = self._children[key] = metric.labels(*labels)
        return child

    def watch_breakers(self, states: BreakerStates) -> None:
        """Report breaker states at scrape time (per process: breakers are per worker
        until they move to shared state)."""
        self.registry.register(_BreakerCollector(states))

    def observe_search(self, response: SearchResponse) -> None:
        """Count one finished search: its stages, page reads and LLM steps."""
        meta = response.meta
        self._child(self.searches, meta.mode_used).inc()
        for stage, ms in meta.timing_ms.items():
            if stage != "total":
                self._child(self.stage_seconds, stage).observe(ms / 1000)
        if "fetch" in meta.timing_ms and response.usage.fetch_pages_used:
            self.extract_seconds.observe(meta.timing_ms["fetch"] / 1000)
        for item in response.items or ():
            fetch = item.fetch
            if fetch.status != "skipped" or fetch.skip_reason:
                self.fetches.labels(fetch.status, fetch.skip_reason or "").inc()
        for call in meta.llm:
            self.llm_calls.labels(call.step, "yes" if call.fallback_used else "no").inc()
            # A counter only goes up: a negative count (none should get here) is skipped.
            if call.prompt_tokens and call.prompt_tokens > 0:
                self.llm_tokens.labels(call.step, "prompt").inc(call.prompt_tokens)
            if call.completion_tokens and call.completion_tokens > 0:
                self.llm_tokens.labels(call.step, "completion").inc(call.completion_tokens)

    def backend_call(self, backend: str, engine: str | None, outcome: str) -> None:
        """Count one backend call (``outcome``: ok, or the failure's kind)."""
        self._child(self.backend_calls, backend, engine or "", outcome).inc()

    def cache_lookup(self, cache: str, kind: str, hit: bool) -> None:
        self.cache_lookups.labels(cache, kind, "hit" if hit else "miss").inc()

    def state_error(self, engine: str) -> None:
        self.state_errors.labels(engine).inc()

    def http_request(self, route: str, method: str, status: int, seconds: float) -> None:
        label = method if method in KNOWN_METHODS else OTHER_METHOD
        self._child(self.http_seconds, route, label, str(status)).observe(seconds)

    def exposition(self) -> bytes:
        """The text format of every metric, summed over workers in multiprocess mode."""
        if not self.multiprocess:
            return generate_latest(self.registry)
        merged = CollectorRegistry()
        multiprocess.MultiProcessCollector(merged)
        return generate_latest(merged) + generate_latest(self.registry)
