"""A crawl's manners towards each host: at most ``per_host`` requests to it at once, and
their starts at least ``delay_s`` apart."""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field

MAX_CRAWL_DELAY_S = 10.0  # a robots.txt Crawl-delay beyond this would stall a job for hours


def host_delay(requested_s: float, robots_delay_s: float | None) -> float:
    """The pause between two requests to a host: what was asked, raised to the site's own
    ``Crawl-delay`` (at most ``MAX_CRAWL_DELAY_S``)."""
    return max(requested_s, min(robots_delay_s or 0.0, MAX_CRAWL_DELAY_S))


@dataclass
class _Host:
    slots: asyncio.Semaphore
    turn: asyncio.Lock = field(default_factory=asyncio.Lock)
    next_start: float = 0.0  # monotonic


class HostPacer:
    """Per-host slots and spacing for one crawl."""

    def __init__(self, delay_s: float, per_host: int) -> None:
        self.delay_s = delay_s
        self._per_host = per_host
        self._hosts: dict[str, _Host] = {}

    @contextlib.asynccontextmanager
    async def turn(self, host: str) -> AsyncIterator[None]:
        """Hold one of ``host``'s slots, entered no sooner than ``delay_s`` after the last
        request to it started."""
        state = self._hosts.setdefault(host, _Host(asyncio.Semaphore(self._per_host)))
        async with state.slots:
            async with state.turn:  # starts are spaced one after the other
                wait = state.next_start - time.monotonic()
                if wait > 0:
                    await asyncio.sleep(wait)
                state.next_start = time.monotonic() + self.delay_s
            yield
