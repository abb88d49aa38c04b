"""The Chrome DevTools Protocol over the browser's debugging pipe: commands and events.

Chromium started with ``--remote-debugging-pipe`` reads commands from its fd 3 and writes
answers and events to its fd 4, each a JSON object ended by a NUL byte. A pipe rather
than ``--remote-debugging-port``: no port on the machine that another local user (or a
page) could connect to and drive the browser with. Sessions are flat
(``Target.attachToTarget`` with ``flatten``): a tab's commands and events carry its
``sessionId`` over the same pipe.
"""

from __future__ import annotations

import asyncio
import contextlib
import itertools
import json
from collections.abc import Callable
from typing import Any

from searcher.errors import BrowserGone, RenderError

EventHandler = Callable[[str, dict[str, Any]], None]


class CdpConnection:
    """Commands sent and answered, events handed to the handler of their session."""

    def __init__(self, reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        self._reader = reader
        self._writer = writer
        self._ids = itertools.count(1)
        self._pending: dict[int, asyncio.Future[dict[str, Any]]] = {}
        self._handlers: dict[str, EventHandler] = {}
        self._task = asyncio.create_task(self._read_loop())
        self.closed = asyncio.Event()

    def listen(self, session_id: str, handler: EventHandler) -> None:
        """Hand the events of ``session_id`` to ``handler(method, params)``."""
        self._handlers[session_id] = handler

    def unlisten(self, session_id: str) -> None:
        """Stop handing on the events of ``session_id``."""
        self._handlers.pop(session_id, None)

    async def send(
        self, method: str, params: dict[str, Any] | None = None, session_id: str | None = None
    ) -> dict[str, Any]:
        """The result of one command; ``RenderError`` when the browser refuses it,
        ``BrowserGone`` when the pipe closed."""
        if self.closed.is_set():
            raise BrowserGone(method, "the browser is gone")
        message: dict[str, Any] = {"id": next(self._ids), "method": method, "params": params or {}}
        if session_id is not None:
            message["sessionId"] = session_id
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._pending[message["id"]] = future
        try:
            self._writer.write(json.dumps(message).encode() + b"\0")
            await self._writer.drain()
            return await future
        except (ConnectionError, OSError) as exc:
            raise BrowserGone(method, "the browser is gone") from exc
        finally:
            self._pending.pop(message["id"], None)

    def _dispatch(self, message: dict[str, Any]) -> None:
        future = self._pending.get(message.get("id", -1))
        if future is not None:
            if future.done():
                return
            if "error" in message:
                error = message["error"].get("message", "error")
                future.set_exception(RenderError("browser", f"the browser refused: {error}"))
            else:
                future.set_result(message.get("result", {}))
            return
        handler = self._handlers.get(message.get("sessionId", ""))
        if handler is not None and "method" in message:
            handler(message["method"], message.get("params", {}))

    async def _read_loop(self) -> None:
        try:
            while True:
                raw = await self._reader.readuntil(b"\0")
                with contextlib.suppress(ValueError):
                    self._dispatch(json.loads(raw[:-1]))
        except (asyncio.IncompleteReadError, asyncio.LimitOverrunError, ConnectionError, OSError):
            pass
        finally:
            self.closed.set()
            for future in self._pending.values():
                if not future.done():
                    future.set_exception(BrowserGone("browser", "the browser is gone"))

    async def aclose(self) -> None:
        """Stop reading; pending commands fail with ``BrowserGone``."""
        self._task.cancel()
        with contextlib.suppress(asyncio.CancelledError):
            await self._task
        self._writer.close()
