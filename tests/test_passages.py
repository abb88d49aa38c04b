"""Query-focused passages: splitting, BM25 selection within a budget, top chunks."""

from __future__ import annotations

import itertools
import re

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from searcher.pack.passages import (
    ELISION,
    MAX_PASSAGES,
    PageChoice,
    page_passage_spans,
    passage_spans,
    select_across_pages,
    select_passages,
    split_passages,
    top_chunks,
    top_chunks_across,
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


# --- across pages -------------------------------------------------------------------------------

OFF_TOPIC = "\n\n".join(FILLER * 2 for _ in range(8))
ANSWER_PAGE = "\n\n".join(
    [FILLER * 2, "The lighthouse keeper's cottage became a museum in 1952.", FILLER * 2]
)


def parts_of(choice: PageChoice) -> list[str]:
    """The page slices a choice shows (elision lines and joins left out)."""
    return [p for p in re.split(r"\s*…\s*|\n\n", choice.text) if p.strip()]


def test_cross_page_gives_the_budget_to_the_best_passages_wherever_they_are() -> None:
    pages = [OFF_TOPIC, OFF_TOPIC.replace("budget", "plan"), ANSWER_PAGE, PAGE]
    query = "when did the lighthouse cottage become a museum"
    choices = select_across_pages(query, pages, 900)
    assert "became a museum in 1952" in choices[2].text
    assert "lighthouse was built in 1871" in choices[3].text
    assert sum(len(c.text) for c in choices) <= 900
    for page, choice in zip(pages, choices, strict=True):
        assert choice.passages == 0 or choice.text
        at = 0
        for part in parts_of(choice):  # each slice found after the one before it
            at = page.index(part.strip(), at) + len(part.strip())
        assert choice.chars <= len(page)


def test_cross_page_floor_gives_each_matching_page_its_best_passage() -> None:
    pages = [PAGE, PAGE.replace("lighthouse", "beacon"), ANSWER_PAGE]
    # The three pages' best passages together fit in half of 3000 characters.
    choices = select_across_pages("lighthouse beacon museum", pages, 3000, floor_share=0.5)
    assert all(c.passages >= 1 for c in choices)
    no_floor = select_across_pages("lighthouse beacon museum", pages, 3000, floor_share=0.0)
    assert sum(len(c.text) for c in no_floor) <= 3000


def test_cross_page_returns_pages_whole_when_they_all_fit() -> None:
    pages = ["A short page.", "Another one.\n\nTwo paragraphs."]
    choices = select_across_pages("page", pages, 100)
    assert [c.text for c in choices] == pages
    assert [c.chars for c in choices] == [len(p) for p in pages]


def test_cross_page_uses_passage_similarity_when_given() -> None:
    pages = [OFF_TOPIC, ANSWER_PAGE]
    spans = page_passage_spans(pages)
    query = "seaside heritage"  # no word in common with any passage
    plain = select_across_pages(query, pages, 300)
    assert "museum" not in plain[1].text
    sims = [[0.0] * len(page) for page in spans]
    target = next(i for i, (s, e) in enumerate(spans[1]) if "museum" in ANSWER_PAGE[s:e])
    sims[1][target] = 0.9
    chosen = select_across_pages(query, pages, 300, sims)
    assert "became a museum in 1952" in chosen[1].text


@settings(max_examples=100, deadline=None)
@given(
    pages=st.lists(st.text(alphabet="ab cd\n.", max_size=600), min_size=1, max_size=4),
    budget=st.integers(0, 800),
)
def test_cross_page_never_exceeds_its_budget(pages: list[str], budget: int) -> None:
    choices = select_across_pages("ab cd", pages, budget)
    assert len(choices) == len(pages)
    assert sum(len(c.text) for c in choices) <= max(budget, 0)
    assert choices == select_across_pages("ab cd", pages, budget)


def test_chunks_across_pages_rank_together_with_a_floor_per_page() -> None:
    pages = [PAGE, OFF_TOPIC, ANSWER_PAGE, ""]
    chunks = top_chunks_across("lighthouse museum football", pages, 2, 300)
    assert [len(c) for c in chunks] == [2, 1, 1, 0]
    assert any("1871" in c for c in chunks[0]) and "1952" in chunks[2][0]
    for page, page_chunks in zip(pages, chunks, strict=True):
        assert all(c in page and len(c) <= 300 for c in page_chunks)


def test_cross_page_cuts_the_best_passage_rather_than_show_a_scrap() -> None:
    # The matching passage (1,000 characters of short lines) does not fit; a 4-character
    # fragment beside it does. The pack used to get only that fragment.
    page = "\n".join(f"x{i}" for i in range(3000))
    (choice,) = select_across_pages("x1", [page], 713, size=1000)
    assert "\nx1\n" in choice.text and 600 <= len(choice.text) <= 713
    assert (choice.passages, choice.chars) == (1, len(choice.text))
