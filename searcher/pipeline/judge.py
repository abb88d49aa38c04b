"""``searcher judge``: judgements without a labelling team.

Queries come from a file, from the query log (the access log's JSON lines, with
``logging.queries`` on) or from feedback. For LLM judgements each query is searched once,
the top results of every backend are pooled (so that no backend's pages go unjudged), and
the LLM grades each pair (``searcher.llm.judge``). The output is TREC qrels keyed by URL,
the input of ``searcher tune``.
"""

from __future__ import annotations

import json
import random
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from searcher.errors import LlmError
from searcher.llm.judge import JudgementCache, Pair, grade
from searcher.pipeline.parts import Parts
from searcher.pipeline.replay import capture, pooled
from searcher.ranking.evaluation import EvalError, Qrels
from searcher.recording.book import Recording

POOL_DEPTH = 10  # results of each backend judged per query
# Grades failed one after another before judging stops: an LLM that is down or refuses
# the contract would otherwise be asked every pair, each up to its timeout (hours).
MAX_FAILURES_IN_A_ROW = 5


def fits_a_qrels_field(text: str) -> bool:
    """Whether ``text`` can be a field of a qrels line: those lines are split on any
    whitespace (str.split, so a tab or a no-break space too), and a query id or URL
    holding some would be read back as extra fields."""
    return bool(text) and text.split() == [text]


def check_query_ids(queries: Mapping[str, str], source: str) -> None:
    """``EvalError`` naming the first query id that cannot be written to qrels: judging
    it would write a file ``searcher tune`` refuses, after every grade was paid for."""
    for qid in queries:
        if not fits_a_qrels_field(qid):
            raise EvalError(
                f"{source}: query id {qid!r} holds whitespace, which a qrels line cannot "
                "(its fields are split on it); give the query an id without"
            )


def queries_from_log(lines: Iterable[str], source: str, sample: int, seed: int) -> dict[str, str]:
    """Up to ``sample`` distinct queries of the access log's search lines, drawn with
    ``seed`` from the most recent ``4 x sample`` (recent queries are what to tune for)."""
    seen: dict[str, None] = {}
    for line in lines:
        try:
            entry = json.loads(line)
        except ValueError:
            continue  # uvicorn's own lines share the stream
        query = entry.get("query") if isinstance(entry, dict) else None
        if isinstance(query, str) and query.strip():
            seen.pop(query.strip(), None)
            seen[query.strip()] = None  # most recent last
    if not seen:
        raise EvalError(
            f"{source}: no search line with a query (is logging.queries on for that log?)"
        )
    recent = list(seen)[-4 * sample :]
    chosen = sorted(random.Random(seed).sample(recent, min(sample, len(recent))))
    return {f"log{n}": text for n, text in enumerate(chosen, start=1)}


@dataclass
class Judged:
    qrels: Qrels = field(default_factory=dict)
    asked: int = 0  # grades asked of the LLM (answered or not)
    cached: int = 0  # grades read from the cache
    failed: list[str] = field(
        default_factory=list
    )  # why pairs went unjudged (no reply, or a bad one)
    unanswered: dict[str, str] = field(default_factory=dict)  # queries no backend answered
    stopped: str | None = None  # why judging stopped before the last pair, if it did


async def judge_queries(
    parts: Parts,
    queries: Mapping[str, str],
    cache: JudgementCache,
    depth: int = POOL_DEPTH,
    recorded: Mapping[str, Recording] | None = None,
    progress: Callable[[int, int, str], None] | None = None,
) -> Judged:
    """Pool and grade the results of every query (the LLM is ``parts.llm``); a query
    with a recording in ``recorded`` (a frozen set's) is pooled from the backend answers
    recorded, not searched (only the LLM is asked anything). ``progress(done, total,
    qid)`` after each query; ``MAX_FAILURES_IN_A_ROW`` failed grades stop it (``stopped``
    says why; the grades made are cached)."""
    if parts.llm is None:
        raise LlmError("no LLM configured (set llm.base_url and llm.model)")
    found = await capture(parts, queries, recorded=recorded)
    judged = Judged(unanswered=dict(found.failed))
    in_a_row = 0
    for done, query in enumerate(found.queries, start=1):
        text = queries[query.qid]
        for hit in pooled(query, depth):
            pair = Pair(text, hit.url, hit.title, hit.snippet)
            value = cache.get(pair)
            if value is None:
                judged.asked += 1
                try:
                    value = await grade(parts.llm, parts.settings.llm, pair)
                except LlmError as exc:
                    judged.failed.append(f"{query.qid} {hit.url}: {exc}")
                    in_a_row += 1
                    if in_a_row >= MAX_FAILURES_IN_A_ROW:
                        judged.stopped = f"{in_a_row} grades failed in a row (the last: {exc})"
                        return judged
                    continue
                in_a_row = 0
                cache.put(pair, value)
            else:
                judged.cached += 1
            if fits_a_qrels_field(hit.url):
                judged.qrels.setdefault(query.qid, {})[hit.url] = value
        if progress is not None:
            progress(done, len(found.queries), query.qid)
    return judged
