"""The request's budget with every unset field filled from the configured defaults."""

from __future__ import annotations

from dataclasses import dataclass, replace

from searcher.config import BudgetDefaults, Settings
from searcher.contract import Budget, ErrorEntry
from searcher.fetch.fetcher import FetchLimits
from searcher.pipeline.limits import clamp_budget


@dataclass(frozen=True)
class EffectiveBudget:
    """Every ``budget`` field, resolved: what the request set, else the configured default."""

    max_tool_calls: int
    max_search_retries: int
    max_results: int
    max_fetch_pages: int
    max_download_bytes_per_page: int
    max_extract_chars_per_page: int
    allowed_content_types: tuple[str, ...]
    max_redirects: int
    max_context_chars: int
    max_total_time_ms: int
    search_timeout_ms: int
    fetch_timeout_ms: int

    def fetch_limits(self) -> FetchLimits:
        """The limits one page read runs under."""
        return FetchLimits(
            timeout_s=self.fetch_timeout_ms / 1000,
            max_bytes=self.max_download_bytes_per_page,
            allowed_content_types=self.allowed_content_types,
            max_redirects=self.max_redirects,
        )


def effective_budget(budget: Budget, defaults: BudgetDefaults) -> EffectiveBudget:
    """Fill the request's unset budget fields from the configured defaults."""

    def pick(value: int | None, default: int) -> int:
        return default if value is None else value

    timeouts = budget.per_request_timeout_ms
    return EffectiveBudget(
        max_tool_calls=pick(budget.max_tool_calls, defaults.max_tool_calls),
        max_search_retries=pick(budget.max_search_retries, defaults.max_search_retries),
        max_results=pick(budget.max_results, defaults.max_results),
        max_fetch_pages=pick(budget.max_fetch_pages, defaults.max_fetch_pages),
        max_download_bytes_per_page=pick(
            budget.max_download_bytes_per_page, defaults.max_download_bytes_per_page
        ),
        max_extract_chars_per_page=pick(
            budget.max_extract_chars_per_page, defaults.max_extract_chars_per_page
        ),
        allowed_content_types=tuple(
            t.lower() for t in (budget.allowed_content_types or defaults.allowed_content_types)
        ),
        max_redirects=pick(budget.max_redirects, defaults.max_redirects),
        max_context_chars=pick(budget.max_context_chars, defaults.max_context_chars),
        max_total_time_ms=pick(budget.max_total_time_ms, defaults.max_total_time_ms),
        search_timeout_ms=pick(timeouts.search if timeouts else None, defaults.search_timeout_ms),
        fetch_timeout_ms=pick(timeouts.fetch if timeouts else None, defaults.fetch_timeout_ms),
    )


@dataclass(frozen=True)
class LimitedBudget:
    """A request's budget within the server's ceilings, and a note per field lowered."""

    budget: EffectiveBudget
    lowered: list[ErrorEntry]

    def spent(self, seconds: float) -> LimitedBudget:
        """This budget for a request that has spent ``seconds`` of its deadline already
        (waiting for an identical request's answer it could not use): the deadline still
        ends when it would have."""
        if seconds <= 0:
            return self
        left = max(1, self.budget.max_total_time_ms - int(seconds * 1000))
        return LimitedBudget(replace(self.budget, max_total_time_ms=left), self.lowered)


def limited_budget(budget: Budget, settings: Settings) -> LimitedBudget:
    """``budget`` held to ``limits.*`` (``InvalidRequest`` when strict), then filled from
    the configured defaults."""
    asked, lowered = clamp_budget(budget, settings.limits)
    return LimitedBudget(effective_budget(asked, settings.budget), lowered)
