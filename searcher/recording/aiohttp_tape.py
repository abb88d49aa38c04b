"""The tape at the backends' HTTP client (aiohttp): one request's status, headers and
body as the backend sent them (record mode), or the recorded answer instead of the
network (replay mode; a request not in the recording fails as a connection would)."""

from __future__ import annotations

from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING

from searcher.recording.tape import NOT_RECORDED, Exchange, current_tape

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


async def taped_request(
    client: aiohttp.ClientSession,
    method: str,
    url: str,
    read: ReadBody,
    params: Mapping[str, str] | None = None,
    headers: Mapping[str, str] | None = None,
) -> HttpAnswer:
    """One request without following redirects, its body read by ``read``; kept on the
    running request's tape, or answered from it. aiohttp's errors pass through."""
    import aiohttp  # loaded already (the client is one)
    from multidict import CIMultiDict, CIMultiDictProxy

    tape = current_tape()
    key = request_url(url, params or {})
    if tape is not None and tape.replaying:
        found = tape.answer("backend", method, key)
        if found is None:
            raise aiohttp.ClientConnectionError(NOT_RECORDED)
        return HttpAnswer(found.status, CIMultiDictProxy(CIMultiDict(found.headers)), found.body)
    async with client.request(
        method, url, params=params, headers=headers, allow_redirects=False
    ) as response:
        body = await read(response)
        answer = HttpAnswer(response.status, response.headers, body)
    if tape is not None:
        pairs = tuple((k, v) for k, v in answer.headers.items())
        tape.record(Exchange("backend", method, key, "", answer.status, pairs, body))
    return answer
