"""Own documents reach every way in (issue 27, point 2), over real HTTP with the testbed
behind the web backends: research drawing on a collection and the web (its report cites
a ``file://`` and an ``http://`` source), MCP ``web_search`` with ``backend`` naming a
``local`` instance, the Python client, ``constraints.multi_query`` over a collection, and
``chunks_per_source`` on local items."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import httpx
import pytest
from mcp import Client

from searcher.client import SearcherClient
from tests.test_corpus import EMBEDDINGS, cli, corpus_config, indexed

__all__ = ["corpus_config", "indexed"]  # the fixtures, imported for these tests

GAMING = "Google Stadia Microsoft xCloud Apple Arcade cloud gaming"
NOTES = {"instances": {"notes": {"adapter": "local", "collection": "notes"}}}


@pytest.fixture
def served(indexed, make_settings, serve_searcher) -> tuple[Path, str]:
    """The indexed notes folder and the base URL of a searcher that has them as ``notes``."""
    notes, _ = indexed
    settings = make_settings(
        backends=NOTES,
        embeddings=EMBEDDINGS,
        scoring={"hybrid_share": 0.0, "min_keyword_overlap": 0},
    )
    return notes, serve_searcher(settings)


def search(base: str, query: str, backend: Any = "notes", **constraints: Any) -> dict[str, Any]:
    """``/v1/search`` with ``backend`` and more ``constraints``, uncached."""
    body = {"query": query, "constraints": {"backend": backend, "cache": "off", **constraints}}
    response = httpx.post(f"{base}/v1/search", json=body, timeout=60)
    assert response.status_code == 200, response.text
    data: dict[str, Any] = response.json()
    return data


def test_research_cites_a_local_file_and_a_web_page(served):
    notes, base = served
    body = {
        "query": GAMING,
        "preset": "minimal",
        "constraints": {"backend": ["searxng", "notes"]},
    }
    response = httpx.post(f"{base}/v1/research", json=body, timeout=30)
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    with SearcherClient(base, timeout=120) as client:
        list(client.stream_research(job_id))
    result = httpx.get(f"{base}/v1/research/{job_id}", timeout=30).json()["result"]
    evidence = {p["n"]: p["url"] for p in result["evidence"]}
    cited = {url for n, url in evidence.items() if f"[{n}]" in result["report"]}
    assert (notes / "gaming.md").as_uri() in cited, (cited, result["report"])
    assert any(url.startswith("http://127.0.0.1:") for url in cited), cited


async def test_mcp_web_search_searches_a_local_instance(served):
    notes, base = served
    async with Client(f"{base}/mcp") as client:
        result = await client.call_tool(
            "web_search", {"query": "aphids roses soapy water", "backend": "notes"}
        )
    assert result.is_error is False, result.content
    items = result.structured_content["items"]
    assert items[0]["url"] == (notes / "garden.md").as_uri()
    assert all(i["url"].startswith("file://") for i in items)
    (block,) = result.content
    assert (notes / "garden.md").as_uri() in block.text and "soapy water" in block.text


def test_the_python_client_searches_a_collection_with_the_web(served):
    notes, base = served
    with SearcherClient(base, timeout=60) as client:
        local = client.search("finderscope Polaris", backend="notes")
        both = client.search(GAMING, backend=["searxng", "notes"], max_results=10)
    assert local.meta.backend_used == "notes"
    assert local.items[0].url == (notes / "manual.pdf").as_uri() + "#page=2"
    assert local.items[0].engines == ["notes"]
    urls = [item.url for item in both.items]
    assert (notes / "gaming.md").as_uri() in urls
    assert any(url.startswith("http://127.0.0.1:") for url in urls)


def test_multi_query_searches_the_collection_once_per_query(served):
    notes, base = served
    data = search(base, "aphids roses soapy water", multi_query=3)
    queries = data["meta"]["perspectives"]["queries"]
    assert len(queries) == 3
    assert data["meta"]["backend_used"] == "notes"
    urls = [item["url"] for item in data["items"]]
    assert urls[0] == (notes / "garden.md").as_uri()
    assert len(urls) == len(set(urls))  # each document once, whatever query found it


def test_chunks_per_source_gives_a_local_documents_best_chunks(
    tmp_path, corpus_config, make_settings, serve_searcher
):
    folder = tmp_path / "long"
    folder.mkdir()
    parts = [f"## Part {n}\n\n" + f"Filler sentence {n} about nothing much. " * 6 for n in range(6)]
    parts[2] = "## Part 2\n\nThe lighthouse keeper logs the fog horn at dawn."
    parts[4] = "## Part 4\n\nAt dusk the lighthouse lamp is trimmed and the fog horn tested."
    (folder / "log.md").write_text("# Keeper's log\n\n" + "\n\n".join(parts))
    overrides: dict[str, Any] = {
        "backends": {"instances": {"mine": {"adapter": "local", "collection": "mine"}}},
        "corpus": {"chunk_chars": 200},
    }
    config = corpus_config(**overrides)
    assert (
        cli("index", "add", str(folder), "--collection", "mine", "--config", config).exit_code == 0
    )
    base = serve_searcher(make_settings(embeddings=EMBEDDINGS, **overrides))
    data = search(base, "lighthouse fog horn", "mine", chunks_per_source=2)
    item = data["items"][0]
    assert item["url"] == (folder / "log.md").as_uri()
    assert item["fetch"]["status"] == "fetched"
    chunks = item["chunks"]
    assert 1 <= len(chunks) <= 2
    assert any("lighthouse keeper logs the fog horn" in c for c in chunks)
    assert all("Filler sentence 0" not in c for c in chunks)
