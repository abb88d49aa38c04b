"""Choosing which ranked results a response carries: domain filters, pick_ids, the cap."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import TypeVar

from searcher.fetch.urls import domain_matches, host_of

T = TypeVar("T")


def filter_domains(
    results: Sequence[T],
    url_of: Callable[[T], str],
    include: Sequence[str] | None,
    exclude: Sequence[str] | None,
) -> list[T]:
    """Keep results on ``include`` domains (if given) and not on ``exclude`` domains."""
    if not include and not exclude:
        return list(results)
    kept = []
    for result in results:
        host = host_of(url_of(result))
        if include and not any(domain_matches(host, d) for d in include):
            continue
        if exclude and any(domain_matches(host, d) for d in exclude):
            continue
        kept.append(result)
    return kept


def apply_pick_ids(
    results: Sequence[T], pick_ids: Sequence[int] | None
) -> tuple[list[T], list[int]]:
    """The results at ``pick_ids`` (0-based), in the order given; invalid and duplicate ids
    are dropped. Returns the results and the ids actually applied."""
    if pick_ids is None:
        return list(results), []
    applied = [i for i in dict.fromkeys(pick_ids) if 0 <= i < len(results)]
    return [results[i] for i in applied], applied
