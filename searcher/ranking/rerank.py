"""Optional reranking model: a stage after fusion that asks a reranking endpoint.

Speaks the request shape most servers share — TEI, Jina, Cohere and llama.cpp's server
with ``--reranking`` (at ``/v1/rerank``)::

    POST {base_url}{path}  {"model"?, "query", "documents" | "texts", "top_n"}
    -> {"results": [{"index", "relevance_score"}, ...]}   (TEI: a bare list, "score")

The first ``top_n`` results are sent as ``title + snippet``; the model's order replaces
theirs, the rest keep the heuristic order after them. Any failure — no answer before the
deadline, an HTTP error, a reply that is not that shape — leaves the heuristic order as it
was, and says why (``RerankOutcome.error``, which the service puts in ``meta.errors``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, TypeVar

import httpx

from searcher.config import RerankSettings

T = TypeVar("T")


@dataclass(frozen=True)
class RerankOutcome:
    """The new order (indices into the candidates, every one once) and the model's score
    of each index it scored; ``error`` says why the order was left as it was."""

    order: list[int]
    scores: dict[int, float]
    error: str | None = None


def request_body(settings: RerankSettings, query: str, documents: Sequence[str]) -> dict[str, Any]:
    """The JSON body for ``documents`` (already cut to ``top_n``)."""
    body: dict[str, Any] = {"query": query, settings.request_shape: list(documents)}
    body["top_n"] = len(documents)
    if settings.model:
        body["model"] = settings.model
    return body


class BadReply(ValueError):
    """The endpoint's reply is not a list of ``{index, relevance_score}``."""


def parse_scores(reply: Any, count: int) -> dict[int, float]:
    """index -> score from a reply; ``BadReply`` when the reply cannot be trusted
    (an index out of range or repeated, a score that is not a finite number)."""
    entries = reply.get("results") if isinstance(reply, Mapping) else reply
    if not isinstance(entries, list) or not entries:
        raise BadReply("no results list")
    scores: dict[int, float] = {}
    for entry in entries:
        if not isinstance(entry, Mapping):
            raise BadReply("a result is not an object")
        index = entry.get("index")
        score = entry.get("relevance_score", entry.get("score"))
        if not isinstance(index, int) or isinstance(index, bool) or not 0 <= index < count:
            raise BadReply(f"index {index!r} is not one of the {count} documents")
        if index in scores:
            raise BadReply(f"index {index} appears twice")
        if (
            not isinstance(score, int | float)
            or isinstance(score, bool)
            or not math.isfinite(score)
        ):
            raise BadReply(f"score {score!r} of index {index} is not a number")
        scores[index] = float(score)
    return scores


def reorder(total: int, scores: Mapping[int, float]) -> list[int]:
    """Scored indices by score (ties: the earlier first), then the rest in their order."""
    scored = sorted(scores, key=lambda i: (-scores[i], i))
    return scored + [i for i in range(total) if i not in scores]


def unchanged(total: int, error: str | None) -> RerankOutcome:
    return RerankOutcome(list(range(total)), {}, error)


async def rerank(
    settings: RerankSettings,
    query: str,
    documents: Sequence[str],
    timeout_s: float,
    transport: httpx.AsyncBaseTransport | None = None,
) -> RerankOutcome:
    """Ask the endpoint to order ``documents`` (best-first candidates); ``timeout_s`` is
    already capped by the request's deadline. Never raises for the endpoint's faults."""
    total = len(documents)
    sent = list(documents[: settings.top_n])
    if not settings.base_url or len(sent) < 2:
        return unchanged(total, None)
    if timeout_s <= 0:
        return unchanged(total, "no time left before the deadline; heuristic order kept")
    headers = {"Authorization": f"Bearer {settings.api_key}"} if settings.api_key else {}
    url = settings.base_url.rstrip("/") + settings.path
    try:
        async with httpx.AsyncClient(timeout=timeout_s, transport=transport) as client:
            response = await client.post(
                url, json=request_body(settings, query, sent), headers=headers
            )
        if response.status_code != 200:
            return unchanged(total, f"HTTP {response.status_code}; heuristic order kept")
        scores = parse_scores(response.json(), len(sent))
    except httpx.TimeoutException:
        return unchanged(total, f"no answer within {timeout_s:.2f} s; heuristic order kept")
    except httpx.HTTPError as exc:
        return unchanged(total, f"{type(exc).__name__}: {exc}; heuristic order kept")
    except (ValueError, BadReply) as exc:  # JSON that does not parse is a ValueError too
        return unchanged(total, f"bad reply ({exc}); heuristic order kept")
    return RerankOutcome(reorder(total, scores), scores)


def unit_scores(scores: Mapping[int, float]) -> dict[int, float]:
    """A reply's scores as relevances in [0, 1], order kept: Cohere, Jina and TEI already
    give such scores; raw logits (llama.cpp) go through the logistic function."""
    if all(0.0 <= s <= 1.0 for s in scores.values()):
        return dict(scores)
    return {i: 1.0 / (1.0 + math.exp(-max(-60.0, min(60.0, s)))) for i, s in scores.items()}


async def rerank_stage(
    items: Sequence[T],
    query: str,
    settings: RerankSettings,
    timeout_s: float,
    text: Callable[[T], str],
    with_score: Callable[[T, float, float], T],
    transport: httpx.AsyncBaseTransport | None = None,
) -> tuple[list[T], str | None]:
    """The stage: ``items`` (heuristic order) re-ordered by the model, and the error to
    report, if any. ``with_score`` gets each scored item, the model's score and that
    score in [0, 1] (``unit_scores``). Items beyond ``top_n`` are not sent and keep their
    order after the scored ones."""
    outcome = await rerank(settings, query, [text(i) for i in items], timeout_s, transport)
    unit = unit_scores(outcome.scores)
    return [
        with_score(items[i], outcome.scores[i], unit[i]) if i in outcome.scores else items[i]
        for i in outcome.order
    ], outcome.error
