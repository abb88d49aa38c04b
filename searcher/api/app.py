"""The HTTP app: v1 routes over one ``SearchService`` built in the app's lifespan."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from typing import Any

import orjson
from fastapi import FastAPI, Request
from fastapi.responses import Response

from searcher import __version__
from searcher.api.body_limit import BodyLimitMiddleware
from searcher.api.compat import openwebui, searxng, tavily
from searcher.api.errors import install_error_handlers
from searcher.api.tools import router as tools_router
from searcher.backends.duckduckgo import SearcherFactory
from searcher.backends.registry import backend_status
from searcher.config import Settings, load_settings
from searcher.contract import (
    BackendHealth,
    CacheCleared,
    CacheStats,
    EmbedderHealth,
    ErrorResponse,
    Health,
    LlmHealth,
    SearchRequest,
    SearchResponse,
)
from searcher.mcp_server import mcp_sessions, mount_mcp
from searcher.runtime import Runtime, open_service


def _json(data: Any, status: int = 200) -> Response:
    return Response(orjson.dumps(data), status_code=status, media_type="application/json")


def _runtime(request: Request) -> Runtime:
    runtime: Runtime = request.app.state.runtime
    return runtime


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

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        async with open_service(settings, ddgs_factory=ddgs_factory) as runtime:
            app.state.runtime = runtime
            async with mcp_sessions(app):  # MCP tool calls end before the service closes
                yield

    app = FastAPI(
        title="searcher",
        version=__version__,
        summary="Search API for LLMs and agents: fused web results packed as evidence.",
        lifespan=lifespan,
    )
    app.add_middleware(BodyLimitMiddleware, max_bytes=settings.service.max_body_bytes)
    install_error_handlers(app)
    app.include_router(tavily.router)  # POST /tavily/search, /tavily/extract
    app.include_router(searxng.router)  # GET/POST /search (and / -> /search), SearXNG's API
    app.include_router(openwebui.router)  # POST /openwebui/search, /openwebui/loader
    app.include_router(tools_router)  # POST /v1/fetch, GET /v1/tools/openai
    mount_mcp(app, settings)  # /mcp (streamable HTTP) when mcp.http is on

    @app.post(
        "/v1/search",
        response_model=SearchResponse,
        responses=_ERRORS,
        summary="Search the web and return a UCP-1 context pack",
    )
    async def search(body: SearchRequest, request: Request) -> Response:
        response = await _runtime(request).service.search(body)
        return _json(response.to_wire(body.want))

    @app.get("/v1/health", response_model=Health, summary="Backends and their circuit breakers")
    async def health(request: Request) -> Response:
        runtime = _runtime(request)
        backends = {}
        for name, status in backend_status(runtime.settings).items():
            breaker = runtime.pool.breakers.get(name)
            snap = breaker.snapshot() if breaker else None
            backends[name] = BackendHealth(
                enabled=status.enabled,
                configured=status.configured,
                note=status.note,
                breaker=snap.state if snap else None,
                consecutive_failures=snap.consecutive_failures if snap else 0,
                last_error=snap.last_error if snap else None,
            )
        usable = [n for n, b in backends.items() if b.breaker is not None]
        healthy = [n for n in usable if backends[n].breaker != "open"]
        state = "ok" if healthy else "degraded"
        embedder = EmbedderHealth(
            name=runtime.embedder.name if runtime.embedder else None,
            problem=runtime.embedder_problem,
        )
        llm = runtime.settings.llm
        health = Health(
            status=state,
            version=__version__,
            backends=backends,
            embedder=embedder,
            llm=LlmHealth(configured=llm.configured, base_url=llm.base_url, model=llm.model),
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

    return app
