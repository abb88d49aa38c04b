"""Near-duplicate removal and the embedders: the real static model (offline copy in
../shared/models) and an OpenAI-compatible endpoint on the testbed."""

from __future__ import annotations

import asyncio
import json
from collections.abc import Sequence

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st

from searcher.backends.base import Hit
from searcher.config import EmbeddingSettings
from searcher.embedding.embedders import (
    CachedEmbedder,
    OpenAIEmbedder,
    StaticEmbedder,
    build_embedder,
    normalise_rows,
    parse_embeddings,
)
from searcher.errors import EmbedderUnavailable
from searcher.fetch.urls import normalise_url
from searcher.ranking.dedup import drop_near_duplicates
from searcher.ranking.fusion import FusedHit, Source
from searcher.text import document_text
from tests.shared_data import REAL_MODEL, SCIFACT, require_shared
from tests.testbed import TestbedServer
from tests.testbed.openai_compat import vector

THRESHOLD = 0.88  # what ../shared/models/README.md measured for this model


def real_model() -> str:
    """The real static model's directory (skips the test when the shared folder lacks it)."""
    return str(require_shared(REAL_MODEL))


PY313 = (
    "Python 3.13 released with experimental free-threaded mode",
    "The Python Software Foundation released Python 3.13 on October 7, with an experimental "
    "build that disables the global interpreter lock and a new interactive shell.",
)
PY313_REPRINT = (
    "Python 3.13 Released With Experimental Free-Threaded Mode | Tech News",
    "The Python Software Foundation released Python 3.13 on October 7, with an experimental "
    "build that disables the global interpreter lock, and a new interactive shell. Read more.",
)
PY312 = (  # related, but another page
    "Python 3.12 release notes",
    "What's new in Python 3.12: improved error messages, a per-interpreter GIL and faster "
    "comprehensions.",
)
SOURDOUGH = (
    "How to bake sourdough bread at home",
    "A step-by-step guide to feeding a starter, shaping the loaf and baking it in a Dutch "
    "oven for a crisp crust.",
)
SOURDOUGH_TIPS = (  # related to SOURDOUGH, another page, and no numbers to tell them apart
    "Keeping a sourdough starter alive",
    "Tips for feeding a starter, storing it in the fridge and reviving it before you bake.",
)
EVEREST = (
    "Mount Everest height remeasured",
    "China and Nepal jointly announced a new official height of 8,848.86 metres for the "
    "world's highest mountain.",
)


@pytest.fixture(scope="module")
def static() -> StaticEmbedder:
    return StaticEmbedder.load(real_model())


def fused(url: str, text: tuple[str, str], score: float, *sources: Source) -> FusedHit:
    engines = tuple(dict.fromkeys(s.engine or s.backend for s in sources))
    hit = Hit(url, text[0], text[1], sources[0].backend, engines=engines)
    return FusedHit(hit, normalise_url(url), score, tuple(sources))


def results(*texts: tuple[str, str]) -> list[FusedHit]:
    return [
        fused(f"https://site{i}.example/a", text, 1.0 / (i + 1), Source("brave", None, i + 1))
        for i, text in enumerate(texts)
    ]


# --- drop_near_duplicates with the static model ----------------------------------------


async def test_a_reprint_merges_into_the_better_ranked_hit(static):
    first = fused("https://news.example/py313", PY313, 0.05, Source("searxng", "bing", 1))
    other = fused("https://bread.example/", SOURDOUGH, 0.04, Source("brave", None, 1))
    reprint = fused(
        "https://mirror.example/py313",
        PY313_REPRINT,
        0.03,
        Source("brave", None, 2),
        Source("searxng", "google", 4),
    )
    kept, notes = await drop_near_duplicates([first, other, reprint], static, THRESHOLD)
    assert notes == []
    assert [k.key for k in kept] == [first.key, other.key]
    merged = kept[0]
    assert (merged.hit.url, merged.key, merged.score) == (first.hit.url, first.key, first.score)
    assert merged.sources == (
        Source("brave", None, 2),
        Source("searxng", "bing", 1),
        Source("searxng", "google", 4),
    )
    assert merged.hit.engines == ("bing", "brave", "google")
    assert (merged.hit.title, merged.hit.snippet) == PY313_REPRINT  # the richer text
    assert kept[1] == other


async def test_unrelated_and_merely_related_pages_are_kept(static):
    hits = results(PY313, PY312, SOURDOUGH, EVEREST)
    kept, notes = await drop_near_duplicates(hits, static, THRESHOLD)
    assert (kept, notes) == (hits, [])


async def test_the_threshold_is_respected(static):
    hits = results(PY313, PY313_REPRINT)
    vectors = await static.embed([document_text(h.hit.title, h.hit.snippet) for h in hits])
    cosine = float(vectors[0] @ vectors[1])
    assert 0.5 < cosine < 1.0
    kept, _ = await drop_near_duplicates(hits, static, cosine + 1e-4)
    assert len(kept) == 2
    kept, _ = await drop_near_duplicates(hits, static, cosine - 1e-4)
    assert [k.key for k in kept] == [hits[0].key]


async def test_merges_never_chain():
    # B is close to A and to C, but C is far from A: B joins A, C stays (compared with
    # kept hits only, so a chain of small steps cannot merge two different pages).
    a, b, c = (1.0, 0.0), (0.8, 0.6), (0.28, 0.96)
    hits = results(PY313, PY313_REPRINT, (PY313[0], f"{PY313[1]} Read more."))
    kept, notes = await drop_near_duplicates(hits, FixedEmbedder([a, b, c]), 0.75)
    assert notes == []
    assert [k.key for k in kept] == [hits[0].key, hits[2].key]


async def test_no_embedder_leaves_the_list_and_says_so():
    hits = results(PY313, PY313_REPRINT)
    kept, notes = await drop_near_duplicates(hits, None, THRESHOLD)
    assert kept == hits
    assert len(notes) == 1 and "URL dedup only" in notes[0]


async def test_fewer_than_two_hits_need_no_embedding():
    broken = FixedEmbedder([])
    assert await drop_near_duplicates([], broken, THRESHOLD) == ([], [])
    one = results(PY313)
    assert await drop_near_duplicates(one, broken, THRESHOLD) == (one, [])


async def test_an_embedder_giving_the_wrong_shape_is_a_note():
    hits = results(PY313, PY312)
    kept, notes = await drop_near_duplicates(hits, FixedEmbedder([(1.0, 0.0)]), THRESHOLD)
    assert kept == hits
    assert len(notes) == 1 and "shape" in notes[0]


class FixedEmbedder:
    """Gives the vectors it was made with, whatever the texts."""

    name = "fixed"

    def __init__(self, rows: Sequence[tuple[float, ...]]) -> None:
        self.rows = np.array(rows, dtype=np.float32)

    async def embed(self, texts: Sequence[str]) -> np.ndarray:
        return self.rows


# --- the static embedder ---------------------------------------------------------------


def test_static_vectors_equal_model2vec_encode(static):
    with (require_shared(SCIFACT) / "corpus.jsonl").open() as f:
        docs = [json.loads(next(f)) for _ in range(50)]
    texts = [f"{d['title']}\n{d['text'][:300]}" for d in docs] + [
        "Ünïcödé, punctuation!!! (and) 'quotes' — dashes",
        "中文 混合 English text",
        "tabs\tand\nnewlines  and   spaces",
        " ".join(d["text"] for d in docs[:10]),  # longer than the model's token limit
        "x" * 300,  # one overlong word: unknown, nothing to embed
    ]
    ours = static.encode(texts)
    theirs = normalise_rows(static.model.encode(texts))
    assert ours.dtype == np.float32 and ours.shape == (len(texts), 256)
    np.testing.assert_allclose(np.linalg.norm(ours[:-1], axis=1), 1.0, rtol=1e-5)
    assert not ours[-1].any()
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_static_vectors_equal_model2vec_encode_around_the_int16_sum_limit(static):
    # Texts of up to static._int16_tokens tokens are summed in int16. "1690" is one token
    # whose vector holds the table's largest value (127): 259 of them overflow int16, so
    # a limit one too high turns that text's vector around.
    limit = static._int16_tokens
    assert limit == 258
    texts = [" ".join(["1690"] * n) for n in (1, limit - 1, limit, limit + 1, 300, 600)]
    texts += [f"{n} tokens " + " ".join(["cloud gaming"] * (n // 2)) for n in (256, 262)]
    ours = static.encode(texts)
    np.testing.assert_allclose(ours, normalise_rows(static.model.encode(texts)), atol=1e-5)


async def test_remembered_vectors_are_the_computed_ones_across_a_full_memory():
    # A fresh embedder, so that what it remembers is this test's alone.
    static = StaticEmbedder.load(real_model())
    embedder = CachedEmbedder(static, size=4096)
    first = [f"text number {i} about subject {i % 7}" for i in range(3000)]
    second = first[-500:] + [f"another text {i} on topic {i % 5}" for i in range(2000)]
    await embedder.embed(first)
    # Over the memory's size: the least recently used go while this call still needs some.
    again = await embedder.embed(second)
    np.testing.assert_allclose(again, normalise_rows(static.model.encode(second)), atol=1e-5)
    hits = embedder.hits
    np.testing.assert_array_equal(await embedder.embed(second[:3]), again[:3])
    assert embedder.hits == hits + 3  # served remembered


# Whitespace, control and format characters, combining marks: where words split.
_TRICKY = [chr(c) for c in (0x20, 0x09, 0x0A, 0x0B, 0x0C, 0x0D, 0x1C, 0x1F, 0x85, 0xA0, 0x200B,
                            0x200D, 0x2028, 0x2029, 0x3000, 0x0301, 0xFFFD, 0x00)]  # fmt: skip


@given(
    st.lists(
        st.text(st.sampled_from([*_TRICKY, *"ab0é中,.!'"]) | st.characters(codec="utf-8")),
        max_size=4,
    )
)
def test_static_vectors_equal_model2vec_encode_for_any_text(static, texts):
    ours = static.encode(texts)
    theirs = normalise_rows(static.model.encode(texts)) if texts else ours
    np.testing.assert_allclose(ours, theirs, atol=1e-5)


def test_static_survives_a_lone_surrogate(static):
    vectors = static.encode(["broken \ud800 text", "broken text"])
    assert float(vectors[0] @ vectors[1]) == pytest.approx(1.0)


async def test_static_empty_texts_get_zero_rows(static):
    vectors = await static.embed(["", "   ", "hello"])
    assert vectors.shape == (3, 256)
    assert not vectors[0].any() and not vectors[1].any()
    assert float(np.linalg.norm(vectors[2])) == pytest.approx(1.0)
    assert (await static.embed([])).shape == (0, 256)


def test_a_missing_local_model_is_a_clear_error(tmp_path):
    with pytest.raises(EmbedderUnavailable, match="no such directory"):
        StaticEmbedder.load(str(tmp_path / "nothing-here"))
    (tmp_path / "broken").mkdir()
    with pytest.raises(EmbedderUnavailable, match="cannot load model2vec model"):
        StaticEmbedder.load(str(tmp_path / "broken"))


def test_build_embedder_follows_the_settings():
    assert build_embedder(EmbeddingSettings(provider="none")) is None
    static = build_embedder(EmbeddingSettings(provider="model2vec", model=real_model()))
    assert isinstance(static, CachedEmbedder) and isinstance(static.inner, StaticEmbedder)
    assert static.size == EmbeddingSettings().cache_size
    uncached = EmbeddingSettings(provider="model2vec", model=real_model(), cache_size=0)
    assert isinstance(build_embedder(uncached), StaticEmbedder)
    with pytest.raises(EmbedderUnavailable, match="base_url"):
        build_embedder(EmbeddingSettings(provider="openai", model="nomic-embed-text"))
    remote = build_embedder(
        EmbeddingSettings(provider="openai", model="nomic-embed-text", base_url="http://x/v1")
    )
    assert isinstance(remote, CachedEmbedder) and isinstance(remote.inner, OpenAIEmbedder)
    assert remote.name == "openai:nomic-embed-text"


# --- the OpenAI-compatible embedder against the testbed --------------------------------


def openai(testbed: TestbedServer, behaviour: str = "", timeout_s: float = 5.0) -> OpenAIEmbedder:
    base = testbed.url("/openai" + (f"/{behaviour}" if behaviour else "") + "/v1")
    return OpenAIEmbedder(base, "nomic-embed-text", api_key="k", timeout_s=timeout_s)


async def test_openai_embedder_gets_unit_rows_in_input_order(testbed_clean):
    texts = ["alpha beta", "gamma", "Alpha  BETA"]
    async with openai(testbed_clean) as embedder:
        vectors = await embedder.embed(texts)
    assert vectors.dtype == np.float32 and vectors.shape == (3, 64)
    np.testing.assert_allclose(vectors, np.array([vector(t) for t in texts]), atol=1e-6)
    [request] = [r for r in testbed_clean.log if r.path.endswith("/embeddings")]
    assert request.headers["authorization"] == "Bearer k"


async def test_openai_embedder_drives_near_duplicate_removal(testbed_clean):
    # The testbed gives equal vectors to texts equal but for case and spacing.
    hits = results(PY313, SOURDOUGH, (PY313[0].upper(), "  " + PY313[1]))
    async with openai(testbed_clean) as embedder:
        kept, notes = await drop_near_duplicates(hits, embedder, THRESHOLD)
    assert notes == []
    assert [k.key for k in kept] == [hits[0].key, hits[1].key]
    assert len(kept[0].sources) == 2


async def test_openai_http_500_is_a_note_not_a_crash(testbed_clean):
    hits = results(PY313, PY313_REPRINT)
    async with openai(testbed_clean, "status/500") as embedder:
        kept, notes = await drop_near_duplicates(hits, embedder, THRESHOLD)
    assert kept == hits
    assert len(notes) == 1
    assert "openai:nomic-embed-text" in notes[0] and "HTTP 500" in notes[0]


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [
        ("status/500", "HTTP 500"),
        ("status/401", "HTTP 401"),
        ("garbage", "unusable answer"),
        ("short", "expected 2 embeddings, got 1"),
        ("slow/3000", "timed out"),
    ],
)
async def test_openai_failures_raise_embedder_unavailable(testbed_clean, behaviour, reason):
    # Only the slow case needs a short timeout; the others get a generous one so a loaded
    # CI machine cannot turn an HTTP error into a timeout.
    timeout_s = 0.3 if behaviour.startswith("slow/") else 5.0
    async with openai(testbed_clean, behaviour, timeout_s=timeout_s) as embedder:
        with pytest.raises(EmbedderUnavailable, match=reason):
            await embedder.embed(["one", "two"])


async def test_openai_connection_refused_is_embedder_unavailable():
    async with OpenAIEmbedder("http://127.0.0.1:9/v1", "m", timeout_s=1.0) as embedder:
        with pytest.raises(EmbedderUnavailable, match="ConnectError"):
            await embedder.embed(["one"])


def test_parse_embeddings_orders_by_index_and_refuses_non_matrices():
    data = {"data": [{"index": 1, "embedding": [0.0, 1.0]}, {"index": 0, "embedding": [1, 0]}]}
    np.testing.assert_array_equal(parse_embeddings(data, 2), [[1, 0], [0, 1]])
    for bad in (
        {"data": [{"index": 0, "embedding": [1, 0]}, {"index": 1, "embedding": [1]}]},
        {"data": [{"index": 0, "embedding": []}, {"index": 1, "embedding": []}]},
        {"data": [{"index": 0, "embedding": ["x", 1]}, {"index": 1, "embedding": [1, 1]}]},
    ):
        with pytest.raises(ValueError):
            parse_embeddings(bad, 2)


async def test_texts_stating_different_numbers_are_never_merged(static):
    from searcher.backends.base import Hit
    from searcher.ranking.dedup import drop_near_duplicates
    from searcher.ranking.fusion import FusedHit, Source

    def fused(url: str, title: str) -> FusedHit:
        hit = Hit(url, title, "Full review: battery, camera, screen and price.", "brave")
        return FusedHit(hit, url, 1.0, (Source("brave", None, 1),))

    hits = [
        fused("https://a.example/14", "iPhone 14 review"),
        fused("https://b.example/15", "iPhone 15 review"),
        fused("https://c.example/14", "iPhone 14 review"),
    ]
    kept, notes = await drop_near_duplicates(hits, static, 0.88)
    assert notes == []
    assert [f.key for f in kept] == ["https://a.example/14", "https://b.example/15"]


# Cranfield 1045 and 1046: two reports under one title, as close as copies in a static
# embedding (cosine 0.90), sharing few words beyond the title.
PRESSURIZED_A = (
    "the bending strength of pressurized cylinders .",
    "the bending strength of pressurized cylinders . discussion of previously presented "
    "experimental data for the loading of pressurized cylinders, in terms of membrane theory .",
)
PRESSURIZED_B = (
    "the bending strength of pressurized cylinders .",
    "the bending strength of pressurized cylinders . a theoretical solution is given for the "
    "critical stress of thin-walled cylinders loaded in torsion . the results are presented in "
    "terms of a few simple formulas and curves which are applicable to a wide range of "
    "cylinder dimensions",
)


async def test_pages_on_one_subject_are_kept_however_close_their_vectors(static):
    hits = results(PRESSURIZED_A, PRESSURIZED_B)
    vectors = await static.embed([document_text(h.hit.title, h.hit.snippet) for h in hits])
    assert float(vectors[0] @ vectors[1]) >= THRESHOLD  # the embedding alone would merge them
    kept, notes = await drop_near_duplicates(hits, static, THRESHOLD)
    assert (kept, notes) == (hits, [])


async def test_a_reprint_cut_shorter_under_a_site_name_still_merges(static):
    shorter = (f"{PY313[0]} - Daily Tech", PY313[1][:90])  # most words of the shorter text
    hits = results(PY313, SOURDOUGH, shorter)
    kept, notes = await drop_near_duplicates(hits, static, THRESHOLD)
    assert notes == []
    assert [k.key for k in kept] == [hits[0].key, hits[1].key]


def test_a_full_word_memory_keeps_the_words_the_call_needs(monkeypatch):
    # Past the word memory's size it was emptied whole, words this call already knew
    # included, and looking them up failed (KeyError: a 500 from the hybrid stage).
    import searcher.embedding.embedders as embeddings

    embedder = StaticEmbedder.load(real_model())
    embedder.encode(["cloud gaming"])
    monkeypatch.setattr(embeddings, "_WORD_CACHE_SIZE", 3)
    texts = ["cloud gaming on new hardware", "gaming servers in the cloud"]
    ours = embedder.encode(texts)
    np.testing.assert_allclose(ours, normalise_rows(embedder.model.encode(texts)), atol=1e-5)


def test_any_failure_of_the_static_embedder_is_embedder_unavailable(static):
    # The steps that use vectors (hybrid relevance, cross-page passages, diversity) catch
    # EmbedderUnavailable and leave the vectors out; anything else ended the request.
    with pytest.raises(EmbedderUnavailable, match="TypeError"):
        asyncio.run(static.embed([None]))  # type: ignore[list-item]


def _plain_keeper_of(similarity, threshold, one_page):
    """_keeper_of without its shortcut for pages where nothing is alike."""
    close = (similarity >= threshold).tolist()
    keeper, kept = [], []
    for j in range(len(close)):
        target = next((i for i in kept if close[i][j] and one_page(i, j)), j)
        if target == j:
            kept.append(j)
        keeper.append(target)
    return keeper


@given(
    st.integers(2, 12).flatmap(
        lambda n: st.tuples(
            st.lists(st.lists(st.sampled_from([0.0, 0.5, 0.9, 1.0]), min_size=n, max_size=n),
                     min_size=n, max_size=n),
            st.lists(st.integers(0, 1), min_size=n, max_size=n),
        )
    ),
    st.sampled_from([0.5, 0.9, 1.0]),
)  # fmt: skip
def test_keeper_of_is_the_plain_loop(case, threshold):
    from searcher.ranking.dedup import _keeper_of, _merge_groups

    rows, number_of = case
    similarity = np.array(rows)

    def one_page(i, j):
        return number_of[i] == number_of[j]

    keeper = _keeper_of(similarity.copy(), threshold, one_page)
    assert keeper == _plain_keeper_of(similarity, threshold, one_page)
    if keeper == list(range(len(rows))):
        hits = results(*[(f"t{i}", "s") for i in range(len(rows))])
        assert _merge_groups(hits, keeper) == hits


@given(
    st.lists(
        st.lists(st.sampled_from(["cloud", "Cloud", "gaming", "2024", "v1.2", "a", "été", "-",
                                  "x_y", "it’s", "£5", "—", "Clouds-gaming"]),
                 max_size=8).map(" ".join),
        min_size=2, max_size=6,
    )
)  # fmt: skip
def test_one_page_compares_words_as_sets_would(texts):
    # The words are compared as bits of an int, read through the request's tokens (the
    # hybrid stage's); the rule is stated on sets of runs of letters and digits.
    import re

    from searcher.ranking.dedup import MIN_SHARED_WORDS, _may_be_one_page, _numbers
    from searcher.ranking.tokens import RequestTexts

    word = re.compile(r"[^\W_]+")
    one_page = _may_be_one_page(texts, RequestTexts("cloud"))
    for i in range(len(texts)):
        for j in range(len(texts)):
            a, b = (frozenset(word.findall(texts[k].lower())) for k in (i, j))
            shares = len(a & b) >= MIN_SHARED_WORDS * min(len(a), len(b))
            assert one_page(i, j) == (_numbers(texts[i]) == _numbers(texts[j]) and shares)
