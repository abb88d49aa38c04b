"""Run the testbed app under uvicorn on 127.0.0.1: in a background thread
(``TestbedServer``, for tests) or in the foreground (``python -m tests.testbed``)."""

from __future__ import annotations

import asyncio
import contextlib
import socket
import threading
import time
from types import TracebackType
from typing import Any

import uvicorn

from .app import LoggedRequest, TestbedApp
from .corpus import corpus

HOST = "127.0.0.1"
# The longest an app's own shutdown (its lifespan) may take when its server stops.
LIFESPAN_SHUTDOWN_S = 5.0
# The longest the requests cancelled at a stop may take to unwind.
CANCELLED_REQUESTS_WAIT_S = 1.0


class _Server(uvicorn.Server):
    """uvicorn's server, which first calls ``on_shutdown`` (the testbed uses it to end
    hanging and slow handlers at once instead of holding up the graceful shutdown), and
    stops without uvicorn's fixed waits: its main loop looks at ``should_exit`` every
    0.1 s and its shutdown sleeps 0.1 s and polls the connections every 0.1 s, about
    0.15 s per stop in all, and the suite stops a server for hundreds of tests. The same
    steps run, in the same order; only the waiting is by event and short polls."""

    def __init__(self, config: uvicorn.Config, on_shutdown: Any = None) -> None:
        super().__init__(config)
        self.on_shutdown = on_shutdown
        self._loop: asyncio.AbstractEventLoop | None = None
        self._wake: asyncio.Event | None = None

    def request_exit(self) -> None:
        """Ask the server to stop (from any thread); its main loop wakes at once."""
        self.should_exit = True
        loop, wake = self._loop, self._wake
        if loop is not None and wake is not None:
            with contextlib.suppress(RuntimeError):  # the loop has already closed
                loop.call_soon_threadsafe(wake.set)

    async def main_loop(self) -> None:
        self._loop, self._wake = asyncio.get_running_loop(), asyncio.Event()
        counter = 0
        should_exit = await self.on_tick(counter)
        while not should_exit:
            counter = (counter + 1) % 864000
            with contextlib.suppress(TimeoutError):  # a tick: on_tick keeps its work
                await asyncio.wait_for(self._wake.wait(), 0.1)
            should_exit = await self.on_tick(counter)

    async def shutdown(self, sockets: list[socket.socket] | None = None) -> None:
        if self.on_shutdown is not None:
            self.on_shutdown()
        for server in self.servers:
            server.close()
        for sock in sockets or []:
            sock.close()
        for connection in list(self.server_state.connections):
            connection.shutdown()
        try:
            async with asyncio.timeout(self.config.timeout_graceful_shutdown):
                await self._connections_and_tasks_done()
        except TimeoutError:
            tasks = list(self.server_state.tasks)
            for task in tasks:
                task.cancel(msg="Task cancelled, timeout graceful shutdown exceeded")
            # Unlike uvicorn, the cancelled requests are let finish unwinding (briefly)
            # before the app's shutdown closes the clients they are using: a request still
            # connecting when its client's pool closes can leave that connection open.
            if tasks:
                await asyncio.wait(tasks, timeout=CANCELLED_REQUESTS_WAIT_S)
        # Unlike uvicorn, the app's own shutdown runs even when forced: ``force_exit``
        # here only cuts the wait for open connections (a test's hanging handler), and
        # an app stopped without its lifespan leaves its clients' pooled connections
        # open, each one an unclosed-transport warning when the garbage collector meets
        # it later, inside whatever test is running then.
        with contextlib.suppress(TimeoutError):
            async with asyncio.timeout(LIFESPAN_SHUTDOWN_S):
                await self.lifespan.shutdown()

    async def _connections_and_tasks_done(self) -> None:
        state = self.server_state
        while (state.connections or state.tasks) and not self.force_exit:
            await asyncio.sleep(0.005)
        for server in self.servers:
            await server.wait_closed()


def bind(host: str = HOST, port: int = 0) -> socket.socket:
    """A socket bound to ``host:port`` (0: a free port). Only 127.0.0.1 is allowed."""
    if host != HOST:
        raise ValueError(f"the testbed only binds {HOST}, not {host!r}")
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    try:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        sock.bind((host, port))
    except BaseException:
        sock.close()
        raise
    return sock


def make_server(
    app: Any, log_config: Any = None, lifespan: str = "off", on_shutdown: Any = None
) -> _Server:
    config = uvicorn.Config(
        app,
        log_level="warning",
        log_config=log_config,
        access_log=False,
        lifespan=lifespan,
        ws="none",
        loop="auto",
        http="auto",
        timeout_graceful_shutdown=2,
    )
    return _Server(config, on_shutdown)


class ThreadedServer:
    """Any ASGI app under uvicorn on 127.0.0.1, in a background thread with its own loop.
    Tests use it for the testbed and for searcher's own app (lifespan on)."""

    __test__ = False  # not a pytest test class

    def __init__(self, app: Any, port: int = 0, host: str = HOST, lifespan: str = "off") -> None:
        if host != HOST:
            raise ValueError(f"the testbed only binds {HOST}, not {host!r}")
        self.host = host
        self.app = app
        self._requested_port = port
        self._lifespan = lifespan
        self._server: _Server | None = None
        self._thread: threading.Thread | None = None
        self._sock: socket.socket | None = None
        self._port: int | None = None
        self._error: BaseException | None = None

    def _on_shutdown(self) -> None:
        """Hook for subclasses: called when the server starts to stop."""

    # ---- lifecycle -------------------------------------------------------------------

    def start(self, timeout: float = 10.0) -> Any:
        if self._thread is not None:
            raise RuntimeError("server already started")
        self._sock = bind(self.host, self._requested_port)
        self._port = self._sock.getsockname()[1]
        self._server = make_server(self.app, lifespan=self._lifespan, on_shutdown=self._on_shutdown)
        self._thread = threading.Thread(target=self._run, name="test-uvicorn", daemon=True)
        self._thread.start()
        deadline = time.monotonic() + timeout
        while not self._server.started:
            if self._error is not None or not self._thread.is_alive():
                self._cleanup()
                raise RuntimeError("server failed to start") from self._error
            if time.monotonic() > deadline:
                self.stop()
                raise TimeoutError(f"server not ready after {timeout} s")
            time.sleep(0.005)
        return self

    def _run(self) -> None:
        assert self._server is not None and self._sock is not None
        try:
            self._server.run(sockets=[self._sock])
        except BaseException as exc:  # surfaced by start()
            self._error = exc

    def stop(self, timeout: float = 10.0) -> None:
        server, thread = self._server, self._thread
        if server is None or thread is None:
            return
        server.request_exit()
        thread.join(timeout / 2)
        if thread.is_alive():
            server.force_exit = True
            thread.join(max(timeout / 2, LIFESPAN_SHUTDOWN_S + 1))
        self._cleanup()

    def _cleanup(self) -> None:
        if self._sock is not None:
            self._sock.close()
        self._sock = None
        self._server = None
        self._thread = None

    def __enter__(self) -> Any:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.stop()

    # ---- access ----------------------------------------------------------------------

    @property
    def port(self) -> int:
        if self._port is None:
            raise RuntimeError("TestbedServer not started")
        return self._port

    @property
    def base_url(self) -> str:
        return f"http://{self.host}:{self.port}"

    def url(self, path: str = "/") -> str:
        """Absolute URL of ``path`` on this server."""
        return self.base_url + (path if path.startswith("/") else "/" + path)


class TestbedServer(ThreadedServer):
    """The testbed in a background thread with its own event loop.

    Usage::

        with TestbedServer() as tb:
            httpx.get(tb.page_url(aeb_ids()[0]))
    """

    def __init__(self, port: int = 0, host: str = HOST, log_limit: int = 10_000) -> None:
        super().__init__(TestbedApp(log_limit=log_limit), port, host)

    def _on_shutdown(self) -> None:
        self.app.shutting_down.set()

    def start(self, timeout: float = 10.0) -> TestbedServer:
        corpus().load()  # fail early (missing data) and keep the first request fast
        server: TestbedServer = super().start(timeout)
        return server

    def searxng_url(self, behaviour: str = "") -> str:
        """Base URL for a SearXNG backend, e.g. ``searxng_url("slow/500")``; the backend
        appends ``/search``."""
        return self.base_url + "/searxng" + (f"/{behaviour.strip('/')}" if behaviour else "")

    def brave_url(self, behaviour: str = "") -> str:
        """Base URL for a Brave backend, e.g. ``brave_url("status/429")``; the backend
        appends ``/res/v1/web/search``."""
        return self.base_url + "/brave" + (f"/{behaviour.strip('/')}" if behaviour else "")

    def llm_url(self) -> str:
        """Base URL of the scripted chat-completions API (see ``tests/testbed/chat.py``)."""
        return self.base_url + "/llm/v1"

    def chat_bodies(self) -> list[dict[str, Any]]:
        """The chat-completions request bodies since the last reset, oldest first."""
        return [b["body"] for b in self.app.bodies if b["path"].startswith("/llm/")]

    def page_url(self, pid: str) -> str:
        return f"{self.base_url}/pages/{pid}"

    @property
    def log(self) -> list[LoggedRequest]:
        """Requests since the last reset (oldest first), as (path, query, headers)."""
        return self.app.log

    def reset(self) -> None:
        """Clear the request log and the flaky counters."""
        self.app.reset()
