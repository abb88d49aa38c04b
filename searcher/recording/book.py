"""Recordings in the state store (SQLite embedded, or Redis): one compressed entry per
recorded search, under its request id, for ``recording.ttl_s``; a ring of
``recording.max_recordings`` slots drops the oldest when a new one comes."""

from __future__ import annotations

import zlib
from dataclasses import dataclass
from typing import Any

import orjson

from searcher.config import RecordingSettings
from searcher.contract import SearchRequest
from searcher.errors import UnknownRecording
from searcher.recording.tape import Exchange
from searcher.state.base import StateStore
from searcher.state.ring import Ring

PREFIX = "recording:"
FORMAT = 1


@dataclass(frozen=True)
class Recording:
    """What one search was asked and got: its request (wire JSON), its response (wire
    JSON, to compare a replay with) and every exchange at the edges."""

    request_id: str
    created_utc: str
    request: dict[str, Any]
    response: dict[str, Any]
    exchanges: list[Exchange]
    # The id of the API key that made the search (None: keys off, or the CLI): only that
    # key's searches may record under its request id again.
    key: str | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "format": FORMAT, "request_id": self.request_id, "created_utc": self.created_utc,
            "request": self.request, "response": self.response,
            "exchanges": [e.to_json() for e in self.exchanges], "key": self.key,
        }  # fmt: skip

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Recording:
        """``ValueError`` (or ``KeyError``) for data that is not a recording of this
        format."""
        if data.get("format") != FORMAT:
            raise ValueError(f"not a recording of format {FORMAT}")
        key = data.get("key")
        return cls(
            str(data["request_id"]), str(data["created_utc"]), dict(data["request"]),
            dict(data["response"]), [Exchange.from_json(e) for e in data["exchanges"]],
            key if isinstance(key, str) else None,
        )  # fmt: skip

    def encode(self) -> bytes:
        return zlib.compress(orjson.dumps(self.to_json()), 6)

    @classmethod
    def decode(cls, raw: bytes) -> Recording:
        return cls.from_json(orjson.loads(zlib.decompress(raw)))


def recorded_request(recording: Recording) -> SearchRequest:
    """The request as it was made (not to be recorded again)."""
    request = SearchRequest.model_validate(recording.request)
    constraints = request.constraints.model_copy(update={"record": False})
    return request.model_copy(update={"constraints": constraints})


class RecordingBook:
    """The recordings of one state store."""

    def __init__(self, store: StateStore, settings: RecordingSettings) -> None:
        self.store = store
        self.settings = settings

    async def keep(self, recording: Recording) -> None:
        """Store ``recording`` in the next slot of the ring, dropping the one it held."""
        ttl = self.settings.ttl_s
        ring = Ring(self.store, PREFIX, self.settings.max_recordings, ttl)
        evicted = await ring.put(recording.request_id)
        if evicted is not None:
            await self.store.delete(f"{PREFIX}id:{evicted}")
        await self.store.set(f"{PREFIX}id:{recording.request_id}", recording.encode(), ttl)

    async def taken_by_another(self, request_id: str, key: str | None) -> bool:
        """Whether a recording kept under ``request_id`` was made by a key other than
        ``key`` (an unreadable one counts as another's: it is not overwritten blindly)."""
        try:
            return (await self.get(request_id)).key != key
        except UnknownRecording:
            return False

    async def get(self, request_id: str) -> Recording:
        """The recording of ``request_id``; ``UnknownRecording`` when none is kept."""
        raw = await self.store.get(f"{PREFIX}id:{request_id}")
        if raw is None:
            raise UnknownRecording(request_id)
        try:
            return Recording.decode(raw)
        except (ValueError, KeyError, TypeError, zlib.error) as exc:  # a corrupt entry
            raise UnknownRecording(request_id) from exc
