"""Each result's text read once per request (searcher/ranking/tokens.py): the keyword
filter, the hybrid stage and near-duplicate removal share one ``RequestTexts``, and what
each of them finds is what it found reading the text on its own."""

from __future__ import annotations

from hypothesis import example, given
from hypothesis import strategies as st

from searcher.backends.base import Hit
from searcher.config import ScoringSettings
from searcher.ranking.hybrid import hybrid_scores
from searcher.ranking.relevance import keyword_overlap, load_domain_lists, score_results
from searcher.ranking.tokens import RequestTexts
from searcher.text import document_text, query_keywords

WORDS = ["Routers", "routing", "route", "firmware", "updating", "SRVO-063", "srvo", "063",
         "the", "a", "it’s", "£5", "x_y", "été", "—", "node.js", "Cloud", "gaming"]  # fmt: skip
texts = st.lists(st.sampled_from(WORDS), max_size=10).map(" ".join)
SETTINGS = ScoringSettings()
LISTS = load_domain_lists(SETTINGS)


def hit(title: str, snippet: str, url: str = "https://x.example/") -> Hit:
    return Hit(url=url, title=title, snippet=snippet, backend="test")


@given(texts, texts, texts, st.sampled_from([*WORDS, "-", "/"]))
@example("routers firmware", "Updating the router", "", "/")
@example("SRVO-063 alarm", "srvo 063 fix", "", "/")
def test_the_keyword_filter_finds_from_the_shared_tokens_what_it_finds_alone(
    query: str, title: str, snippet: str, path: str
) -> None:
    url = f"https://x.example/{path}"
    alone = keyword_overlap(query_keywords(query), title, snippet, url)
    (scored,) = score_results([(hit(title, snippet, url), 1.0, 1)], query, "general", LISTS,
                              SETTINGS, RequestTexts(query))  # fmt: skip
    assert scored.components["keyword_overlap"] == alone


@given(texts, st.lists(texts, min_size=2, max_size=5))
def test_the_hybrid_stage_scores_alike_from_tokens_the_filter_read(
    query: str, snippets: list[str]
) -> None:
    request = RequestTexts(query)
    hits = [(hit(f"t{i}", s), 1.0, 1) for i, s in enumerate(snippets)]
    score_results(hits, query, "general", LISTS, SETTINGS, request)
    read = {t: request.read(t) for t in (document_text(h.title, h.snippet) for h, _, _ in hits)}
    shared = hybrid_scores(query, list(read), None, request)
    # Read once: the hybrid stage took the filter's tokens, it did not read the texts again.
    assert all(request.read(t) is tokens for t, tokens in read.items())
    assert shared == hybrid_scores(query, list(read), None)
