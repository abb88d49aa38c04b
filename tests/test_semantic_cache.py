"""The semantic result cache: close queries that ask the same share an answer."""

from __future__ import annotations

from collections.abc import AsyncIterator
from pathlib import Path
from typing import Any

import httpx
import numpy as np
import pytest

from searcher.cache.semantic import (
    SPACE,
    SemanticCache,
    VectorIndex,
    anchors,
    same_anchors,
    same_question,
)
from searcher.embedding.embedders import StaticEmbedder
from searcher.state import RedisStore, SqliteStore, StateStore
from tests.conftest import STATIC_MODEL


@pytest.fixture(scope="module")
def embedder() -> StaticEmbedder:
    return StaticEmbedder.load(str(STATIC_MODEL))


@pytest.fixture(params=["sqlite", "redis"])
async def store(request: pytest.FixtureRequest, tmp_path: Path) -> AsyncIterator[StateStore]:
    engine: StateStore
    if request.param == "sqlite":
        engine = SqliteStore(tmp_path / "state.sqlite3")
    else:
        # A generous timeout: these tests are about behaviour, on a busy machine.
        engine = RedisStore(request.getfixturevalue("redis_url"), prefix="t:", timeout_s=10)
    yield engine
    await engine.aclose()


def test_anchors_are_numbers_dates_and_proper_nouns():
    assert anchors("What is the population of France in 2019?") == {"france", "2019"}
    assert anchors("Who won the match on Monday, 3 March?") == {"monday", "3", "march"}
    assert anchors("How does NASA pick astronauts?") == {"nasa"}
    assert anchors("Is it rude? Maybe not.") == set()  # sentence openers are not names
    assert same_anchors("capital of France", "capital of france")  # case is no anchor
    assert not same_anchors("population of France in 2019", "population of France in 2020")
    assert not same_anchors("capital of France", "capital of Spain")


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("convert celsius to fahrenheit", "convert fahrenheit to celsius"),
        ("flights from London to Paris", "flights from Paris to London"),
        ("is rust faster than go", "is go faster than rust"),
        (
            "what foods should i eat during pregnancy",
            "what foods should i not eat during pregnancy",
        ),
        ("medications safe with alcohol", "medications that aren't safe with alcohol"),
    ],
)
def test_a_question_turned_around_is_another_question(a, b):
    # A static embedding is a bag of words: these pairs have cosine 0.985-1.0.
    assert same_anchors(a, b) and not same_question(a, b)


@pytest.mark.parametrize(
    ("a", "b"),
    [
        ("Games on Google Stadia and Apple Arcade", "google stadia and apple arcade games"),
        ("how to get to the airport", "how to get to airport"),
        ("why can't I sleep", "why cannot I sleep"),
    ],
)
def test_words_moved_or_respelt_ask_the_same(a, b):
    assert same_question(a, b)


async def test_a_close_query_finds_the_cached_key_in_its_scope(store, embedder):
    writer = SemanticCache(store, embedder, threshold=0.95)
    await writer.add("Games on Google Stadia, Microsoft xCloud and Apple Arcade", "s1", "k1", 60)
    await writer.add("population of France in 2019", "s1", "k2", 60)
    # Another worker over the same store sees what the first one added.
    reader = SemanticCache(store, embedder, threshold=0.95)
    assert await reader.find("Google Stadia Microsoft xCloud Apple Arcade games", "s1") == "k1"
    assert await reader.find("google stadia, microsoft xcloud and apple arcade games", "s1") == "k1"
    assert await reader.find("population of France in 2020", "s1") is None  # another year
    assert await reader.find("Google Stadia Microsoft xCloud Apple Arcade games", "s2") is None
    assert await reader.find("best pizza dough recipe", "s1") is None


async def test_corrupt_vector_rows_are_skipped(store, embedder):
    await store.add_vector(SPACE, "bad", np.ones(256, dtype=np.float32), b"{not json", 60)
    cache = SemanticCache(store, embedder, threshold=0.5)
    await cache.add("capital of France", "s", "good", 60)
    assert await cache.find("capital of France", "s") == "good"
    assert cache.index.size == 1


async def test_rows_of_another_embedder_are_skipped_not_fatal(store, embedder):
    # Left by a model configured before this one (or a replica with another one).
    meta = b'{"q": "capital of France", "s": "s"}'
    await store.add_vector(SPACE, "old", np.ones(64, dtype=np.float32), meta, 60)
    writer = SemanticCache(store, embedder, threshold=0.5)
    await writer.add("capital of France", "s", "new", 60)
    assert await writer.find("capital of France", "s") == "new"
    # A worker whose start-up sync mirrored the old rows before it embedded anything.
    reader = SemanticCache(store, embedder, threshold=0.5)
    await reader.sync()
    assert await reader.find("capital of France", "s") == "new"
    assert reader.index.dimension == 256 and reader.index.size == 1


def test_the_index_drops_expired_then_oldest_rows_when_full():
    index = VectorIndex(max_entries=3)
    vectors = np.eye(4, dtype=np.float32)
    index.add(vectors[:3], ["a"] * 3, [0.0, 1e12, 1e12], ["x0", "x1", "x2"], ["q"] * 3)
    index.add(vectors[3:], ["a"], [1e12], ["x3"], ["q"])  # x0 has expired: it goes
    assert index.size == 3
    assert [m.item_id for m in index.nearest(vectors[1], "a", 0.5, now=1.0)] == ["x1"]
    assert index.nearest(vectors[0], "a", 0.5, now=1.0) == []
    index.add(vectors[:1], ["a"], [1e12], ["x4"], ["q"])  # full and none expired: oldest goes
    assert index.nearest(vectors[1], "a", 0.5, now=1.0) == []
    assert [m.item_id for m in index.nearest(vectors[0], "a", 0.5, now=1.0)] == ["x4"]


def post(base: str, body: dict[str, Any]) -> httpx.Response:
    return httpx.post(f"{base}/v1/search", json=body, timeout=30.0)


def test_over_http_a_close_query_is_a_semantic_hit(make_settings, serve_searcher, testbed_clean):
    base = serve_searcher(make_settings(cache={"semantic": {"enabled": True}}))
    first = post(base, {"query": "Games on Google Stadia, Microsoft xCloud and Apple Arcade"})
    assert first.json()["meta"]["cache"]["hit"] is False
    calls = len(testbed_clean.log)
    close = post(base, {"query": "google stadia, microsoft xcloud and apple arcade games"}).json()
    assert close["meta"]["cache"]["hit"] is True and close["meta"]["cache"]["kind"] == "semantic"
    assert close["items"] == first.json()["items"]
    assert len(testbed_clean.log) == calls
    # Same words, another setting (result count): no match across scopes.
    other = {"query": "google stadia, microsoft xcloud and apple arcade games",
             "budget": {"max_results": 2}}  # fmt: skip
    assert post(base, other).json()["meta"]["cache"]["hit"] is False
    # Words moved: the same question. A relation turned around: another one.
    moved = post(base, {"query": "Games on Microsoft xCloud, Google Stadia and Apple Arcade"})
    assert moved.json()["meta"]["cache"]["kind"] == "semantic"
    there = {"query": "switch from Google Stadia to Microsoft xCloud"}
    post(base, there)
    assert post(base, there).json()["meta"]["cache"]["kind"] == "exact"  # it is stored
    back = post(base, {"query": "switch from Microsoft xCloud to Google Stadia"})
    assert back.json()["meta"]["cache"]["hit"] is False


def test_semantic_matching_is_off_by_default(make_settings, serve_searcher, testbed_clean):
    base = serve_searcher(make_settings())
    post(base, {"query": "Games on Google Stadia, Microsoft xCloud and Apple Arcade"})
    close = post(base, {"query": "google stadia, microsoft xcloud and apple arcade games"})
    assert close.json()["meta"]["cache"]["hit"] is False
