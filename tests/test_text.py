"""The one text library (searcher/text.py): words, the stemmer, stop words, the query's
terms and keywords, BM25, what is read of a result."""

from __future__ import annotations

import math
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from searcher import text as text_module
from searcher.text import (
    MAX_DOCUMENT_CHARS,
    bm25,
    document_text,
    query_keywords,
    query_terms,
    searched_prefixes,
    stem,
    stem_positions,
    stem_prefixes,
    words,
    words_stemming_to,
)

# --- the query ----------------------------------------------------------------------------


def test_codes_are_kept_whole_and_in_parts() -> None:
    assert query_keywords("SRVO-063 encoder alarm") == [
        "srvo-063", "srvo", "063", "encoder", "alarm",
    ]  # fmt: skip
    assert {"6es7-214", "6es7", "214"} <= set(query_keywords("6ES7-214 wiring"))
    assert {"a06b-6079", "a06b", "6079"} <= set(query_keywords("A06B-6079 amplifier"))


def test_stop_words_and_noise_are_dropped() -> None:
    assert query_keywords("What is the capital of Peru?") == ["capital", "peru"]
    assert query_keywords("what's it") == []
    assert query_keywords("the and/or of") == []
    assert query_keywords("python 3") == ["python", "3"]  # a lone digit can be a version


def test_keywords_are_deduplicated_in_first_seen_order() -> None:
    assert query_keywords("router Routers ROUTER switch") == ["router", "switch"]


@pytest.mark.parametrize(
    ("forms", "common"),
    [
        (["router", "routers"], "router"),
        (["route", "routes", "routed", "routing"], "rout"),
        (["library", "libraries"], "library"),
        (["study", "studies", "studied"], "study"),
        (["box", "boxes"], "box"),
        (["class", "classes"], "class"),
        (["patch", "patches", "patched", "patching"], "patch"),
        (["run", "running"], "run"),
        (["install", "installs", "installed", "installing"], "install"),
        (["configure", "configured", "configuring", "configures"], "configur"),
        (["setting", "settings"], "set"),
    ],
)
def test_stemming_brings_forms_together(forms: list[str], common: str) -> None:
    assert {stem(form) for form in forms} == {common}


@pytest.mark.parametrize(
    "word", ["news", "status", "analysis", "string", "thing", "speed", "need", "free", "bus",
             "063", "6es7", "ok"],
)  # fmt: skip
def test_stemming_leaves_these_alone(word: str) -> None:
    assert stem(word) == word


# --- words and stems ---------------------------------------------------------------------


@given(st.text())
def test_word_split_is_the_regex_split(text: str) -> None:
    # The translate-table split stands in for this regex because it is faster.
    assert words(text) == re.findall(r"[^\W_]+", text.lower())


@given(st.lists(st.text(alphabet="abcdeilnorsty", min_size=1, max_size=12), min_size=1, max_size=8))
def test_the_stem_finder_finds_every_word_that_stems_to_a_keyword(given_words: list[str]) -> None:
    # The keyword overlap stems only the words the finder yields: it must miss none.
    text = " ".join(given_words)
    for word in given_words:
        found = words_stemming_to((stem(word),), text)
        assert word in found


# Text made of the stems' pieces, so that words start (and contain) one, two or none.
PIECES = ["ga", "gam", "m", "clou", "d", "a", "b1", "é", "É", "1", "u", "lo", "_", " ", "-", "."]


@given(
    st.text(alphabet="abgclou_ -.1éÉ", max_size=40)
    | st.lists(st.sampled_from(PIECES)).map("".join),
    st.lists(
        st.sampled_from(["gam", "clou", "cloud", "a", "b1", "é", "ga", "gb", "lo", "1", "u"]),
        min_size=1,
        max_size=8,
    ),
)
@settings(max_examples=500)
def test_the_finder_yields_exactly_the_words_that_start_with_a_prefix(
    text: str, stems: list[str]
) -> None:
    # What a look-behind for the word's start would give: every whole word (a run of
    # letters and digits) that starts with a prefix, once, nothing inside a word; with a
    # few prefixes (a scan for each) and with many (one scan for all).
    prefixes = stem_prefixes(stems)
    found = re.findall(r"[^\W_]+", text)
    expected = sorted(w for w in found if w.startswith(prefixes))
    assert sorted(words_stemming_to(tuple(stems), text)) == expected
    # Both finders, whichever the number of prefixes and the length of the text.
    searched = searched_prefixes(tuple(stems))
    for finder in (text_module._spans_per_prefix, text_module._spans_in_one_scan):
        assert sorted(text[s:e] for s, e in finder(searched, text, 0, len(text))) == expected


def test_a_long_text_is_read_in_one_scan(monkeypatch: pytest.MonkeyPatch) -> None:
    # A snippet of megabytes full of words with a prefix: the regex's one scan is about
    # twice as fast as a search per prefix, and finds the same words.
    def no_search_per_prefix(*_: object) -> list[tuple[int, int]]:
        raise AssertionError("a long text is searched per prefix")

    monkeypatch.setattr(text_module, "_spans_per_prefix", no_search_per_prefix)
    text = "saga gaming clouds 1gam " * 1_000
    assert len(text) > text_module._SEARCH_PER_PREFIX_CHARS_UP_TO
    found = words_stemming_to(("cloud", "gam"), text)
    assert sorted(found) == sorted(["gaming", "clouds"] * 1_000)


def test_query_terms_are_the_keywords_less_the_compounds() -> None:
    assert query_terms("What are the countries with the most boxes and engines?") == (
        "country", "box", "engin",
    )  # fmt: skip
    assert query_terms("Who won in 1871, a or b?") == ("won", "1871")
    assert query_terms("SRVO-063 encoder alarm") == ("srvo", "063", "encoder", "alarm")
    assert len(query_terms(" ".join(f"word{i}" for i in range(100)))) == 32
    # The hybrid stage's BM25 over a pool of snippets keeps the stop words (IDF weighs them).
    assert query_terms("What is the capital of Peru?", keep_stop_words=True) == (
        "what", "is", "the", "capital", "of", "peru",
    )  # fmt: skip


# --- the stemmer's prefixes ----------------------------------------------------------------

WORDS = st.text(alphabet="abcdeilnorsty", min_size=1, max_size=12)


@given(WORDS)
@settings(max_examples=2000)
def test_every_word_starts_with_the_prefix_of_its_stem(word: str) -> None:
    # The finders look only at words starting with a stem's prefix: none may be missed.
    assert word.startswith(stem_prefixes([stem(word)]))


def test_a_prefix_is_the_stem_itself_unless_it_ends_in_y() -> None:
    assert stem_prefixes(["rout", "country", "y"]) == ("countr", "rout", "y")


@given(st.lists(WORDS, min_size=1, max_size=20), st.lists(WORDS, min_size=1, max_size=3))
def test_stem_positions_are_the_words_that_stem_to_a_term(
    given_words: list[str], terms: list[str]
) -> None:
    stems = tuple(stem(t) for t in terms)
    text = " ".join(given_words)
    expected = sorted(
        (m.start(), stem(m.group()))
        for m in re.finditer(r"[^\W_]+", text)
        if stem(m.group()) in stems
    )
    assert sorted(stem_positions(stems, text)) == expected


# --- BM25 -----------------------------------------------------------------------------------


def test_bm25_is_okapi_with_the_non_negative_idf() -> None:
    counts = [{"cat": 2}, {}, {"cat": 1, "dog": 1}]
    lengths = [4, 4, 10]
    scores = bm25(["cat", "dog"], counts, lengths)
    n, average = 3, 6.0

    def idf(df: int) -> float:
        return math.log(1 + (n - df + 0.5) / (df + 0.5))

    def part(tf: int, length: int, df: int) -> float:
        return idf(df) * tf * 2.2 / (tf + 1.2 * (0.25 + 0.75 * length / average))

    assert scores[0] == pytest.approx(part(2, 4, 2))
    assert scores[1] == 0.0
    assert scores[2] == pytest.approx(part(1, 10, 2) + part(1, 10, 1))


def test_bm25_without_a_match_is_all_zero() -> None:
    assert bm25(["cat"], [{}, {}], [3, 5]) == [0.0, 0.0]
    assert bm25([], [{"cat": 1}], [3]) == [0.0]
    assert bm25(["cat"], [], []) == []


# --- what is read of a result -------------------------------------------------------------


def test_document_text_is_title_and_snippet_bounded() -> None:
    text = document_text("Title", "word " * 1_000_000)
    assert len(text) == MAX_DOCUMENT_CHARS and text.startswith("Title\nword word")
    assert document_text(" Short ", "snippet ") == "Short \nsnippet"
