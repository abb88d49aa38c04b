"""The JSON access log, written off the request's path.

A request hands its line's fields to a bounded queue and goes on; one thread formats the
lines and writes them (a write to stderr is a system call, and blocks while whoever reads
stderr falls behind). The thread wakes every ``DRAIN_EVERY_S`` and writes what is queued,
rather than once per request: each wake-up takes the GIL from the event loop, and on a busy
machine every hand-over can wait for the scheduler. Lines go out in the order they were
handed over. When the queue is full, the request wakes the writer and waits for room: the
log is never dropped, and memory stays bounded.
``close`` (the app's shutdown) writes every line still queued before it returns, so a
clean stop loses nothing.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from dataclasses import dataclass
from datetime import UTC, datetime
from typing import Any

import orjson

log = logging.getLogger("searcher.access")
# Lines waiting to be written: enough for a burst of thousands of requests a second while
# the writer waits on a slow stderr, yet a few megabytes at most.
MAX_PENDING = 10_000
WRITER_THREAD = "searcher-access-log"
# How often the writer writes what is queued: a line is out at most this late.
DRAIN_EVERY_S = 0.05
# How long a request waits before it looks again for room in a full queue.
FULL_WAIT_S = 0.001


@dataclass(frozen=True, slots=True)
class AccessEntry:
    """One request's access line, as plain fields (formatted by the writer)."""

    at: float  # time.time() when the response was complete
    request_id: str
    key_id: str | None
    client: str | None
    method: str | None
    route: str
    path: str | None
    status: int
    seconds: float
    extra: dict[str, Any]


def access_line(entry: AccessEntry) -> str:
    """The JSON line of one request."""
    when = datetime.fromtimestamp(entry.at, UTC)
    fields = {
        "ts": when.isoformat(timespec="milliseconds").replace("+00:00", "Z"),
        "request_id": entry.request_id,
        "key_id": entry.key_id,
        "client": entry.client,
        "method": entry.method,
        "route": entry.route,
        "path": entry.path,
        "status": entry.status,
        "latency_ms": round(entry.seconds * 1000, 2),
        **entry.extra,
    }
    return orjson.dumps(fields).decode()


class AccessLogWriter:
    """Writes ``AccessEntry`` lines to the ``searcher.access`` logger from one thread,
    started with the first line."""

    def __init__(self, max_pending: int = MAX_PENDING) -> None:
        # SimpleQueue: a put is a microsecond (queue.Queue's locks cost tens); the bound is
        # kept by looking at its size.
        self._queue: queue.SimpleQueue[AccessEntry] = queue.SimpleQueue()
        self._max_pending = max_pending
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._wake = threading.Event()  # set when the queue is full, and by ``close``
        self._closed = False

    def write(self, entry: AccessEntry) -> None:
        """Queue ``entry``'s line. When the queue is full the caller waits for room, as a
        synchronous write would wait for stderr. After ``close`` the line is written at
        once, on the caller's thread."""
        if self._closed:
            log.info(access_line(entry))
            return
        if self._thread is None:
            self._start()
        while self._queue.qsize() >= self._max_pending:
            self._wake.set()
            time.sleep(FULL_WAIT_S)  # the writer is behind: wait for room, lose nothing
        self._queue.put(entry)

    def _start(self) -> None:
        with self._lock:
            if self._thread is None and not self._closed:
                self._thread = threading.Thread(target=self._drain, name=WRITER_THREAD, daemon=True)
                self._thread.start()

    def _drain(self) -> None:
        while True:
            self._wake.wait(DRAIN_EVERY_S)
            self._wake.clear()
            closing = self._closed  # read before the last drain: nothing is queued after
            self._write_queued()
            if closing:
                return

    def _write_queued(self) -> None:
        while True:
            try:
                entry = self._queue.get_nowait()
            except queue.Empty:
                return
            try:
                log.info(access_line(entry))
            except Exception:  # a handler that fails must not end the log for good
                logging.getLogger(__name__).exception("writing an access line failed")

    def close(self, timeout_s: float = 10.0) -> None:
        """Write every queued line, then stop the thread (the app's shutdown)."""
        with self._lock:
            self._closed = True
            thread, self._thread = self._thread, None
        if thread is not None:
            self._wake.set()
            thread.join(timeout_s)
