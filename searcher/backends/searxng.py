"""SearXNG through its JSON API (``/search?format=json``), with per-engine health: engines
the instance reports unresponsive again and again are left out of the engines asked for
(``engine_health.py``); the instance's engines are learned from its ``/config``."""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import replace
from typing import TYPE_CHECKING, Any

import orjson
from pydantic import Field

from searcher.backends.base import (
    BackendAnswer,
    BackendQuery,
    BackendSpec,
    BuildContext,
    Capabilities,
    Hit,
    HttpBackend,
    RequestParts,
    json_object,
)
from searcher.backends.engine_health import (
    EngineHealth,
    EngineHealthSettings,
    EngineSnapshot,
    engines_to_ask,
)
from searcher.backends.engine_positions import (
    MAX_ENGINES_PER_RESULT,
    MAX_SHARED_NAMES,
    align,
    alignable,
    single_engine_pairs,
)
from searcher.backends.failures import engine_failure_kind
from searcher.backends.normalise import http_url, iso_utc, plain_text
from searcher.config_sections import ANSWER_SETTINGS, HttpUrl, InstanceSettings
from searcher.errors import EnginesUnresponsive, FailureKind, engines_unresponsive
from searcher.recording.aiohttp_tape import taped_request

if TYPE_CHECKING:  # loaded by whoever opens the client
    import aiohttp

NAME = "searxng"
CAPABILITIES = Capabilities(
    paging=True,
    time_range=True,
    safesearch=True,
    language=True,
    engines=True,
    categories=True,
    per_engine=True,
)
# What SearXNG's statuses mean for a user who must fix something.
STATUS_HINTS = {
    403: "the JSON format is switched off on this SearXNG instance; enable it in its "
    "settings.yml with `search: formats: [html, json]` and restart it",
    429: "SearXNG's limiter refused us; set `server: limiter: false` in its settings.yml "
    "or allow this client in its limiter.toml",
}
# Results read of one answer. A real page holds tens (a few engines x ~20); pairing
# engines with positions works over the whole answer and its cost grows faster than the
# answer, so a broken or hostile instance sending tens of thousands cannot stall a worker.
MAX_RESULTS_PER_ANSWER = 1000
# /config is small; waiting longer for it than this is not worth it on a search's path.
CONFIG_TIMEOUT_S = 2.0
CONFIG_RETRY_S = 60.0  # after /config failed, ask again no sooner than this
# JSON arrays and numbers as the decoder gives them. Tuples, not ``list | tuple``: a union
# written in a call is built anew on every call, and these checks run per result.
_ARRAY = (list, tuple)
_NUMBER = (int, float)


class SearxngSettings(InstanceSettings):
    """A SearXNG instance (``adapter: searxng``)."""

    base_url: HttpUrl | None = Field(
        default=None,
        description=(
            "SearXNG instance (its JSON format must be enabled); unset = SearXNG not "
            "configured. Every `base_url` (backends, `llm`, `embeddings`, `rerank`) must "
            "be an `http://` or `https://` URL: anything else stops start-up with exit 2"
        ),
    )
    engine_health: EngineHealthSettings = Field(default_factory=EngineHealthSettings)


def build_request(base_url: str, query: BackendQuery) -> RequestParts:
    """The GET request for one page of SearXNG results."""
    params = {"q": query.text, "format": "json", "pageno": str(query.pageno)}
    if query.lang:
        params["language"] = query.lang
    if query.categories:
        params["categories"] = ",".join(query.categories)
    if query.engines:
        params["engines"] = ",".join(query.engines)
    if query.time_range:
        params["time_range"] = query.time_range
    if query.safesearch is not None:
        params["safesearch"] = str(query.safesearch)
    return RequestParts(
        "GET", base_url.rstrip("/") + "/search", params, {"Accept": "application/json"}
    )


def unresponsive_kind(engines: Sequence[tuple[str, str]]) -> FailureKind:
    """One kind for a whole answer whose engines all failed: the most telling one."""
    kinds = {engine_failure_kind(message) for _, message in engines}
    for kind in ("blocked", "rate_limited", "timeout", "connect", "http_status"):
        if kind in kinds:
            return kind
    return "bad_response"


def _unresponsive(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    pairs = []
    for entry in data.get("unresponsive_engines") or []:
        # An entry without an engine name tells nothing ("engine None unresponsive").
        if isinstance(entry, list | tuple) and entry and isinstance(entry[0], str):
            told = len(entry) > 1 and entry[1] is not None
            pairs.append((entry[0], str(entry[1]) if told else "unresponsive"))
    return pairs


def _engines(raw: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[int, ...]]:
    """A result's engines and positions as sent, at most ``MAX_ENGINES_PER_RESULT`` of
    each (a real result is found by a few)."""
    engines = raw.get("engines") or ([raw["engine"]] if raw.get("engine") else [])
    positions = raw.get("positions") or []
    if not isinstance(engines, _ARRAY) or not isinstance(positions, _ARRAY):
        return (), ()
    return (
        tuple([str(e) for e in engines[:MAX_ENGINES_PER_RESULT] if isinstance(e, str)]),
        tuple(
            [
                p
                for p in positions[:MAX_ENGINES_PER_RESULT]
                if isinstance(p, int) and not isinstance(p, bool)
            ]
        ),
    )


def _hit(
    raw: Mapping[str, Any], url: str, instance: str, engines: Sequence[str], pairs: dict[str, int]
) -> Hit:
    """A result whose engines are paired with their positions (``pairs``, from
    ``engine_positions.align``); engines with no position left come last."""
    score = raw.get("score")
    category = raw.get("category")
    return Hit(
        url=url,
        title=plain_text(raw.get("title")) or url,
        snippet=plain_text(raw.get("content")),
        backend=instance,
        engines=(*pairs, *[e for e in engines if e not in pairs]),
        positions=tuple(pairs.values()),
        score=float(score)
        if isinstance(score, _NUMBER) and not isinstance(score, bool) and math.isfinite(score)
        else None,
        published=iso_utc(raw.get("publishedDate")),
        category=category if isinstance(category, str) else None,
    )


def _hits(raw_results: Sequence[Any], instance: str) -> tuple[list[Hit], bool]:
    """The hits of an answer's results, and whether their engines and positions were
    paired. A real SearXNG sends ``engines`` as an unordered set, so which position
    belongs to which engine is worked out over the whole answer (``engine_positions``);
    an answer too large for that keeps only the pairs of results one engine found."""
    usable = [
        (raw, url, _engines(raw))
        for raw in raw_results
        if isinstance(raw, dict) and (url := http_url(raw.get("url"))) is not None
    ]
    named = [engines for _, _, engines in usable]
    paired = alignable(named)
    pairings = align(named) if paired else single_engine_pairs(named)
    hits = [
        _hit(raw, url, instance, engines, pairs)
        for (raw, url, (engines, _)), pairs in zip(usable, pairings, strict=True)
    ]
    return hits, paired


def parse_response(
    status: int, headers: Mapping[str, str], body: bytes, instance: str = NAME
) -> BackendAnswer:
    """Hits from a SearXNG JSON answer. Zero results with failed engines is a failure:
    SearXNG answers 200 even when every engine it asked failed."""
    data = json_object(instance, headers, body)
    raw_results = data.get("results")
    if not isinstance(raw_results, list):
        raw_results = []
    hits, paired = _hits(raw_results[:MAX_RESULTS_PER_ANSWER], instance)
    unresponsive = _unresponsive(data)
    if not hits and unresponsive:
        raise engines_unresponsive(instance, unresponsive, unresponsive_kind(unresponsive))
    warnings = [f"engine {name} unresponsive: {msg}" for name, msg in unresponsive]
    if not paired:
        warnings.append(
            f"engines not paired with positions: the answer names more than "
            f"{MAX_SHARED_NAMES} engines on results several engines found; those results "
            f"count at their place in the answer"
        )
    if len(raw_results) > MAX_RESULTS_PER_ANSWER:
        warnings.append(
            f"the answer held {len(raw_results)} results; the first "
            f"{MAX_RESULTS_PER_ANSWER} were read"
        )
    return BackendAnswer(
        instance, hits, warnings=warnings, per_engine=True, unresponsive=tuple(unresponsive)
    )


def parse_config(body: bytes) -> list[tuple[str, tuple[str, ...]]]:
    """The enabled engines of an instance and their categories, from its ``/config``."""
    data = orjson.loads(body)
    engines = data.get("engines") if isinstance(data, dict) else None
    found = []
    for engine in engines if isinstance(engines, list) else []:
        if not isinstance(engine, dict) or not isinstance(engine.get("name"), str):
            continue
        if engine.get("enabled") is False:
            continue
        cats = engine.get("categories")
        names = tuple(c for c in cats if isinstance(c, str)) if isinstance(cats, list) else ()
        found.append((engine["name"], names))
    return found


class SearxngBackend:
    """One SearXNG instance: the HTTP runner plus the health of its engines."""

    capabilities = CAPABILITIES

    def __init__(
        self, name: str, settings: SearxngSettings, client: aiohttp.ClientSession,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:  # fmt: skip
        self.name = name
        self.base_url = (settings.base_url or "").rstrip("/")
        self.engine_health = EngineHealth(settings.engine_health, clock)
        self._client = client
        self._clock = clock
        self._config_ttl = settings.engine_health.config_ttl_s
        self._known: list[tuple[str, tuple[str, ...]]] = []  # (engine, categories)
        self._known_at: float | None = None  # when /config was read
        self._config_failed_at: float | None = None
        self._seen: dict[str, None] = {}  # engines seen in answers, in order
        base = self.base_url

        def build(query: BackendQuery) -> RequestParts:
            return build_request(base, query)

        self._http = HttpBackend(name, CAPABILITIES, build, parse_response, client, STATUS_HINTS)

    async def search(self, query: BackendQuery, timeout_s: float) -> BackendAnswer:
        started = self._clock()
        left_out = self.engine_health.left_out()
        asked = query.engines
        if left_out:
            if all(e in left_out for e in query.engines):  # the instance's list is needed
                await self._learn_engines(min(timeout_s / 2, CONFIG_TIMEOUT_S))
            known = self._known or [(name, ()) for name in self._seen]
            asked = engines_to_ask(query.engines, query.categories, known, left_out)
            # The engines named stand for the categories: sent too, they would have
            # SearXNG ask every engine of them, the left-out ones as well.
            query = replace(query, engines=asked, categories=() if asked else query.categories)
        remaining = max(0.0, timeout_s - (self._clock() - started))
        try:
            answer = await self._http.search(query, remaining)
        except EnginesUnresponsive as exc:
            self.engine_health.observe(asked, exc.engines)
            left_s = max(0.0, timeout_s - (self._clock() - started))
            if not await self._others_answered(asked, query.categories, exc.engines, left_s):
                raise
            # Engines that answered found nothing: no results, not the instance failing.
            warnings = [f"engine {name} unresponsive: {msg}" for name, msg in exc.engines]
            return BackendAnswer(
                self.name, [], warnings=warnings, per_engine=True, unresponsive=tuple(exc.engines)
            )
        engines_answered = {e for hit in answer.hits for e in hit.engines}
        self._seen.update(dict.fromkeys(sorted(engines_answered)))
        if not asked:  # the instance's defaults: those of its engines in these categories
            asked = engines_to_ask((), query.categories, self._known, set()) or tuple(
                engines_answered
            )
        self.engine_health.observe(asked, answer.unresponsive)
        answer.warnings[:0] = self.engine_health.notes(left_out)
        return answer

    async def _others_answered(
        self, asked: Sequence[str], categories: Sequence[str], failed: Sequence[tuple[str, str]],
        timeout_s: float,
    ) -> bool:  # fmt: skip
        """Whether engines other than ``failed`` were asked (named, or the instance's in
        ``categories``, known from its ``/config``): an answer with no results then means
        they found nothing. Unknown (no ``/config``): False, the answer stays a failure."""
        if not asked:
            await self._learn_engines(min(timeout_s / 2, CONFIG_TIMEOUT_S))
            asked = engines_to_ask((), categories, self._known, set())
        failed_names = {name for name, _ in failed}
        return any(engine not in failed_names for engine in asked)

    async def _learn_engines(self, timeout_s: float) -> None:
        """Read the instance's engines from ``/config`` when not known or stale; a failure
        leaves what is known (or the engines seen in answers) and is retried later."""
        now = self._clock()
        if self._known_at is not None and now - self._known_at < self._config_ttl:
            return
        if self._config_failed_at is not None and now - self._config_failed_at < CONFIG_RETRY_S:
            return
        import aiohttp  # loaded already (the client is one); kept off the config's imports

        try:
            got = await taped_request(
                self._client, "GET", self.base_url + "/config", _read_config, timeout_s
            )
            if got.status >= 300:
                raise aiohttp.ClientError(f"/config: HTTP {got.status}")
            self._known = parse_config(got.body)
            self._known_at = now
        except (TimeoutError, aiohttp.ClientError, orjson.JSONDecodeError):
            self._config_failed_at = now

    def engines_health(self) -> list[EngineSnapshot]:
        """Engines seen failing, for ``/v1/health``."""
        return self.engine_health.snapshot()


async def _read_config(response: aiohttp.ClientResponse) -> bytes:
    return await response.content.read(1024 * 1024)


def _missing(settings: SearxngSettings) -> str | None:
    return None if settings.base_url else "no base_url (set SEARXNG_BASE_URL)"


def _build(name: str, settings: SearxngSettings, context: BuildContext) -> SearxngBackend:
    return SearxngBackend(name, settings, context.client, context.clock)


# Which SearXNG answers; how long it is waited for and how its failing engines are backed
# off (engine_health) do not change what it answers.
SPEC = BackendSpec(
    NAME, CAPABILITIES, SearxngSettings, _build, _missing, ANSWER_SETTINGS | {"base_url"}
)
