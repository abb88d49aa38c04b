"""The one exception tree of searcher.

Foreign errors (httpx, ddgs, OS errors) are translated into these at the boundary where
they happen, with ``raise OurError(...) from exc``. HTTP status codes for them are chosen in
exactly one place: ``searcher.api.errors``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, ClassVar, Literal, get_args

if TYPE_CHECKING:
    from searcher.contract import FetchStatus, SkipReason


class SearcherError(Exception):
    """Base class of every error searcher raises on purpose."""


class ConfigError(SearcherError):
    """The configuration file or environment is invalid."""


class InvalidRequest(SearcherError):
    """A request failed validation; ``field`` names the offending field (dotted path)."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message

    @classmethod
    def from_validation(cls, errors: Sequence[Mapping[str, Any]]) -> InvalidRequest:
        """The first problem of a pydantic validation (``exc.errors()``)."""
        problem = (field_problems(errors) or [FieldProblem("body", "invalid request")])[0]
        return cls(problem.field, problem.text)


@dataclass(frozen=True)
class FieldProblem:
    """One validation problem: the dotted field, and what is wrong with it."""

    field: str
    message: str
    detail: str | None = None  # e.g. where a JSON body stops parsing

    @property
    def text(self) -> str:
        return f"{self.message}: {self.detail}" if self.detail else self.message


UNKNOWN_FIELD = "unknown field"  # what field_problems says of a key no model has
# What pydantic puts in an error's location to say which member of a union failed
# ("messages.0.content.list[ContentPart].0.text"): a type, never one of our fields.
_TYPE_NAMES = frozenset({"str", "int", "float", "bool", "bytes", "list", "dict", "none"})


def _union_member(part: object) -> bool:
    return isinstance(part, str) and ("[" in part or part in _TYPE_NAMES)


def field_problems(errors: Sequence[Mapping[str, Any]]) -> list[FieldProblem]:
    """pydantic's validation errors (``exc.errors()``) in our words: fields dotted, without
    FastAPI's leading ``body``; the one rule for every entry point (HTTP, CLI, MCP, client,
    configuration)."""
    problems = []
    for err in errors:
        parts = [str(p) for p in err.get("loc", ()) if not _union_member(p)]
        if parts and parts[0] == "body":
            parts = parts[1:]
        field = ".".join(parts) or "body"
        message = str(err.get("msg", "invalid")).removeprefix("Value error, ")
        detail = None
        kind = err.get("type")
        if kind == "json_invalid":
            field, message = "body", "malformed JSON"
            detail = str((err.get("ctx") or {}).get("error", "")) or None
        elif kind == "extra_forbidden":
            message = UNKNOWN_FIELD
        elif kind == "missing" and field == "body":
            message = "a JSON object body is required"
        elif kind in ("model_attributes_type", "dict_type") and field == "body":
            # Also what FastAPI says of a JSON body sent as text/plain: it reads no other.
            message = "must be a JSON object, sent with content-type: application/json"
        elif kind in ("model_type", "model_attributes_type", "dict_type"):
            # pydantic names the model class ("instance of BudgetDefaults"): ours to hide.
            message = "must be an object (a mapping of keys to values)"
        problems.append(FieldProblem(field, message, detail))
    return problems


# --- search backends -------------------------------------------------------------------

# Why a backend gave no usable answer. The circuit breaker reacts by kind (a rejected key
# opens it at once, a 429 honours Retry-After, an empty answer is no failure), and
# ``/v1/health`` counts failures by kind. ``unavailable``: the instance is disabled or not
# configured, so it was never called.
FailureKind = Literal[
    "timeout",
    "connect",
    "http_status",
    "rate_limited",
    "blocked",
    "auth",
    "bad_response",
    "no_results",
    "circuit_open",
    "unavailable",
]
FAILURE_KINDS: tuple[FailureKind, ...] = get_args(FailureKind)
# What an empty answer's entry says (``BackendFailure.no_results``); read its kind, not this.
NO_RESULTS_REASON = "no results"


class BackendError(SearcherError):
    """A search backend did not give a usable answer. The class is the kind: ``kind``
    names it in one word (the breaker, ``/v1/health``, ``meta.errors`` and the metrics
    read it), and no instance can say otherwise. A plugin that raises ``BackendError``
    itself reports a bad answer."""

    kind: ClassVar[FailureKind] = "bad_response"
    retryable: bool = False
    # Whether the failure says something about the backend's health (its breaker counts
    # it); False when the request itself was at fault, e.g. a constraint the backend
    # refused as invalid: the request failed, the backend is not unhealthy.
    verdict: bool = True

    def __init__(
        self,
        backend: str,
        reason: str,
        *,
        status: int | None = None,
        retry_after_s: float | None = None,
        verdict: bool = True,
    ) -> None:
        super().__init__(f"{backend}: {reason}")
        self.backend = backend
        self.reason = reason
        self.status = status  # the HTTP status the backend answered with, when it did
        self.retry_after_s = retry_after_s  # from a 429's Retry-After, when it said
        self.verdict = verdict

    def failure(self) -> BackendFailure:
        """This error as an entry of a search outcome's failures."""
        return BackendFailure(self.backend, self.reason, self.kind)


class BackendTimeout(BackendError):
    kind = "timeout"
    retryable = True


class BackendConnectError(BackendError):
    kind = "connect"
    retryable = True


class BackendHTTPError(BackendError):
    """The backend answered with an HTTP error status no other class names (not a 429,
    a refused key or a challenge page: ``searcher.backends.failures.http_failure``
    chooses). 5xx can pass, so they are retried; other statuses mean our request is
    wrong."""

    kind = "http_status"

    def __init__(
        self, backend: str, status: int, reason: str | None = None, *, verdict: bool = True
    ) -> None:
        super().__init__(backend, reason or f"HTTP {status}", status=status, verdict=verdict)
        self.retryable = status >= 500


class BackendRateLimited(BackendError):
    """The backend said "too many requests" (a 429, with its Retry-After when it gave
    one: the breaker waits it out), or searcher's own pacing
    (``backends.<instance>.rate``) had no turn for the call before the request's
    deadline, so it was never made."""

    kind = "rate_limited"


class BackendBlocked(BackendError):
    """The backend answered with a CAPTCHA or bot wall instead of results."""

    kind = "blocked"


class BackendAuthRejected(BackendError):
    """The backend refused the key, or access is switched off (401, 403): retrying will
    not help, so the breaker opens at once."""

    kind = "auth"


class BackendBadResponse(BackendError):
    """The backend answered with something that is not the expected format."""

    kind = "bad_response"


class CircuitOpen(BackendError):
    """The backend's circuit breaker is open: the call failed fast without being made."""

    kind = "circuit_open"


class BackendNotAvailable(BackendError):
    """The backend is disabled or not configured."""

    kind = "unavailable"


class EnginesUnresponsive(BackendError):
    """SearXNG answered, but with no results because its engines failed. Raised as one
    of its subclasses, whose other base is the kind the engines' messages tell
    (``engines_unresponsive``); none is retried (SearXNG asked its engines already)."""

    retryable = False

    def __init__(self, backend: str, engines: list[tuple[str, str]]) -> None:
        listed = ", ".join(f"{name} ({msg})" for name, msg in engines)
        super().__init__(backend, f"no results; unresponsive engines: {listed}")
        self.engines = engines


class EnginesTimedOut(EnginesUnresponsive, BackendTimeout):
    pass


class EnginesUnreachable(EnginesUnresponsive, BackendConnectError):
    pass


class EnginesHTTPError(EnginesUnresponsive, BackendError):
    kind = "http_status"


class EnginesRateLimited(EnginesUnresponsive, BackendRateLimited):
    pass


class EnginesBlocked(EnginesUnresponsive, BackendBlocked):
    pass


class EnginesBadResponse(EnginesUnresponsive, BackendBadResponse):
    pass


_ENGINES_UNRESPONSIVE: dict[FailureKind, type[EnginesUnresponsive]] = {
    cls.kind: cls
    for cls in (
        EnginesTimedOut, EnginesUnreachable, EnginesHTTPError, EnginesRateLimited,
        EnginesBlocked, EnginesBadResponse,
    )
}  # fmt: skip


def engines_unresponsive(
    backend: str, engines: list[tuple[str, str]], kind: FailureKind
) -> EnginesUnresponsive:
    """The error of a SearXNG answer whose engines all failed, as the class of ``kind``
    (the most telling of their messages); a kind engines cannot fail with reads as a bad
    answer."""
    return _ENGINES_UNRESPONSIVE.get(kind, EnginesBadResponse)(backend, engines)


@dataclass(frozen=True)
class BackendFailure:
    """Why one backend did not contribute to an answer."""

    backend: str
    reason: str
    kind: FailureKind

    @classmethod
    def no_results(cls, backend: str) -> BackendFailure:
        """An instance that answered with no hits: listed, but no failure of its own."""
        return cls(backend, NO_RESULTS_REASON, "no_results")

    @property
    def empty(self) -> bool:
        """The instance answered, with nothing (``no_results``)."""
        return self.kind == "no_results"


def describe_failures(failures: Sequence[BackendFailure], separator: str = "; ") -> str:
    """``backend: reason`` for each failure, joined (empty when there are none); a retry
    that failed as the attempt before it is said once."""
    return separator.join(dict.fromkeys(f"{f.backend}: {f.reason}" for f in failures))


class AllBackendsFailed(SearcherError):
    """Every backend that was tried failed; ``failures`` says why, one entry each."""

    def __init__(self, failures: list[BackendFailure]) -> None:
        listed = describe_failures(failures) or "no backend is enabled"
        super().__init__(f"all search backends failed ({listed})")
        self.failures = failures


# --- a remote searcher (searcher.client) -----------------------------------------------


class RemoteError(SearcherError):
    """A remote searcher could not be reached or did not answer as expected; ``status`` is
    its HTTP status when it answered at all."""

    def __init__(self, url: str, reason: str, status: int | None = None) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason
        self.status = status


# --- fetching pages --------------------------------------------------------------------


class FetchError(SearcherError):
    """A page could not be fetched. ``status``/``skip_reason`` are what the item reports."""

    status: FetchStatus = "failed"
    skip_reason: SkipReason | None = None

    def __init__(self, url: str, reason: str) -> None:
        super().__init__(f"{url}: {reason}")
        self.url = url
        self.reason = reason


class FetchBlocked(FetchError):
    """The fetch guard refused the address before connecting."""

    status = "skipped"
    skip_reason = "blocked"


class FetchTimeout(FetchError):
    status = "skipped"
    skip_reason = "timeout"


class UnsupportedContentType(FetchError):
    """A response refused for its content type, with what did arrive: its HTTP status and
    media type (``None`` when unlabelled), so that the page's fetch block can show them."""

    status = "skipped"
    skip_reason = "content_type"

    def __init__(
        self, url: str, reason: str, status_code: int | None = None, media_type: str | None = None
    ) -> None:
        super().__init__(url, reason)
        self.status_code = status_code
        self.media_type = media_type


class FetchHTTPError(FetchError):
    def __init__(self, url: str, status_code: int, note: str = "") -> None:
        super().__init__(url, f"HTTP {status_code}{note}")
        self.status_code = status_code


class TooManyRedirects(FetchError):
    pass


class PageBlocked(FetchError):
    """The page is a CAPTCHA, bot wall, cookie wall or access-denied stub, not content;
    ``status_code`` is the HTTP status it came with, when the fetcher judged it."""

    skip_reason = "blocked"

    def __init__(self, url: str, reason: str, status_code: int | None = None) -> None:
        super().__init__(url, reason)
        self.status_code = status_code


class RenderError(FetchError):
    """The headless browser could not render the page (it refused a command, the page
    is too large once drawn)."""


class BrowserGone(RenderError):
    """The browser died or was stopped while a page was rendered (it is restarted for the
    next page)."""


class ExtractionError(FetchError):
    """The page was fetched but its main text could not be extracted (e.g. a worker crashed)."""


class PageTooComplex(ExtractionError):
    """The pre-scan refused the page: too many elements, attributes, cells in a row, or
    nesting too deep to parse in reasonable time."""


class ExtractionTimeout(ExtractionError):
    """Extraction ran past its time limit; its worker process was killed."""

    skip_reason = "timeout"


class ExtractionTooLarge(ExtractionError):
    """Extraction needed more memory than a worker may take
    (``limits.max_extract_memory_mb``); its worker process was replaced."""

    skip_reason = "too_large"


class ExtractionInterrupted(ExtractionError):
    """The worker extracting the page died; another try may succeed."""

    skip_reason = "error"


# --- embeddings ------------------------------------------------------------------------


class EmbedderUnavailable(SearcherError):
    """The embedding model could not be loaded, or the embedding endpoint gave no usable
    answer. Near-duplicate removal degrades to URL dedup when this happens."""


class EmbedderMisconfigured(EmbedderUnavailable):
    """The configured embedder cannot be loaded as configured: its model is not where
    ``embeddings.model`` says, a setting it needs is missing, or its package is not
    installed. Bad input (a command exits 2); an endpoint that fails is not this."""


# --- LLM steps -------------------------------------------------------------------------


class LlmError(SearcherError):
    """An LLM step could not get a usable reply; the step takes its fallback."""


class LlmUnavailable(LlmError):
    """No LLM is configured, or the endpoint cannot be reached."""


class LlmTimeout(LlmError):
    """The call did not finish within its timeout or the request deadline."""


class LlmBadReply(LlmError):
    """The endpoint answered, but not with something the step can use."""


class LlmRequired(SearcherError):
    """The request asks for what only a model can give (a chat answer), and no LLM is
    configured: 503, naming the setting."""

    def __init__(self, what: str) -> None:
        super().__init__(
            f"{what} needs an LLM, and none is configured: set llm.base_url and llm.model"
        )
        self.field = "llm.base_url"


class StructuredOutputFailed(SearcherError):
    """The model gave no answer that validates against the caller's ``output_schema``
    within its repairs (``problems``: the last validation errors), or could not be asked."""

    def __init__(self, reason: str, problems: Sequence[str] = ()) -> None:
        detail = "; ".join(problems)
        super().__init__(f"output_schema: {reason}" + (f": {detail}" if detail else ""))
        self.reason = reason
        self.problems = list(problems)


class AnswerUnavailable(SearcherError):
    """The LLM was asked for a chat answer and gave none (unreachable, timed out, a reply
    it could not use): 502 with the reason; the evidence alone is no chat answer."""


class AnswerJobFailed(AnswerUnavailable):
    """A chat answer's research job failed; ``kind``: its ``error_kind`` (every search
    failed, no answer validated against the schema...), the error's type on the wire."""

    def __init__(self, message: str, kind: str) -> None:
        super().__init__(message)
        self.kind = kind


# --- research --------------------------------------------------------------------------


class JobFailed(SearcherError):
    """A background job (research, crawl) could not go on; the job ends ``failed``, its
    ``error_kind`` ``kind`` (a ``contract.JobFailure``)."""

    def __init__(self, message: str, kind: str = "failed") -> None:
        super().__init__(message)
        self.kind = kind


class ResearchFailed(JobFailed):
    """A research job could not go on (every search failed); the job ends ``failed``."""


class TooManyJobs(SearcherError):
    """``research.max_concurrent_jobs`` are running; ``retry_after_s`` says when to retry.
    ``what``: the kind of job (``research``, ``crawl``)."""

    def __init__(self, limit: int, retry_after_s: int, what: str = "research") -> None:
        super().__init__(f"{limit} {what} jobs are running already; retry later")
        self.limit = limit
        self.retry_after_s = retry_after_s


class TooManyJobsForKey(TooManyJobs):
    """The caller's API key runs its share of the job slots already (other keys may still
    start theirs); ``setting`` is the one that sets the share."""

    def __init__(
        self,
        limit: int,
        retry_after_s: int,
        what: str = "research",
        setting: str = "research.max_jobs_per_key",
    ) -> None:
        SearcherError.__init__(
            self,
            f"this API key runs {limit} {what} job(s) already, its share of the job slots "
            f"({setting}); retry when one has ended",
        )
        self.limit = limit
        self.retry_after_s = retry_after_s


class UnknownRequest(SearcherError):
    """No search with that request id is kept for feedback (never made, expired, or
    feedback is off)."""

    def __init__(self, request_id: str, ttl_s: int | None = None) -> None:
        kept = (
            f"searches are kept for feedback for {ttl_s} s" if ttl_s else "feedback.enabled is off"
        )
        super().__init__(f"no search with request id {request_id!r} ({kept})")
        self.request_id = request_id


class UnknownRecording(SearcherError):
    """No recorded search has that request id (never recorded, expired or replaced)."""

    def __init__(self, request_id: str) -> None:
        super().__init__(
            f"no recorded search {request_id!r} (never recorded, expired after "
            "recording.ttl_s, or replaced: recording.max_recordings)"
        )
        self.request_id = request_id


class JobNotFound(SearcherError):
    """No job of that kind (``research``, ``crawl``) has that id (or it expired)."""

    def __init__(self, job_id: str, what: str = "research") -> None:
        # Ids are 16 characters: a longer one is named by its start, not echoed whole.
        shown = job_id if len(job_id) <= 64 else job_id[:64] + "…"
        super().__init__(f"no {what} job {shown!r}")
        self.job_id = job_id


# --- shared state (SQLite files, Redis) ------------------------------------------------


class StateUnavailable(SearcherError):
    """The state store (Redis, or the SQLite files) cannot be reached or used. At start-up
    this stops ``searcher serve``; while serving, the caches treat it as a miss."""


class StateEntryUnusable(StateUnavailable):
    """One entry cannot be used (another program stored a value of another type under our
    key): a miss for that entry, while the store itself is fine."""


# --- API keys --------------------------------------------------------------------------


class KeyNotFound(SearcherError):
    """No active API key has that name or id."""

    def __init__(self, name_or_id: str) -> None:
        super().__init__(f"no active API key named or with id {name_or_id!r}")
        self.name_or_id = name_or_id


class AccessDenied(SearcherError):
    """The caller's API key may not use what the request names (a collection of own
    documents, through the backend instance or upload that reaches it); ``field`` names
    where the request named it."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(f"{field}: {message}")
        self.field = field
        self.message = message


class UploadsOff(SearcherError):
    """Uploads are switched off on this server (``corpus.uploads.enabled``)."""

    def __init__(self) -> None:
        super().__init__(
            "uploads are off on this server (corpus.uploads.enabled); index files with "
            "searcher index add"
        )


class DocumentNotFound(SearcherError):
    """No uploaded document of that name in the collection."""
