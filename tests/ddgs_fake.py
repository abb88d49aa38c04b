"""A stand-in for ``ddgs.DDGS``, the one library that can only reach the real internet.

It replaces ddgs at its own boundary (the factory the DuckDuckGo backend is given) and
raises ddgs' real exception classes, so our translation of them is what gets tested.
"""

from __future__ import annotations

import threading
from dataclasses import dataclass, field
from typing import Any

from ddgs.exceptions import DDGSException, RatelimitException, TimeoutException


@dataclass
class FakeDDGS:
    """Configure ``behaviour`` and ``rows``; every call is recorded in ``calls``."""

    rows: list[dict[str, Any]] = field(default_factory=list)
    behaviour: str = "ok"  # ok | timeout | ratelimit | no_results | error | hang
    calls: list[tuple[str, dict[str, Any]]] = field(default_factory=list)
    release: threading.Event = field(default_factory=threading.Event)

    def factory(self, timeout_s: float) -> FakeDDGS:
        return self

    def text(self, query: str, **kwargs: Any) -> list[dict[str, Any]]:
        self.calls.append((query, kwargs))
        if self.behaviour == "timeout":
            raise TimeoutException("fake: timed out")
        if self.behaviour == "ratelimit":
            raise RatelimitException("fake: 202 Ratelimit")
        if self.behaviour == "no_results":
            raise DDGSException("No results found.")
        if self.behaviour == "error":
            raise DDGSException("fake: connection reset")
        if self.behaviour == "hang":
            self.release.wait(10)  # bounded: the test releases it when done
        return self.rows[: kwargs.get("max_results") or len(self.rows)]
