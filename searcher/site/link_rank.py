"""Which links a crawl follows first: those whose anchor text and URL match what it is
looking for, by BM25 (``searcher.text``), ties kept in page order; with an LLM
configured, the model's picks first (``llm_ranker``), BM25 as its fallback. Without a
query the page order stands."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Awaitable, Callable, Sequence
from urllib.parse import unquote, urlsplit

from searcher.llm.runner import StepRunner
from searcher.llm.snippet_rank import Candidate, rank_candidates
from searcher.site.links import Link
from searcher.text import bm25, query_terms, stem, words

_URL_SEPARATORS = re.compile(r"[/\-_.?=&+]+")


def link_text(link: Link) -> str:
    """What is read of a link: its anchor text, and its URL's path and query as words."""
    parts = urlsplit(link.url)
    address = _URL_SEPARATORS.sub(" ", unquote(f"{parts.path} {parts.query}"))
    return f"{link.text} {address}"


def link_scores(query: str, links: Sequence[Link]) -> list[float]:
    """Each link's BM25 score for ``query`` over the links given (their own statistics)."""
    terms = query_terms(query)
    stemmed = [[stem(w) for w in words(link_text(link).lower())] for link in links]
    counts = [Counter(s) for s in stemmed]
    return bm25(terms, counts, [float(len(s)) for s in stemmed])


def ranked_links(query: str | None, links: Sequence[Link]) -> list[Link]:
    """``links`` best first for ``query`` (stable: equal scores keep their order)."""
    if not query or len(links) < 2:
        return list(links)
    scores = link_scores(query, links)
    order = sorted(range(len(links)), key=lambda i: -scores[i])
    return [links[i] for i in order]


# Ranks a page's (or a level's) links for a query, best first; ``want``: how many of
# them will be followed (the rest may come in any order).
RankLinks = Callable[[str | None, Sequence[Link], int], Awaitable[list[Link]]]
MAX_LLM_LINKS = 30  # links shown to the model at once (in page order)
MAX_LLM_PICKS = 10


async def bm25_ranked(query: str | None, links: Sequence[Link], want: int) -> list[Link]:
    """``ranked_links`` as a ``RankLinks``."""
    return ranked_links(query, links)


def llm_ranker(runner: StepRunner) -> RankLinks:
    """Links ranked by the model (the ``rank`` step: it picks the best of the first
    ``MAX_LLM_LINKS``, shown in page order with their anchor text), the rest after them
    in BM25 order; BM25 alone whenever the step falls back (no reply, a bad one, the
    call budget or deadline spent)."""

    async def rank(query: str | None, links: Sequence[Link], want: int) -> list[Link]:
        ordered = ranked_links(query, links)
        if not query or len(links) < 2:
            return ordered
        shown = list(links)[:MAX_LLM_LINKS]
        candidates = [Candidate(i, link.text or link.url, "", link.url)
                      for i, link in enumerate(shown)]  # fmt: skip
        picks = min(want, MAX_LLM_PICKS, len(shown))
        result = await rank_candidates(runner, query, candidates, picks)
        if result.fallback_used:
            return ordered
        picked = [shown[i] for i in result.picks]
        return picked + [link for link in ordered if link not in picked]

    return rank
