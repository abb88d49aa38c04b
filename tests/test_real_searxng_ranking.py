"""Issue 12: a REAL SearXNG (built from ``../shared/searxng/``, cached in
``~/.cache/searcher-tests/searxng``) over a small collection — Cranfield's first 300
abstracts served by three simple engines as SearXNG ``json_engine``s. Proves that
searcher reads the real wire format (``engines`` an unordered set, ``positions`` in
arrival order) and merge, and that with SearXNG alone and default settings searcher's
order is not worse than SearXNG's own (nDCG@10 and MRR on Cranfield's judgements)."""

from __future__ import annotations

import asyncio
import json
import math
import random
import re
from collections import Counter
from collections.abc import Iterator

import httpx
import pytest

from bench.ranking_collections import cranfield
from searcher.backends import searxng
from searcher.config import Settings
from searcher.contract import SearchRequest
from searcher.ranking.evaluation import evaluate, run_from_rankings
from searcher.ranking.fusion import ranked_lists
from searcher.runtime import open_service
from tests.shared_data import require_shared
from tests.testbed import real_searxng
from tests.testbed.json_engines import JsonEnginesApp
from tests.testbed.server import ThreadedServer

DOCS = 300
DEPTH = 15
ENGINES = ("text", "title", "rare")
_WORD = re.compile(r"[a-z]{3,}")


def _words(text: str) -> list[str]:
    return _WORD.findall(text.lower())


class Collection:
    """The first ``DOCS`` Cranfield abstracts, the queries judged on them, three engines."""

    def __init__(self) -> None:
        require_shared("data/cranfield")
        data = cranfield()
        self.docs = {d.id: d for d in data.docs[:DOCS]}
        judged = {**data.dev, **data.test}
        self.qrels = {
            q: kept for q, rel in judged.items() if (kept := {d: g for d, g in rel.items()
                                                              if d in self.docs})
        }  # fmt: skip
        self.queries = {q: data.queries[q] for q in sorted(self.qrels, key=int)[:25]}
        self.qrels = {q: self.qrels[q] for q in self.queries}
        df = Counter(w for d in self.docs.values() for w in set(_words(d.title + " " + d.text)))
        self.idf = {w: math.log(1 + DOCS / n) for w, n in df.items()}

    def rank(self, engine: str, query: str) -> list[str]:
        """tf-idf overlap on the text ("text"), on the title ("title"), or counting only
        the query's rarest word ("rare"): three different opinions."""
        wanted = set(_words(query)) & set(self.idf)
        if engine == "rare" and wanted:
            wanted = {min(wanted, key=lambda w: (-self.idf[w], w))}
        scored = []
        for doc_id, doc in self.docs.items():
            words = set(_words(doc.title if engine == "title" else doc.title + " " + doc.text))
            score = sum(self.idf[w] for w in wanted & words)
            if score > 0:
                scored.append((-score, int(doc_id), doc_id))
        return [doc_id for *_, doc_id in sorted(scored)[:DEPTH]]

    def results(self, engine: str, query: str) -> list[dict[str, str]]:
        return [
            {"url": f"https://cranfield.example/doc/{d}", "title": self.docs[d].title,
             "content": self.docs[d].text[:300]}
            for d in self.rank(engine, query)
        ]  # fmt: skip


def doc_id(url: str) -> str:
    return url.rstrip("/").rsplit("/", 1)[1]


@pytest.fixture(scope="session")
def collection() -> Collection:
    return Collection()


@pytest.fixture(scope="session")
def real_searxng_url(collection: Collection) -> Iterator[str]:
    missing = real_searxng.shared_missing()
    if missing:
        pytest.skip(missing)
    build = real_searxng.build()
    app = JsonEnginesApp(collection.results, ENGINES)
    with (
        ThreadedServer(app) as engines,
        real_searxng.running(build, {e: app.url(engines.base_url, e) for e in ENGINES}) as base,
    ):
        yield base


@pytest.fixture(scope="session")
def answers(real_searxng_url: str, collection: Collection) -> dict[str, tuple[dict, object]]:
    """query id -> (the raw JSON, searcher's parse of the same bytes)."""
    out = {}
    with httpx.Client(timeout=30) as client:
        for qid, text in collection.queries.items():
            response = client.get(
                f"{real_searxng_url}/search", params={"q": text, "format": "json"}
            )
            assert response.status_code == 200
            out[qid] = (response.json(), searxng.parse_response(200, {}, response.content))
    return out


def test_per_engine_lists_are_read_from_the_real_answer(answers, collection):
    exact = total = right_pairs = naive_pairs = pairs = 0
    for qid, (raw, answer) in answers.items():
        text = collection.queries[qid]
        truth = {e: collection.rank(e, text) for e in ENGINES}
        by_engine = {lst.engine: [doc_id(h.url) for h in lst.hits]
                     for lst in ranked_lists(answer, 1.0, {})}  # fmt: skip
        for engine in ENGINES:
            total += 1
            exact += by_engine.get(engine, []) == truth[engine]
        for result, hit in zip(raw["results"], answer.hits, strict=True):
            # The real format: an unordered set and positions in arrival order.
            assert sorted(result["engines"]) == sorted(hit.engines)
            assert len(result["positions"]) == len(hit.positions)
            d = doc_id(hit.url)
            for engine, position in zip(hit.engines, hit.positions, strict=True):
                pairs += 1
                right_pairs += truth[engine].index(d) + 1 == position
            naive = zip(result["engines"], result["positions"], strict=False)
            naive_pairs += sum(truth[e].index(d) + 1 == p for e, p in naive)
    # Every (engine, position) pair the answer can decide is decided right; a swap of two
    # results between two engines at the same two positions cannot be told apart.
    print(f"pairs right {right_pairs}/{pairs}, naive {naive_pairs}, exact lists {exact}/{total}")
    assert right_pairs >= 0.95 * pairs, (right_pairs, pairs)
    assert exact >= 0.8 * total, (exact, total)
    # Pairing by index is right only as often as the set's order happens to follow the
    # answers' arrival (it changes with each SearXNG process's hash seed), so it is no
    # bar. What must hold: the pairing does not depend on that order at all.
    shuffle = random.Random(7)
    for raw, answer in answers.values():
        reordered = json.loads(json.dumps(raw))
        for result in reordered["results"]:
            shuffle.shuffle(result["engines"])
        again = searxng.parse_response(200, {}, json.dumps(reordered).encode())
        for first, second in zip(answer.hits, again.hits, strict=True):
            assert dict(zip(first.engines, first.positions, strict=False)) == dict(
                zip(second.engines, second.positions, strict=False)
            )


def test_searxng_score_and_order_are_its_merge(answers):
    for raw, answer in answers.values():
        for result in raw["results"]:
            formula = len(result["positions"]) * sum(1 / p for p in result["positions"])
            assert result["score"] == pytest.approx(formula)
        scores = [r["score"] for r in raw["results"]]
        assert scores == sorted(scores, reverse=True)
        assert [h.score for h in answer.hits] == scores


def _metrics(rankings, qrels):
    run = run_from_rankings({q: docs[:10] for q, docs in rankings.items()})
    result = evaluate(run, qrels, ["nDCG@10", "MRR"])
    return result.mean("nDCG@10"), result.mean("MRR")


def test_searcher_alone_is_not_worse_than_searxngs_own_order(
    real_searxng_url, answers, collection, tmp_path
):
    own = {q: [doc_id(r["url"]) for r in raw["results"]] for q, (raw, _) in answers.items()}
    settings = Settings.model_validate({
        "backends": {"order": ["searxng"], "searxng": {"base_url": real_searxng_url},
                     "duckduckgo": {"enabled": False}, "brave": {"enabled": False}},
        "embeddings": {"provider": "none"},
        "service": {"cache": {"dir": str(tmp_path / "cache")}},
        "state": {"dir": str(tmp_path / "state")},
    })  # fmt: skip

    async def search_all() -> dict[str, list[str]]:
        out = {}
        async with open_service(settings, extract_in_process=True, sweep=False) as rt:
            for qid, text in collection.queries.items():
                request = SearchRequest.model_validate(
                    {"query": text, "budget": {"max_results": 10}}
                )
                response = await rt.service.search(request)
                out[qid] = [doc_id(i.url) for i in response.items or ()]
        return out

    ours = asyncio.run(search_all())
    ours_ndcg, ours_mrr = _metrics(ours, collection.qrels)
    own_ndcg, own_mrr = _metrics(own, collection.qrels)
    assert own_ndcg > 0.2  # the engines find relevant documents: the comparison means something
    assert ours_ndcg >= own_ndcg - 1e-9
    # SearXNG orders equal scores by which engine answered first, so its own MRR here moves
    # by up to 0.02 between identical calls (measured 0.676-0.696): allow that much.
    assert ours_mrr >= own_mrr - 0.02
