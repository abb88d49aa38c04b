"""The tape at the backends' HTTP client (aiohttp): one request's status, headers and
body as the backend sent them, or its failure (a timeout, a connection refused or
dropped) in the words it was reported in (record mode); the recorded answer or the same
failure instead of the network (replay mode; a request not in the recording fails as a
connection would)."""

from __future__ import annotations

import asyncio
import functools
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from searcher.recording.tape import NOT_RECORDED, Exchange, Failure, Tape, current_tape

if TYPE_CHECKING:
    import aiohttp

# How the body of an answer is read (capped, or only its head for an error status).
ReadBody = Callable[["aiohttp.ClientResponse"], Awaitable[bytes]]


@dataclass(frozen=True)
class HttpAnswer:
    status: int
    headers: Mapping[str, str]
    body: bytes


def request_url(url: str, params: Mapping[str, str]) -> str:
    """The URL with its query parameters, as the tape knows the request."""
    from yarl import URL  # aiohttp's; loaded with it

    return str(URL(url).update_query(dict(params))) if params else url


@functools.cache
def _replayed_error_class() -> type[aiohttp.ClientConnectionError]:
    import aiohttp  # loaded already (the client is one); kept off the config's imports

    class ReplayedConnectionError(aiohttp.ClientConnectionError):
        """A recorded connection failure raised again; ``problem``: its words as they
        were reported (``backends.failures.connection_problem`` gives them back)."""

        def __init__(self, problem: str) -> None:
            super().__init__(problem)
            self.problem = problem

    return ReplayedConnectionError


def _recorded_failure(
    tape: Tape | None, method: str, key: str, failure: Failure, words: str
) -> None:
    if tape is not None:
        tape.record(Exchange("backend", method, key, "", 0, (), words.encode(), failure))


async def taped_request(
    client: aiohttp.ClientSession,
    method: str,
    url: str,
    read: ReadBody,
    timeout_s: float,
    params: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> HttpAnswer:
    """One request without following redirects, within ``timeout_s``, its body read by
    ``read``; kept on the running request's tape, or answered from it. aiohttp's errors
    and ``TimeoutError`` pass through (a replayed failure raises them again)."""
    import aiohttp  # loaded already (the client is one)
    from multidict import CIMultiDict, CIMultiDictProxy

    from searcher.backends.failures import connection_problem

    tape = current_tape()
    # The key is built only for a tape: building a URL with yarl costs as much again as
    # aiohttp's own, on every backend call.
    key = "" if tape is None else request_url(url, params or {})
    if tape is not None and tape.replaying:
        found = tape.answer("backend", method, key)
        if found is None:
            raise aiohttp.ClientConnectionError(NOT_RECORDED)
        if found.failure == "timeout":
            raise TimeoutError(found.words)
        if found.failure is not None:
            raise _replayed_error_class()(found.words)
        return HttpAnswer(found.status, CIMultiDictProxy(CIMultiDict(found.headers)), found.body)
    try:
        async with (
            asyncio.timeout(timeout_s),
            client.request(
                method, url, params=params, headers=headers, allow_redirects=False
            ) as response,
        ):
            body = await read(response)
            answer = HttpAnswer(response.status, response.headers, body)
    except TimeoutError:
        _recorded_failure(tape, method, key, "timeout", f"timed out after {timeout_s:.1f}s")
        raise
    except aiohttp.ClientConnectionError as exc:
        _recorded_failure(tape, method, key, "connection", connection_problem(exc))
        raise
    if tape is not None:
        pairs = tuple((k, v) for k, v in answer.headers.items())
        tape.record(Exchange("backend", method, key, "", answer.status, pairs, body))
    return answer
