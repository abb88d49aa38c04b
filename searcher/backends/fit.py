"""What an instance can honour of a query: the query as it is sent to that instance, and
a note for each constraint left out (the service lists them in ``meta.errors``)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from searcher.backends.base import BackendQuery, Capabilities

# (capability, query field, constraint as the request names it)
_CONSTRAINTS: tuple[tuple[str, str, str], ...] = (
    ("language", "lang", "constraints.lang"),
    ("time_range", "time_range", "constraints.time_range"),
    ("safesearch", "safesearch", "constraints.safesearch"),
    ("engines", "engines", "constraints.engines"),
    ("categories", "categories", "constraints.categories"),
)
_CLEARED: dict[str, Any] = {
    "lang": None, "time_range": None, "safesearch": None, "engines": (), "categories": ()
}  # fmt: skip


def fit_query(query: BackendQuery, capabilities: Capabilities) -> tuple[BackendQuery, list[str]]:
    """The query with what the instance cannot honour left out, and a note for each
    constraint left out (as the request names it)."""
    cleared: dict[str, Any] = {}
    notes = []
    for capability, name, constraint in _CONSTRAINTS:
        value = getattr(query, name)
        if value not in (None, ()) and not getattr(capabilities, capability):
            cleared[name] = _CLEARED[name]
            if name in query.routed:
                continue
            shown = ", ".join(value) if isinstance(value, tuple) else value
            notes.append(f"cannot honour {constraint} ({shown}); searched without it")
    last_page = _limit(capabilities, "max_pageno")
    if query.pageno > 1 and not capabilities.paging:
        cleared["pageno"] = 1
        notes.append(f"cannot honour constraints.pageno ({query.pageno}); searched page 1")
    elif last_page is not None and query.pageno > last_page:
        cleared["pageno"] = last_page
        notes.append(
            f"cannot honour constraints.pageno ({query.pageno}): it serves pages up to "
            f"{last_page}; searched page {last_page}"
        )
    most = _limit(capabilities, "max_results")
    if most is not None and query.max_results > most:
        notes.append(
            f"cannot honour budget.max_results ({query.max_results}): it gives at most {most} "
            "results a search"
        )
    return (replace(query, **cleared) if cleared else query), notes


def _limit(capabilities: Capabilities, name: str) -> int | None:
    """A limit an adapter's capabilities add (``max_pageno``, ``max_results``), if any."""
    value = getattr(capabilities, name, None)
    return value if isinstance(value, int) else None
