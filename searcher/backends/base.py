"""What every search backend is: a query in, ranked hits out.

HTTP backends are two pure halves, as SearXNG's engine modules are: ``build_request``
(query -> request parts) and ``parse_response`` (status, headers, body -> hits). The I/O,
timeouts and error translation live once, in ``HttpBackend``. A backend that is a library
(DuckDuckGo through ``ddgs``) implements ``Backend.search`` itself.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, Protocol

import orjson

from searcher.backends.failures import challenge, http_failure, transport_failure
from searcher.config_sections import CALL_SETTINGS, InstanceSettings
from searcher.errors import (
    BackendBadResponse,
    BackendBlocked,
    BackendError,
    BackendTimeout,
)
from searcher.recording.aiohttp_tape import taped_request
from searcher.text import whole_characters

if TYPE_CHECKING:  # loaded by whoever opens the client: the configuration does not need it
    import aiohttp


@dataclass(frozen=True)
class BackendQuery:
    """One search, as every backend receives it."""

    text: str
    max_results: int = 10
    lang: str | None = None
    pageno: int = 1
    time_range: str | None = None  # day | week | month | year
    safesearch: int | None = None  # 0 off | 1 moderate | 2 strict
    engines: tuple[str, ...] = ()
    categories: tuple[str, ...] = ()
    # Fields the engine-group route filled in, not the request: an instance that cannot
    # honour them searches without them, and nobody needs telling.
    routed: frozenset[str] = frozenset()


@dataclass(frozen=True)
class Hit:
    """One result as a backend gave it, normalised."""

    url: str
    title: str
    snippet: str
    backend: str
    engines: tuple[str, ...] = ()
    positions: tuple[int, ...] = ()
    score: float | None = None
    published: str | None = None  # ISO 8601, UTC where known
    category: str | None = None


@dataclass(frozen=True)
class Capabilities:
    """What a backend can honour; the service leaves out what it cannot."""

    paging: bool = False
    result_count: bool = False  # honours max_results itself (else: auto-paging)
    time_range: bool = False
    safesearch: bool = False
    language: bool = False
    engines: bool = False
    categories: bool = False
    # A meta-search: each hit names the engines that found it and its position in each,
    # so fusion splits the answer into one ranked list per engine.
    per_engine: bool = False


@dataclass
class BackendAnswer:
    backend: str  # the instance's name
    hits: list[Hit]
    elapsed_ms: int = 0
    warnings: list[str] = field(default_factory=list)
    per_engine: bool = False  # see Capabilities.per_engine
    # A meta-search's engines that failed this time: (engine, its message).
    unresponsive: tuple[tuple[str, str], ...] = ()


class Backend(Protocol):
    """A configured search backend instance."""

    name: str
    capabilities: Capabilities

    async def search(self, query: BackendQuery, timeout_s: float) -> BackendAnswer:
        """Run one search; raise a ``BackendError`` subclass on any failure."""
        ...


@dataclass(frozen=True)
class BuildContext:
    """What the app hands every adapter's build function."""

    client: aiohttp.ClientSession  # shared HTTP client for backends
    ddgs_factory: Any = None  # the DuckDuckGo library's stand-in (tests only)
    clock: Callable[[], float] = time.monotonic
    corpus: Any = None  # the corpus index's reader (a CorpusReader), for ``adapter: local``
    # The embedder once loaded (None while it loads or when off): local collections embed
    # their queries with it.
    embedder: Callable[[], Any] = field(default=lambda: None)


@dataclass(frozen=True)
class BackendSpec:
    """An adapter, as the registry knows it: its name, what it can honour, the config
    model of its instances, and how to build one. Built-in modules and plugins (entry
    point group ``searcher.backends``) each declare one ``SPEC``."""

    adapter: str
    capabilities: Capabilities
    config_model: type[InstanceSettings]
    build: Callable[[str, Any, BuildContext], Backend]  # (instance name, config, context)
    # What keeps a configured instance from being usable (e.g. "no base_url"), or None.
    missing: Callable[[Any], str | None] = field(default=lambda config: None)
    # The keys of its config model that change what an instance answers (its upstream,
    # its weight: ``config_sections.ANSWER_SETTINGS`` plus its own): the result cache's
    # fingerprint holds these and nothing else, so a new timeout or key keeps the cached
    # answers. None (a plugin that does not say): every key but the timing ones
    # (``CALL_SETTINGS``) and an ``api_key``.
    answer_settings: frozenset[str] | None = None

    def answer_shaping(self, config: InstanceSettings) -> dict[str, Any]:
        """The settings of ``config`` that change its answers, as JSON-ready data."""
        data = config.model_dump(mode="json")
        if self.answer_settings is None:
            return {k: v for k, v in data.items() if k not in CALL_SETTINGS | {"api_key"}}
        return {k: v for k, v in data.items() if k in self.answer_settings}


@dataclass(frozen=True)
class RequestParts:
    method: str
    url: str
    params: Mapping[str, str] = field(default_factory=dict)
    headers: Mapping[str, str] = field(default_factory=dict)


BuildRequest = Callable[[BackendQuery], RequestParts]
# (status, headers, body, instance name) -> the answer, labelled with the instance's name.
ParseResponse = Callable[[int, Mapping[str, str], bytes, str], BackendAnswer]


# A backend's answer is a page of results; anything larger is not one.
MAX_ANSWER_BYTES = 8 * 1024 * 1024
# Of an error answer, enough to recognise a challenge page.
MAX_ERROR_BYTES = 64 * 1024


class HttpBackend:
    """The shared runner for HTTP backends: sends the request, translates failures.

    aiohttp rather than httpx here: on this hot path it measured 1.0 ms a call against
    httpx's 2.3 ms (bench/overhead.py's set-up), most of the service's own budget."""

    def __init__(
        self,
        name: str,
        capabilities: Capabilities,
        build_request: BuildRequest,
        parse_response: ParseResponse,
        client: aiohttp.ClientSession,
        status_hints: Mapping[int, str] | None = None,
    ) -> None:
        self.name = name
        self.capabilities = capabilities
        self._build_request = build_request
        self._parse_response = parse_response
        self._client = client
        self._status_hints = status_hints or {}

    async def search(self, query: BackendQuery, timeout_s: float) -> BackendAnswer:
        import aiohttp  # loaded already (the client is one); kept off the config's imports

        parts = self._build_request(query)
        started = time.perf_counter()
        try:
            # The tape of a recorded or replayed request is at this edge (its timeout
            # too: a backend that timed out replays as one).
            got = await taped_request(
                self._client, parts.method, parts.url, self._read, timeout_s,
                params=parts.params, headers=parts.headers,
            )  # fmt: skip
        except TimeoutError as exc:
            raise BackendTimeout(self.name, f"timed out after {timeout_s:.1f}s") from exc
        except aiohttp.ClientError as exc:
            raise transport_failure(self.name, exc) from exc
        status, headers, body = got.status, got.headers, got.body
        if status >= 300:  # a redirect is not followed: say where
            raise http_failure(self.name, status, headers, body, self._status_hints)
        wall = challenge(headers, body)
        if wall:  # a JSON API answering a CAPTCHA page with 200
            raise BackendBlocked(self.name, f"HTTP {status}: {wall}", status=status)
        try:
            answer = self._parse_response(status, headers, body, self.name)
        except BackendError:
            raise
        except Exception as exc:  # a parser bug must read as a bad answer, not a crash
            raise BackendBadResponse(self.name, f"unparseable answer: {exc!r}") from exc
        answer.elapsed_ms = int((time.perf_counter() - started) * 1000)
        return answer

    async def _read(self, response: aiohttp.ClientResponse) -> bytes:
        """The answer's body; of an error answer, only its head."""
        if response.status >= 300:
            return await response.content.read(MAX_ERROR_BYTES)
        return await _read_capped(self.name, response)


async def _read_capped(backend: str, response: aiohttp.ClientResponse) -> bytes:
    chunks, size = [], 0
    async for chunk in response.content.iter_chunked(256 * 1024):
        size += len(chunk)
        if size > MAX_ANSWER_BYTES:
            raise BackendBadResponse(backend, f"answer larger than {MAX_ANSWER_BYTES} bytes")
        chunks.append(chunk)
    return b"".join(chunks)


def json_object(backend: str, headers: Mapping[str, str], body: bytes) -> dict[str, Any]:
    """Decode a JSON object body or raise ``BackendBadResponse`` saying what came instead."""
    try:
        data = orjson.loads(body)
    except orjson.JSONDecodeError as exc:
        data = _python_json(body)
        if data is None:
            ctype = headers.get("content-type", "unknown")
            raise BackendBadResponse(
                backend, f"expected JSON, got {ctype!s} ({len(body)} bytes) that does not parse"
            ) from exc
    if not isinstance(data, dict):
        raise BackendBadResponse(backend, f"expected a JSON object, got {type(data).__name__}")
    return data


def _python_json(body: bytes) -> Any | None:
    """What Python's ``json`` reads of a body strict JSON refuses, or None. SearXNG writes
    its answer with ``json.dumps``, which lets through what engines send: a string cut in
    the middle of a UTF-16 pair (a lone surrogate) or a NaN score. One such result must not
    cost the whole answer; its broken characters become U+FFFD."""
    try:
        return whole_characters(json.loads(body))
    except (ValueError, RecursionError):
        return None
