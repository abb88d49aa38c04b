"""How far ``searcher judge``'s LLM agrees with SciFact's human judgements: Cohen's kappa
and accuracy, for whatever model ``llm.base_url`` / ``llm.model`` name (searcher.yaml,
``$SEARCHER_CONFIG`` or ``--config``).

Pairs: for each of the first ``QUERIES`` held-out (test) queries, its judged relevant
abstracts and as many unjudged ones from BM25's top 10 (hard negatives, taken as not
relevant, as SciFact's judgements are complete for its claims). The model grades each with
the exact prompt, temperature and JSON contract of ``searcher judge``; grade 1 or 2 counts
as relevant. Grades are cached in the state directory, as ``searcher judge`` caches them.

Without a model configured, or with one that does not answer, it says so and exits 0.

    .venv/bin/python -m bench.judge_agreement [--config searcher.yaml] [--queries 40]
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import time
from collections.abc import Sequence

from bench.ranking_parts.engines import BM25Engine, full_text
from bench.ranking_parts.scifact import load
from searcher.config import load_settings
from searcher.errors import LlmBadReply, LlmError
from searcher.llm.client import LlmClient
from searcher.llm.judge import JudgementCache, Pair, grade


def cohen_kappa(a: Sequence[bool], b: Sequence[bool]) -> float:
    """Cohen's kappa of two binary labellings of the same items."""
    n = len(a)
    observed = sum(x == y for x, y in zip(a, b, strict=True)) / n
    pa, pb = sum(a) / n, sum(b) / n
    expected = pa * pb + (1 - pa) * (1 - pb)
    return 1.0 if expected == 1 else (observed - expected) / (1 - expected)


def pairs(n_queries: int) -> list[tuple[Pair, bool]]:
    data = load()
    docs = {d.id: d for d in data.docs}
    qids = sorted(data.test, key=int)[:n_queries]
    bm25 = BM25Engine("bm25", data.docs, full_text, stem=False)
    ranked = bm25.rank([data.queries[q] for q in qids], 10)
    out = []
    for qid, top in zip(qids, ranked, strict=True):
        relevant = [d for d, g in data.test[qid].items() if g > 0]
        negatives = [d for d in top if d not in data.test[qid]][: len(relevant)]
        for docid, truth in [(d, True) for d in relevant] + [(d, False) for d in negatives]:
            doc = docs[docid]
            url = f"https://scifact.example/doc/{docid}"
            out.append((Pair(data.queries[qid], url, doc.title, doc.text), truth))
    return out


async def measure(config: list[str], n_queries: int) -> int:
    settings = load_settings(config or None)
    llm = settings.llm
    if not llm.configured:
        print("no LLM configured (llm.base_url and llm.model): nothing to measure")
        return 0
    client = LlmClient(llm)
    cache = JudgementCache(settings.state.directory(), llm.model or "")
    judged: list[tuple[bool, bool]] = []
    refused = 0
    started = time.perf_counter()
    try:
        for pair, truth in pairs(n_queries):
            value = cache.get(pair)
            if value is None:
                try:
                    value = await grade(client, llm, pair)
                except LlmBadReply:
                    refused += 1
                    continue
                except LlmError as exc:
                    print(f"the model at {llm.base_url} does not answer ({exc}): nothing measured")
                    return 0
                cache.put(pair, value)
            judged.append((value >= 1, truth))
    finally:
        await client.aclose()
    if not judged:
        print(f"model {llm.model}: every reply broke the JSON contract ({refused})")
        return 0
    llm_says, truth = [j for j, _ in judged], [t for _, t in judged]
    accuracy = sum(x == y for x, y in judged) / len(judged)
    print(f"model {llm.model} at {llm.base_url}, {n_queries} SciFact test queries, "
          f"{len(judged)} pairs ({sum(truth)} relevant), {refused} replies refused")  # fmt: skip
    print(f"  Cohen's kappa {cohen_kappa(llm_says, truth):.3f}   accuracy {accuracy:.3f}   "
          f"wall time {time.perf_counter() - started:.0f} s")  # fmt: skip
    return 0


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--config", action="append", default=[])
    parser.add_argument("--queries", type=int, default=40)
    args = parser.parse_args()
    sys.exit(asyncio.run(measure(args.config, args.queries)))


if __name__ == "__main__":
    main()
