"""Auto-paging: an instance that has no result count (SearXNG) is asked for its next
pages until ``max_results`` is met."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import replace

from searcher.backends.base import Backend, BackendAnswer, BackendQuery, Hit
from searcher.backends.runner import MIN_ATTEMPT_S, BackendRunner, Watch
from searcher.errors import BackendError
from searcher.fetch.urls import page_key
from searcher.pipeline.resilience import Deadline


def merge_pages(pages: Sequence[list[Hit]]) -> list[Hit]:
    """Hits of consecutive result pages, without repeats (SearXNG pages overlap)."""
    seen: set[str] = set()
    merged = []
    for page in pages:
        for hit in page:
            key = page_key(hit.url)
            if key not in seen:
                seen.add(key)
                merged.append(hit)
    return merged


async def more_pages(
    runner: BackendRunner, backend: Backend, query: BackendQuery, first: BackendAnswer,
    deadline: Deadline, timeout_s: float, max_pages: int,
) -> BackendAnswer:  # fmt: skip
    """SearXNG has no count parameter: ask for the next pages until there are enough
    hits, a page adds nothing new, or ``max_pages`` is reached. Each page is a call like
    the first (its breaker, its pacing turn); a later page failing or finding no turn
    before the deadline keeps what the earlier ones gave, with a warning."""
    pages = [first.hits]
    hits = merge_pages(pages)
    warnings = list(first.warnings)
    pageno = query.pageno
    for _ in range(max_pages - 1):
        if (
            len(hits) >= query.max_results
            or not pages[-1]
            or deadline.cap(timeout_s) < MIN_ATTEMPT_S
        ):
            break
        pageno += 1
        try:
            page = await runner.page(
                backend, replace(query, pageno=pageno), deadline, timeout_s, 0, Watch()
            )
        except BackendError as exc:
            warnings.append(f"page {pageno} not read ({exc.kind}): {exc.reason}")
            break
        pages.append(page.hits)
        warnings += [w for w in page.warnings if w not in warnings]
        before = len(hits)
        hits = merge_pages(pages)
        if len(hits) == before:
            break
    return replace(first, hits=hits, warnings=warnings, unresponsive=tuple(first.unresponsive))
