"""Query-focused passages: splitting, BM25 selection within a budget, top chunks."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from searcher.passages import (
    ELISION,
    MAX_PASSAGES,
    passage_spans,
    query_terms,
    select_passages,
    split_passages,
    top_chunks,
)

FILLER = (
    "The committee met again in the spring and discussed the budget at some length. "
    "Several members asked for more detail on the costs of the new building. "
)
PAGE = "\n\n".join(
    [
        "# Example town",
        "Example is a small town on the coast, known for its harbour and its old mill.",
        "## History",
        FILLER * 3,
        "The lighthouse was built in 1871 by the harbour board and still guides ships.",
        FILLER * 3,
        "## Sport",
        "The football club was founded in 1903 and plays at the riverside ground.",
        FILLER * 3,
    ]
)


def squash(text: str) -> str:
    return re.sub(r"\s+", "", text)


# --- splitting ------------------------------------------------------------------------------


def test_paragraphs_become_passages_and_headings_stay_with_their_text() -> None:
    passages = split_passages(PAGE)
    assert passages[0].startswith("# Example town\n\nExample is a small town")
    assert "## History\n\nThe committee met" in passages[0]
    assert any(p.startswith("## Sport\n\nThe football club was founded") for p in passages)
    assert not any(p.startswith("#") and "\n" not in p for p in passages)
    assert all(len(p) <= 500 for p in passages)
    assert squash("".join(passages)) == squash(PAGE)


def test_long_paragraphs_are_cut_at_sentence_boundaries() -> None:
    text = " ".join(f"Sentence number {n} says something short." for n in range(60))
    passages = split_passages(text, 200)
    assert len(passages) > 1
    assert all(len(p) <= 200 and p.endswith(".") for p in passages)
    assert " ".join(passages) == text


def test_an_overlong_sentence_is_cut_at_spaces_and_a_token_hard() -> None:
    words = "word " * 300
    assert all(len(p) <= 100 for p in split_passages(words, 100))
    assert split_passages("x" * 250, 100) == ["x" * 100, "x" * 100, "x" * 50]


def test_line_separated_text_and_tiny_fragments() -> None:
    text = "Head\nFirst para. Is here.\nSecond para with more.\na item\nb item\nSub\nThird."
    assert split_passages(text, 500) == [text]
    pieces = split_passages(text, 40)
    assert all(len(p) <= 40 for p in pieces)
    assert squash("".join(pieces)) == squash(text)


def test_blank_text_and_bad_size() -> None:
    assert split_passages("") == []
    assert split_passages(" \n\n\t \n") == []
    with pytest.raises(ValueError):
        split_passages("text", 0)


def test_passages_are_capped_on_huge_pages() -> None:
    text = "\n\n".join(f"Paragraph {n} " + "word " * 90 for n in range(5000))
    spans = passage_spans(text)
    assert len(spans) == MAX_PASSAGES


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from("ab .!?\n\t…é"), max_size=2000),
    max_chars=st.integers(1, 300),
)
def test_passages_are_ordered_slices_covering_the_text(text: str, max_chars: int) -> None:
    spans = passage_spans(text, max_chars)
    assert all(0 < e - s <= max_chars for s, e in spans)
    assert all(a[1] <= b[0] for a, b in itertools.pairwise(spans))
    assert squash("".join(text[s:e] for s, e in spans)) == squash(text)
    assert all(text[s:e] == text[s:e].strip() for s, e in spans)


# --- scoring and selection ------------------------------------------------------------------


def test_query_terms_drop_stop_words_and_stem_plurals() -> None:
    assert query_terms("What are the countries with the most boxes and engines?") == [
        "country",
        "box",
        "engine",
    ]
    assert query_terms("Who won in 1871, a or b?") == ["won", "1871"]


def test_select_keeps_the_matching_passage_in_document_order() -> None:
    chosen = select_passages("when was the lighthouse built", PAGE, 300)
    assert "The lighthouse was built in 1871" in chosen
    assert len(chosen) <= 300
    both = select_passages("lighthouse football", PAGE, 400)
    assert both.index("lighthouse") < both.index("football")
    assert f"\n\n{ELISION}\n\n" in both  # the gap between them is marked
    football = select_passages("football club riverside ground", PAGE, 120)
    assert football.startswith(f"{ELISION}\n\n")  # and so is a head left out
    assert "The football club was founded in 1903" in football


def test_select_matches_case_and_plurals() -> None:
    text = "\n\n".join([FILLER * 4, "Many COUNTRIES signed the treaty.", FILLER * 4])
    assert "COUNTRIES signed" in select_passages("which country signed", text, 200)


def test_select_falls_back_to_the_head_when_nothing_matches() -> None:
    chosen = select_passages("zeppelin quantum", PAGE, 300)
    assert chosen.startswith("# Example town\n\nExample is a small town")
    assert ELISION not in chosen
    assert PAGE.startswith(chosen)


def test_select_whole_text_when_it_fits_and_nothing_for_no_budget() -> None:
    assert select_passages("lighthouse", "Short text.", 100) == "Short text."
    assert select_passages("lighthouse", PAGE, 0) == ""
    assert select_passages("lighthouse", "", 50) == ""


def test_select_cuts_the_best_passage_when_none_fits_whole() -> None:
    text = FILLER * 5 + "\n\n" + "The lighthouse " + "stands tall " * 40
    chosen = select_passages("lighthouse", text, 60)
    assert len(chosen) <= 60
    assert chosen.startswith(f"{ELISION}\n\nThe lighthouse")
    assert chosen.endswith(ELISION)


def test_select_is_deterministic_with_ties_by_position() -> None:
    cat = "A cat sat on the mat in the old house by the sea."
    text = "\n\n".join(["Filler text here. " * 15, cat, "Filler text. " * 20, cat])
    first = select_passages("cat", text, 80)
    assert first == select_passages("cat", text, 80)
    assert first == f"{ELISION}\n\n{cat}"  # the earlier of two equal passages


@settings(max_examples=300, deadline=None)
@given(
    text=st.text(alphabet=st.sampled_from("ab cd.\n…"), max_size=3000),
    query=st.text(alphabet=st.sampled_from("ab cd"), max_size=12),
    budget=st.integers(-5, 1500),
)
def test_select_never_exceeds_the_budget(text: str, query: str, budget: int) -> None:
    chosen = select_passages(query, text, budget)
    assert len(chosen) <= max(budget, 0)
    pieces = [p for p in re.split(r"\s*…\s*", chosen) if p.strip()]
    at = 0
    for piece in pieces:  # kept passages appear in document order
        found = text.find(piece.split()[0], at)
        assert found >= 0
        at = found


# --- top chunks -----------------------------------------------------------------------------


def test_top_chunks_best_first() -> None:
    chunks = top_chunks("lighthouse football club", PAGE, 2)
    assert len(chunks) == 2
    assert chunks[0].startswith("## Sport") or "football" in chunks[0]
    assert "lighthouse" in chunks[1]
    assert all(len(c) <= 500 for c in chunks)


def test_top_chunks_fill_with_the_head_and_respect_n() -> None:
    assert top_chunks("lighthouse", PAGE, 0) == []
    chunks = top_chunks("lighthouse", PAGE, 3, max_chars=120)
    assert chunks[0].startswith("The lighthouse")
    assert chunks[1].startswith("# Example town")  # unmatched: in page order
    assert all(len(c) <= 120 for c in chunks)
    assert top_chunks("nothing", "", 3) == []
