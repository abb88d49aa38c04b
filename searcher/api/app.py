"""The HTTP app: v1 routes over one ``SearchService`` built in the app's lifespan."""

from __future__ import annotations

import contextlib
import copy
from collections.abc import AsyncIterator, Callable
from typing import Any

from fastapi import APIRouter, FastAPI
from fastapi.middleware.cors import CORSMiddleware
from fastapi.routing import APIRoute

from searcher import __version__
from searcher.api.access_log import AccessLogWriter
from searcher.api.auth import AuthMiddleware
from searcher.api.body_limit import BodyLimitMiddleware
from searcher.api.chat import router as chat_router
from searcher.api.collections import router as collections_router
from searcher.api.collections import upload_limit
from searcher.api.compat import openwebui, searxng, tavily
from searcher.api.crawl_routes import router as crawl_router
from searcher.api.docs import mount_docs
from searcher.api.errors import install_error_handlers
from searcher.api.feedback import router as feedback_router
from searcher.api.host_check import HostOriginMiddleware
from searcher.api.http_server import collect_garbage_in_batches
from searcher.api.metrics import Metrics
from searcher.api.observe import ObserveMiddleware
from searcher.api.research import end_jobs_when_stopping
from searcher.api.research import router as research_router
from searcher.api.search_route import answer_valid_searches_directly
from searcher.api.search_route import router as search_router
from searcher.api.site_routes import router as site_router
from searcher.api.status_routes import metrics_router
from searcher.api.status_routes import router as status_router
from searcher.api.tools import router as tools_router
from searcher.backends.duckduckgo import SearcherFactory
from searcher.config import Settings, load_settings
from searcher.research.jobs import JobBook
from searcher.runtime import open_service
from searcher.site.crawl_jobs import CrawlBook
from searcher.tools.mcp_server import mcp_sessions, mount_mcp

Lifespan = Callable[[FastAPI], contextlib.AbstractAsyncContextManager[None]]


def create_worker_app() -> FastAPI:
    """``create_app`` for a worker of ``serve --workers N`` (settings from the
    environment). One that cannot build its app exits with uvicorn's start-up failure
    code, which stops the parent: any other exit has the worker restarted, to fail again,
    without end, while the server never answers."""
    collect_garbage_in_batches()
    try:
        return create_app()
    except Exception as exc:  # a ConfigError, an unreadable file: the worker's last word
        import logging
        import sys

        from uvicorn.config import STARTUP_FAILURE

        logging.getLogger("uvicorn.error").error("the worker cannot start: %s", exc)
        sys.exit(STARTUP_FAILURE)


def create_app(
    settings: Settings | None = None, *, ddgs_factory: SearcherFactory | None = None
) -> FastAPI:
    """The ASGI app. ``ddgs_factory`` replaces the DuckDuckGo library (tests only)."""
    settings = settings or load_settings()
    metrics = Metrics() if settings.metrics.enabled else None
    access_log = AccessLogWriter() if settings.logging.access else None
    app = FastAPI(
        title="searcher",
        version=__version__,
        summary="Search API for LLMs and agents: fused web results packed as evidence.",
        lifespan=_lifespan(settings, ddgs_factory, metrics, access_log),
        docs_url=None,  # served from our own assets (searcher/api/docs.py), not a CDN
        redoc_url=None,
    )
    mount_docs(app)
    app.state.metrics = metrics
    _add_middleware(app, settings, metrics, access_log)
    install_error_handlers(app)
    # The search route first: the router tries routes in order, and /v1/search is the
    # busiest; none of the other paths overlaps another.
    _add_routes(app, search_router)  # POST /v1/search
    _add_routes(app, status_router)  # /v1/health, /v1/cache/*, /v1/usage
    _add_routes(app, feedback_router)  # POST /v1/feedback, GET /v1/stats/routes
    if metrics is not None:
        _add_routes(app, metrics_router)  # GET /metrics
    app.include_router(tavily.router)  # POST /tavily/search, /tavily/extract
    app.include_router(searxng.router)  # GET/POST /search (and / -> /search), SearXNG's API
    app.include_router(openwebui.router)  # POST /openwebui/search, /openwebui/loader
    app.include_router(tools_router)  # POST /v1/fetch, GET /v1/tools/openai
    app.include_router(research_router)  # /v1/research: jobs, their events (SSE)
    app.include_router(crawl_router)  # /v1/crawl: crawl jobs, as research's
    app.include_router(site_router)  # POST /v1/map
    app.include_router(collections_router)  # /v1/collections: list, upload, delete
    app.include_router(chat_router)  # /v1/chat/completions, /v1/models: searcher as a model
    mount_mcp(app, settings)  # /mcp (streamable HTTP) when mcp.http is on
    _name_the_instances(app, list(settings.backends.names))
    answer_valid_searches_directly(app)
    _answer_probes_with_head(app)
    return app


def _lifespan(
    settings: Settings,
    ddgs_factory: SearcherFactory | None,
    metrics: Metrics | None,
    access_log: AccessLogWriter | None,
) -> Lifespan:
    """The app's life: the service, research jobs and MCP sessions opened at start-up and
    closed in reverse order at shutdown; the access log's last lines written after all."""

    @contextlib.asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        try:
            async with open_service(
                settings, ddgs_factory=ddgs_factory, metrics=metrics
            ) as runtime:
                app.state.runtime = runtime
                service = runtime.service
                jobs = JobBook(service.parts, settings.research, runtime.state, service.sessions)
                app.state.jobs = jobs
                crawls = CrawlBook(runtime.service.parts, runtime.state)
                app.state.crawls = crawls
                undo = end_jobs_when_stopping(jobs, crawls)
                try:
                    async with mcp_sessions(app):  # MCP tool calls end before the service
                        yield
                finally:
                    undo()
                    await jobs.close()  # research jobs end (cancelled) before the service
                    await crawls.close()
        finally:
            if access_log is not None:
                access_log.close()  # every queued line is written before the app stops

    return lifespan


def _add_middleware(
    app: FastAPI, settings: Settings, metrics: Metrics | None, access_log: AccessLogWriter | None
) -> None:
    """The middleware, innermost first: each one added wraps the ones before it."""
    server = settings.server
    app.add_middleware(
        BodyLimitMiddleware, max_bytes=server.max_body_bytes, routes=[upload_limit(settings)]
    )
    if settings.auth.enabled:  # outside the body limit: a stranger's body is never read
        app.add_middleware(
            AuthMiddleware,
            settings=settings.auth,
            default_access=tuple(settings.corpus.default_access),
        )
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
    app.add_middleware(
        ObserveMiddleware, metrics=metrics, access_log=access_log,
        log_queries=settings.logging.queries, routes=app.router.routes,
    )  # fmt: skip


def _add_routes(app: FastAPI, router: APIRouter) -> None:
    """The router's routes as the app's own (copies: each app adjusts its own, and
    FastAPI's ``include_router`` keeps an included router's routes out of
    ``app.router.routes``, where the fast path and the HEAD probes find them)."""
    app.router.routes.extend(copy.copy(route) for route in router.routes)


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
