"""What each search session was shown (``constraints.session_id``), in the state store.

A session is named by its caller and kept per caller (an API key, else the peer
address): another key naming the same session id reads and writes another record. Its
record is the page keys of the items its searches returned, newest last, at most
``sessions.max_urls`` of them, living ``sessions.ttl_s`` after the last search. Two
searches of one session at the same moment may each miss what the other showed (a
read, then a write): novelty is a preference, not a guarantee, and the store needs no
lock for it. A store that cannot be reached costs the novelty, never the search.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterable

from searcher.config import SessionSettings
from searcher.errors import StateUnavailable
from searcher.fetch.urls import page_key
from searcher.state.base import StateStore, decode_json, encode_json

NAMESPACE = "session:"


def session_key(client: str | None, session_id: str) -> str:
    """The state key of a caller's session (hashed: ids are the caller's own text)."""
    digest = hashlib.sha256(f"{client or ''}\0{session_id}".encode()).hexdigest()[:40]
    return NAMESPACE + digest


class SessionBook:
    """Reads and extends sessions' shown pages."""

    def __init__(self, store: StateStore, settings: SessionSettings) -> None:
        self.store = store
        self.settings = settings

    async def shown(self, client: str | None, session_id: str) -> frozenset[str]:
        """The page keys the session was shown (none for a new or expired session, or
        while the store cannot be reached)."""
        return frozenset(await self._keys(session_key(client, session_id)))

    async def add(self, client: str | None, session_id: str, urls: Iterable[str]) -> None:
        """Remember ``urls`` as shown to the session (newest last, the oldest forgotten
        beyond ``max_urls``), for ``ttl_s`` from now."""
        key = session_key(client, session_id)
        fresh = list(dict.fromkeys(page_key(url) for url in urls))
        new = set(fresh)
        kept = [k for k in await self._keys(key) if k not in new] + fresh
        try:
            await self.store.set(
                key, encode_json(kept[-self.settings.max_urls :]), self.settings.ttl_s
            )
        except StateUnavailable:
            return

    async def _keys(self, key: str) -> list[str]:
        try:
            value = decode_json(await self.store.get(key))
        except StateUnavailable:
            return []
        if not isinstance(value, list):
            return []
        return [k for k in value if isinstance(k, str)]
