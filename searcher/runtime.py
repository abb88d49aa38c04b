"""Building, and closing, the long-lived objects a running searcher owns.

The HTTP app (in its lifespan) and the CLI (for one command) both get their service from
``open_service``, so the two cannot be wired differently.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp

from searcher.backends.chain import BackendPool
from searcher.backends.duckduckgo import SearcherFactory
from searcher.backends.registry import build_backends
from searcher.cache.extraction import ExtractionCache
from searcher.config import Settings
from searcher.embeddings import Embedder, build_embedder
from searcher.errors import EmbedderUnavailable
from searcher.fetch.extractor import build_extractor
from searcher.fetch.fetcher import PageFetcher
from searcher.llm.client import LlmClient
from searcher.page_reader import PageReader
from searcher.service import SearchService


@dataclass
class Runtime:
    settings: Settings
    service: SearchService
    pool: BackendPool
    cache: ExtractionCache
    embedder: Embedder | None = None
    embedder_problem: str | None = None


async def _load_embedder(settings: Settings) -> tuple[Embedder | None, str | None]:
    """The configured embedder, or None and why (near-duplicate removal then works on URLs
    only, and responses say so)."""
    try:
        embedder = await asyncio.to_thread(build_embedder, settings.embeddings)
    except EmbedderUnavailable as exc:
        return None, f"near-duplicate removal is off: {exc}"
    return embedder, None


@contextlib.asynccontextmanager
async def open_service(
    settings: Settings,
    *,
    ddgs_factory: SearcherFactory | None = None,
    extract_in_process: bool = False,
    sweep: bool = True,
) -> AsyncIterator[Runtime]:
    """Yield a ready ``Runtime``; everything it opened is closed on exit.

    ``extract_in_process`` runs extraction in a thread instead of a process pool (cheaper
    for a one-shot CLI call); ``sweep`` runs the cache sweeper in the background."""
    # trust_env=False: aiohttp would look proxies up in a thread on every request.
    backend_client = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=200, ttl_dns_cache=300), trust_env=False
    )
    fetcher = PageFetcher(settings.fetch.allowed_hosts, settings.fetch.user_agent)
    extractor = build_extractor(settings.fetch, in_thread=extract_in_process)
    cache_cfg = settings.service.cache
    cache = ExtractionCache(
        settings.cache_dir(), cache_cfg.ttl_s, enabled=cache_cfg.enabled,
        max_bytes=cache_cfg.max_bytes or None,
    )  # fmt: skip
    pool = BackendPool(build_backends(settings, backend_client, ddgs_factory), settings)
    reader = PageReader(fetcher, extractor, cache, settings.fetch.max_concurrency)
    embedder, problem = await _load_embedder(settings)
    llm = LlmClient(settings.llm) if settings.llm.configured else None
    sweeper = None
    if sweep and cache_cfg.enabled:
        sweeper = asyncio.create_task(cache.run_sweeper(cache_cfg.sweep_interval_s))
    try:
        service = SearchService(settings, pool, reader, embedder, problem, llm)
        yield Runtime(settings, service, pool, cache, embedder, problem)
    finally:
        if sweeper is not None:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
        await backend_client.close()
        close_embedder = getattr(embedder, "aclose", None)
        if close_embedder is not None:
            await close_embedder()
        await fetcher.aclose()
        if llm is not None:
            await llm.aclose()
        extractor.close()
