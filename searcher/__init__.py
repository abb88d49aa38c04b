"""searcher: a self-hosted Search API for LLMs and agents.

The public API, for library users: build a service from settings, send it a request, get
a UCP-1 response; or talk to a running searcher with a client. Names are imported on first
use, so that ``import searcher`` (and ``searcher --version``) stays cheap.

    import asyncio, searcher

    async def main() -> None:
        async with searcher.open_service(searcher.load_settings()) as runtime:
            response = await runtime.service.search(searcher.SearchRequest(query="bm25"))
            print(response.rendered_text)

    if __name__ == "__main__":
        asyncio.run(main())

Keep the ``__name__`` guard in a script: the service extracts pages in worker processes
started with ``forkserver``, which import the script again as their main module;
unguarded, each worker would run ``main()`` itself, and full-mode pages would fail.
"""

from __future__ import annotations

import importlib
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"

# name -> the module that defines it
_EXPORTS: dict[str, str] = {
    # the service and its settings
    "open_service": "searcher.runtime",
    "Runtime": "searcher.runtime",
    "SearchService": "searcher.service",
    "Settings": "searcher.config",
    "load_settings": "searcher.config",
    # the wire contract
    "SearchRequest": "searcher.contract",
    "SearchResponse": "searcher.contract",
    "Query": "searcher.contract",
    "Constraints": "searcher.contract",
    "Want": "searcher.contract",
    "Budget": "searcher.contract",
    "Item": "searcher.contract",
    "Meta": "searcher.contract",
    "FetchPageResponse": "searcher.contract",
    # clients of a running searcher
    "SearcherClient": "searcher.client",
    "AsyncSearcherClient": "searcher.client",
    # LLM snippet ranking as a function (seed 001, section 11)
    "snippet_rank": "searcher.llm.snippet_rank",
    # errors
    "SearcherError": "searcher.errors",
    "ConfigError": "searcher.errors",
    "InvalidRequest": "searcher.errors",
    "AllBackendsFailed": "searcher.errors",
    "BackendError": "searcher.errors",
    "FetchError": "searcher.errors",
    "LlmError": "searcher.errors",
    "RemoteError": "searcher.errors",
}

__all__ = [
    "AllBackendsFailed",
    "AsyncSearcherClient",
    "BackendError",
    "Budget",
    "ConfigError",
    "Constraints",
    "FetchError",
    "FetchPageResponse",
    "InvalidRequest",
    "Item",
    "LlmError",
    "Meta",
    "Query",
    "RemoteError",
    "Runtime",
    "SearchRequest",
    "SearchResponse",
    "SearchService",
    "SearcherClient",
    "SearcherError",
    "Settings",
    "Want",
    "__version__",
    "load_settings",
    "open_service",
    "snippet_rank",
]

if TYPE_CHECKING:
    from searcher.client import AsyncSearcherClient, SearcherClient
    from searcher.config import Settings, load_settings
    from searcher.contract import (
        Budget,
        Constraints,
        FetchPageResponse,
        Item,
        Meta,
        Query,
        SearchRequest,
        SearchResponse,
        Want,
    )
    from searcher.errors import (
        AllBackendsFailed,
        BackendError,
        ConfigError,
        FetchError,
        InvalidRequest,
        LlmError,
        RemoteError,
        SearcherError,
    )
    from searcher.llm.snippet_rank import snippet_rank
    from searcher.runtime import Runtime, open_service
    from searcher.service import SearchService


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'searcher' has no attribute {name!r}")
    value = getattr(importlib.import_module(module), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted(__all__)
