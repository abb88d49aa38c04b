"""Passages chosen across pages for the context pack: the embedding step (async, before
rendering) and the allotter the renderer calls with its content budget.

The choice itself is the pure :func:`searcher.pack.passages.select_across_pages`; this module
only feeds it the passage-query cosines when an embedder is loaded, and keeps what it
chose so the response can say how many passages each page gave (``meta.passages``).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from searcher.contract import PagePassages
from searcher.embedding.embedders import Embedder
from searcher.errors import EmbedderUnavailable
from searcher.pack.passages import PageChoice, page_passage_spans, select_across_pages

# Embedding more passages than this per request costs more than it adds (a static model
# does ~15,000 a second here; a remote endpoint far fewer): BM25 alone decides beyond it.
MAX_EMBEDDED_PASSAGES = 1000

Similarity = dict[str, list[float]]  # page text -> cosine of each of its passages


async def passage_similarity(
    embedder: Embedder | None, query: str, texts: Sequence[str]
) -> Similarity | None:
    """The cosine between ``query`` and each passage of each page (as
    ``page_passage_spans`` cuts them); None without a working embedder or when there are
    more than ``MAX_EMBEDDED_PASSAGES`` passages."""
    texts = [t for t in dict.fromkeys(texts) if t]
    if embedder is None or not texts:
        return None
    spans = page_passage_spans(texts)
    passages = [text[s:e] for text, page in zip(texts, spans, strict=True) for s, e in page]
    if not passages or len(passages) > MAX_EMBEDDED_PASSAGES:
        return None
    try:
        vectors = np.asarray(await embedder.embed([query, *passages]), dtype=np.float32)
    except EmbedderUnavailable:
        return None
    cosines = (vectors[1:] @ vectors[0]).tolist()
    out: Similarity = {}
    at = 0
    for text, page in zip(texts, spans, strict=True):
        out[text] = cosines[at : at + len(page)]
        at += len(page)
    return out


@dataclass
class CrossPageAllotter:
    """``allot(contents, budget)`` for ``render_context_pack``: the passages of all pages
    ranked together; remembers its last choice (the one the pack shows)."""

    query: str
    similarity: Similarity | None = None
    chosen: list[tuple[str, PageChoice]] = field(default_factory=list)

    def __call__(self, contents: Sequence[str], budget: int) -> list[str]:
        sims = None
        if self.similarity is not None and all(c in self.similarity for c in contents):
            sims = [self.similarity[c] for c in contents]
        choices = select_across_pages(self.query, contents, budget, sims)
        self.chosen = list(zip(contents, choices, strict=True))
        return [c.text for c in choices]


def passages_meta(
    pages: Sequence[tuple[str, str, str | None]], allotter: CrossPageAllotter
) -> list[PagePassages]:
    """``meta.passages``: for each (id, url, content) the pack was given a content for,
    in rank order, what the allotter's last choice kept of it (nothing for a page the
    budget left no room to offer it)."""
    kept = {id(content): choice for content, choice in allotter.chosen}
    return [
        PagePassages(
            id=item_id,
            url=url,
            passages=choice.passages if choice is not None else 0,
            chars=choice.chars if choice is not None else 0,
        )
        for item_id, url, content in pages
        if content is not None
        for choice in [kept.get(id(content))]
    ]
