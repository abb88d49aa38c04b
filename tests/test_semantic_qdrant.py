"""The semantic result cache with its vectors in Qdrant (``state.qdrant_url``), tested in
the real ``qdrant-client``'s embedded mode (a directory, no server)."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from searcher.cache.semantic_qdrant import COLLECTION, QdrantSemanticCache, open_qdrant
from searcher.embedding.embedders import StaticEmbedder
from searcher.errors import StateUnavailable
from tests.conftest import STATIC_MODEL, serve_until_it_exits


class Clock:
    def __init__(self, now: float = 1_000_000.0) -> None:
        self.now = now

    def __call__(self) -> float:
        return self.now


@pytest.fixture(scope="module")
def embedder() -> StaticEmbedder:
    return StaticEmbedder.load(str(STATIC_MODEL))


@pytest.fixture
async def client(tmp_path: Path) -> AsyncIterator[Any]:
    opened = await open_qdrant(str(tmp_path / "qdrant"))
    yield opened
    await opened.close()


async def test_a_close_query_finds_the_cached_key_in_its_scope(client, embedder):
    clock = Clock()
    cache = QdrantSemanticCache(client, embedder, threshold=0.95, clock=clock)
    assert await cache.find("anything at all", "s1") is None  # no collection yet
    await cache.add("Games on Google Stadia, Microsoft xCloud and Apple Arcade", "s1", "k1", 60)
    await cache.add("population of France in 2019", "s1", "k2", 60)
    # A second cache over the same Qdrant (another process would see the same).
    other = QdrantSemanticCache(client, embedder, threshold=0.95, clock=clock)
    assert await other.find("google stadia, microsoft xcloud and apple arcade games", "s1") == "k1"
    assert await other.find("population of France in 2020", "s1") is None  # another year
    assert await other.find("Google Stadia Microsoft xCloud Apple Arcade games", "s2") is None
    assert await other.find("best pizza dough recipe", "s1") is None
    clock.now += 61  # expired: never served, and pruned with the next additions
    assert await other.find("google stadia, microsoft xcloud and apple arcade games", "s1") is None
    await cache._prune()
    assert (await client.count(COLLECTION)).count == 0


async def test_the_same_key_is_one_point(client, embedder):
    cache = QdrantSemanticCache(client, embedder, threshold=0.95)
    for _ in range(3):
        await cache.add("population of France in 2019", "s1", "k1", 60)
    assert (await client.count(COLLECTION)).count == 1


async def test_an_unreachable_server_is_state_unavailable():
    from tests.ports import free_port

    with pytest.raises(StateUnavailable, match=r"state\.qdrant_url"):
        await open_qdrant(f"http://127.0.0.1:{free_port()}", timeout_s=1)


def test_over_http_a_close_query_is_a_semantic_hit_from_qdrant(
    make_settings, serve_searcher, testbed_clean, tmp_path
):
    settings = make_settings(
        cache={"semantic": {"enabled": True}}, state={"qdrant_url": str(tmp_path / "q")}
    )
    base = serve_searcher(settings)

    def post(body: dict[str, Any]) -> dict[str, Any]:
        return httpx.post(f"{base}/v1/search", json=body, timeout=30).json()

    first = post({"query": "Games on Google Stadia, Microsoft xCloud and Apple Arcade"})
    assert first["meta"]["cache"]["hit"] is False
    calls = len(testbed_clean.log)
    close = post({"query": "google stadia, microsoft xcloud and apple arcade games"})
    assert close["meta"]["cache"] | {"age_s": 0} == {"hit": True, "kind": "semantic", "age_s": 0}
    assert close["items"] == first["items"] and len(testbed_clean.log) == calls
    assert post({"query": "best pizza dough recipe"})["meta"]["cache"]["hit"] is False


def test_serve_exits_2_when_qdrant_is_unreachable(config_file):
    from tests.ports import free_port

    path = config_file()
    config = yaml.safe_load(Path(path).read_text())
    config["state"]["qdrant_url"] = f"http://127.0.0.1:{free_port()}"
    config["cache"] = {"semantic": {"enabled": True}}
    Path(path).write_text(yaml.safe_dump(config))
    done = serve_until_it_exits(path)
    assert done.returncode == 2, done.stderr
    assert "Qdrant at http://127.0.0.1" in done.stderr and "Traceback" not in done.stderr


async def test_a_cache_whose_collection_was_deleted_makes_it_again(client, embedder):
    cache = QdrantSemanticCache(client, embedder, threshold=0.95)
    await cache.add("population of France in 2019", "s1", "k1", 60)
    await client.delete_collection(COLLECTION)  # `searcher cache clear`, from another process
    await cache.add("population of Spain in 2019", "s1", "k2", 60)  # fails once, with a warning
    await cache.add("population of Spain in 2019", "s1", "k2", 60)
    assert await cache.find("population of spain in 2019", "s1") == "k2"
    assert (await client.count(COLLECTION)).count == 1


def test_cache_clear_deletes_the_vectors_in_qdrant(config_file, embedder, tmp_path):
    import asyncio

    from click.testing import CliRunner

    from searcher.cli import main

    where = str(tmp_path / "vectors")

    async def fill() -> None:
        opened = await open_qdrant(where)
        cache = QdrantSemanticCache(opened, embedder, threshold=0.95)
        await cache.add("population of France in 2019", "s1", "k1", 60)
        await cache.add("Games on Google Stadia", "s1", "k2", 60)
        await opened.close()

    async def collection_exists() -> bool:
        opened = await open_qdrant(where)
        try:
            return bool(await opened.collection_exists(COLLECTION))
        finally:
            await opened.close()

    asyncio.run(fill())
    path = config_file()
    config = yaml.safe_load(Path(path).read_text())
    config["state"]["qdrant_url"] = where  # one state block: a second is refused
    Path(path).write_text(yaml.safe_dump(config))
    cleared = CliRunner().invoke(main, ["cache", "clear", "--config", path])
    assert cleared.exit_code == 0, cleared.output
    assert f"removed 2 query vectors from Qdrant at {where}" in cleared.stdout
    assert asyncio.run(collection_exists()) is False
    again = CliRunner().invoke(main, ["cache", "clear", "--config", path])
    assert "removed 0 query vectors" in again.stdout
