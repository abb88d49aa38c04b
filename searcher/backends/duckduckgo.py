"""DuckDuckGo through the ``ddgs`` library (no API key).

``ddgs`` is synchronous and can only reach the real internet, so it runs in a worker
thread, and the object that talks to it is injectable: tests replace it at this boundary.
"""

from __future__ import annotations

import asyncio
import json
import math
import time
from collections.abc import Callable
from typing import Any, Protocol

from pydantic import Field

from searcher.backends.base import (
    BackendAnswer,
    BackendQuery,
    BackendSpec,
    BuildContext,
    Capabilities,
    Hit,
)
from searcher.backends.normalise import http_url, plain_text
from searcher.config_sections import ANSWER_SETTINGS, InstanceSettings
from searcher.errors import (
    BackendBadResponse,
    BackendConnectError,
    BackendError,
    BackendRateLimited,
    BackendTimeout,
)
from searcher.recording.tape import NOT_RECORDED, Exchange, Failure, current_tape

NAME = "duckduckgo"
CAPABILITIES = Capabilities(result_count=True, time_range=True, safesearch=True, language=True)
_TIMELIMIT = {"day": "d", "week": "w", "month": "m", "year": "y"}
_SAFESEARCH = {0: "off", 1: "moderate", 2: "on"}
# DuckDuckGo regions are country-language; a bare language gets its usual country.
_REGION_FOR_LANG = {
    "en": "us-en", "de": "de-de", "fr": "fr-fr", "es": "es-es", "it": "it-it", "nl": "nl-nl",
    "pt": "pt-pt", "ru": "ru-ru", "pl": "pl-pl", "sv": "se-sv", "ja": "jp-jp", "ko": "kr-kr",
    "zh": "cn-zh", "tr": "tr-tr", "uk": "ua-uk", "cs": "cz-cs", "da": "dk-da", "fi": "fi-fi",
}  # fmt: skip
_COUNTRY_ALIASES = {"gb": "uk"}


class DuckDuckGoSettings(InstanceSettings):
    """DuckDuckGo through ``ddgs`` (``adapter: duckduckgo``); no key."""

    timeout_s: float = Field(
        default=10.0,
        gt=0,
        description="DuckDuckGo's default `timeout_s` (a library call, slower than an API)",
    )


class TextSearcher(Protocol):
    """The slice of ``ddgs.DDGS`` this backend uses."""

    def text(self, query: str, **kwargs: Any) -> list[dict[str, Any]]: ...


SearcherFactory = Callable[[float], TextSearcher]


def default_factory(timeout_s: float) -> TextSearcher:
    """A real ``ddgs.DDGS`` client."""
    from ddgs import DDGS

    client: TextSearcher = DDGS(timeout=max(1, math.ceil(timeout_s)))
    return client


def region_for(lang: str | None) -> str:
    """``en`` -> ``us-en``, ``en-GB`` -> ``uk-en``; unknown or none -> ``wt-wt`` (no region)."""
    if not lang:
        return "wt-wt"
    language, _, country = lang.replace("_", "-").lower().partition("-")
    if country:
        return f"{_COUNTRY_ALIASES.get(country, country)}-{language}"
    return _REGION_FOR_LANG.get(language, "wt-wt")


def search_kwargs(query: BackendQuery) -> dict[str, Any]:
    """Keyword arguments for ``DDGS.text`` from our query."""
    kwargs: dict[str, Any] = {
        "region": region_for(query.lang),
        "safesearch": _SAFESEARCH.get(query.safesearch if query.safesearch is not None else 1),
        "max_results": query.max_results,
        "backend": "duckduckgo",
    }
    if query.time_range in _TIMELIMIT:
        kwargs["timelimit"] = _TIMELIMIT[query.time_range]
    return kwargs


def parse_results(rows: object, instance: str = NAME) -> list[Hit]:
    """Hits from ``DDGS.text`` rows (``title``, ``href``, ``body``)."""
    if not isinstance(rows, list):
        raise BackendBadResponse(instance, f"expected a list of results, got {type(rows).__name__}")
    hits = []
    for row in rows:
        url = http_url(row.get("href")) if isinstance(row, dict) else None
        if url is None:
            continue
        title = plain_text(row.get("title")) or url
        hits.append(Hit(url, title, plain_text(row.get("body")), instance, engines=(NAME,)))
    return hits


def _translate(exc: Exception, instance: str = NAME) -> BackendError:
    """ddgs' exceptions -> ours. Imported lazily: ddgs is slow to import."""
    from ddgs.exceptions import RatelimitException, TimeoutException

    if isinstance(exc, TimeoutException):
        return BackendTimeout(instance, f"ddgs timed out: {exc}")
    if isinstance(exc, RatelimitException):
        return BackendRateLimited(instance, f"rate limited: {exc}")
    return BackendConnectError(instance, _in_words(exc))


def _in_words(exc: Exception) -> str:
    """ddgs' failure in one short line: its errors nest the HTTP library's whole chain
    ("DNSError('error sending request for url (...) > error resolving DNS > ...')")."""
    text = str(exc)
    if "dns" in text.lower():
        return "cannot resolve DuckDuckGo's address (no network or DNS?)"
    first = text.split(" > ")[0].strip()
    return f"ddgs failed: {first[:200]}"


def _is_no_results(exc: Exception) -> bool:
    # ddgs raises instead of returning [] when nothing matched.
    return "no results" in str(exc).lower()


class DuckDuckGoBackend:
    capabilities = CAPABILITIES

    def __init__(self, factory: SearcherFactory = default_factory, name: str = NAME) -> None:
        self.name = name
        self._factory = factory

    def _search_blocking(self, query: BackendQuery, timeout_s: float) -> list[dict[str, Any]]:
        rows = self._factory(timeout_s).text(query.text, **search_kwargs(query))
        return rows

    async def _rows(self, query: BackendQuery, timeout_s: float) -> list[dict[str, Any]]:
        """The library's rows for ``query`` (none when it found nothing)."""
        try:
            return await asyncio.wait_for(
                asyncio.to_thread(self._search_blocking, query, timeout_s), timeout_s
            )
        except TimeoutError as exc:
            raise BackendTimeout(self.name, f"timed out after {timeout_s:.1f}s") from exc
        except BackendError:
            raise
        except Exception as exc:
            if _is_no_results(exc):
                return []
            raise _translate(exc, self.name) from exc

    async def search(self, query: BackendQuery, timeout_s: float) -> BackendAnswer:
        started = time.perf_counter()
        tape = current_tape()
        # The library is this backend's edge: its rows are what a recording keeps.
        key = json.dumps([query.text, search_kwargs(query)], sort_keys=True)
        if tape is not None and tape.replaying:
            found = tape.answer("ddgs", "TEXT", key)
            if found is None:
                raise BackendConnectError(self.name, NOT_RECORDED)
            if found.failure is not None:  # a timeout or a connection failure, as it was
                failed = BackendTimeout if found.failure == "timeout" else BackendConnectError
                raise failed(self.name, found.words)
            rows = json.loads(found.body)
            return BackendAnswer(self.name, parse_results(rows, self.name), elapsed_ms=0)
        try:
            rows = await self._rows(query, timeout_s)
        except (BackendTimeout, BackendConnectError) as exc:
            if tape is not None:
                failure: Failure = "timeout" if isinstance(exc, BackendTimeout) else "connection"
                tape.record(Exchange("ddgs", "TEXT", key, "", 0, (), exc.reason.encode(), failure))
            raise
        if tape is not None:
            body = json.dumps(rows, ensure_ascii=False, default=str).encode()
            tape.record(Exchange("ddgs", "TEXT", key, "", 200, (), body))
        hits = parse_results(rows, self.name)
        elapsed_ms = int((time.perf_counter() - started) * 1000)
        return BackendAnswer(self.name, hits, elapsed_ms=elapsed_ms)


def _build(name: str, settings: DuckDuckGoSettings, context: BuildContext) -> DuckDuckGoBackend:
    return DuckDuckGoBackend(context.ddgs_factory or default_factory, name)


SPEC = BackendSpec(NAME, CAPABILITIES, DuckDuckGoSettings, _build, answer_settings=ANSWER_SETTINGS)
