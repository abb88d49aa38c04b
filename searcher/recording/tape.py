"""A request's tape: every answer it got from the outside world, kept at the edges where it
arrived (a backend's HTTP answer, a page's bytes and headers, an LLM reply, the DuckDuckGo
library's rows, a local collection's hits and texts, the browser's rendered DOM), so that
the request can be run again on exactly that input. A request that got no answer (a
timeout, a refused connection, a page the browser could not draw) is kept as that
``failure`` and replayed as the same.

The tape of the running request is a context variable: the edges ask ``current_tape()``
and, when there is one, record into it (``record`` mode) or answer from it without any
I/O (``replay`` mode). Tasks started inside the request inherit it; nothing between the
edges knows it exists. With no tape (every request that does not ask to be recorded) an
edge costs one context-variable lookup.

An exchange is found again by its kind, method, URL and a digest of its request body, in
the order recorded (a page read twice is answered twice). An LLM call whose prompt
changed (another config, another day's date in the system prompt) takes the next reply
recorded for that endpoint: the recording holds what the model said, not what it would
say to another prompt.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
from collections.abc import Iterator, Sequence
from contextvars import ContextVar
from dataclasses import dataclass, field
from typing import Any, Literal

ExchangeKind = Literal["backend", "page", "llm", "ddgs", "render", "local", "session"]
TapeMode = Literal["record", "replay"]
KINDS: tuple[ExchangeKind, ...] = (
    "backend", "page", "llm", "ddgs", "render", "local", "session"
)  # fmt: skip
# A request that got no answer, kept as what happened to it (its words in the body):
# a backend that timed out or refused the connection replays as the same failure, and so
# does a page the browser could not draw (its error's class, see ``render_tape``).
# A backend whose circuit breaker refused the call is kept as ``circuit_open``
# (see ``breaker_tape``).
Failure = Literal[
    "timeout", "connection", "render", "browser_gone", "blocked", "too_complex", "circuit_open"
]
FAILURES: tuple[Failure, ...] = (
    "timeout",
    "connection",
    "render",
    "browser_gone",
    "blocked",
    "too_complex",
    "circuit_open",
)
NOT_RECORDED = "not in the recording (replay is offline)"


def body_digest(body: bytes) -> str:
    """What identifies a request body in the tape (empty for none)."""
    return hashlib.sha256(body).hexdigest()[:32] if body else ""


@dataclass(frozen=True)
class Exchange:
    """One request to the outside world and the answer it got."""

    kind: ExchangeKind
    method: str
    url: str
    request_digest: str
    status: int
    headers: tuple[tuple[str, str], ...]
    body: bytes
    # What went wrong instead of an answer (``body``: its words); None for an answer.
    failure: Failure | None = None

    def to_json(self) -> dict[str, Any]:
        data = {
            "kind": self.kind, "method": self.method, "url": self.url,
            "request_digest": self.request_digest, "status": self.status,
            "headers": [list(h) for h in self.headers],
            "body": base64.b64encode(self.body).decode("ascii"),
        }  # fmt: skip
        if self.failure is not None:
            data["failure"] = self.failure
        return data

    @classmethod
    def from_json(cls, data: dict[str, Any]) -> Exchange:
        kind, failure = data["kind"], data.get("failure")
        if kind not in KINDS:
            raise ValueError(f"unknown exchange kind {kind!r}")
        if failure is not None and failure not in FAILURES:
            raise ValueError(f"unknown failure {failure!r}")
        return cls(
            kind, str(data["method"]), str(data["url"]), str(data["request_digest"]),
            int(data["status"]), tuple((str(k), str(v)) for k, v in data["headers"]),
            base64.b64decode(data["body"]), failure,
        )  # fmt: skip

    @property
    def words(self) -> str:
        """A failure's words (its body as text)."""
        return self.body.decode("utf-8", errors="replace")


@dataclass
class Tape:
    """The exchanges of one request. ``max_bytes``: recording stops taking bodies beyond
    it (``overflowed`` then says so: such a tape is not kept)."""

    mode: TapeMode
    exchanges: list[Exchange] = field(default_factory=list)
    max_bytes: int | None = None
    # Replay: the time the search is run at (the recording's), so that the times in its
    # response are the recorded ones.
    clock_utc: str | None = None
    overflowed: bool = False
    _size: int = 0
    _used: set[int] = field(default_factory=set)

    @property
    def replaying(self) -> bool:
        return self.mode == "replay"

    def record(self, exchange: Exchange) -> None:
        """Keep an exchange (record mode), unless the tape is full."""
        if self.replaying:
            return
        self._size += len(exchange.body) + len(exchange.url) + 200
        if self.max_bytes is not None and self._size > self.max_bytes:
            self.overflowed = True
            return
        self.exchanges.append(exchange)

    def answer(
        self, kind: ExchangeKind, method: str, url: str, request_digest: str = ""
    ) -> Exchange | None:
        """The recorded answer to this request, each answer given once, in recorded
        order; an LLM call may take the next reply of its endpoint (see the module)."""
        exact = self._next(
            lambda e: (
                (e.kind, e.method, e.url, e.request_digest) == (kind, method, url, request_digest)
            )
        )
        if exact is None and kind == "llm":
            exact = self._next(lambda e: (e.kind, e.method, e.url) == (kind, method, url))
        return exact

    def holds(self, kind: ExchangeKind, method: str, url: str) -> bool:
        """Whether an answer to this request is still to be given (none is taken)."""
        return any(
            i not in self._used and (e.kind, e.method, e.url) == (kind, method, url)
            for i, e in enumerate(self.exchanges)
        )

    def _next(self, matches: Any) -> Exchange | None:
        for i, exchange in enumerate(self.exchanges):
            if i not in self._used and matches(exchange):
                self._used.add(i)
                return exchange
        return None

    def size(self) -> int:
        """The bytes of the bodies kept."""
        return sum(len(e.body) for e in self.exchanges)


def replay_tape(exchanges: Sequence[Exchange], clock_utc: str | None = None) -> Tape:
    """A tape that answers from ``exchanges``, at ``clock_utc`` if given."""
    return Tape("replay", list(exchanges), clock_utc=clock_utc)


_CURRENT: ContextVar[Tape | None] = ContextVar("searcher_tape", default=None)


def current_tape() -> Tape | None:
    """The running request's tape, if it is recorded or replayed."""
    return _CURRENT.get()


def replaying() -> bool:
    """Whether the running request is a replay (its outside world is the recording)."""
    tape = _CURRENT.get()
    return tape is not None and tape.replaying


@contextlib.contextmanager
def taping(tape: Tape | None) -> Iterator[Tape | None]:
    """Run the block (and the tasks it starts) with ``tape`` as the request's tape."""
    token = _CURRENT.set(tape)
    try:
        yield tape
    finally:
        _CURRENT.reset(token)
