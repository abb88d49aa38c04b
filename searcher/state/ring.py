"""A ring of ids in the state store: a bounded book (recordings, feedback records) keeps
at most ``size`` entries, a new id taking the next slot and the id that slot held going.

An id kept again (a client may send the same ``X-Request-ID`` twice) takes a new slot and
moves there: the slot it held before no longer evicts it, so its newest entry stays until
its own slot comes round."""

from __future__ import annotations

from searcher.state.base import StateStore


class Ring:
    """The ring of ``size`` slots under ``prefix`` (``seq``, ``slot:N`` -> id, ``at:ID`` ->
    the slot of the id's newest entry), each entry kept ``ttl_s``."""

    def __init__(self, store: StateStore, prefix: str, size: int, ttl_s: int) -> None:
        self.store = store
        self.prefix = prefix
        self.size = size
        self.ttl_s = ttl_s

    async def put(self, item_id: str) -> str | None:
        """Take the next slot for ``item_id``; the id evicted from it (whose entry the
        caller drops), or None: the slot was free, held ``item_id`` already, or held an
        id kept again since in a later slot."""
        slot = (await self.store.incr(f"{self.prefix}seq") - 1) % self.size
        old = await self.store.get(f"{self.prefix}slot:{slot}")
        evicted = None
        if old is not None and old.decode() != item_id:
            at = await self.store.get(f"{self.prefix}at:{old.decode()}")
            if at is None or int(at) == slot:  # (no "at": kept before ids could move)
                evicted = old.decode()
                await self.store.delete(f"{self.prefix}at:{evicted}")
        await self.store.set(f"{self.prefix}slot:{slot}", item_id.encode(), self.ttl_s)
        await self.store.set(f"{self.prefix}at:{item_id}", str(slot).encode(), self.ttl_s)
        return evicted

    async def ids(self) -> list[str]:
        """Every id kept, each once (at its newest slot), in slot order."""
        found = []
        for slot in range(self.size):
            held = await self.store.get(f"{self.prefix}slot:{slot}")
            if held is None:
                continue
            at = await self.store.get(f"{self.prefix}at:{held.decode()}")
            if at is None or int(at) == slot:
                found.append(held.decode())
        return found
