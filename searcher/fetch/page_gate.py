"""The browser's pages, shared fairly: at most ``size`` at once, at most a share of them
per client, so that one caller's pages (a hostile site that never finishes loading, a
crawl) cannot hold every page while others wait."""

from __future__ import annotations

import asyncio
import contextlib
from collections import Counter
from collections.abc import AsyncIterator, Hashable


class PageGate:
    """Admits renders: a page when one is free and the client is within its share."""

    def __init__(self, size: int, client_share: float) -> None:
        self.size = size
        self.per_client = max(1, int(size * client_share))
        self._open: Counter[Hashable] = Counter()
        self._changed = asyncio.Condition()

    @property
    def in_use(self) -> int:
        """Pages held now."""
        return sum(self._open.values())

    def _admits(self, client: Hashable) -> bool:
        return self.in_use < self.size and self._open[client] < self.per_client

    @contextlib.asynccontextmanager
    async def page(self, client: Hashable) -> AsyncIterator[None]:
        """Hold one page for ``client`` while the block runs (waiting for one first)."""
        async with self._changed:
            await self._changed.wait_for(lambda: self._admits(client))
            self._open[client] += 1
        try:
            yield
        finally:
            self._open[client] -= 1
            if self._open[client] <= 0:
                del self._open[client]
            async with self._changed:
                self._changed.notify_all()
