"""A backend's circuit breaker refusing a call, kept as an outcome at the runner's edge.

The breaker is state of this worker, not of the request: a search recorded while a
backend's breaker was open got no answer from it and made no HTTP call. Without this, its
replay would reach the backend's edge and find nothing recorded (a connect failure "not in
the recording") instead of the same refusal, so ``meta.errors`` and the fallback would
differ. The refusal's words are kept as they were (its "next trial in" time included).
"""

from __future__ import annotations

from searcher.recording.tape import Exchange, current_tape

METHOD = "CIRCUIT"  # not an HTTP method: no backend exchange is ever found under it


def _url(name: str) -> str:
    return f"circuit:{name}"


def record_refusal(name: str, words: str) -> None:
    """Keep that ``name``'s breaker refused the call, in ``words`` (record mode only)."""
    tape = current_tape()
    if tape is None or tape.replaying:
        return
    body = words.encode("utf-8")
    tape.record(Exchange("backend", METHOD, _url(name), "", 0, (), body, "circuit_open"))


def replayed_refusal(name: str) -> str | None:
    """The words of a refusal of ``name``'s breaker recorded for this call, if one was
    (each taken once, in recorded order); None when the call went through."""
    tape = current_tape()
    if tape is None or not tape.replaying:
        return None
    exchange = tape.answer("backend", METHOD, _url(name))
    return None if exchange is None else exchange.words
