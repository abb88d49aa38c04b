"""The large data that lives outside the repository (``../shared``: data sets, the real
embedding model, SearXNG's source), found in one place for every test and benchmark.

The folder is ``$SEARCHER_SHARED_DIR``, by default ``shared`` beside the checkout. A test
that needs something from it calls ``require_shared``: it is skipped with one line naming
what is missing, and with ``SEARCHER_REQUIRE_SHARED=1`` (set by ``.ci/run``) the skip
becomes a failure (``tests/conftest.py``), so CI always runs these tests.
"""

from __future__ import annotations

import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
REQUIRE_VARIABLE = "SEARCHER_REQUIRE_SHARED"
# Every skip for missing shared data starts so; the conftest hook recognises it by this.
MISSING_PREFIX = "shared data missing:"


def shared_dir() -> Path:
    """``$SEARCHER_SHARED_DIR``, or ``shared`` beside the checkout."""
    configured = os.environ.get("SEARCHER_SHARED_DIR")
    if configured:
        return Path(configured).expanduser().resolve()
    return (REPO.parent / "shared").resolve()


def shared_path(relative: str) -> Path:
    """``relative`` (e.g. ``data/aeb``) inside the shared folder; it may not exist."""
    return shared_dir() / relative


def missing_reason(relative: str) -> str | None:
    """One line naming what is missing, or None when ``relative`` exists."""
    path = shared_path(relative)
    if path.exists():
        return None
    return f"{MISSING_PREFIX} {path} (set SEARCHER_SHARED_DIR to the folder holding {relative})"


def require_shared(relative: str) -> Path:
    """The path of ``relative`` in the shared folder; skips the calling test when absent
    (a failure under ``SEARCHER_REQUIRE_SHARED=1``, by the conftest hook)."""
    import pytest

    reason = missing_reason(relative)
    if reason is not None:
        pytest.skip(reason)
    return shared_path(relative)


def shared_required() -> bool:
    """Whether a skip for missing shared data must fail the run (CI sets it)."""
    return os.environ.get(REQUIRE_VARIABLE, "") not in ("", "0")


# The paths the tests and benchmarks use (relative to the shared folder).
AEB = "data/aeb"
REAL_MODEL = "models/minilm-static-256"
SCIFACT = "data/scifact"
SEARXNG_SOURCE = "searxng"
