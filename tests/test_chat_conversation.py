"""The pure parts of the chat models: reading a conversation, the condensing fallback,
citations renumbered, and the session novelty rule."""

from __future__ import annotations

import pytest

from searcher.chat.conversation import carried_query, fallback_query, read_conversation, urls_in
from searcher.chat.reply import cited_numbers, renumbered
from searcher.chat.wire import ChatMessage
from searcher.ranking.novelty import demote_shown, shown_keys


def messages(*turns: tuple[str, str]) -> list[ChatMessage]:
    return [ChatMessage.model_validate({"role": r, "content": c}) for r, c in turns]


@pytest.mark.parametrize(
    ("previous", "question", "query"),
    [
        ("capital of France", "and its population?", "France capital population"),
        (
            "What is the capital of France?",
            "How many people live there?",
            "France capital people live",
        ),
        ("Who directed Alien?", "what about its sequel?", "Alien directed sequel"),
        ("Okapi BM25", "who invented it?", "Okapi BM25 invented"),
        ("capital of France", "population?", "France capital population"),
        # A question that names its own subject stands alone.
        ("capital of France", "Tallest mountain in Japan", "Tallest mountain in Japan"),
        ("capital of France", "How does BM25 rank documents?", "How does BM25 rank documents?"),
        # The operators typed, in either question, hold whole.
        (
            "capital of Spain -wikipedia filetype:pdf",
            "and its population?",
            "Spain capital population -wikipedia filetype:pdf",
        ),
        (
            "capital of Egypt",
            '"exact phrase" -wiki site:example.com and its population?',
            'Egypt capital population "exact phrase" -wiki site:example.com',
        ),
    ],
)
def test_a_follow_up_carries_the_previous_querys_words_names_first(previous, question, query):
    assert carried_query(previous, question) == query


def test_each_turn_carries_the_standalone_form_of_the_one_before():
    conversation = read_conversation(
        messages(
            ("system", "Be brief."),
            ("user", "capital of France"),
            ("assistant", "Paris [1].\n\nSources:\n[1] Paris — https://example.org/paris."),
            ("user", "and its population?"),
            ("assistant", "About 2 million, see <https://stats.example/fr?x=1>"),
            ("user", "and its area?"),
        )
    )
    assert conversation.questions[-1] == "and its area?" and conversation.is_follow_up
    assert fallback_query(conversation) == "France capital population area"
    assert conversation.shown_urls == ["https://example.org/paris", "https://stats.example/fr?x=1"]
    assert [role for role, _ in conversation.turns] == ["user", "assistant", "user", "assistant"]


def test_text_parts_are_read_and_other_parts_left_out():
    (message,) = messages(
        (
            "user",
            [
                {"type": "text", "text": "look at"},
                {"type": "image_url"},
                {"type": "text", "text": "this"},
            ],
        )  # type: ignore[arg-type]
    )
    assert message.text == "look at\nthis"


def test_what_only_looks_like_a_url_is_not_one():
    text = "use http://[your-host]:8080/v1 or http://]x, not https://a.example/x"
    assert urls_in(text) == ["https://a.example/x"]


def test_urls_lose_the_sentences_punctuation():
    assert urls_in("see (https://a.example/x), and http://b.example/y.") == [
        "https://a.example/x",
        "http://b.example/y",
    ]


def test_urls_keep_the_brackets_they_hold_in_pairs():
    text = "[1] Mercury — https://en.wikipedia.org/wiki/Mercury_(planet); [b](https://y.example/z_(q))."
    assert urls_in(text) == [
        "https://en.wikipedia.org/wiki/Mercury_(planet)",
        "https://y.example/z_(q)",
    ]
    assert urls_in("[x](https://a.example/[v]) and https://b.example/p]") == [
        "https://a.example/[v]",
        "https://b.example/p",
    ]


def test_citations_are_renumbered_merged_and_dropped_when_unknown():
    text = "A [3]. B [1, 4][2]. C [9]. D [ 3 , 3 ]."
    assert cited_numbers(text) == [3, 1, 4, 2, 9]
    assert renumbered(text, {1: 1, 3: 2, 4: 2, 2: 1}) == "A [2]. B [1, 2][1]. C . D [2]."


def test_shown_results_step_aside_but_the_best_keeps_its_place():
    urls = [f"https://site.example/{n}" for n in range(6)]
    shown = shown_keys(["http://site.example/0", "https://site.example/2/", urls[3]])
    assert demote_shown(urls, lambda u: u, shown) == [urls[i] for i in (0, 1, 4, 5, 2, 3)]
    assert demote_shown(urls, lambda u: u, frozenset()) == urls
    assert demote_shown(urls[2:4], lambda u: u, shown) == urls[2:4]  # only repeats: kept
