"""The long-lived objects the stages work with: one set per app or CLI run."""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

from searcher.backends.pool import BackendPool
from searcher.config import Settings
from searcher.embedding.embedders import Embedder
from searcher.fetch.page_reader import PageReader
from searcher.llm.client import LlmClient
from searcher.pipeline.routing import CompiledRoutes, compile_routes
from searcher.ranking.relevance import DomainLists, load_domain_lists

if TYPE_CHECKING:  # prometheus_client is imported only by the apps that count
    from searcher.api.metrics import Metrics


@dataclass
class Parts:
    """What a stage may use beside its request: settings, backends, page reader, embedder
    (None when off or not loaded), LLM client (None when not configured), routes, domains."""

    settings: Settings
    pool: BackendPool
    reader: PageReader
    embedder: Embedder | None
    embedder_problem: str | None
    llm: LlmClient | None
    routes: CompiledRoutes
    domains: DomainLists
    metrics: Metrics | None = None

    @classmethod
    def build(
        cls,
        settings: Settings,
        pool: BackendPool,
        reader: PageReader,
        embedder: Embedder | None = None,
        embedder_problem: str | None = None,
        llm: LlmClient | None = None,
        metrics: Metrics | None = None,
    ) -> Parts:
        """Parts with the routes and domain lists compiled from ``settings``."""
        return cls(
            settings, pool, reader, embedder, embedder_problem, llm,
            compile_routes(settings.routing), load_domain_lists(settings.scoring), metrics,
        )  # fmt: skip
