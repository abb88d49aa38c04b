"""The result cache: whole search answers, keyed by what changes the answer.

A request's key is its normalised form (query text and language, backends, engines,
categories, filters, mode, result count, wants, budget limits that shape the answer)
plus a fingerprint of the settings that shape answers, so a configuration change or an
upgrade never serves an answer computed under other rules. Time limits and the cache's
own controls are left out: they change whether an answer is complete, not what it is.

Entries are JSON (never pickle), stored for their fresh time plus
``cache.stale_if_error_s``; a stale entry is served only when every backend failed.
Partial answers (a backend of a fan-out failed, the deadline cut a fetch, an LLM step fell
back) are never stored. ``serve_cached`` is the one call site's wrapper.

With API keys on and ``cache.scope: key`` (the default), the caller (its key) is part of
every key and semantic scope: an exact hit, its age, a semantic hit (whose pack names the
query it was made for) and a wait for an identical request being computed stay within one
key. Another key asking the same learns nothing of it.
"""

from __future__ import annotations

import asyncio
import copy
import functools
import hashlib
import logging
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Literal, Protocol

import orjson
from pydantic import ValidationError

from searcher import __version__
from searcher.backends.instances import answer_settings
from searcher.config import LEGACY_INSTANCES, ResultCacheSettings, Settings
from searcher.contract import (
    MIN_TIME_MS,
    Budget,
    CacheInfo,
    CacheKind,
    ErrorEntry,
    FetchInfo,
    SearchRequest,
    SearchResponse,
)
from searcher.errors import AllBackendsFailed
from searcher.pipeline.limits import BUDGET_STAGE
from searcher.state.base import StateStore, decode_json, encode_json

log = logging.getLogger(__name__)

NAMESPACE = "results:"
_FORMAT = 1
# Budget fields that bound time or retries: they decide whether an answer is complete,
# and only complete answers are stored, so they do not change a stored answer.
_TIME_FIELDS = ("max_total_time_ms", "per_request_timeout_ms", "max_search_retries", "max_age_s")

_TIMING_DEFAULTS = {
    "max_total_time_ms", "search_timeout_ms", "fetch_timeout_ms", "max_search_retries"
}  # fmt: skip
# How pages are read, not what reading them gives.
_FETCH_CAPACITY = {
    "max_concurrency",
    "extract_workers",
    "extract_timeout_s",
    "extract_client_share",
}

# How many pages are rendered at once and within what time and memory, not what
# rendering gives.
_BROWSER_CAPACITY = {"max_pages", "client_share", "page_timeout_s", "max_memory_mb"}

CachePolicy = Literal["use", "refresh", "off"]


class SemanticMatcher(Protocol):
    """The semantic cache as the result cache sees it (``searcher.cache.semantic``)."""

    async def find(self, query: str, scope: str) -> str | None:
        """The key of a cached answer to a query close enough to ``query``."""
        ...

    async def add(self, query: str, scope: str, key: str, ttl_s: float) -> None: ...


@dataclass(frozen=True)
class CachedResponse:
    response: SearchResponse
    kind: CacheKind
    age_s: float


@dataclass(frozen=True)
class _Computing:
    """A request being computed in this process, which identical requests may wait for."""

    answer: asyncio.Future[SearchResponse]
    ends_by: float  # time.monotonic() when its deadline is over


def budget_defaults(settings: Settings) -> dict[str, Any]:
    """What a request's budget fields are when it does not set them (``budget.*`` of the
    config), those that shape an answer only: a request that states them is the same."""
    configured = settings.budget.model_dump(mode="json")
    return {
        name: configured[name]
        for name in Budget.model_fields
        if name in configured and name not in _TIME_FIELDS
    }


def canonical_request(
    request: SearchRequest, with_query: bool = True, defaults: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """The parts of a request that change its answer, in a stable form, its budget filled
    in from ``defaults`` (``budget_defaults``). Without the query text it is the request's
    *scope*: what two queries must share to answer each other."""
    data = request.model_dump(mode="json", exclude_defaults=True)
    data.pop("query", None)
    constraints = data.get("constraints", {})
    constraints.pop("cache", None)
    constraints.pop("lang", None)
    # A session changes the answer only through the pages it was shown, which the
    # service adds to the fingerprint (none shown: the answer everyone gets).
    constraints.pop("session_id", None)
    budget = data.setdefault("budget", {})
    for name in _TIME_FIELDS:
        budget.pop(name, None)
    for name, value in (defaults or {}).items():
        budget.setdefault(name, value)
    data = {name: part for name, part in data.items() if part != {}}
    data["lang"] = request.lang
    if with_query:
        data["text"] = request.query_text
    return data


def _digest(*parts: Any) -> str:
    return hashlib.sha256(orjson.dumps(parts, option=orjson.OPT_SORT_KEYS)).hexdigest()[:40]


def _owned(owner: str | None, *parts: Any) -> tuple[Any, ...]:
    """``parts``, and the owner when answers are kept per caller (a shared cache's keys
    stay what they were)."""
    return (*parts, owner) if owner is not None else parts


def request_key(
    request: SearchRequest,
    fingerprint: str,
    defaults: Mapping[str, Any] | None = None,
    owner: str | None = None,
) -> str:
    """The state key of a request's cached answer; ``owner``: whose alone it is."""
    canonical = canonical_request(request, defaults=defaults)
    return NAMESPACE + _digest(*_owned(owner, fingerprint, canonical))


def request_scope(
    request: SearchRequest,
    fingerprint: str,
    defaults: Mapping[str, Any] | None = None,
    owner: str | None = None,
) -> str:
    canonical = canonical_request(request, with_query=False, defaults=defaults)
    return _digest(*_owned(owner, fingerprint, canonical))


def answer_fingerprint(settings: Settings) -> str:
    """A digest of every setting that shapes an answer (not timeouts, keys or caches).
    Of each backend instance, what its adapter declares (``backends.instances``)."""
    backends = settings.backends.model_dump(
        mode="json", exclude={"instances", "hedge_delay_ms", *LEGACY_INSTANCES}
    )
    backends["instances"] = answer_settings(settings)
    shaping = {
        "version": __version__,
        "backends": backends,
        "routing": settings.routing.model_dump(mode="json"),
        "fusion": settings.fusion.model_dump(mode="json"),
        "scoring": settings.scoring.model_dump(mode="json"),
        "rerank": settings.rerank.model_dump(mode="json", exclude={"api_key", "timeout_s"}),
        "budget": settings.budget.model_dump(mode="json", exclude=_TIMING_DEFAULTS),
        # Which pages may be read and how (hosts, user agent, complexity and PDF limits).
        "fetch": settings.fetch.model_dump(mode="json", exclude=_FETCH_CAPACITY),
        # Whether pages only JavaScript fills are rendered, and which are refused: without
        # the browser such a page is a complete answer's failed item.
        "browser": settings.browser.model_dump(mode="json", exclude=_BROWSER_CAPACITY),
        # The ceilings lower what a request asked: an answer made under others differs.
        "limits": settings.limits.model_dump(mode="json"),
        "embeddings": [settings.embeddings.provider, settings.embeddings.model],
        "llm": [settings.llm.base_url, settings.llm.model, settings.llm.steps.model_dump()],
    }
    return _digest(shaping)


def cache_policy(request: SearchRequest) -> CachePolicy:
    """``off``: neither read nor write (also for a recorded search: it records what the
    backends say now); ``refresh``: compute, then store (max_age_s: 0)."""
    if request.constraints.cache == "off" or request.constraints.record:
        return "off"
    if request.budget.max_age_s == 0:
        return "refresh"
    return "use"


def fresh_seconds(
    request: SearchRequest, response: SearchResponse, cfg: ResultCacheSettings
) -> int:
    """How long an answer stays fresh: per intent, shorter for fast-moving questions."""
    ttl = cfg.ttl_by_intent.get(request.intent or "", cfg.ttl_s)
    route = (response.meta.route or {}).get("group")
    if request.constraints.time_range == "day" or route in cfg.fresh_routes:
        ttl = min(ttl, cfg.fresh_ttl_s)
    return ttl


def page_may_change(fetch: FetchInfo) -> bool:
    """Whether another read of the page could go better: it timed out (its own timeout or
    the request's deadline), was cut by an error (a dead worker), or failed with no
    answer, a 5xx, 408 or 429. A 404, a refused type, a page too complex to parse or a
    page beyond ``max_fetch_pages`` (``budget``) would go the same way again."""
    if fetch.skip_reason in ("timeout", "error"):
        return True
    if fetch.status == "failed" and fetch.skip_reason is None:
        code = fetch.http_status
        return code is None or code >= 500 or code in (408, 429)
    return False


def is_complete(response: SearchResponse) -> bool:
    """False for an answer that another try could improve: a fanned-out backend or some
    engines failed, the deadline cut a fetch or a page read failed for a passing reason,
    an LLM step took its fallback."""
    if any(page_may_change(item.fetch) for item in response.items or ()):
        return False
    meta = response.meta
    used = set((meta.backend_used or "").split("+"))
    for error in meta.errors:
        if error.stage == "search":
            if error.kind == "no_results":
                continue
            # In a fallback chain the failures before the answering backend are the
            # chain doing its job; anything else is a missing part of the answer.
            if meta.fallback_used and error.source not in used:
                continue
            return False
        if error.stage == "fetch" and error.kind in ("budget", "timeout"):
            return False
        if error.kind == "fallback":
            return False
    return True


class ResultCache:
    """Cached answers in a ``StateStore``; ``clock`` is injectable for tests."""

    def __init__(
        self,
        store: StateStore,
        settings: ResultCacheSettings,
        fingerprint: str,
        semantic: SemanticMatcher | None = None,
        clock: Callable[[], float] = time.time,
        budget_defaults: Mapping[str, Any] | None = None,
        per_client: bool = False,
    ) -> None:
        self.state = store
        # True: each client (an API key) is served only answers its own requests stored.
        self.per_client = per_client
        self.settings = settings
        self.fingerprint = fingerprint
        self.budget_defaults = dict(budget_defaults or {})
        self.semantic = semantic
        self._clock = clock
        # request key -> its computation in this process (identical requests at once).
        self.computing: dict[str, _Computing] = {}

    def with_fingerprint(self, extra: str) -> ResultCache:
        """This cache, its keys made also of ``extra`` (the generations of the local
        collections a request searches): the same store, counters and computations."""
        view = copy.copy(self)
        view.fingerprint = _digest(self.fingerprint, extra)
        return view

    def _owner(self, client: str | None, partition: str | None) -> str | None:
        owner = client if self.per_client else None
        if partition is None:
            return owner
        # Kept apart whatever cache.scope says: callers of another partition may not see
        # what this answer holds (the collections of own documents their keys allow).
        return f"{owner or ''}|partition:{partition}"

    def key(
        self, request: SearchRequest, client: str | None = None, partition: str | None = None
    ) -> str:
        """The state key of ``request``'s cached answer, asked by ``client`` (who may see
        what ``partition`` says: the answer is kept for that partition alone)."""
        owner = self._owner(client, partition)
        return request_key(request, self.fingerprint, self.budget_defaults, owner)

    def scope(
        self, request: SearchRequest, client: str | None = None, partition: str | None = None
    ) -> str:
        """What two queries must share to answer each other (the semantic cache's scope):
        every other field of the request, the partition and, kept per client, the client."""
        owner = self._owner(client, partition)
        return request_scope(request, self.fingerprint, self.budget_defaults, owner)

    async def _entry(
        self, key: str, request: SearchRequest
    ) -> tuple[SearchResponse, float, float] | None:
        """(response, age, fresh seconds) of the entry at ``key`` as an answer to
        ``request``; None if absent or corrupt. Its fresh time is the shorter of the one
        it was stored with and the one the configuration gives now: a fresh time lowered
        since (``cache.ttl_s``, ``ttl_by_intent``) holds for answers kept before."""
        data = decode_json(await self.state.get(key))
        if not isinstance(data, dict) or data.get("v") != _FORMAT:
            return None
        try:
            response = SearchResponse.model_validate(data["response"])
            age = max(0.0, self._clock() - float(data["stored_at"]))
            fresh = float(data["fresh_s"])
        except (KeyError, TypeError, ValueError, ValidationError):
            log.warning("result cache: corrupt entry %s treated as a miss", key)
            return None
        return response, age, min(fresh, fresh_seconds(request, response, self.settings))

    async def lookup(
        self, request: SearchRequest, client: str | None = None, partition: str | None = None
    ) -> CachedResponse | None:
        """A fresh cached answer to ``request`` (exact, then semantic), within
        ``budget.max_age_s`` when set."""
        max_age = request.budget.max_age_s
        key = self.key(request, client, partition)
        kind: CacheKind = "exact"
        entry = await self._entry(key, request)
        if entry is None and self.semantic is not None:
            scope = self.scope(request, client, partition)
            similar = await self.semantic.find(request.query_text, scope)
            if similar is not None:
                entry, kind = await self._entry(similar, request), "semantic"
        if entry is None:
            return None
        response, age, fresh = entry
        if age >= fresh or (max_age is not None and age > max_age):
            return None
        return CachedResponse(response, kind, age)

    async def lookup_stale(
        self, request: SearchRequest, client: str | None = None, partition: str | None = None
    ) -> CachedResponse | None:
        """An answer past its fresh time but within ``stale_if_error_s`` of it."""
        entry = await self._entry(self.key(request, client, partition), request)
        if entry is None:
            return None
        response, age, fresh = entry
        if age > fresh + self.settings.stale_if_error_s:
            return None
        oldest = request.budget.max_age_s
        if oldest is not None and age > oldest:  # the oldest answer this request accepts
            return None
        return CachedResponse(response, "stale", age)

    async def store(
        self,
        request: SearchRequest,
        response: SearchResponse,
        complete: bool,
        client: str | None = None,
        partition: str | None = None,
    ) -> None:
        """Keep a complete answer for its fresh time plus the stale-if-error window."""
        if not complete:
            return
        fresh = fresh_seconds(request, response, self.settings)
        keep = fresh + self.settings.stale_if_error_s
        if keep <= 0:
            return
        key = self.key(request, client, partition)
        entry = {
            "v": _FORMAT,
            "stored_at": self._clock(),
            "fresh_s": fresh,
            "response": response.model_dump(mode="json", by_alias=True),
        }
        await self.state.set(key, encode_json(entry), keep)
        if self.semantic is not None and fresh > 0:
            scope = self.scope(request, client, partition)
            await self.semantic.add(request.query_text, scope, key, fresh)


def _served(
    cached: CachedResponse,
    request: SearchRequest,
    started: float,
    budget_notes: Sequence[ErrorEntry],
    notes: Sequence[ErrorEntry] = (),
) -> SearchResponse:
    """The cached answer as this request's response: its own echo, timing, budget notes
    and meta.cache."""
    response = cached.response
    kept = [e for e in response.meta.errors if e.stage != BUDGET_STAGE]
    elapsed = int((time.perf_counter() - started) * 1000)
    meta = response.meta.model_copy(
        update={
            "cache": CacheInfo(hit=True, kind=cached.kind, age_s=round(cached.age_s, 3)),
            "timing_ms": {"cache": elapsed, "total": elapsed},
            "errors": [*budget_notes, *kept, *notes],
        }
    )
    return response.model_copy(
        update={"meta": meta, "request": request.model_dump(mode="json", exclude_unset=True)}
    )


async def serve_cached(
    cache: ResultCache | None,
    request: SearchRequest,
    compute: Callable[[float], Awaitable[SearchResponse]],
    budget_notes: Sequence[ErrorEntry] = (),
    time_budget_s: float = 0.0,
    client: str | None = None,
    partition: str | None = None,
) -> SearchResponse:
    """Answer ``request`` from ``cache`` when it may, else ``compute`` it and store a
    complete answer; when every backend fails, a stale answer if there is one.
    ``budget_notes`` (what ``limits.*`` lowered in this request's budget) stand in a cached
    answer for those of the request that stored it: the time fields are not in the key.
    An identical request being computed in this process, whose deadline ends before
    ``time_budget_s`` (this request's) does, is waited for instead of computed again;
    ``compute`` is given the seconds so spent (0 when it did not wait), which its
    deadline no longer has. ``client``: who asks (an API key), whose answers alone it may
    be served when the cache is kept per client; ``partition``: what the caller may see
    (see ``ResultCache.key``)."""
    started = time.perf_counter()
    policy = cache_policy(request) if cache is not None else "off"
    whose = (client, partition)
    if cache is None or policy != "use":
        run = functools.partial(compute, 0.0)
        return await _computed(cache, request, run, policy, started, budget_notes, whose)
    cached = await cache.lookup(request, *whose)
    if cached is not None:
        return _served(cached, request, started, budget_notes, [])
    key = cache.key(request, *whose)
    ends_by = time.monotonic() + time_budget_s
    waited_s = 0.0
    other = cache.computing.get(key)
    if other is not None and other.ends_by <= ends_by:
        waiting = time.monotonic()
        answer = await _awaited(other, ends_by)
        if answer is not None:
            return _served(_shared(answer), request, started, budget_notes)
        waited_s = time.monotonic() - waiting
    run = functools.partial(compute, waited_s)
    if key in cache.computing:  # one that may outlast this request's deadline
        return await _computed(cache, request, run, policy, started, budget_notes, whose)
    mine = _Computing(asyncio.get_running_loop().create_future(), ends_by)
    cache.computing[key] = mine
    try:
        response = await _computed(cache, request, run, policy, started, budget_notes, whose)
    except BaseException as exc:
        if isinstance(exc, asyncio.CancelledError):
            mine.answer.cancel()
        else:
            mine.answer.set_exception(exc)
            mine.answer.exception()  # retrieved: nobody may be waiting for it
        raise
    else:
        mine.answer.set_result(response)
        return response
    finally:
        del cache.computing[key]


async def _awaited(other: _Computing, ends_by: float) -> SearchResponse | None:
    """The answer of an identical request computed meanwhile, if this request may take
    it: a complete one, or whatever it got when this request has too little time left to
    do better (``ends_by``: when its deadline is over). None: compute this request's own,
    as a request arriving just after the other ended would (nothing was cached): the
    other was cancelled, or its answer is partial or a failure, which its own shorter
    deadline or per-call timeouts may have caused."""
    try:
        # Shielded: this request giving up must not cancel the other's computation.
        answer = await asyncio.shield(other.answer)
    except asyncio.CancelledError:
        if not other.answer.cancelled():
            raise  # this request was cancelled
        return None  # the other was (its client left)
    except AllBackendsFailed:
        if _time_left(ends_by):
            return None
        raise
    if _time_left(ends_by) and not _storable(answer):
        return None
    return answer


def _time_left(ends_by: float) -> bool:
    """Whether enough of a deadline is left for a search of its own (the shortest a
    request may ask for)."""
    return ends_by - time.monotonic() >= MIN_TIME_MS / 1000


def _storable(answer: SearchResponse) -> bool:
    """Whether ``answer`` is what the cache would keep: computed (not a stale stand-in)
    and complete."""
    stale = answer.meta.cache is not None and answer.meta.cache.kind == "stale"
    return not stale and is_complete(answer)


def _shared(answer: SearchResponse) -> CachedResponse:
    """Another request's answer, computed while this one waited: an exact match of age 0,
    or the stale answer that stood in for it."""
    info = answer.meta.cache
    if info is not None and info.hit and info.kind is not None:
        return CachedResponse(answer, info.kind, info.age_s or 0.0)
    return CachedResponse(answer, "exact", 0.0)


async def _computed(
    cache: ResultCache | None,
    request: SearchRequest,
    compute: Callable[[], Awaitable[SearchResponse]],
    policy: CachePolicy,
    started: float,
    budget_notes: Sequence[ErrorEntry],
    whose: tuple[str | None, str | None] = (None, None),
) -> SearchResponse:
    """``compute``'s answer, stored when complete; a stale one if every backend failed.
    ``whose``: the client and partition it is cached for."""
    try:
        response = await compute()
    except AllBackendsFailed as exc:
        stale = await cache.lookup_stale(request, *whose) if cache and policy == "use" else None
        if stale is None:
            raise
        reason = f"every backend failed ({exc}); served a cached answer {stale.age_s:.0f} s old"
        note = ErrorEntry(stage="cache", source="stale", reason=reason)
        return _served(stale, request, started, budget_notes, [note])
    response.meta.cache = CacheInfo(hit=False)
    if cache is not None and policy != "off":
        await cache.store(request, response, is_complete(response), *whose)
    return response
