"""Seed 004's hybrid relevance (searcher/ranking/hybrid.py) as a rerank stage of the fused pool."""

import asyncio

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from searcher.errors import EmbedderUnavailable
from searcher.ranking.hybrid import (
    blended_order,
    entity_overlap,
    hybrid_scores,
    hybrid_stage,
    pool_bm25,
)
from searcher.ranking.tokens import entity_words

TEXTS = [
    "Banana bread recipe with walnuts",
    "FANUC SRVO-063 encoder alarm: reset the pulse coder",
    "Encoder alarms on robots, a general overview",
]
QUERY = "FANUC SRVO-063 encoder alarm"


def test_pool_bm25_scales_the_best_to_one_and_misses_to_zero():
    scores = pool_bm25(QUERY, TEXTS)
    assert scores[1] == 1.0 and scores[0] == 0.0 and 0 < scores[2] < 1
    assert pool_bm25("zebra", TEXTS) == [0.0, 0.0, 0.0]


def test_entity_overlap_counts_names_and_codes():
    assert entity_overlap(QUERY, TEXTS) == [0.0, 1.0, 0.0]  # srvo-063 is the only entity


def test_the_mix_is_forty_forty_twenty_and_renormalised_without_vectors():
    with_vectors = hybrid_scores(QUERY, TEXTS, [0.0, 1.0, 0.5])
    assert with_vectors[1] == pytest.approx(0.4 + 0.4 + 0.2)
    without = hybrid_scores(QUERY, TEXTS, None)
    assert without[1] == pytest.approx(1.0) and without[0] == 0.0


def test_share_zero_keeps_the_order_and_share_one_follows_the_scores():
    assert blended_order([0.1, 0.9, 0.5], 0.0) == [0, 1, 2]
    assert blended_order([0.1, 0.9, 0.5], 1.0) == [1, 2, 0]


class Failing:
    name = "failing"

    async def embed(self, texts):
        raise EmbedderUnavailable("down")


class Fixed:
    name = "fixed"

    async def embed(self, texts):
        # The query is row 0; the banana text points the same way as the query.
        rows = [[1.0, 0.0], [1.0, 0.0], [0.0, 1.0], [0.0, 1.0]]
        return np.array(rows[: len(texts)], dtype=np.float32)


def run(embedder, share=0.7):
    return asyncio.run(
        hybrid_stage(TEXTS, QUERY, share, embedder, lambda t: t, lambda t, s, total: f"{s:.2f} {t}")
    )


def test_the_stage_reorders_and_scores_each_item():
    ordered = run(None)
    assert ordered[0].endswith(TEXTS[1]) and all(" " in o for o in ordered)
    assert run(None, share=0.0) == TEXTS  # off: untouched, no scores


def test_an_embedder_changes_the_cosine_and_a_failing_one_is_left_out():
    assert run(Failing()) == run(None)
    assert run(Fixed()) != run(None)


def _reference_bm25(query: str, texts: list[str]) -> list[float]:
    """BM25 as the docstring says it, every word of every text stemmed (no shortcuts), the
    query's terms those of ``searcher.text.query_terms``."""
    import math
    import re
    from collections import Counter

    from searcher.text import query_terms, stem

    # Every run of letters and digits counts; the length is in words of two or more.
    docs = [Counter(map(stem, re.findall(r"[^\W_]+", t.lower()))) for t in texts]
    wanted = set(query_terms(query, keep_stop_words=True)) & {w for d in docs for w in d}
    if not wanted:
        return [0.0] * len(texts)
    lengths = [len(re.findall(r"[^\W_]{2,}", t)) for t in texts]
    average = (sum(lengths) / len(docs)) or 1.0
    scores = []
    for d, length in zip(docs, lengths, strict=True):
        total = 0.0
        for w in wanted:
            df = sum(1 for other in docs if w in other)
            idf = math.log(1 + (len(docs) - df + 0.5) / (df + 0.5))
            total += idf * d[w] * 2.2 / (d[w] + 1.2 * (0.25 + 0.75 * length / average))
        scores.append(total)
    best = max(scores)
    return [s / best if best > 0 else 0.0 for s in scores]


def _reference_entities(query: str, texts: list[str]) -> list[float]:
    import re

    from searcher.ranking.hybrid import entities
    from searcher.text import query_keywords, stem

    wanted = entities(query) or set(query_keywords(query))
    out = []
    for text in texts:
        words = set(re.findall(r"[^\W_][\w-]*", text.lower()))
        found = {w for w in wanted if w in words or w in {stem(x) for x in words}}
        out.append(len(found) / len(wanted) if wanted else 0.0)
    return out


# Words built from roots and the suffixes stem() strips, so that forms of a word meet.
WORD = st.builds(
    "".join,
    st.tuples(
        st.sampled_from(
            [
                "stud",
                "rout",
                "gam",
                "run",
                "Co-op",
                "x_y",
                "Éclat",
                "a",
                "6es7",
                "trout",
                "outrun",
                "phas",
            ]
        ),
        st.sampled_from(["", "y", "ies", "ied", "ing", "ed", "es", "s", "e", "-1"]),
    ),
)
WORDS = st.lists(WORD, max_size=8).map(" ".join)


@given(WORDS, st.lists(WORDS, min_size=1, max_size=6))
@settings(max_examples=300)
def test_scores_equal_stemming_every_word(query: str, texts: list[str]) -> None:
    # The stage stems only the words that can stem to a query term; it must lose none.
    assert pool_bm25(query, texts) == pytest.approx(_reference_bm25(query, texts))
    assert entity_overlap(query, texts) == pytest.approx(_reference_entities(query, texts))


# Text as snippets have it: ASCII words and punctuation, hyphens and underscores at word
# edges, typographic quotes and dashes, letters of other scripts, odd spaces.
SNIPPET = st.lists(
    st.sampled_from(
        [
            "co-op",
            "-x",
            "_y_",
            "--",
            "a-",
            "6es7",
            "It",
            "’s",
            "“q”",
            "–",
            "\u00a0",
            "é",
            "日本",
            "\u2003",
            ".",
            ",",
            " ",
            "\t",
            "x_y",
            "A.B",
            "…",
            "ß",
            "\x1c",
        ]
    )
    | st.text(max_size=4),
    max_size=12,
).map("".join)


@given(SNIPPET)
@settings(max_examples=500)
def test_entity_words_are_the_regex_words(text: str) -> None:
    import re

    lowered = text.lower()
    expected = re.findall(r"[^\W_][\w-]*", lowered)
    assert sorted(entity_words(lowered)) == sorted(expected)


def test_a_hostile_run_of_hyphens_is_read_in_one_pass() -> None:
    # A backend can send a megabyte of hyphens as a snippet. Stripping them a layer at a
    # time took quadratic time (16,000 hyphens: 0.3 s; this many: about 20 minutes).
    text = " " + "-" * 1_000_000 + "x _y " + "_-" * 500_000
    assert entity_words(text) == ["x", "y"]


@given(WORDS, st.lists(SNIPPET | WORDS, min_size=1, max_size=6))
@settings(max_examples=300)
def test_scores_equal_stemming_every_word_of_messy_text(query: str, texts: list[str]) -> None:
    # Words are found in a space-joined string of a text's words: punctuation, other
    # scripts and odd spaces must not make it find more words, or fewer, than the regex.
    assert pool_bm25(query, texts) == pytest.approx(_reference_bm25(query, texts))
    assert entity_overlap(query, texts) == pytest.approx(_reference_entities(query, texts))


@given(WORDS.map(str.lower), st.lists(SNIPPET | WORDS, min_size=1, max_size=6))
@example("phasing", ["phas"])  # the keyword "phas" is named, and stems to "pha"
@example("5", ["5"])  # the entity "5" is no BM25 term (too short)
@settings(max_examples=500)
def test_the_mix_reads_the_entity_overlap_off_bm25_counts_only_where_they_agree(
    query: str, texts: list[str]
) -> None:
    # A query without entities wants its keywords, whose forms BM25 has just counted:
    # hybrid_scores takes the overlap from those counts where they say the same (no
    # hyphen or underscore in the text; wanted words that are BM25 terms and stem to
    # themselves, which "phas" from "phasing" does not).
    bm25, entity = pool_bm25(query, texts), entity_overlap(query, texts)
    scale = 1.0 / (0.4 + 0.2)  # without cosines, as hybrid_scores mixes them
    plain = [scale * (0.4 * b + 0.2 * e) for b, e in zip(bm25, entity, strict=True)]
    assert hybrid_scores(query, texts, None) == plain
