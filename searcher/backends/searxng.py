"""SearXNG through its JSON API (``/search?format=json``)."""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping, Sequence
from typing import Any

from searcher.backends.base import (
    BackendAnswer,
    BackendQuery,
    Capabilities,
    Hit,
    RequestParts,
    json_object,
)
from searcher.backends.engine_positions import align
from searcher.backends.normalise import http_url, iso_utc, plain_text
from searcher.errors import EnginesUnresponsive

NAME = "searxng"
CAPABILITIES = Capabilities(
    paging=True, time_range=True, safesearch=True, language=True, engines=True, categories=True
)


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


def _unresponsive(data: Mapping[str, Any]) -> list[tuple[str, str]]:
    pairs = []
    for entry in data.get("unresponsive_engines") or []:
        if isinstance(entry, list | tuple) and entry:
            message = str(entry[1]) if len(entry) > 1 else "unresponsive"
            pairs.append((str(entry[0]), message))
    return pairs


def _hit(raw: Mapping[str, Any]) -> Hit | None:
    url = http_url(raw.get("url"))
    if url is None:
        return None
    engines = raw.get("engines") or ([raw["engine"]] if raw.get("engine") else [])
    positions = raw.get("positions") or []
    score = raw.get("score")
    return Hit(
        url=url,
        title=plain_text(raw.get("title")) or url,
        snippet=plain_text(raw.get("content")),
        backend=NAME,
        engines=tuple(str(e) for e in engines if isinstance(e, str)),
        positions=tuple(p for p in positions if isinstance(p, int) and not isinstance(p, bool)),
        score=float(score)
        if isinstance(score, int | float) and not isinstance(score, bool)
        else None,
        published=iso_utc(raw.get("publishedDate")),
        category=raw.get("category") if isinstance(raw.get("category"), str) else None,
    )


def _aligned(hits: Sequence[Hit]) -> list[Hit]:
    """Hits whose ``positions[i]`` belongs to ``engines[i]``: a real SearXNG sends
    ``engines`` as an unordered set, so the pairing is worked out over the whole answer
    (``engine_positions.align``); engines with no position left come last."""
    out = []
    for hit, pairs in zip(hits, align([(h.engines, h.positions) for h in hits]), strict=True):
        rest = tuple(e for e in hit.engines if e not in pairs)
        out.append(
            dataclasses.replace(hit, engines=(*pairs, *rest), positions=tuple(pairs.values()))
        )
    return out


def parse_response(status: int, headers: Mapping[str, str], body: bytes) -> BackendAnswer:
    """Hits from a SearXNG JSON answer. Zero results with failed engines is a failure:
    SearXNG answers 200 even when every engine it asked failed."""
    data = json_object(NAME, headers, body)
    raw_results = data.get("results")
    if not isinstance(raw_results, list):
        raw_results = []
    hits = _aligned([hit for raw in raw_results if isinstance(raw, dict) and (hit := _hit(raw))])
    unresponsive = _unresponsive(data)
    if not hits and unresponsive:
        raise EnginesUnresponsive(NAME, unresponsive)
    warnings = [f"engine {name} unresponsive: {msg}" for name, msg in unresponsive]
    return BackendAnswer(NAME, hits, warnings=warnings)
