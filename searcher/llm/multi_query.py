"""Multi-query perspectives (seed 002): N reformulations of one question, from the LLM
(JSON contract, validated) or, when it fails, from templates; and their diversity,
1 - the mean pairwise cosine of their embeddings (lexical overlap without an embedder).
A set of LLM perspectives less diverse than the configured minimum is replaced by the
templates: near-identical searches cost calls and add nothing to fusion.

The searches themselves, their fusion and the rest of the degradation ladder (some
searches fail: partial; all fail: the original query alone) belong to the service."""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Sequence
from dataclasses import dataclass
from datetime import date
from typing import Any, Literal

import numpy as np

from searcher.contract import PerspectiveSource
from searcher.embedding.embedders import Embedder
from searcher.errors import EmbedderUnavailable, LlmBadReply
from searcher.llm.json_reply import json_object
from searcher.llm.prompts import messages
from searcher.llm.query_checks import on_topic, statement_problem
from searcher.llm.rewrite import keep_operators
from searcher.llm.runner import StepRunner
from searcher.text import query_terms

MAX_PERSPECTIVE_CHARS = 300

# The seed's three perspectives, then two more for N = 4 and 5. A template keeps the
# whole original query, so its operators (site:, quotes) survive.
TEMPLATES: tuple[tuple[str, str, str], ...] = (
    ("technical", "implementation, architecture, how it works", "{q} how it works"),
    ("user", "problems solved, use cases, user needs", "{q} use cases and common problems"),
    ("conceptual", "theory, patterns, abstract concepts", "{q} concepts explained"),
    ("examples", "concrete examples and tutorials", "{q} examples"),
    ("comparison", "alternatives and trade-offs", "{q} compared with alternatives"),
)


@dataclass(frozen=True)
class Perspective:
    type: str
    query: str
    confidence: float | None = None


def template_perspectives(query: str, n: int) -> list[Perspective]:
    """N perspectives from templates, in the seed's order."""
    return [Perspective(kind, text.format(q=query)) for kind, _, text in TEMPLATES[:n]]


def _perspective(entry: Any) -> Perspective | None:
    if not isinstance(entry, dict):
        return None
    kind, text, confidence = entry.get("type"), entry.get("query"), entry.get("confidence")
    if not isinstance(kind, str) or not kind.strip() or not isinstance(text, str):
        return None
    text = " ".join(text.split())
    if not text or len(text) > MAX_PERSPECTIVE_CHARS:
        return None
    if isinstance(confidence, bool) or not isinstance(confidence, int | float):
        return None
    if not 0.0 <= confidence <= 1.0:
        return None
    return Perspective(kind.strip().lower()[:32], text, float(confidence))


def parse_perspectives(reply: str, n: int) -> list[Perspective]:
    """The valid, distinct perspectives of a reply (at most ``n``); ``LlmBadReply`` if
    there are none. Each needs a type, a query and a confidence in [0, 1]."""
    data = json_object(reply)
    entries = data.get("perspectives")
    if not isinstance(entries, list):
        raise LlmBadReply('"perspectives" is missing or not a list')
    found: list[Perspective] = []
    seen: set[str] = set()
    for entry in entries:
        p = _perspective(entry)
        if p is not None and p.query.lower() not in seen:
            seen.add(p.query.lower())
            found.append(p)
    if not found:
        raise LlmBadReply("no valid perspective in the reply")
    return found[:n]


def checked_perspectives(found: list[Perspective], query: str, today: date) -> list[Perspective]:
    """The perspectives of ``found`` on the question's subject (a key term in common)
    that do not state an answer to it (how alike they are is ``diversity``'s to judge);
    ``LlmBadReply`` naming the first problems if none is left."""
    kept: list[Perspective] = []
    problems: list[str] = []
    for p in found:
        problem = statement_problem(p.query, query, today)
        if problem is None and not on_topic(p.query, query):
            problem = f"off the question's subject: {p.query[:80]!r}"
        if problem is None:
            kept.append(p)
        else:
            problems.append(problem)
    if not kept:
        raise LlmBadReply(f"no perspective usable ({'; '.join(problems[:2])})")
    return kept


def fill_with_templates(found: list[Perspective], query: str, n: int) -> list[Perspective]:
    """``found`` topped up to ``n`` with templates whose type and query are not used yet."""
    used = {p.type for p in found} | {p.query.lower() for p in found}
    extra = [
        p
        for p in template_perspectives(query, len(TEMPLATES))
        if p.type not in used and p.query.lower() not in used
    ]
    return found + extra[: max(0, n - len(found))]


@dataclass(frozen=True)
class Perspectives:
    items: list[Perspective]
    source: PerspectiveSource  # llm | templates (never "original": that rung is the caller's)
    note: str | None = None  # why templates were used, in whole or in part


async def generate(runner: StepRunner, query: str, n: int, reserve: int) -> Perspectives:
    """N perspectives: the LLM's, topped up from templates if it gave fewer; all from
    templates if it failed (rung 2 of the degradation ladder)."""
    types = "\n".join(f"{i}. {kind}: {what}" for i, (kind, what, _) in enumerate(TEMPLATES[:n], 1))
    outcome = await runner.run(
        "multi_query",
        messages("multi_query", runner.today, query=query, n=n, types=types),
        lambda reply: checked_perspectives(parse_perspectives(reply, n), query, runner.today),
        reserve,
    )
    if outcome.value is None:
        return Perspectives(template_perspectives(query, n), "templates", outcome.reason)
    # The user's operators hold for every search, as they do for the templates.
    found = [
        dataclasses.replace(p, query=keep_operators(p.query, query) or query) for p in outcome.value
    ]
    items = fill_with_templates(found, query, n)
    note = None
    if len(outcome.value) < n:
        note = f"{len(outcome.value)} of {n} perspectives from the LLM, the rest from templates"
    return Perspectives(items, "llm", note)


def mean_pairwise_diversity(vectors: np.ndarray) -> float | None:
    """1 - mean pairwise cosine of unit rows; None with fewer than two rows."""
    count = len(vectors)
    if count < 2:
        return None
    sims = vectors @ vectors.T
    upper = sims[np.triu_indices(count, k=1)]
    return float(round(1.0 - float(np.mean(upper)), 4))


DiversityMethod = Literal["embeddings", "lexical"]


@dataclass(frozen=True)
class Diversity:
    value: float  # 0 (all alike) .. 1 (nothing in common)
    method: DiversityMethod


def lexical_diversity(queries: Sequence[str]) -> float:
    """1 - mean pairwise Jaccard overlap of the queries' topical words (lower-cased, stop
    words out, stemmed: ``searcher.text.query_terms``); 0.0 with fewer than two queries."""
    if len(queries) < 2:
        return 0.0
    bags = [set(query_terms(q)) or set(q.lower().split()) for q in queries]
    overlaps = [
        len(a & b) / len(a | b) if a | b else 1.0 for a, b in itertools.combinations(bags, 2)
    ]
    return round(1.0 - sum(overlaps) / len(overlaps), 4)


async def diversity(embedder: Embedder | None, queries: Sequence[str]) -> Diversity:
    """The perspectives' diversity: from their embeddings when an embedder answers, else
    lexical. Always a number (0.0 with fewer than two perspectives)."""
    if embedder is not None and len(queries) >= 2:
        try:
            vectors = await embedder.embed(list(queries))
        except EmbedderUnavailable:
            pass
        else:
            spread = mean_pairwise_diversity(np.asarray(vectors, dtype=np.float32))
            if spread is not None:
                return Diversity(spread, "embeddings")
    return Diversity(lexical_diversity(queries), "lexical")


def too_alike(spread: Diversity, min_embedding: float, min_lexical: float) -> bool:
    """Whether a perspective set is below the configured minimum for its measure."""
    floor = min_embedding if spread.method == "embeddings" else min_lexical
    return spread.value < floor
