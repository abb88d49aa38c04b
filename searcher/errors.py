"""The one exception tree of searcher.

Foreign errors (httpx, ddgs, OS errors) are translated into these at the boundary where
they happen, with ``raise OurError(...) from exc``. HTTP status codes for them are chosen in
exactly one place: ``searcher.api.errors``.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import TYPE_CHECKING

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


# --- search backends -------------------------------------------------------------------


class BackendError(SearcherError):
    """A search backend did not give a usable answer."""

    retryable: bool = False

    def __init__(self, backend: str, reason: str) -> None:
        super().__init__(f"{backend}: {reason}")
        self.backend = backend
        self.reason = reason


class BackendTimeout(BackendError):
    retryable = True


class BackendConnectError(BackendError):
    retryable = True


class BackendHTTPError(BackendError):
    """The backend answered with an HTTP error status."""

    def __init__(self, backend: str, status: int, reason: str | None = None) -> None:
        super().__init__(backend, reason or f"HTTP {status}")
        self.status = status
        # 429 and 5xx can pass; 4xx other than 429 means our request or key is wrong.
        self.retryable = status == 429 or status >= 500


class BackendBadResponse(BackendError):
    """The backend answered 200 with something that is not the expected format."""


class EnginesUnresponsive(BackendError):
    """SearXNG answered, but with no results because its engines failed."""

    def __init__(self, backend: str, engines: list[tuple[str, str]]) -> None:
        listed = ", ".join(f"{name} ({msg})" for name, msg in engines)
        super().__init__(backend, f"no results; unresponsive engines: {listed}")
        self.engines = engines


class CircuitOpen(BackendError):
    """The backend's circuit breaker is open: the call failed fast without being made."""


class BackendNotAvailable(BackendError):
    """The backend is disabled or not configured."""


@dataclass(frozen=True)
class BackendFailure:
    """Why one backend did not contribute to an answer."""

    backend: str
    reason: str


class AllBackendsFailed(SearcherError):
    """Every backend that was tried failed; ``failures`` says why, one entry each."""

    def __init__(self, failures: list[BackendFailure]) -> None:
        listed = "; ".join(f"{f.backend}: {f.reason}" for f in failures) or "no backend is enabled"
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
    status = "skipped"
    skip_reason = "content_type"


class FetchHTTPError(FetchError):
    def __init__(self, url: str, status_code: int) -> None:
        super().__init__(url, f"HTTP {status_code}")
        self.status_code = status_code


class TooManyRedirects(FetchError):
    pass


class PageBlocked(FetchError):
    """The page is a CAPTCHA, bot wall, cookie wall or access-denied stub, not content."""

    skip_reason = "blocked"


class ExtractionError(FetchError):
    """The page was fetched but its main text could not be extracted (e.g. a worker crashed)."""


class PageTooComplex(ExtractionError):
    """The pre-scan refused the page: too many elements, attributes, cells in a row, or
    nesting too deep to parse in reasonable time."""


class ExtractionTimeout(ExtractionError):
    """Extraction ran past its time limit; its worker process was killed."""


# --- embeddings ------------------------------------------------------------------------


class EmbedderUnavailable(SearcherError):
    """The embedding model could not be loaded, or the embedding endpoint gave no usable
    answer. Near-duplicate removal degrades to URL dedup when this happens."""


# --- LLM steps -------------------------------------------------------------------------


class LlmError(SearcherError):
    """An LLM step could not get a usable reply; the step takes its fallback."""


class LlmUnavailable(LlmError):
    """No LLM is configured, or the endpoint cannot be reached."""


class LlmTimeout(LlmError):
    """The call did not finish within its timeout or the request deadline."""


class LlmBadReply(LlmError):
    """The endpoint answered, but not with something the step can use."""
