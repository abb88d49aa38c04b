"""Session novelty: results a conversation or an agent's session was already shown step
aside for ones it was not, unless they are still the best.

The rule (docs/api.md, "Session novelty"): a result whose page (``page_key``: the URL
normalised, http and https as one) was shown before moves below every result that was
not, the repeats keeping their order among themselves; the result ranked first keeps its
place even when it was shown, because an answer that is still the best must not be
hidden. Nothing is dropped: with only repeats left, the repeats are what is returned.
"""

from __future__ import annotations

from collections.abc import Callable, Collection, Iterable, Sequence
from typing import TypeVar

from searcher.fetch.urls import page_key

T = TypeVar("T")


def shown_keys(urls: Iterable[str]) -> frozenset[str]:
    """The page keys of ``urls``, as ``demote_shown`` compares them."""
    return frozenset(page_key(url) for url in urls)


def demote_shown(
    results: Sequence[T], url_of: Callable[[T], str], shown: Collection[str]
) -> list[T]:
    """``results`` (best first) with those whose page key is in ``shown`` moved after the
    others, except the first result, which keeps its place."""
    if not shown or len(results) < 2:
        return list(results)
    head, rest = results[0], results[1:]
    fresh = [r for r in rest if page_key(url_of(r)) not in shown]
    repeats = [r for r in rest if page_key(url_of(r)) in shown]
    return [head, *fresh, *repeats]
