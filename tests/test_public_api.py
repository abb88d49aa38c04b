"""The package root's public API is small, explicit and pinned: a name added or removed
here is a decision, not an accident."""

from __future__ import annotations

import subprocess
import sys

import searcher

PINNED = {
    "__version__",
    "open_service",
    "Runtime",
    "SearchService",
    "Settings",
    "load_settings",
    "SearchRequest",
    "SearchResponse",
    "Query",
    "Constraints",
    "Want",
    "Budget",
    "Item",
    "Meta",
    "FetchPageResponse",
    "SearcherClient",
    "AsyncSearcherClient",
    "snippet_rank",
    "SearcherError",
    "ConfigError",
    "InvalidRequest",
    "AllBackendsFailed",
    "BackendError",
    "FetchError",
    "LlmError",
    "RemoteError",
}


def test_all_is_pinned() -> None:
    assert set(searcher.__all__) == PINNED
    assert len(searcher.__all__) == len(PINNED)  # no name twice


def test_every_exported_name_resolves_to_its_definition() -> None:
    for name in PINNED - {"__version__"}:
        value = getattr(searcher, name)
        assert getattr(value, "__name__", name) == name, name
        assert value.__module__.startswith("searcher."), name


def test_errors_share_one_root() -> None:
    for name in ("ConfigError", "InvalidRequest", "AllBackendsFailed", "BackendError",
                 "FetchError", "LlmError", "RemoteError"):  # fmt: skip
        assert issubclass(getattr(searcher, name), searcher.SearcherError)


def test_unknown_name_is_an_attribute_error() -> None:
    try:
        searcher.no_such_name  # noqa: B018
    except AttributeError as exc:
        assert "no_such_name" in str(exc)
    else:
        raise AssertionError("expected AttributeError")


def test_importing_the_package_loads_nothing_heavy() -> None:
    # `searcher --version` must stay fast: the root imports no submodule until asked.
    code = "import sys, searcher; print(sorted(m for m in sys.modules if m.startswith('searcher')))"
    out = subprocess.run(
        [sys.executable, "-c", code], capture_output=True, text=True, check=True
    ).stdout
    assert out.strip() == "['searcher']"


def test_library_round_trip_through_the_public_names(make_settings) -> None:  # type: ignore[no-untyped-def]
    import asyncio

    async def run() -> searcher.SearchResponse:
        async with searcher.open_service(make_settings(), extract_in_process=True) as runtime:
            return await runtime.service.search(searcher.SearchRequest(query="cloud gaming"))

    response = asyncio.run(run())
    assert response.items and response.rendered_text
