"""Building, and closing, the long-lived objects a running searcher owns.

The HTTP app (in its lifespan) and the CLI (for one command) both get their service from
``open_service``, so the two cannot be wired differently.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING

import aiohttp

from searcher.backends.chain import BackendPool
from searcher.backends.duckduckgo import SearcherFactory
from searcher.backends.registry import build_backends
from searcher.cache.extraction import ExtractionCache
from searcher.config import Settings
from searcher.embedder_loading import EmbedderLoad, needs_network
from searcher.embeddings import Embedder
from searcher.fetch.extract import Extractor
from searcher.fetch.fetcher import PageFetcher
from searcher.llm.client import LlmClient
from searcher.page_reader import PageReader
from searcher.pipeline.parts import Parts
from searcher.service import SearchService

if TYPE_CHECKING:  # prometheus_client is imported only by the apps that count
    from searcher.metrics import Metrics


@dataclass
class Runtime:
    settings: Settings
    service: SearchService
    pool: BackendPool
    cache: ExtractionCache
    embedding: EmbedderLoad

    @property
    def embedder(self) -> Embedder | None:
        """The embedder once loaded; None while loading, after a failure, or when off."""
        return self.embedding.embedder

    @property
    def embedder_problem(self) -> str | None:
        """Why near-duplicate removal is off right now (None: on, or off on purpose)."""
        return self.embedding.problem


@contextlib.asynccontextmanager
async def open_service(
    settings: Settings,
    *,
    ddgs_factory: SearcherFactory | None = None,
    extract_in_process: bool = False,
    sweep: bool = True,
    wait_for_embedder: bool = False,
    metrics: Metrics | None = None,
) -> AsyncIterator[Runtime]:
    """Yield a ready ``Runtime``; everything it opened is closed on exit.

    ``extract_in_process`` runs extraction in a thread instead of a process pool (cheaper
    for a one-shot CLI call); ``sweep`` runs the cache sweeper in the background.
    An embedder from a local directory is loaded before the runtime is yielded; one that
    may need a model hub loads in the background (under ``embeddings.load_timeout_s``)
    unless ``wait_for_embedder`` (a one-shot CLI call wants its near-duplicate removal)."""
    # trust_env=False: aiohttp would look proxies up in a thread on every request.
    backend_client = aiohttp.ClientSession(
        connector=aiohttp.TCPConnector(limit=200, ttl_dns_cache=300), trust_env=False
    )
    fetcher = PageFetcher(settings.fetch.allowed_hosts, settings.fetch.user_agent)
    extractor = Extractor(settings.fetch.extract_workers, in_thread=extract_in_process)
    cache_cfg = settings.service.cache
    cache = ExtractionCache(settings.cache_dir(), cache_cfg.ttl_s, enabled=cache_cfg.enabled)
    pool = BackendPool(build_backends(settings, backend_client, ddgs_factory), settings)
    reader = PageReader(fetcher, extractor, cache, settings.fetch.max_concurrency)
    llm = LlmClient(settings.llm) if settings.llm.configured else None
    sweeper = None
    if sweep and cache_cfg.enabled:
        sweeper = asyncio.create_task(cache.run_sweeper(cache_cfg.sweep_interval_s))
    # The service starts without an embedder and gets it when the load is done; it carries
    # no problem note, so responses do not repeat it (/v1/health says it, once).
    parts = Parts.build(settings, pool, reader, None, None, llm, metrics)
    service = SearchService(parts)
    embedding = EmbedderLoad(settings.embeddings, on_ready=_use_embedder(parts))
    try:
        if metrics is not None:
            metrics.watch_breakers(lambda: {n: b.state for n, b in pool.breakers.items()})
        embedding.start()
        if wait_for_embedder or not needs_network(settings.embeddings):
            await embedding.wait()
        yield Runtime(settings, service, pool, cache, embedding)
    finally:
        if sweeper is not None:
            sweeper.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await sweeper
        await backend_client.close()
        await embedding.aclose()
        await fetcher.aclose()
        if llm is not None:
            await llm.aclose()
        extractor.close()


def _use_embedder(parts: Parts) -> Callable[[Embedder], None]:
    def use(embedder: Embedder) -> None:
        parts.embedder = embedder

    return use
