"""The tape at an httpx client's transport (the page fetcher's, the LLM client's): in
record mode each answer's status, headers and body bytes as they came off the wire (still
compressed; what the reader read of them), in replay mode the recorded answer instead of
the network."""

from __future__ import annotations

from collections.abc import AsyncIterator, Callable

import httpx

from searcher.recording.tape import (
    NOT_RECORDED,
    Exchange,
    ExchangeKind,
    Tape,
    body_digest,
    current_tape,
)


class _Tee(httpx.AsyncByteStream):
    """A response body passed on as read, and handed to ``done`` when closed."""

    def __init__(self, inner: httpx.AsyncByteStream, done: Callable[[bytes], None]) -> None:
        self._inner = inner
        self._done = done
        self._chunks: list[bytes] = []

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for chunk in self._inner:
            self._chunks.append(chunk)
            yield chunk

    async def aclose(self) -> None:
        try:
            await self._inner.aclose()
        finally:
            self._done(b"".join(self._chunks))


class TapedTransport(httpx.AsyncBaseTransport):
    """``inner`` with the running request's tape (if any) at its edge."""

    def __init__(self, inner: httpx.AsyncBaseTransport, kind: ExchangeKind) -> None:
        self._inner = inner
        self._kind = kind

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        tape = current_tape()
        if tape is None:
            return await self._inner.handle_async_request(request)
        digest = body_digest(request.content)
        if tape.replaying:
            return self._replayed(tape, request, digest)
        response = await self._inner.handle_async_request(request)

        def done(body: bytes) -> None:
            head = (self._kind, request.method, str(request.url), digest)
            headers = tuple(response.headers.multi_items())
            tape.record(Exchange(*head, response.status_code, headers, body))

        if not isinstance(response.stream, httpx.AsyncByteStream):  # never from an async one
            return response
        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=_Tee(response.stream, done),
            extensions=response.extensions,
            request=request,
        )

    def _replayed(self, tape: Tape, request: httpx.Request, digest: str) -> httpx.Response:
        exchange = tape.answer(self._kind, request.method, str(request.url), digest)
        if exchange is None:
            raise httpx.ConnectError(NOT_RECORDED, request=request)
        return httpx.Response(
            exchange.status,
            headers=list(exchange.headers),
            stream=httpx.ByteStream(exchange.body),
            request=request,
        )

    async def aclose(self) -> None:
        await self._inner.aclose()
