"""The HTTP app: v1 routes over one ``SearchService`` built in the app's lifespan."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import json
import time
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.middleware.cors import CORSMiddleware
from fastapi.responses import PlainTextResponse, Response
from fastapi.routing import APIRoute
from starlette.types import Message, Receive, Scope, Send

from searcher import __version__
from searcher.api.auth import (
    AuthMiddleware,
    quota_window,
    read_counter,
    usage_counter,
    usage_report,
)
from searcher.api.body_limit import BodyLimitMiddleware
from searcher.api.compat import openwebui, searxng, tavily
from searcher.api.docs import mount_docs
from searcher.api.errors import error_response, install_error_handlers
from searcher.api.host_check import HostOriginMiddleware
from searcher.api.metrics import CONTENT_TYPE, Metrics
from searcher.api.observe import ObserveMiddleware, client_identity
from searcher.api.replayed_body import read_body, replaying
from searcher.api.research import end_jobs_when_stopping
from searcher.api.research import router as research_router
from searcher.api.tools import router as tools_router
from searcher.auth.keys import KeyBook
from searcher.backends.duckduckgo import SearcherFactory
from searcher.backends.engine_health import ReportsEngineHealth
from searcher.backends.registry import backend_status, default_registry
from searcher.config import Settings, load_settings
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
    SearchRequest,
    SearchResponse,
    StateInfo,
)
from searcher.fetch.urls import without_password
from searcher.research.jobs import JobBook
from searcher.runtime import Runtime, open_service
from searcher.tools.mcp_server import mcp_sessions, mount_mcp


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


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


_ERRORS: dict[int | str, dict[str, Any]] = {
    413: {"model": ErrorResponse, "description": "Body over the size limit."},
    422: {"model": ErrorResponse, "description": "Invalid request; `error.field` names the field."},
    502: {"model": ErrorResponse, "description": "Every backend failed; each is listed."},
}


def create_app(
    settings: Settings | None = None, *, ddgs_factory: SearcherFactory | None = None
) -> FastAPI:
    """The ASGI app. ``ddgs_factory`` replaces the DuckDuckGo library (tests only)."""
    settings = settings or load_settings()
    metrics = Metrics() if settings.metrics.enabled else None

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with open_service(settings, ddgs_factory=ddgs_factory, metrics=metrics) as runtime:
            app.state.runtime = runtime
            app.state.jobs = jobs = JobBook(runtime.service.parts, settings.research, runtime.state)
            undo = end_jobs_when_stopping(jobs)
            try:
                async with mcp_sessions(app):  # MCP tool calls end before the service closes
                    yield
            finally:
                undo()
                await jobs.close()  # research jobs end (cancelled) before the service closes

    app = FastAPI(
        title="searcher",
        version=__version__,
        summary="Search API for LLMs and agents: fused web results packed as evidence.",
        lifespan=lifespan,
        docs_url=None,  # served from our own assets (searcher/api/docs.py), not a CDN
        redoc_url=None,
    )
    mount_docs(app)
    # Middleware, innermost first: each one added wraps the ones before it.
    server = settings.server
    app.add_middleware(BodyLimitMiddleware, max_bytes=server.max_body_bytes)
    if settings.auth.enabled:  # outside the body limit: a stranger's body is never read
        app.add_middleware(AuthMiddleware, settings=settings.auth)
    if server.cors.allow_origins:  # browser clients the operator allows (README "Security")
        app.add_middleware(  # outside auth: a preflight carries no key
            CORSMiddleware,
            allow_origins=server.cors.allow_origins,
            allow_methods=["GET", "POST", "DELETE", "OPTIONS"],
            allow_headers=server.cors.allow_headers,
            expose_headers=[
                "Mcp-Session-Id", "X-Request-ID", "Retry-After",
                "RateLimit-Limit", "RateLimit-Remaining", "RateLimit-Reset",
            ],
            max_age=server.cors.max_age_s,
        )  # fmt: skip
    # A foreign Host or Origin is refused before anything else runs ...
    app.add_middleware(
        HostOriginMiddleware,
        allowed_hosts=server.served_hosts(),
        cors_origins=server.cors.allow_origins,
    )
    # ... and, outermost, every request is timed, counted and logged, refusals included.
    logs = settings.logging
    app.add_middleware(
        ObserveMiddleware, metrics=metrics, access_log=logs.access, log_queries=logs.queries,
        routes=app.router.routes,
    )  # fmt: skip
    install_error_handlers(app)

    @app.post(
        "/v1/search",
        response_model=SearchResponse,
        responses=_ERRORS,
        summary="Search the web and return a UCP-1 context pack",
    )
    async def search(body: SearchRequest, request: Request) -> Response:
        response = await _runtime(request).service.search(
            body, client=client_identity(request.scope)
        )
        request.state.log = {
            "query": body.query_text,
            "mode": response.meta.mode_used,
            "backends": response.meta.backends_tried,
        }
        return _json(response.to_wire(body.want))

    @app.get("/v1/health", response_model=Health, summary="Backends and their circuit breakers")
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
        # A store that failed is asked again here once its cooldown is over: health must
        # not report a store down until some request happens to use it.
        store = await runtime.state.check() if runtime.state else None
        health = Health(
            status=state if store is None or store.ok else "degraded",
            version=__version__,
            backends=backends,
            adapter_problems=dict(default_registry().problems),
            embedder=embedder,
            llm=LlmHealth(
                configured=llm.configured,
                base_url=without_password(llm.base_url) if llm.base_url else None,
                model=llm.model,
            ),
            state=StateInfo(**dataclasses.asdict(store)) if store else None,
        )
        return _json(health.model_dump())

    @app.get("/v1/cache/stats", response_model=CacheStats, summary="Extraction cache statistics")
    async def cache_stats(request: Request) -> Response:
        runtime = _runtime(request)
        stats = await asyncio.to_thread(runtime.cache.stats)  # scans the cache directory
        return _json(
            CacheStats(
                enabled=runtime.settings.service.cache.enabled,
                dir=str(runtime.settings.cache_dir()),
                max_bytes=runtime.cache.max_bytes,
                **stats,
            ).model_dump()
        )

    @app.post("/v1/cache/clear", response_model=CacheCleared, summary="Empty the extraction cache")
    async def cache_clear(request: Request) -> Response:
        removed = await _runtime(request).cache.clear()
        return _json({"removed": removed})

    if metrics is not None:

        @app.get(
            "/metrics",
            summary="Prometheus metrics",
            response_class=PlainTextResponse,
            responses={200: {"content": {"text/plain": {}}}},
        )
        async def prometheus_metrics() -> Response:
            return Response(metrics.exposition(), media_type=CONTENT_TYPE)

    @app.get(
        "/v1/usage",
        summary="The calling key: its limits and what it used today",
        responses={404: {"model": ErrorResponse, "description": "API keys are off."}},
    )
    async def usage(request: Request) -> Response:
        key_id = request.scope.get("state", {}).get("key_id")
        if key_id is None:
            return error_response(404, "not_found", "API keys are off (auth.enabled: false)")
        store = _runtime(request).state
        if store is None:
            return error_response(404, "not_found", "no state store")
        key = next((k for k in await KeyBook(store).list() if k.id == key_id), None)
        if key is None:
            return error_response(404, "not_found", "the key is gone")
        now = time.time()
        today = await read_counter(store, usage_counter(key, now))
        used = 0
        if key.quota is not None:
            window, _ = quota_window(key.quota, now)
            used = await read_counter(store, f"auth:quota:{key.id}:{window}")
        return _json(usage_report(key, today, used, now))

    # After the app's own routes: the router tries routes in order, and /v1/search is the
    # busiest; none of these paths overlaps another.
    app.include_router(tavily.router)  # POST /tavily/search, /tavily/extract
    app.include_router(searxng.router)  # GET/POST /search (and / -> /search), SearXNG's API
    app.include_router(openwebui.router)  # POST /openwebui/search, /openwebui/loader
    app.include_router(tools_router)  # POST /v1/fetch, GET /v1/tools/openai
    app.include_router(research_router)  # /v1/research: jobs, their events (SSE)
    mount_mcp(app, settings)  # /mcp (streamable HTTP) when mcp.http is on
    _name_the_instances(app, list(settings.backends.names))
    _answer_valid_searches_directly(app)
    _answer_probes_with_head(app)
    return app


def _answer_probes_with_head(app: FastAPI) -> None:
    """HEAD on the routes load balancers and uptime checks probe (they send HEAD), as a GET
    without its body (the server sends none for HEAD); left out of the OpenAPI document,
    where a second operation of one function would repeat its id."""
    for route in list(app.router.routes):
        if isinstance(route, APIRoute) and route.path in ("/v1/health", "/metrics"):
            app.add_api_route(
                route.path, route.endpoint, methods=["HEAD"], include_in_schema=False,
                response_class=route.response_class,
            )  # fmt: skip


def _answer_valid_searches_directly(app: FastAPI) -> None:
    """Put a :class:`SearchFastPath` in front of FastAPI's handler of POST /v1/search."""
    for route in app.router.routes:
        if isinstance(route, APIRoute) and route.path == "/v1/search":
            route.app = SearchFastPath(route.app, route.endpoint)


class SearchFastPath:
    """POST /v1/search, answered without FastAPI's request handling when the body is valid.

    FastAPI's handling of a body parameter (content-type sniffing, dependency solving,
    its exit stacks) costs about 50 us a request, a sixth of what the server adds to a
    simple search. A body sent as ``application/json`` that parses and validates is
    parsed and validated here as FastAPI does it (``json.loads``, then the model with
    ``from_attributes``, as its body field does) and handed to the endpoint. Anything
    else (another content type, bad JSON, an invalid request, a client gone, a failed
    read) goes to FastAPI's handler with what was received replayed, so every error
    answer stays FastAPI's own. The route itself is unchanged: the OpenAPI document and
    the route in metrics and logs stay the same (tests/test_api_search.py compares the two
    paths)."""

    def __init__(self, handler: Any, endpoint: Any) -> None:
        self.handler = handler  # FastAPI's ASGI app of the route
        self.endpoint = endpoint

    async def __call__(self, scope: Scope, receive: Receive, send: Send) -> None:
        received: list[Message | BaseException] = []
        body = await read_body(receive, received)
        request = None if body is None else _valid_search(scope, body)
        if request is None:
            await self.handler(scope, replaying(received, receive), send)
            return
        response = await self.endpoint(request, Request(scope, receive, send))
        await response(scope, receive, send)


def _valid_search(scope: Scope, body: bytes) -> SearchRequest | None:
    """The request in ``body`` when FastAPI would take the body as JSON and it is valid."""
    content_type = next((v for k, v in scope["headers"] if k == b"content-type"), None)
    if content_type != b"application/json" or not body:
        return None
    try:
        return SearchRequest.model_validate(json.loads(body), from_attributes=True)
    except Exception:  # bad JSON, too deep, invalid: FastAPI's handler answers it
        return None


def _name_the_instances(app: FastAPI, names: list[str]) -> None:
    """The OpenAPI document lists this server's backend instances for
    ``constraints.backend`` (the contract cannot: instances are configuration)."""
    build = app.openapi

    def openapi() -> dict[str, Any]:
        if app.openapi_schema is not None:
            return app.openapi_schema
        schema = build()
        constraints = schema.get("components", {}).get("schemas", {}).get("Constraints", {})
        backend = constraints.get("properties", {}).get("backend")
        if backend is not None:
            backend["anyOf"] = [
                {"type": "string", "enum": [*names, "auto"]},
                {
                    "type": "array",
                    "items": {"type": "string", "enum": names},
                    "minItems": 1,
                    "maxItems": 16,
                },
                {"type": "null"},
            ]
        app.openapi_schema = schema
        return schema

    app.openapi = openapi  # type: ignore[method-assign]
