"""Which links a crawl follows first: those whose anchor text and URL match what it is
looking for, by BM25 (``searcher.text``), ties kept in page order. Without a query the
page order stands."""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Sequence
from urllib.parse import unquote, urlsplit

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
