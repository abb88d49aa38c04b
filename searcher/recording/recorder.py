"""A search run with a tape at its edges, then kept (``constraints.record``): the one
function the HTTP route and the CLI both call."""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from datetime import UTC, datetime

from searcher.config import RecordingSettings
from searcher.contract import ErrorEntry, SearchRequest, SearchResponse
from searcher.errors import InvalidRequest
from searcher.recording.book import Recording, RecordingBook
from searcher.recording.tape import Tape, taping
from searcher.state.base import StateStore

FIELD = "constraints.record"


def check_recordable(settings: RecordingSettings, store: StateStore | None) -> RecordingBook:
    """The book a recorded search is kept in; ``InvalidRequest`` naming
    ``constraints.record`` when this server keeps none."""
    if not settings.enabled:
        raise InvalidRequest(FIELD, "recording is off on this server (recording.enabled)")
    if store is None:
        raise InvalidRequest(FIELD, "this server has no state store to keep recordings in")
    return RecordingBook(store, settings)


async def recorded_search(
    book: RecordingBook,
    request_id: str,
    request: SearchRequest,
    search: Callable[[], Awaitable[SearchResponse]],
    key: str | None = None,
) -> SearchResponse:
    """Run ``search`` with a tape at the edges and keep what it saw under
    ``request_id`` (then ``meta.request_id``), made with API key ``key``. A search that
    saw more than ``recording.max_bytes``, or whose request id (a client chooses it) names
    another key's recording, is answered unrecorded, ``meta.errors`` saying why."""
    tape = Tape("record", max_bytes=book.settings.max_bytes)
    with taping(tape):
        response = await search()
    if tape.overflowed:
        return _unrecorded(
            response,
            f"the search saw more than recording.max_bytes={book.settings.max_bytes} bytes",
        )
    if await book.taken_by_another(request_id, key):
        return _unrecorded(
            response,
            f"request id {request_id!r} names a recording another key made; send another "
            f"X-Request-ID",
        )
    response.meta.request_id = request_id
    created = datetime.now(UTC).isoformat(timespec="seconds")
    wire = response.to_wire(request.want)
    request_json = request.model_dump(mode="json", exclude_defaults=True)
    await book.keep(Recording(request_id, created, request_json, wire, tape.exchanges, key))
    return response


def _unrecorded(response: SearchResponse, why: str) -> SearchResponse:
    response.meta.errors.append(
        ErrorEntry(stage="record", source="recording", reason=f"not recorded: {why}")
    )
    return response
