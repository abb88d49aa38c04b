"""Building, and closing, the long-lived objects a running searcher owns.

The HTTP app (in its lifespan) and the CLI (for one command) both get their service from
``open_service``, so the two cannot be wired differently.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import logging
from collections.abc import AsyncIterator, Callable, Coroutine
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import aiohttp

from searcher.backends.duckduckgo import SearcherFactory
from searcher.backends.instances import build_backends, upstream_keys
from searcher.backends.pacing import Pacer, instance_rates
from searcher.backends.pool import BackendPool
from searcher.backends.shared_breakers import SharedBreakers
from searcher.cache.extraction import ExtractionCache
from searcher.cache.results import (
    ResultCache,
    SemanticMatcher,
    answer_fingerprint,
    budget_defaults,
)
from searcher.cache.semantic import SemanticCache
from searcher.cache.semantic_qdrant import QdrantSemanticCache, open_qdrant
from searcher.config import Settings
from searcher.corpus.operations import open_store as open_corpus_store
from searcher.corpus.serving import CorpusReader
from searcher.embedding.embedders import Embedder
from searcher.embedding.loading import EmbedderLoad, needs_network
from searcher.errors import StateUnavailable
from searcher.fetch.extractor import build_extractor
from searcher.fetch.fetcher import PageFetcher
from searcher.fetch.page_reader import PageReader
from searcher.fetch.renderer import BrowserTier
from searcher.llm.client import LlmClient
from searcher.pipeline.parts import Parts
from searcher.service import SearchService
from searcher.state import FailSoftStore, open_store
from searcher.state.sessions import SessionBook

log = logging.getLogger(__name__)

if TYPE_CHECKING:  # prometheus_client is imported only by the apps that count
    from qdrant_client import AsyncQdrantClient

    from searcher.api.metrics import Metrics


@dataclass
class Runtime:
    settings: Settings
    service: SearchService
    pool: BackendPool
    cache: ExtractionCache
    embedding: EmbedderLoad
    state: FailSoftStore | None = None
    results: ResultCache | None = None

    @property
    def embedder(self) -> Embedder | None:
        """The embedder once loaded; None while loading, after a failure, or when off."""
        return self.embedding.embedder

    @property
    def browser(self) -> BrowserTier | None:
        """The headless-browser tier (``available``: a browser was found and it is on)."""
        return self.service.parts.reader.browser

    @property
    def embedder_problem(self) -> str | None:
        """Why near-duplicate removal is off right now (None: on, or off on purpose)."""
        return self.embedding.problem


def _result_cache(
    settings: Settings,
    state: FailSoftStore,
    embedder: Embedder | None,
    qdrant: AsyncQdrantClient | None,
) -> ResultCache | None:
    """The result cache, with its semantic part when switched on and an embedder loaded:
    its vectors in Qdrant when ``state.qdrant_url`` is set, else in the state store."""
    if not settings.cache.enabled:
        return None
    semantic: SemanticMatcher | None = None
    cfg = settings.cache.semantic
    if cfg.enabled and embedder is not None:
        if qdrant is not None:
            semantic = QdrantSemanticCache(qdrant, embedder, cfg.threshold)
        else:
            semantic = SemanticCache(state, embedder, cfg.threshold, cfg.max_entries)
    return ResultCache(
        state, settings.cache, answer_fingerprint(settings), semantic,
        budget_defaults=budget_defaults(settings),
        # With keys on, each key is served only its own answers unless shared on purpose.
        per_client=settings.auth.enabled and settings.cache.scope == "key",
    )  # fmt: skip


async def _prune_state(state: FailSoftStore, interval_s: float) -> None:
    while True:
        await asyncio.sleep(interval_s)
        # Housekeeping: a store that is down shows in the next request's operation, and
        # whatever else goes wrong must not end the loop (expired rows would pile up).
        try:
            await state.prune()
        except StateUnavailable:
            pass
        except Exception:
            log.exception("pruning the state store failed; trying again in %s s", interval_s)


@contextlib.asynccontextmanager
async def open_service(
    settings: Settings,
    *,
    ddgs_factory: SearcherFactory | None = None,
    extract_in_process: bool = False,
    sweep: bool = True,
    metrics: Metrics | None = None,
    wait_for_embedder: bool = False,
) -> AsyncIterator[Runtime]:
    """Yield a ready ``Runtime``; everything it opened is closed on exit.

    ``extract_in_process`` runs extraction in a thread instead of a process pool (cheaper
    for a one-shot CLI call); ``sweep`` runs the cache sweeper in the background. Raises
    ``StateUnavailable`` when the state store (Redis) cannot be reached.
    An embedder from a local directory is loaded before the runtime is yielded; one that
    may need a model hub loads in the background (under ``embeddings.load_timeout_s``)
    unless ``wait_for_embedder`` (a one-shot CLI call wants its near-duplicate removal)."""
    # Everything opened is closed again, in reverse order, however start-up ends (a Redis
    # or Qdrant that cannot be reached, Ctrl-C while the embedder loads): nothing leaks.
    async with contextlib.AsyncExitStack() as opened:
        state, qdrant = await _open_stores(opened, settings, metrics)
        # trust_env=False: aiohttp would look proxies up in a thread on every request.
        backend_client = aiohttp.ClientSession(
            connector=aiohttp.TCPConnector(limit=200, ttl_dns_cache=300), trust_env=False
        )
        opened.push_async_callback(backend_client.close)
        reader, cache = _page_reader(opened, settings, extract_in_process)
        # Breakers agree through the state store: one opened by a worker is open for all.
        keys = upstream_keys(settings)  # what workers share per upstream: breakers and pace
        corpus = CorpusReader.from_settings(
            open_corpus_store(settings), settings.corpus, settings.embeddings.provider
        )
        opened.callback(corpus.close)
        parts: Parts | None = None  # local collections embed queries with its embedder

        def current_embedder() -> Embedder | None:
            return None if parts is None else parts.embedder

        pool = BackendPool(
            build_backends(
                settings, backend_client, ddgs_factory, corpus=corpus, embedder=current_embedder
            ),
            settings,
            shared=SharedBreakers(state, keys),
            pacer=Pacer(state, instance_rates(settings), keys),
            metrics=metrics,
        )
        opened.push_async_callback(pool.aclose)  # hedged calls still running in the background
        llm = LlmClient(settings.llm) if settings.llm.configured else None
        if llm is not None:
            opened.push_async_callback(llm.aclose)
        # The service starts without an embedder and gets it when the load is done; it
        # carries no problem note, so responses do not repeat it (/v1/health says it, once).
        parts = Parts.build(settings, pool, reader, None, None, llm, metrics)
        embedding = EmbedderLoad(settings.embeddings, on_ready=_use_embedder(parts))
        opened.push_async_callback(embedding.aclose)
        embedding.start()
        if wait_for_embedder or not needs_network(settings.embeddings):
            await embedding.wait()
        # The semantic cache needs the embedder now: with a model still loading from a hub,
        # it stays off for this run (the exact-match result cache works regardless).
        results = _result_cache(settings, state, embedding.embedder, qdrant)
        _housekeeping(opened, settings, cache, state, results, sweep)
        if metrics is not None:
            metrics.watch_breakers(lambda: {n: b.state for n, b in pool.breakers.items()})
        service = SearchService(parts, results, SessionBook(state, settings.sessions))
        yield Runtime(settings, service, pool, cache, embedding, state, results)


def _page_reader(
    opened: contextlib.AsyncExitStack, settings: Settings, extract_in_process: bool
) -> tuple[PageReader, ExtractionCache]:
    """The guarded fetcher, the extraction workers and the page cache, as one reader;
    each closed with ``opened``."""
    fetcher = PageFetcher(settings.fetch.allowed_hosts, settings.fetch.user_agent)
    opened.push_async_callback(fetcher.aclose)
    extractor = build_extractor(
        settings.fetch,
        in_thread=extract_in_process,
        max_chars=settings.limits.max_extract_chars_per_page,
        memory_mb=settings.limits.max_extract_memory_mb,
    )
    opened.callback(extractor.close)
    cache_cfg = settings.service.cache
    cache = ExtractionCache(
        settings.cache_dir(), cache_cfg.ttl_s, enabled=cache_cfg.enabled,
        max_bytes=cache_cfg.max_bytes or None,
    )  # fmt: skip
    # The browser starts with the first page to render, not here: most runs need none.
    browser = BrowserTier(settings.browser, settings.fetch.allowed_hosts, settings.fetch.user_agent)
    opened.push_async_callback(browser.aclose)
    reader = PageReader(fetcher, extractor, cache, settings.fetch.max_concurrency, browser)
    return reader, cache


async def _open_stores(
    opened: contextlib.AsyncExitStack, settings: Settings, metrics: Metrics | None
) -> tuple[FailSoftStore, AsyncQdrantClient | None]:
    """The state store and, when the semantic cache uses it, Qdrant: either one that cannot
    be reached stops start-up (the state store first)."""
    state = await open_store(settings.state)
    opened.push_async_callback(state.aclose)
    if metrics is not None:
        state.on_failure = functools.partial(metrics.state_error, state.engine)
    semantic_on = settings.cache.enabled and settings.cache.semantic.enabled
    qdrant = None
    if settings.state.qdrant_url and semantic_on:
        qdrant = await open_qdrant(settings.state.qdrant_url)
        opened.push_async_callback(qdrant.close)
    return state, qdrant


def _housekeeping(
    opened: contextlib.AsyncExitStack,
    settings: Settings,
    cache: ExtractionCache,
    state: FailSoftStore,
    results: ResultCache | None,
    sweep: bool,
) -> None:
    """The background work of a runtime: the cache sweeper and state pruning (``sweep``),
    and the semantic cache's mirror of the vectors other workers stored."""
    interval_s = settings.service.cache.sweep_interval_s
    if sweep and settings.service.cache.enabled:
        _in_background(opened, cache.run_sweeper(interval_s))
    if sweep:
        _in_background(opened, _prune_state(state, interval_s))
    if results is not None and isinstance(results.semantic, SemanticCache):
        # In the background: a lookup meanwhile uses what is there rather than waiting
        # for 100,000 rows.
        _in_background(opened, results.semantic.sync())


def _in_background(opened: contextlib.AsyncExitStack, work: Coroutine[Any, Any, Any]) -> None:
    """Run ``work`` as a task, cancelled (and awaited) when ``opened`` closes."""
    task = asyncio.create_task(work)

    async def stop() -> None:
        task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await task

    opened.push_async_callback(stop)


def _use_embedder(parts: Parts) -> Callable[[Embedder], None]:
    def use(embedder: Embedder) -> None:
        parts.embedder = embedder

    return use
