"""searcher itself over the benchmark's servers: in-process, one ``service.search`` per
query, exactly as ``searcher search`` and the HTTP API run it."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from bench.ranking_parts import wire
from bench.ranking_parts.engines import STATIC_MODEL


def config(
    urls: Mapping[str, str],
    engine_weights: Mapping[str, float],
    brave_weight: float,
    rrf_k: int,
    scoring: Mapping[str, float],
) -> dict[str, Any]:
    """searcher.yaml as a dict: fan-out to the servers in ``urls`` (SearXNG, and Brave if
    given), fusion with these weights and k, scoring overrides, near-duplicate removal with
    the offline static model, no cache."""
    backends: dict[str, Any] = {
        "auto": "fanout",
        "order": list(urls),
        "searxng": {"base_url": urls["searxng"]},
        "duckduckgo": {"enabled": False},
        "brave": {"enabled": False},
        "engine_weights": dict(engine_weights),
    }
    if "brave" in urls:
        backends["brave"] = {
            "base_url": urls["brave"],
            "api_key": wire.BRAVE_KEY,
            "weight": brave_weight,
        }
    return {
        "backends": backends,
        "fusion": {"rrf_k": rrf_k},
        "scoring": dict(scoring),
        "embeddings": {"provider": "model2vec", "model": str(STATIC_MODEL)},
        "service": {"cache": {"enabled": False}},
    }


async def rankings(
    settings: dict[str, Any], queries: Mapping[str, str], max_results: int
) -> dict[str, list[str]]:
    """query id -> the documents of searcher's items, in order (simple mode)."""
    from searcher.config import Settings
    from searcher.contract import SearchRequest
    from searcher.runtime import open_service

    body: dict[str, Any] = {
        "budget": {"max_results": max_results},
        "want": {"rendered_text": False},
    }
    out: dict[str, list[str]] = {}
    async with open_service(
        Settings.model_validate(settings), extract_in_process=True, sweep=False
    ) as rt:
        for qid, text in queries.items():
            response = await rt.service.search(
                SearchRequest.model_validate({**body, "query": text})
            )
            out[qid] = [wire.docid_of(item.url) for item in response.items or ()]
    return out
