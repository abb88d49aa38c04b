"""A network backend whose streams read at most ``READ_BYTES`` at a time.

httpcore reads 64 KB per call, so a body read stopped at its byte budget had already
received up to 64 KB more (a 20,000-byte budget downloaded 65 KB). With 16 KB reads the
fetcher stops within 16 KB of ``max_download_bytes_per_page``, for a few more system calls
on large pages.
"""

from __future__ import annotations

import ssl
import typing
from collections.abc import Iterable

import httpcore

READ_BYTES = 16 * 1024


class _SmallReadStream(httpcore.AsyncNetworkStream):
    def __init__(self, inner: httpcore.AsyncNetworkStream) -> None:
        self._inner = inner

    async def read(self, max_bytes: int, timeout: float | None = None) -> bytes:
        return await self._inner.read(min(max_bytes, READ_BYTES), timeout)

    async def write(self, buffer: bytes, timeout: float | None = None) -> None:
        await self._inner.write(buffer, timeout)

    async def aclose(self) -> None:
        await self._inner.aclose()

    async def start_tls(
        self,
        ssl_context: ssl.SSLContext,
        server_hostname: str | None = None,
        timeout: float | None = None,
    ) -> httpcore.AsyncNetworkStream:
        tls = await self._inner.start_tls(ssl_context, server_hostname, timeout)
        return _SmallReadStream(tls)

    def get_extra_info(self, info: str) -> typing.Any:
        return self._inner.get_extra_info(info)


class SmallReadBackend(httpcore.AsyncNetworkBackend):
    """Wraps another backend (default: anyio's) so that its streams read in small steps."""

    def __init__(self, inner: httpcore.AsyncNetworkBackend | None = None) -> None:
        self._inner = inner or httpcore.AnyIOBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._inner.connect_tcp(host, port, timeout, local_address, socket_options)
        return _SmallReadStream(stream)

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        stream = await self._inner.connect_unix_socket(path, timeout, socket_options)
        return _SmallReadStream(stream)

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)
