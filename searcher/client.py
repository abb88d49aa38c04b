"""Python client for searcher's HTTP API: ``SearcherClient`` (sync), ``AsyncSearcherClient``.

Both speak the wire contract of ``searcher.contract`` and raise only searcher's own errors:
HTTP 422 (and 413) -> ``InvalidRequest``, 502 -> ``AllBackendsFailed``, any other status,
an unreachable server or an answer that is not searcher's -> ``RemoteError``.
"""

from __future__ import annotations

import difflib
import math
import time
from collections.abc import AsyncIterator, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass
from types import TracebackType
from typing import Any, Generic, Literal, Self, TypedDict, TypeVar, Unpack
from urllib.parse import quote, urlsplit

import anyio
import httpx
from pydantic import BaseModel, ValidationError

from searcher.contract import (
    Budget,
    CacheCleared,
    CacheStats,
    CollectionList,
    Constraints,
    CrawlAccepted,
    CrawlEvent,
    CrawlJob,
    CrawlRequest,
    ErrorResponse,
    FetchBatchResponse,
    FetchPageRequest,
    FetchPageResponse,
    FetchRequest,
    Health,
    JobEvent,
    MapRequest,
    MapResponse,
    Preset,
    Removed,
    ResearchAccepted,
    ResearchEvent,
    ResearchJob,
    ResearchRequest,
    ResearchResult,
    SearchMode,
    SearchRequest,
    SearchResponse,
    UploadAnswer,
    Want,
)
from searcher.errors import (
    FAILURE_KINDS,
    AllBackendsFailed,
    BackendFailure,
    FailureKind,
    InvalidRequest,
    RemoteError,
    SearcherError,
)

DEFAULT_BASE_URL = "http://127.0.0.1:8080"
# A full-mode search may take the server's whole deadline (12 s by default) and more.
DEFAULT_TIMEOUT_S = 60.0

M = TypeVar("M", bound=BaseModel)
E = TypeVar("E", bound=JobEvent)
JobKind = Literal["research", "crawl"]


def _given_text(field: str, value: object) -> str:
    """``value`` if it is a non-empty string; else ``InvalidRequest`` naming ``field``
    (``quote`` would raise a TypeError about bytes for a number)."""
    if not isinstance(value, str):
        raise InvalidRequest(field, f"must be a string, got {type(value).__name__}")
    if not value:
        raise InvalidRequest(field, "must not be empty")
    return value


def job_path(job_id: str, kind: JobKind = "research") -> str:
    """The path of a job (research or crawl): its id as one path segment, whatever it
    holds; ``InvalidRequest`` for an empty id (the path would name the job list)."""
    segment = quote(_given_text("job_id", job_id), safe="")
    if segment in (".", ".."):  # a dot segment the URL would drop: the job list or /v1
        segment = segment.replace(".", "%2E")
    return f"/v1/{kind}/{segment}"


def documents_path(collection: str, name: str | None = None) -> str:
    """The path of a collection's uploaded documents (or of one, ``name``, its folders
    kept as path segments); ``InvalidRequest`` for an empty collection or name."""
    path = f"/v1/collections/{quote(_given_text('collection', collection), safe='')}/documents"
    if name is None:
        return path
    if not _given_text("name", name).strip("/"):
        raise InvalidRequest("name", "must not be empty")
    return f"{path}/{quote(name, safe='/')}"


UploadFiles = Sequence[tuple[str, bytes]]


def upload_parts(files: UploadFiles) -> list[tuple[str, tuple[str, bytes, str]]]:
    """The multipart parts of an upload: each ``(name, body)`` as a file part named
    ``files``; ``InvalidRequest`` for none, or a body that is not bytes."""
    if isinstance(files, str | bytes) or not files:
        raise InvalidRequest("files", "send one or more (name, bytes) pairs")
    parts = []
    for index, entry in enumerate(files):
        # A bare body, a path or a name alone would fail to unpack with Python's own error.
        if not (isinstance(entry, tuple | list) and len(entry) == 2 and isinstance(entry[0], str)):
            kind = type(entry).__name__
            raise InvalidRequest(f"files[{index}]", f"must be a (name, bytes) pair, got {kind}")
        name, body = entry
        if not isinstance(body, bytes | bytearray):
            raise InvalidRequest(f"files[{index}]", "the body must be bytes (read the file)")
        parts.append(("files", (name, bytes(body), "application/octet-stream")))
    return parts


def _events_path(job_id: str, after: int, kind: JobKind = "research") -> str:
    """The path of a job's event stream; ``InvalidRequest`` for a negative ``after``."""
    if isinstance(after, bool) or not isinstance(after, int) or after < 0:
        raise InvalidRequest("after", "must be a whole number >= 0 (an event id)")
    return f"{job_path(job_id, kind)}/events"


class SearchOptions(TypedDict, total=False):
    """Keyword shortcuts of ``search``; they are laid over the request's own fields."""

    intent: str
    mode: SearchMode
    backend: str | list[str]
    lang: str
    max_results: int
    max_context_chars: int
    constraints: Constraints | Mapping[str, Any]
    budget: Budget | Mapping[str, Any]
    want: Want | Mapping[str, Any]


# The names ``search`` takes as keyword options; anything else is a typo to refuse, not
# an option to drop silently (``max_result=1`` would otherwise return the default count).
SEARCH_OPTIONS: frozenset[str] = SearchOptions.__optional_keys__ | SearchOptions.__required_keys__


# --- building requests (pure) ----------------------------------------------------------


def _check_option_names(options: Mapping[str, Any]) -> None:
    """``TypeError`` for a keyword ``search`` does not know, as Python gives for a bad
    keyword argument of an ordinary function."""
    for name in options:
        if name not in SEARCH_OPTIONS:
            close = difflib.get_close_matches(name, sorted(SEARCH_OPTIONS), n=1)
            hint = f"; did you mean {close[0]!r}?" if close else ""
            raise TypeError(f"search() got an unexpected keyword argument {name!r}{hint}")


def _as_dict(name: str, section: object) -> dict[str, Any]:
    """A request section given as a model or a mapping; ``InvalidRequest`` naming the
    option for anything else (``dict("abc")`` would raise a bare ValueError)."""
    if isinstance(section, BaseModel):
        return section.model_dump(mode="json", exclude_unset=True)
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        kind = type(section).__name__
        raise InvalidRequest(name, f"must be a mapping or a model, got {kind}")
    return dict(section)


def _overlay(
    name: str, base: dict[str, Any] | None, given: object, **fields: Any
) -> dict[str, Any]:
    merged = {**(base or {}), **_as_dict(name, given)}
    merged.update({name: value for name, value in fields.items() if value is not None})
    return merged


def _invalid(exc: ValidationError) -> InvalidRequest:
    """The first problem of a local validation, named like the server's 422 names it."""
    return InvalidRequest.from_validation(exc.errors())


def build_search_request(
    query: str | SearchRequest, **options: Unpack[SearchOptions]
) -> SearchRequest:
    """The request ``search`` sends: ``query`` (a string or a whole request) with the
    shortcuts laid over it. Raises ``InvalidRequest`` naming the field, as the server would,
    and ``TypeError`` for an option ``search`` does not take."""
    _check_option_names(options)
    if isinstance(query, SearchRequest) and not options:
        return query
    body: dict[str, Any] = (
        query.model_dump(mode="json", exclude_unset=True)
        if isinstance(query, SearchRequest)
        else {"query": query}
    )
    sections = {
        "constraints": _overlay(
            "constraints",
            body.get("constraints"),
            options.get("constraints"),
            search_mode=options.get("mode"),
            backend=options.get("backend"),
            lang=options.get("lang"),
        ),
        "budget": _overlay(
            "budget",
            body.get("budget"),
            options.get("budget"),
            max_results=options.get("max_results"),
            max_context_chars=options.get("max_context_chars"),
        ),
        "want": _overlay("want", body.get("want"), options.get("want")),
    }
    body.update({name: section for name, section in sections.items() if section})
    if options.get("intent") is not None:
        body["intent"] = options["intent"]
    try:
        return SearchRequest.model_validate(body)
    except ValidationError as exc:
        raise _invalid(exc) from exc


def search_body(request: SearchRequest) -> dict[str, Any]:
    """The JSON body of ``POST /v1/search``: only the fields the caller set, so the server's
    configured defaults apply to the rest."""
    return request.model_dump(mode="json", exclude_unset=True)


def fetch_body(url: str, max_chars: int | None, start_char: int) -> dict[str, Any]:
    """The JSON body of ``POST /v1/fetch``; ``InvalidRequest`` naming the field if it is bad."""
    try:
        request = FetchPageRequest(url=url, max_chars=max_chars, start_char=start_char)
    except ValidationError as exc:
        raise _invalid(exc) from exc
    return request.model_dump(mode="json")


def fetch_pages_body(urls: list[str], max_chars: int | None, start_char: int) -> dict[str, Any]:
    """The JSON body of ``POST /v1/fetch`` for several pages; ``InvalidRequest`` naming the
    field if it is bad."""
    try:
        request = FetchRequest(urls=urls, max_chars=max_chars, start_char=start_char)
    except ValidationError as exc:
        raise _invalid(exc) from exc
    return request.model_dump(mode="json", exclude_unset=True)


def crawl_body(url: str, options: dict[str, Any]) -> dict[str, Any]:
    """The JSON body of ``POST /v1/crawl``; ``InvalidRequest`` naming the field if it is bad."""
    try:
        request = CrawlRequest(url=url, **options)
    except ValidationError as exc:
        raise _invalid(exc) from exc
    return request.model_dump(mode="json", exclude_unset=True)


def map_body(url: str, options: dict[str, Any]) -> dict[str, Any]:
    """The JSON body of ``POST /v1/map``; ``InvalidRequest`` naming the field if it is bad."""
    try:
        request = MapRequest(url=url, **options)
    except ValidationError as exc:
        raise _invalid(exc) from exc
    return request.model_dump(mode="json", exclude_unset=True)


# --- reading answers (pure) ------------------------------------------------------------


def _error_body(response: httpx.Response) -> ErrorResponse | None:
    try:
        return ErrorResponse.model_validate_json(response.content)
    except ValidationError:
        return None  # not searcher's error shape: a proxy page, an empty body...


def _kind(entry: dict[str, str]) -> FailureKind:
    """A failure's kind as the server sent it; an older server sends none."""
    kind = entry.get("kind")
    for known in FAILURE_KINDS:
        if kind == known:
            return known
    return "bad_response"


def error_from(response: httpx.Response, url: str) -> SearcherError:
    """Our exception for a non-2xx answer from ``url``."""
    status = response.status_code
    parsed = _error_body(response)
    error = parsed.error if parsed else None
    if error and status == 422:
        field = error.field or "body"
        return InvalidRequest(field, error.message.removeprefix(f"{field}: "))
    if error and status == 413:
        return InvalidRequest("body", error.message)
    if error and status == 502 and error.type == "all_backends_failed":
        failures = [
            BackendFailure(entry.get("backend", "?"), entry.get("reason", "?"), _kind(entry))
            for entry in error.backends or []
        ]
        return AllBackendsFailed(failures)
    detail = error.message if error else response.reason_phrase or "unexpected answer"
    return RemoteError(url, f"HTTP {status}: {detail}", status)


def _refuse_if_closed(http: httpx.Client | httpx.AsyncClient, url: str) -> None:
    # httpx raises RuntimeError here; a caller is promised searcher's own errors.
    if http.is_closed:
        raise RemoteError(url, "this client is closed")


def _transport_error(url: str, exc: Exception, timeout: float) -> RemoteError:
    if isinstance(exc, httpx.TimeoutException):
        return _no_answer(url, timeout)
    if isinstance(exc, httpx.ConnectError):
        return RemoteError(url, f"cannot connect ({str(exc) or 'connection failed'})")
    return RemoteError(url, f"request failed ({str(exc) or type(exc).__name__})")


def _no_answer(url: str, timeout: float) -> RemoteError:
    return RemoteError(url, f"no answer within {timeout:g} s")


def body_by(chunks: Iterable[bytes], deadline: float, url: str, timeout: float) -> bytes:
    """The answer's body, read by ``deadline`` (``time.monotonic()``). httpx's read timeout
    bounds each wait between two parts of the body, not the whole: a server or proxy that
    trickles its answer a byte at a time would hold the call for ever."""
    parts = []
    for chunk in chunks:
        parts.append(chunk)
        if time.monotonic() > deadline:
            raise _no_answer(url, timeout)
    return b"".join(parts)


def _read(streamed: httpx.Response, body: bytes) -> httpx.Response:
    # The streamed answer as a response read whole; httpx decodes its raw body here.
    return httpx.Response(
        streamed.status_code, headers=streamed.headers, content=body, request=streamed.request
    )


def decode(response: httpx.Response, url: str) -> Any:
    """The JSON of a 2xx answer; our exception for anything else."""
    if not response.is_success:
        raise error_from(response, url)
    try:
        return response.json()
    except ValueError as exc:
        raise RemoteError(url, "the answer is not JSON", response.status_code) from exc


def parse(model: type[M], data: Any, url: str) -> M:
    """``data`` as ``model``; a ``RemoteError`` if it does not fit (not a searcher, or
    another version of it)."""
    try:
        return model.model_validate(data)
    except ValidationError as exc:
        raise RemoteError(url, f"unexpected answer: {_invalid(exc)}") from exc


# --- the clients -----------------------------------------------------------------------


@dataclass(frozen=True)
class _Call:
    method: Literal["GET", "POST", "DELETE"]
    path: str
    body: dict[str, Any] | None = None
    files: list[tuple[str, tuple[str, bytes, str]]] | None = None  # multipart instead


def _normalised(base_url: str) -> str:
    """``base_url`` without its trailing slash; ``ValueError`` unless httpx can use it as
    an http(s) base URL (a bad port would otherwise surface at the first call, as httpx's
    or the socket's own error)."""
    wanted = f"base_url must be an http(s) URL such as {DEFAULT_BASE_URL}"
    try:
        parts = urlsplit(base_url)
        _ = parts.port  # raises for a port that is not a number in 0-65535
        _ = httpx.URL(base_url).host  # decodes IDNA labels (``xn--`` alone does not)
    except (ValueError, httpx.InvalidURL) as exc:
        raise ValueError(f"{wanted}: {base_url!r} ({exc})") from exc
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise ValueError(f"{wanted}: {base_url!r}")
    return base_url.rstrip("/")


def _checked_timeout(timeout: float) -> float:
    """``timeout`` if it is a usable number of seconds; ``ValueError`` now, instead of
    httpx's "Timeout value out of range" at the first call."""
    if isinstance(timeout, bool) or not isinstance(timeout, int | float):
        raise ValueError(f"timeout must be a number of seconds, got {timeout!r}")
    if not (math.isfinite(timeout) and timeout > 0):
        raise ValueError(f"timeout must be a positive, finite number of seconds, got {timeout!r}")
    return timeout


def _checked_api_key(api_key: str | None) -> str | None:
    """``api_key`` if it can go in an HTTP header (printable ASCII); ``ValueError`` now,
    instead of a UnicodeEncodeError at the first call. The key is a secret, so the message
    names the offending position, never the key."""
    for position, char in enumerate(api_key or "", start=1):
        if not " " <= char <= "~":
            kind = "not ASCII" if ord(char) > 0x7F else "a control character"
            raise ValueError(f"api_key must be printable ASCII; character {position} is {kind}")
    return api_key


def _headers(api_key: str | None) -> dict[str, str]:
    headers = {"accept": "application/json"}
    if api_key:
        headers["authorization"] = f"Bearer {api_key}"
    return headers


class SseParser(Generic[E]):
    """Server-Sent Events from ``url``, a line at a time, into job events of ``model``
    (research's by default; comments skipped)."""

    def __init__(self, url: str, model: type[E] = ResearchEvent) -> None:  # type: ignore[assignment]
        self._url = url
        self._model = model
        self._fields: dict[str, str] = {}

    def feed(self, line: str) -> E | None:
        """The event a blank line completes, else None; ``RemoteError`` for an event that
        is not one of this kind of job (another server, or another version of searcher)."""
        if line:
            if not line.startswith(":"):
                name, _, value = line.partition(":")
                self._fields[name] = value.removeprefix(" ")
            return None
        fields, self._fields = self._fields, {}
        if "data" not in fields:
            return None
        try:
            return self._model.model_validate_json(fields["data"])
        except ValidationError as exc:
            raise RemoteError(self._url, f"unexpected answer: {_invalid(exc)}") from exc


def _check_event_stream(response: httpx.Response, url: str) -> None:
    """``RemoteError`` unless a 200 answer is an event stream: a proxy's HTML page or a
    JSON body has no events, and reading it as SSE would end the stream with none."""
    content_type = response.headers.get("content-type", "")
    if content_type.partition(";")[0].strip().lower() != "text/event-stream":
        got = content_type or "no content-type"
        raise RemoteError(url, f"not an event stream ({got})", response.status_code)


def research_body(question: str | ResearchRequest, preset: Preset | None) -> dict[str, Any]:
    """The ``POST /v1/research`` body for a question (or a whole request, ``preset`` laid
    over its own, as ``search`` lays its options over a request)."""
    if isinstance(question, ResearchRequest) and preset is None:
        request = question
    else:
        given = (
            question.model_dump(mode="json", exclude_unset=True)
            if isinstance(question, ResearchRequest)
            else {"query": question}
        )
        try:
            request = ResearchRequest.model_validate(
                {**given, **({"preset": preset} if preset else {})}
            )
        except ValidationError as exc:
            raise _invalid(exc) from exc
    body = request.model_dump(mode="json", exclude_unset=True)
    # The client follows a job with calls of its own (its status, its event stream): the
    # job is always started for its id, never as an event stream answered in place.
    body.pop("stream", None)
    return body


# An event stream may be quiet between heartbeats; only connecting is bounded tightly.
# Events may be minutes apart (a slow LLM step): a stream waits longer than a call.
STREAM_READ_S = 120.0
_STREAM_TIMEOUT = httpx.Timeout(10.0, read=STREAM_READ_S)
# A dropped stream is resumed after the last event seen, this many times in a row at most
# (with no event between them): a long job may be resumed any number of times.
STREAM_RECONNECTS = 5

_HEALTH = _Call("GET", "/v1/health")
_CACHE_STATS = _Call("GET", "/v1/cache/stats")
_CACHE_CLEAR = _Call("POST", "/v1/cache/clear")
_COLLECTIONS = _Call("GET", "/v1/collections")


def _upload_call(collection: str, files: UploadFiles) -> _Call:
    return _Call("POST", documents_path(collection), files=upload_parts(files))


class SearcherClient:
    """Blocking client of a running searcher; one connection pool for all calls.

    ``api_key`` is sent as ``Authorization: Bearer …``: a key of a searcher with
    ``auth.enabled``, or of a proxy in front of it.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        api_key: str | None = None,
    ) -> None:
        self.base_url = _normalised(base_url)
        self.timeout = _checked_timeout(timeout)
        self._http = httpx.Client(
            base_url=self.base_url, timeout=timeout, headers=_headers(_checked_api_key(api_key))
        )

    def __enter__(self) -> Self:
        return self

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()

    def close(self) -> None:
        """Close the connection pool."""
        self._http.close()

    def _send(self, call: _Call) -> Any:
        url = self.base_url + call.path
        _refuse_if_closed(self._http, url)
        # ``timeout`` is for the whole call; each wait within it is bounded by httpx too.
        deadline = time.monotonic() + self.timeout
        try:
            with self._http.stream(
                call.method, call.path, json=call.body, files=call.files
            ) as streamed:
                body = body_by(streamed.iter_raw(), deadline, url, self.timeout)
                response = _read(streamed, body)
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise _transport_error(url, exc, self.timeout) from exc
        return decode(response, url)

    def _call(self, call: _Call, model: type[M]) -> M:
        return parse(model, self._send(call), self.base_url + call.path)

    def search(
        self, query: str | SearchRequest, **options: Unpack[SearchOptions]
    ) -> SearchResponse:
        """``POST /v1/search``: a query string or a whole ``SearchRequest``, plus shortcuts."""
        request = build_search_request(query, **options)
        return self._call(_Call("POST", "/v1/search", search_body(request)), SearchResponse)

    def health(self) -> Health:
        """``GET /v1/health``: backends, their breakers, the embedder."""
        return self._call(_HEALTH, Health)

    def cache_stats(self) -> CacheStats:
        """``GET /v1/cache/stats``: the extraction cache."""
        return self._call(_CACHE_STATS, CacheStats)

    def cache_clear(self) -> CacheCleared:
        """``POST /v1/cache/clear``: empty the extraction cache."""
        return self._call(_CACHE_CLEAR, CacheCleared)

    def collections(self) -> CollectionList:
        """``GET /v1/collections``: the collections this key may see, with counts."""
        return self._call(_COLLECTIONS, CollectionList)

    def upload(self, collection: str, files: UploadFiles) -> UploadAnswer:
        """``POST /v1/collections/{collection}/documents``: ``files`` as ``(name,
        bytes)`` pairs, indexed; what became of each (``corpus.uploads``)."""
        return self._call(_upload_call(collection, files), UploadAnswer)

    def delete_document(self, collection: str, name: str) -> Removed:
        """``DELETE /v1/collections/{collection}/documents/{name}``: drop an uploaded
        document (index and disk)."""
        return self._call(_Call("DELETE", documents_path(collection, name)), Removed)

    def fetch_page(
        self, url: str, max_chars: int | None = None, start_char: int = 0
    ) -> FetchPageResponse:
        """``POST /v1/fetch``: up to ``max_chars`` of one page's extracted text from
        ``start_char`` (``next_start_char`` continues it)."""
        call = _Call("POST", "/v1/fetch", fetch_body(url, max_chars, start_char))
        return self._call(call, FetchPageResponse)

    def fetch_pages(
        self, urls: list[str], max_chars: int | None = None, start_char: int = 0
    ) -> FetchBatchResponse:
        """``POST /v1/fetch`` with several URLs: read concurrently, each with its status."""
        call = _Call("POST", "/v1/fetch", fetch_pages_body(urls, max_chars, start_char))
        return self._call(call, FetchBatchResponse)

    def map_site(self, url: str, **options: Any) -> MapResponse:
        """``POST /v1/map``: a site's URLs from its sitemaps and links (options: the body's
        fields, e.g. ``max_depth``, ``limit``, ``select_paths``)."""
        return self._call(_Call("POST", "/v1/map", map_body(url, options)), MapResponse)

    def start_research(
        self, question: str | ResearchRequest, preset: Preset | None = None
    ) -> ResearchAccepted:
        """``POST /v1/research``: start a job (202); follow it with ``stream_research``."""
        call = _Call("POST", "/v1/research", research_body(question, preset))
        return self._call(call, ResearchAccepted)

    def research_status(self, job_id: str) -> ResearchJob:
        """``GET /v1/research/{id}``: status, progress, and the result when done."""
        return self._call(_Call("GET", job_path(job_id)), ResearchJob)

    def cancel_research(self, job_id: str) -> ResearchJob:
        """``DELETE /v1/research/{id}``."""
        return self._call(_Call("DELETE", job_path(job_id)), ResearchJob)

    def stream_research(self, job_id: str, after: int = 0) -> Iterator[ResearchEvent]:
        """The job's events as they come, until its ``done`` event; a dropped connection is
        resumed after the last event seen (``Last-Event-ID``), so none is missed or
        repeated."""
        return self._stream(job_id, after, "research", ResearchEvent)

    def _stream(self, job_id: str, after: int, kind: JobKind, model: type[E]) -> Iterator[E]:
        last, drops = after, 0
        while True:
            url = f"{self.base_url}{_events_path(job_id, after, kind)}"
            _refuse_if_closed(self._http, url)
            parser = SseParser(url, model)
            try:
                with self._http.stream(
                    "GET", url, headers={"Last-Event-ID": str(last)}, timeout=_STREAM_TIMEOUT
                ) as response:
                    if response.status_code != 200:
                        response.read()
                        raise error_from(response, url)
                    _check_event_stream(response, url)
                    for line in response.iter_lines():
                        event = parser.feed(line)
                        if event is None:
                            continue
                        last, drops = event.id, 0  # a resume that goes on is no failure
                        yield event
                        if event.type == "done":
                            return
            except httpx.TransportError as exc:
                drops += 1
                if drops > STREAM_RECONNECTS:
                    raise _transport_error(url, exc, STREAM_READ_S) from exc
                continue
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                # Not a dropped connection (a bad job id in the URL, an undecodable body):
                # resuming would fail the same way.
                raise _transport_error(url, exc, STREAM_READ_S) from exc
            return  # the server ended the stream: the job is over

    def start_crawl(self, url: str, **options: Any) -> CrawlAccepted:
        """``POST /v1/crawl``: start a crawl job (202; options: the body's fields, e.g.
        ``max_depth``, ``limit``, ``query``); follow it with ``stream_crawl``."""
        return self._call(_Call("POST", "/v1/crawl", crawl_body(url, options)), CrawlAccepted)

    def crawl_status(self, job_id: str) -> CrawlJob:
        """``GET /v1/crawl/{id}``: status and the pages read so far."""
        return self._call(_Call("GET", job_path(job_id, "crawl")), CrawlJob)

    def cancel_crawl(self, job_id: str) -> CrawlJob:
        """``DELETE /v1/crawl/{id}``."""
        return self._call(_Call("DELETE", job_path(job_id, "crawl")), CrawlJob)

    def stream_crawl(self, job_id: str, after: int = 0) -> Iterator[CrawlEvent]:
        """The crawl's events (``page``, ``skip``, ... ``done``) as they come, resumed as
        ``stream_research`` resumes."""
        return self._stream(job_id, after, "crawl", CrawlEvent)

    def crawl(self, url: str, **options: Any) -> CrawlJob:
        """Run a crawl to its end and return it, its pages included."""
        job = self.start_crawl(url, **options)
        for _ in self.stream_crawl(job.id):
            pass
        return self.crawl_status(job.id)

    def research(
        self, question: str | ResearchRequest, preset: Preset | None = None
    ) -> ResearchResult:
        """Run a job to its end and return its result (``RemoteError`` if it failed)."""
        job = self.start_research(question, preset)
        for _ in self.stream_research(job.id):
            pass
        status = self.research_status(job.id)
        if status.result is None:
            where = f"{self.base_url}{job_path(job.id)}"
            raise RemoteError(where, f"research {status.status}: {status.error}")
        return status.result


class AsyncSearcherClient:
    """Asyncio client of a running searcher; one connection pool for all calls.

    ``api_key`` is sent as ``Authorization: Bearer …``: a key of a searcher with
    ``auth.enabled``, or of a proxy in front of it.
    """

    def __init__(
        self,
        base_url: str = DEFAULT_BASE_URL,
        *,
        timeout: float = DEFAULT_TIMEOUT_S,
        api_key: str | None = None,
    ) -> None:
        self.base_url = _normalised(base_url)
        self.timeout = _checked_timeout(timeout)
        self._http = httpx.AsyncClient(
            base_url=self.base_url, timeout=timeout, headers=_headers(_checked_api_key(api_key))
        )

    async def __aenter__(self) -> Self:
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Close the connection pool."""
        await self._http.aclose()

    async def _send(self, call: _Call) -> Any:
        url = self.base_url + call.path
        _refuse_if_closed(self._http, url)
        try:
            # ``timeout`` is for the whole call: httpx's bounds each wait for a part of
            # the answer only, so a server trickling it would hold the call for ever.
            with anyio.fail_after(self.timeout):
                response = await self._http.request(
                    call.method, call.path, json=call.body, files=call.files
                )
        except TimeoutError as exc:
            raise _no_answer(url, self.timeout) from exc
        except (httpx.HTTPError, httpx.InvalidURL) as exc:
            raise _transport_error(url, exc, self.timeout) from exc
        return decode(response, url)

    async def _call(self, call: _Call, model: type[M]) -> M:
        return parse(model, await self._send(call), self.base_url + call.path)

    async def search(
        self, query: str | SearchRequest, **options: Unpack[SearchOptions]
    ) -> SearchResponse:
        """``POST /v1/search``: a query string or a whole ``SearchRequest``, plus shortcuts."""
        request = build_search_request(query, **options)
        return await self._call(_Call("POST", "/v1/search", search_body(request)), SearchResponse)

    async def health(self) -> Health:
        """``GET /v1/health``: backends, their breakers, the embedder."""
        return await self._call(_HEALTH, Health)

    async def cache_stats(self) -> CacheStats:
        """``GET /v1/cache/stats``: the extraction cache."""
        return await self._call(_CACHE_STATS, CacheStats)

    async def cache_clear(self) -> CacheCleared:
        """``POST /v1/cache/clear``: empty the extraction cache."""
        return await self._call(_CACHE_CLEAR, CacheCleared)

    async def collections(self) -> CollectionList:
        """``GET /v1/collections``: the collections this key may see, with counts."""
        return await self._call(_COLLECTIONS, CollectionList)

    async def upload(self, collection: str, files: UploadFiles) -> UploadAnswer:
        """``POST /v1/collections/{collection}/documents``: ``files`` as ``(name,
        bytes)`` pairs, indexed; what became of each (``corpus.uploads``)."""
        return await self._call(_upload_call(collection, files), UploadAnswer)

    async def delete_document(self, collection: str, name: str) -> Removed:
        """``DELETE /v1/collections/{collection}/documents/{name}``: drop an uploaded
        document (index and disk)."""
        return await self._call(_Call("DELETE", documents_path(collection, name)), Removed)

    async def fetch_page(
        self, url: str, max_chars: int | None = None, start_char: int = 0
    ) -> FetchPageResponse:
        """``POST /v1/fetch``: up to ``max_chars`` of one page's extracted text from
        ``start_char`` (``next_start_char`` continues it)."""
        call = _Call("POST", "/v1/fetch", fetch_body(url, max_chars, start_char))
        return await self._call(call, FetchPageResponse)

    async def fetch_pages(
        self, urls: list[str], max_chars: int | None = None, start_char: int = 0
    ) -> FetchBatchResponse:
        """``POST /v1/fetch`` with several URLs: read concurrently, each with its status."""
        call = _Call("POST", "/v1/fetch", fetch_pages_body(urls, max_chars, start_char))
        return await self._call(call, FetchBatchResponse)

    async def map_site(self, url: str, **options: Any) -> MapResponse:
        """``POST /v1/map``: a site's URLs from its sitemaps and links."""
        return await self._call(_Call("POST", "/v1/map", map_body(url, options)), MapResponse)

    async def start_research(
        self, question: str | ResearchRequest, preset: Preset | None = None
    ) -> ResearchAccepted:
        """``POST /v1/research``: start a job (202); follow it with ``stream_research``."""
        call = _Call("POST", "/v1/research", research_body(question, preset))
        return await self._call(call, ResearchAccepted)

    async def research_status(self, job_id: str) -> ResearchJob:
        """``GET /v1/research/{id}``: status, progress, and the result when done."""
        return await self._call(_Call("GET", job_path(job_id)), ResearchJob)

    async def cancel_research(self, job_id: str) -> ResearchJob:
        """``DELETE /v1/research/{id}``."""
        return await self._call(_Call("DELETE", job_path(job_id)), ResearchJob)

    def stream_research(self, job_id: str, after: int = 0) -> AsyncIterator[ResearchEvent]:
        """The job's events as they come, until its ``done`` event; a dropped connection is
        resumed after the last event seen (``Last-Event-ID``)."""
        return self._stream(job_id, after, "research", ResearchEvent)

    async def _stream(
        self, job_id: str, after: int, kind: JobKind, model: type[E]
    ) -> AsyncIterator[E]:
        last, drops = after, 0
        while True:
            url = f"{self.base_url}{_events_path(job_id, after, kind)}"
            _refuse_if_closed(self._http, url)
            parser = SseParser(url, model)
            try:
                async with self._http.stream(
                    "GET", url, headers={"Last-Event-ID": str(last)}, timeout=_STREAM_TIMEOUT
                ) as response:
                    if response.status_code != 200:
                        await response.aread()
                        raise error_from(response, url)
                    _check_event_stream(response, url)
                    async for line in response.aiter_lines():
                        event = parser.feed(line)
                        if event is None:
                            continue
                        last, drops = event.id, 0  # a resume that goes on is no failure
                        yield event
                        if event.type == "done":
                            return
            except httpx.TransportError as exc:
                drops += 1
                if drops > STREAM_RECONNECTS:
                    raise _transport_error(url, exc, STREAM_READ_S) from exc
                continue
            except (httpx.HTTPError, httpx.InvalidURL) as exc:
                # Not a dropped connection (a bad job id in the URL, an undecodable body):
                # resuming would fail the same way.
                raise _transport_error(url, exc, STREAM_READ_S) from exc
            return

    async def start_crawl(self, url: str, **options: Any) -> CrawlAccepted:
        """``POST /v1/crawl``: start a crawl job (202); follow it with ``stream_crawl``."""
        call = _Call("POST", "/v1/crawl", crawl_body(url, options))
        return await self._call(call, CrawlAccepted)

    async def crawl_status(self, job_id: str) -> CrawlJob:
        """``GET /v1/crawl/{id}``: status and the pages read so far."""
        return await self._call(_Call("GET", job_path(job_id, "crawl")), CrawlJob)

    async def cancel_crawl(self, job_id: str) -> CrawlJob:
        """``DELETE /v1/crawl/{id}``."""
        return await self._call(_Call("DELETE", job_path(job_id, "crawl")), CrawlJob)

    def stream_crawl(self, job_id: str, after: int = 0) -> AsyncIterator[CrawlEvent]:
        """The crawl's events as they come, resumed as ``stream_research`` resumes."""
        return self._stream(job_id, after, "crawl", CrawlEvent)

    async def crawl(self, url: str, **options: Any) -> CrawlJob:
        """Run a crawl to its end and return it, its pages included."""
        job = await self.start_crawl(url, **options)
        async for _ in self.stream_crawl(job.id):
            pass
        return await self.crawl_status(job.id)

    async def research(
        self, question: str | ResearchRequest, preset: Preset | None = None
    ) -> ResearchResult:
        """Run a job to its end and return its result (``RemoteError`` if it failed)."""
        job = await self.start_research(question, preset)
        async for _ in self.stream_research(job.id):
            pass
        status = await self.research_status(job.id)
        if status.result is None:
            where = f"{self.base_url}{job_path(job.id)}"
            raise RemoteError(where, f"research {status.status}: {status.error}")
        return status.result
