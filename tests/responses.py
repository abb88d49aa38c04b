"""Building a ``SearchResponse`` by hand, for tests of code that translates one (the
compatibility endpoints)."""

from __future__ import annotations

from searcher.contract import ErrorEntry, Item, Meta, Producer, SearchResponse, Usage


def search_response(
    items: list[Item],
    *,
    errors: list[ErrorEntry] | None = None,
    answer: str | None = None,
    mode: str = "simple",
    timing_ms: dict[str, int] | None = None,
    created: str = "2026-01-01T00:00:00Z",
) -> SearchResponse:
    """A response holding ``items``, as searxng answered it."""
    return SearchResponse(
        created_utc=created,
        producer=Producer(name="searcher", version="0"),
        request={},
        meta=Meta(
            backend_used="searxng",
            fallback_used=False,
            pick_applied=False,
            pick_ids=[],
            mode_used=mode,  # type: ignore[arg-type]
            timing_ms=timing_ms or {},
            errors=errors or [],
        ),
        usage=Usage(results_returned=len(items), context_chars=0, fetch_pages_used=0),
        items=items,
        answer=answer,
    )
