"""Server ceilings on what one request may spend (``limits.*``).

The ``budget`` a client sends says how much of the server's time, memory and bandwidth
it wants; the configured defaults only fill what it leaves out. These pure functions hold
every request to the operator's ceilings: a value above its ceiling is lowered to it and
reported (``meta.errors``, stage ``budget``), or refused with ``InvalidRequest`` naming
the field when ``limits.strict`` is on. Configured defaults are never above a ceiling
(``Settings`` refuses such a configuration), so unset fields need no check.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from searcher.config import LIMITED_BUDGET_FIELDS, LimitsSettings
from searcher.contract import Budget, ErrorEntry
from searcher.errors import InvalidRequest

BUDGET_STAGE = "budget"
# per_request_timeout_ms.<part> -> the ceiling that bounds it.
_TIMEOUT_CEILING = "max_total_time_ms"


def over_ceiling(field: str, value: int, setting: str, limit: int, strict: bool) -> ErrorEntry:
    """The note for ``field``'s ``value`` above ``limit`` (the setting ``setting``, e.g.
    ``limits.max_results``); raises ``InvalidRequest`` on ``field`` instead when ``strict``."""
    if strict:
        raise InvalidRequest(field, f"{value} is above this server's limit of {limit} ({setting})")
    return ErrorEntry(
        stage=BUDGET_STAGE,
        source=field,
        reason=f"{value} is above this server's limit ({setting}); {limit} used",
    )


def _over(field: str, value: int, ceiling: str, limit: int, limits: LimitsSettings) -> ErrorEntry:
    return over_ceiling(field, value, f"limits.{ceiling}", limit, limits.strict)


def clamp_budget(budget: Budget, limits: LimitsSettings) -> tuple[Budget, list[ErrorEntry]]:
    """The request's budget with every field at most its ceiling, and a note per field
    that was lowered. Raises ``InvalidRequest`` (field ``budget.<name>``) instead of
    lowering when ``limits.strict``."""
    changes: dict[str, Any] = {}
    notes: list[ErrorEntry] = []
    for name in LIMITED_BUDGET_FIELDS:
        value, limit = getattr(budget, name), getattr(limits, name)
        if value is not None and value > limit:
            notes.append(_over(f"budget.{name}", value, name, limit, limits))
            changes[name] = limit
    timeouts = budget.per_request_timeout_ms
    if timeouts is not None:
        limit = getattr(limits, _TIMEOUT_CEILING)
        lowered: dict[str, int] = {}
        for part in ("search", "fetch"):
            value = getattr(timeouts, part)
            if value is not None and value > limit:
                field = f"budget.per_request_timeout_ms.{part}"
                notes.append(_over(field, value, _TIMEOUT_CEILING, limit, limits))
                lowered[part] = limit
        if lowered:
            changes["per_request_timeout_ms"] = timeouts.model_copy(update=lowered)
    if not changes:
        return budget, notes
    return budget.model_copy(update=changes), notes


def pages_within_limit(
    urls: Sequence[str], limits: LimitsSettings, field: str = "urls"
) -> tuple[list[str], list[str]]:
    """``urls`` split into those one request may read (``limits.max_fetch_pages``) and
    those beyond it. Raises ``InvalidRequest`` on ``field`` instead when ``limits.strict``
    and there are too many."""
    limit = limits.max_fetch_pages
    if len(urls) > limit and limits.strict:
        raise InvalidRequest(
            field,
            f"{len(urls)} pages asked for; this server reads at most {limit} per request "
            "(limits.max_fetch_pages)",
        )
    return list(urls[:limit]), list(urls[limit:])


def extract_chars_within_limit(max_chars: int, limits: LimitsSettings) -> int:
    """``max_chars`` of extracted text per page, at most ``limits.max_extract_chars_per_page``."""
    return min(max_chars, limits.max_extract_chars_per_page)
