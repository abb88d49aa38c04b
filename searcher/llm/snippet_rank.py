"""``snippet_rank``: one LLM call picks the best ``want_n`` of the top ``top_k`` results
(seed 001, "Snippet Ranking Contract", sections 11.1-11.6, implemented as written).

The validation is normative: parse the JSON, require ``pick`` to be a list, keep integers
in ``[0, N-1]``, drop duplicates keeping order, cap to ``want_n``; if that fails or leaves
nothing, pick the first ``want_n``. The pure parts (``rank_messages``, ``validate_pick``,
``fallback_pick``) are what a thin client needs; ``snippet_rank`` runs the whole step
against any OpenAI-compatible endpoint.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any

from searcher.config import LlmSettings, LlmStepsSettings, RankStepSettings
from searcher.errors import LlmBadReply, LlmError
from searcher.llm.client import LlmClient, Message
from searcher.llm.json_reply import json_object
from searcher.llm.prompts import PROMPTS, messages
from searcher.llm.runner import TIME_SHARE, StepRunner
from searcher.pipeline.resilience import CallBudget, Deadline

# Long snippets cost tokens without helping the choice.
SNIPPET_CHARS = 300


@dataclass(frozen=True)
class Candidate:
    """One result shown to the model; ``i`` is its 0-based index (as in ``pick_ids``)."""

    i: int
    title: str
    snippet: str
    url: str = ""


@dataclass(frozen=True)
class RankResult:
    picks: list[int]  # indices into the candidates, best first
    fallback_used: bool
    reason: str | None = None


def _one_line(text: str, limit: int) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[: limit - 1] + "…"


def candidate_lines(candidates: Sequence[Candidate]) -> str:
    """``0) TITLE — SNIPPET (URL: URL)``, one line per candidate (the reference format)."""
    lines = []
    for c in candidates:
        line = f"{c.i}) {_one_line(c.title, 200)} — {_one_line(c.snippet, SNIPPET_CHARS)}"
        if c.url:
            line += f" (URL: {c.url})"
        lines.append(line)
    return "\n".join(lines)


def rank_messages(
    query: str,
    candidates: Sequence[Candidate],
    want_n: int,
    today: date,
    room_chars: int | None = None,
) -> list[Message]:
    """The reference prompt for these candidates (the last ones left out if the prompt
    must fit in ``room_chars``)."""
    wanted = min(want_n, len(candidates))
    lines = candidate_lines(candidates)
    return messages("rank", today, room_chars, query=query, candidates=lines, want_n=wanted)


def validate_pick(reply: str, n_candidates: int, want_n: int) -> list[int]:
    """The valid picks of a reply (section 11.4); ``LlmBadReply`` if none survive."""
    data = json_object(reply)
    pick = data.get("pick")
    if not isinstance(pick, list):
        raise LlmBadReply('"pick" is missing or not a list')
    kept: list[int] = []
    for value in pick:
        # bool is an int in Python; true/false are not indices.
        is_index = isinstance(value, int) and not isinstance(value, bool)
        if is_index and 0 <= value < n_candidates and value not in kept:
            kept.append(value)
    kept = kept[:want_n]
    if not kept:
        raise LlmBadReply(f'no valid index in "pick": {pick!r}'[:200])
    return kept


def pick_schema(n_candidates: int, want_n: int) -> dict[str, Any]:
    """The rank step's reply schema for this call: at most ``want_n`` picks, each an index
    of a candidate. A server that turns the schema into a grammar (llama.cpp's) stops the
    list there; without the bound SmolLM2-135M counted 1, 2, 3, ... until max_tokens in 2
    of 5 queries."""
    schema = copy.deepcopy(PROMPTS["rank"].schema or {})
    pick = schema["properties"]["pick"]
    pick["maxItems"] = max(1, min(want_n, n_candidates))
    pick["items"]["maximum"] = max(0, n_candidates - 1)
    return schema


def fallback_pick(n_candidates: int, want_n: int) -> list[int]:
    """The first ``want_n`` candidates."""
    return list(range(min(n_candidates, want_n)))


async def rank_candidates(
    runner: StepRunner, query: str, candidates: Sequence[Candidate], want_n: int, reserve: int = 0
) -> RankResult:
    """The step inside a request: the model's valid picks, or the fallback and why."""
    if not candidates:
        runner.fallback("rank", "no results to rank")
        return RankResult([], True, "no results to rank")
    n = len(candidates)
    outcome = await runner.run(
        "rank",
        rank_messages(query, candidates, want_n, runner.today, await runner.room_chars("rank")),
        lambda text: validate_pick(text, n, want_n),
        reserve,
        step_schema=pick_schema(n, want_n),
    )
    if outcome.value is None:
        return RankResult(fallback_pick(n, want_n), True, outcome.reason)
    return RankResult(outcome.value, False)


def as_candidates(results: Sequence[Mapping[str, Any]]) -> list[Candidate]:
    """Candidates from dicts with ``title``, ``snippet`` and ``url`` (such as a search
    response's ``items``), numbered in order."""
    return [
        Candidate(i, str(r.get("title", "")), str(r.get("snippet", "")), str(r.get("url", "")))
        for i, r in enumerate(results)
    ]


async def snippet_rank(
    query: str,
    results: Sequence[Mapping[str, Any]],
    *,
    base_url: str,
    model: str,
    api_key: str | None = None,
    want_n: int = 3,
    top_k: int = 10,
    timeout_s: float = 15.0,
    today: date | None = None,
) -> RankResult:
    """Pick the best ``want_n`` of the first ``top_k`` ``results`` with one call to an
    OpenAI-compatible endpoint; never raises for a bad or missing reply (fallback)."""
    candidates = as_candidates(results[:top_k])
    settings = LlmSettings(
        base_url=base_url,
        model=model,
        api_key=api_key,
        timeout_s=timeout_s,
        steps=LlmStepsSettings(rank=RankStepSettings(max_tokens=96, temperature=0.0)),
    )
    try:
        client = LlmClient(settings)
    except LlmError as exc:
        return RankResult(fallback_pick(len(candidates), want_n), True, str(exc))
    # The runner gives a step its share of the time left; here the step is all there is.
    deadline = Deadline(timeout_s / TIME_SHARE["rank"])
    runner = StepRunner(client, settings, deadline, CallBudget(1), today or date.today())
    try:
        return await rank_candidates(runner, query, candidates, want_n)
    finally:
        await client.aclose()
