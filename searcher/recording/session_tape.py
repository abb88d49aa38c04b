"""What a search session had been shown, kept where a recorded search reads it.

The session's shown pages are state of the server, not of the request: a replay run
later, by another caller or on another machine, would read the session as it is then
(moved on, expired, or not there at all) and demote other pages. So a recorded search
keeps the page keys it read, and its replay reads them from the recording.
"""

from __future__ import annotations

import json

from searcher.recording.tape import Exchange, current_tape

METHOD = "SHOWN"  # not an HTTP method: no backend exchange is ever found under it


def _url(session_id: str) -> str:
    return f"session:{session_id}"


def record_shown(session_id: str, shown: frozenset[str]) -> None:
    """Keep the page keys ``session_id`` had been shown (record mode only)."""
    tape = current_tape()
    if tape is None or tape.replaying:
        return
    body = json.dumps(sorted(shown)).encode("utf-8")
    tape.record(Exchange("session", METHOD, _url(session_id), "", 0, (), body))


def replayed_shown(session_id: str) -> frozenset[str] | None:
    """The page keys recorded for ``session_id``, when replaying a recording that holds
    them; None otherwise (the live session is read)."""
    tape = current_tape()
    if tape is None or not tape.replaying:
        return None
    exchange = tape.answer("session", METHOD, _url(session_id))
    if exchange is None:
        return None
    return frozenset(str(key) for key in json.loads(exchange.body))
