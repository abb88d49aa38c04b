"""The tape at a local collection backend (``adapter: local``): the index is this
backend's outside world, so a recording keeps what it answered — each search's hits
(title, snippet, score: the chunk texts it returned) and warnings, or its timeout, and
each document text full mode read from it — and a replay answers from that, never from
the collection as it is then (changed, re-indexed or gone)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Awaitable, Callable
from typing import Any

from searcher.backends.base import Hit
from searcher.recording.tape import Exchange, body_digest, current_tape

# (hits, warnings): what a local search answers.
LocalAnswer = tuple[list[Hit], list[str]]


class NotInRecording(LookupError):
    """A replay asked the collection something the recording does not hold."""


def _request(instance: str, verb: str, *asked: object) -> tuple[str, str]:
    """The (URL, digest) the tape knows a request to ``instance`` by."""
    return f"local://{instance}/{verb.lower()}", body_digest(json.dumps(asked).encode())


def _hit(data: dict[str, Any]) -> Hit:
    tuples = {k: tuple(data[k]) for k in ("engines", "positions")}
    return Hit(**{**data, **tuples})


async def taped_search(
    instance: str, text: str, max_results: int, search: Callable[[], Awaitable[LocalAnswer]]
) -> LocalAnswer:
    """``search`` (the collection's answer to ``text``), kept on the running request's
    tape or answered from it; a ``TimeoutError`` is kept and replayed as one.
    ``NotInRecording`` when a replay asks what was not recorded."""
    tape = current_tape()
    if tape is None:
        return await search()
    url, digest = _request(instance, "SEARCH", text, max_results)
    if tape.replaying:
        found = tape.answer("local", "SEARCH", url, digest)
        if found is None:
            raise NotInRecording(url)
        if found.failure == "timeout":
            raise TimeoutError(found.words)
        data = json.loads(found.body)
        return [_hit(h) for h in data["hits"]], [str(w) for w in data["warnings"]]
    try:
        hits, warnings = await search()
    except TimeoutError:
        tape.record(Exchange("local", "SEARCH", url, digest, 0, (), b"timed out", "timeout"))
        raise
    body = {"hits": [dataclasses.asdict(h) for h in hits], "warnings": warnings}
    tape.record(Exchange("local", "SEARCH", url, digest, 200, (), json.dumps(body).encode()))
    return hits, warnings


async def taped_read(
    instance: str,
    url: str,
    query: str,
    max_chars: int,
    read: Callable[[], Awaitable[str | None]],
) -> str | None:
    """``read`` (a document's text from the index; None: no longer in it), kept on the
    running request's tape or answered from it (``NotInRecording`` when not held)."""
    tape = current_tape()
    if tape is None:
        return await read()
    key, digest = _request(instance, "READ", url, query, max_chars)
    if tape.replaying:
        found = tape.answer("local", "READ", key, digest)
        if found is None:
            raise NotInRecording(key)
        text: str | None = json.loads(found.body)
        return text
    text = await read()
    tape.record(Exchange("local", "READ", key, digest, 200, (), json.dumps(text).encode()))
    return text
