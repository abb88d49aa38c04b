"""SearXNG's JSON answer around a list of results, in one place for everything that speaks
it: the SearXNG-compatible endpoint (``compat/searxng.py``) and the demo web
(``demo/web.py``). Standard library only: the demo web imports it in the lean runtime."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any


def searxng_envelope(
    query: str, results: list[dict[str, Any]], unresponsive: Sequence[Sequence[str]] = ()
) -> dict[str, Any]:
    """SearXNG's answer: ``results`` (SearXNG result objects) and the engines that did not
    answer as ``[name, reason]`` pairs; the other lists SearXNG sends are empty."""
    return {
        "query": query,
        # SearXNG's estimate of all matches; here the count returned. Older clients read it.
        "number_of_results": len(results),
        "results": results,
        "answers": [],
        "corrections": [],
        "infoboxes": [],
        "suggestions": [],
        "unresponsive_engines": [list(pair) for pair in unresponsive],
    }
