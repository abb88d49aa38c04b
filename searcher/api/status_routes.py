"""What the server says about itself: ``/v1/health``, the extraction cache's statistics
and clearing, the calling key's usage, and ``/metrics``."""

from __future__ import annotations

import asyncio
import dataclasses
import time
from typing import Any

from fastapi import APIRouter, Request
from fastapi.responses import PlainTextResponse, Response

from searcher import __version__
from searcher.api.auth import (
    quota_window,
    read_counter,
    require_operator,
    usage_counter,
    usage_report,
)
from searcher.api.errors import error_response
from searcher.api.json_body import json_response
from searcher.api.metrics import CONTENT_TYPE, Metrics
from searcher.auth.keys import ApiKey
from searcher.auth.rates import Rate
from searcher.backends.engine_health import ReportsEngineHealth
from searcher.backends.instances import backend_status
from searcher.backends.registry import default_registry
from searcher.contract import (
    BackendHealth,
    CacheCleared,
    CacheStats,
    EmbedderHealth,
    EngineHealthEntry,
    ErrorResponse,
    FailureSeen,
    Health,
    LlmHealth,
    StateInfo,
)
from searcher.fetch.urls import without_password
from searcher.runtime import Runtime
from searcher.state import StateHealth

router = APIRouter()
# GET /metrics: included only when metrics are on; it serves ``app.state.metrics``.
metrics_router = APIRouter()


def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


def _backends_health(runtime: Runtime) -> dict[str, BackendHealth]:
    """Every instance: its adapter, whether it is usable, its breaker, its recent failures
    by kind and (meta-search instances) the engines seen failing."""
    pool = runtime.pool
    now = pool.clock()
    backends = {}
    for name, status in backend_status(runtime.settings).items():
        breaker = pool.breakers.get(name)
        snap = breaker.snapshot() if breaker else None
        backend = pool.backends.get(name)
        engines = None
        if isinstance(backend, ReportsEngineHealth):
            engines = [EngineHealthEntry(**vars(e)) for e in backend.engines_health()]
        backends[name] = BackendHealth(
            adapter=status.adapter,
            enabled=status.enabled,
            configured=status.configured,
            note=status.note,
            breaker=snap.state if snap else None,
            consecutive_failures=snap.consecutive_failures if snap else 0,
            last_error=snap.last_error if snap else None,
            retry_in_s=snap.retry_in_s if snap else None,
            failures_by_kind=snap.failures_by_kind if snap else {},
            last_failures=[
                FailureSeen(kind=f.kind, reason=f.reason, age_s=round(now - f.at, 3))
                for f in (snap.recent if snap else ())
            ],
            engines=engines,
        )
    return backends


def _service_status(backends: str, store: StateHealth | None, auth_on: bool) -> str:
    """``unavailable`` when requests cannot be served: keys are on and the store that
    holds them cannot be reached (every key soon gets 503); ``degraded`` when they are
    served without something (the shared caches, a backend); else ``ok``."""
    if store is not None and not store.ok:
        return "unavailable" if auth_on else "degraded"
    return backends


@router.get(
    "/v1/health",
    response_model=Health,
    summary="Backends and their circuit breakers",
    responses={503: {"model": Health, "description": "Requests cannot be served."}},
)
async def health(request: Request) -> Response:
    runtime = _runtime(request)
    backends = _backends_health(runtime)
    usable = [n for n, b in backends.items() if b.breaker is not None]
    healthy = [n for n in usable if backends[n].breaker != "open"]
    state = "ok" if healthy else "degraded"
    embedder = EmbedderHealth(
        name=runtime.embedder.name if runtime.embedder else None,
        problem=runtime.embedder_problem,
        state=runtime.embedding.state,
    )
    llm = runtime.settings.llm
    client = runtime.service.parts.llm
    # A store that failed is asked again here once its cooldown is over: health must
    # not report a store down until some request happens to use it.
    store = await runtime.state.check() if runtime.state else None
    health = Health(
        status=_service_status(state, store, runtime.settings.auth.enabled),
        version=__version__,
        backends=backends,
        adapter_problems=dict(default_registry().problems),
        embedder=embedder,
        llm=LlmHealth(
            configured=llm.configured,
            base_url=without_password(llm.base_url) if llm.base_url else None,
            model=llm.model,
            structured_output=client.structured if client else None,
            context_tokens=client.known_context_tokens if client else None,
        ),
        state=StateInfo(**dataclasses.asdict(store)) if store else None,
        browser=runtime.browser.health() if runtime.browser is not None else None,
    )
    # A load balancer reads the status code, not the body: 503 when nothing can be
    # served, 200 (with "degraded" in the body) when requests still get answers.
    return json_response(health.model_dump(), 503 if health.status == "unavailable" else 200)


_OPERATOR_ONLY: dict[int | str, dict[str, Any]] = {
    403: {"model": ErrorResponse, "description": "API keys are on and this key is no operator's."}
}


@router.get(
    "/v1/cache/stats",
    response_model=CacheStats,
    summary="Extraction cache statistics",
    responses=_OPERATOR_ONLY,
)
async def cache_stats(request: Request) -> Response:
    require_operator(request.scope)
    runtime = _runtime(request)
    stats = await asyncio.to_thread(runtime.cache.stats)  # scans the cache directory
    return json_response(
        CacheStats(
            enabled=runtime.settings.service.cache.enabled,
            dir=str(runtime.settings.cache_dir()),
            max_bytes=runtime.cache.max_bytes,
            **stats,
        ).model_dump()
    )


@router.post(
    "/v1/cache/clear",
    response_model=CacheCleared,
    summary="Empty the extraction cache",
    responses=_OPERATOR_ONLY,
)
async def cache_clear(request: Request) -> Response:
    require_operator(request.scope)
    removed = await _runtime(request).cache.clear()
    return json_response({"removed": removed})


@router.get(
    "/v1/usage",
    summary="The calling key: its limits and what it used today",
    responses={
        404: {"model": ErrorResponse, "description": "API keys are off."},
        503: {"model": ErrorResponse, "description": "The state store is unavailable."},
    },
)
async def usage(request: Request) -> Response:
    key: ApiKey | None = request.scope.get("state", {}).get("api_key")
    if key is None:
        return error_response(404, "not_found", "API keys are off (auth.enabled: false)")
    state = _runtime(request).state
    if state is None:
        return error_response(404, "not_found", "no state store")
    # The store itself, not its fail-soft wrapper: a count it cannot read is 503
    # (StateUnavailable), never a 0 or a "gone" key.
    store = state.inner
    now = time.time()
    today = await read_counter(store, usage_counter(key, now))
    used = 0
    if key.quota is not None:
        window, _ = quota_window(key.quota, now)
        used = await read_counter(store, f"auth:quota:{key.id}:{window}")
    auth = _runtime(request).settings.auth
    default = Rate.parse(auth.default_rate) if auth.default_rate else None
    return json_response(usage_report(key, today, used, now, default))


@metrics_router.get(
    "/metrics",
    summary="Prometheus metrics",
    response_class=PlainTextResponse,
    responses={200: {"content": {"text/plain": {}}}},
)
async def prometheus_metrics(request: Request) -> Response:
    metrics: Metrics = request.app.state.metrics
    return Response(metrics.exposition(), media_type=CONTENT_TYPE)
