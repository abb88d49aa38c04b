"""Vectors are made once: within a request (near-duplicate removal and the hybrid stage
share the title + snippet vectors) and across requests (``embeddings.cache_size``, least
recently used forgotten first), counted by the testbed's OpenAI-compatible embeddings API."""

from __future__ import annotations

from typing import Any

import httpx
import numpy as np
import pytest

from searcher.embedding.embedders import CachedEmbedder, OpenAIEmbedder
from tests.testbed import TestbedServer
from tests.testbed.openai_compat import vector


def embedded(testbed: TestbedServer) -> list[list[str]]:
    """The inputs of each embeddings request the testbed got since its last reset."""
    return [b["body"]["input"] for b in testbed.app.bodies if b["path"].endswith("/embeddings")]


def search_settings(make_settings: Any, testbed: TestbedServer, cache_size: int) -> Any:
    return make_settings(
        embeddings={
            "provider": "openai",
            "base_url": testbed.url("/openai/v1"),
            "model": "nomic-embed-text",
            "cache_size": cache_size,
        },
        scoring={"hybrid_share": 0.5},  # the hybrid stage embeds too
        service={"cache": {"enabled": False}},  # every search runs the pipeline
    )


def search(base: str, query: str) -> dict[str, Any]:
    response = httpx.post(f"{base}/v1/search", json={"query": query}, timeout=30.0)
    assert response.status_code == 200, response.text
    return response.json()


def test_a_request_embeds_each_text_once(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    # No cache across requests: only the request's own table keeps the vectors.
    base = serve_searcher(search_settings(make_settings, testbed_clean, cache_size=0))
    data = search(base, matching_query)
    assert len(data["items"]) >= 2
    inputs = [text for body in embedded(testbed_clean) for text in body]
    assert matching_query in inputs  # the hybrid stage asked for the query's vector
    assert len(inputs) >= 3  # and near-duplicate removal for the results'
    assert len(inputs) == len(set(inputs))


def test_a_repeated_search_embeds_nothing_new(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    base = serve_searcher(search_settings(make_settings, testbed_clean, cache_size=4096))
    first = search(base, matching_query)
    calls = len(embedded(testbed_clean))
    assert calls >= 1
    second = search(base, matching_query)
    assert len(embedded(testbed_clean)) == calls
    assert [i["url"] for i in second["items"]] == [i["url"] for i in first["items"]]


async def test_the_cache_forgets_the_least_recently_used_text(testbed_clean):
    inner = OpenAIEmbedder(testbed_clean.url("/openai/v1"), "nomic-embed-text")
    async with inner:
        cached = CachedEmbedder(inner, size=2)
        await cached.embed(["alpha", "beta"])
        await cached.embed(["alpha"])  # alpha is now the most recently used
        await cached.embed(["gamma"])  # full: beta goes
        vectors = await cached.embed(["alpha", "beta", "alpha"])
    assert embedded(testbed_clean) == [["alpha", "beta"], ["gamma"], ["beta"]]
    expected = np.array([vector(t) for t in ("alpha", "beta", "alpha")], dtype=np.float32)
    np.testing.assert_allclose(vectors, expected, atol=1e-6)
    assert (cached.hits, cached.misses) == (2, 4)


def test_the_cache_size_is_checked():
    from searcher.config import EmbeddingSettings

    assert EmbeddingSettings().cache_size == 4096
    with pytest.raises(ValueError, match="cache_size"):
        EmbeddingSettings(cache_size=-1)
