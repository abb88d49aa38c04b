"""Issue 12 part 2: the optional reranking model, against the testbed's rerank API over
real HTTP — its order, its scores on the items, and the heuristic order kept (and the
reason in ``meta.errors``) when it is slow, fails or answers garbage."""

import asyncio

import httpx
import pytest

from searcher.config import RerankSettings
from searcher.ranking.rerank import (
    BadReply,
    parse_scores,
    reorder,
    request_body,
    rerank,
)

QUERY = "Google Stadia Microsoft xCloud Apple Arcade games"


def post(base, body, timeout=30.0):
    return httpx.post(f"{base}/v1/search", json=body, timeout=timeout)


def settings_for(testbed, behaviour="", **extra):
    base = testbed.url("/rerank-api" + (f"/{behaviour}" if behaviour else ""))
    return {"rerank": {"base_url": base, **extra}}


# --- the pure parts ----------------------------------------------------------------------


def test_the_request_has_the_shared_shape_and_tei_texts():
    cohere = request_body(RerankSettings(model="bge"), "q", ["a", "b"])
    assert cohere == {"query": "q", "documents": ["a", "b"], "top_n": 2, "model": "bge"}
    tei = request_body(RerankSettings(request_shape="texts"), "q", ["a"])
    assert tei == {"query": "q", "texts": ["a"], "top_n": 1}


def test_replies_are_read_in_both_shapes_and_bad_ones_refused():
    assert parse_scores({"results": [{"index": 1, "relevance_score": 0.9}]}, 2) == {1: 0.9}
    assert parse_scores([{"index": 0, "score": -1.5}], 1) == {0: -1.5}  # TEI: a bare list
    bad_replies = [
        {"results": []},
        {"results": [{"index": 2, "relevance_score": 1}]},
        [{"index": 0, "score": 1}, {"index": 0, "score": 2}],
        [{"index": 0, "score": "high"}],
        [{"index": True, "score": 1}],
        "nope",
    ]
    for bad in bad_replies:
        with pytest.raises(BadReply):
            parse_scores(bad, 2)


def test_reorder_puts_scored_first_and_keeps_the_rest_in_order():
    assert reorder(5, {3: 0.2, 1: 0.9, 4: 0.2}) == [1, 3, 4, 0, 2]


# --- over HTTP --------------------------------------------------------------------------


def test_the_model_orders_the_items_and_scores_each(testbed, make_settings, serve_searcher):
    body = {"query": QUERY, "budget": {"max_results": 8}}
    plain = post(serve_searcher(make_settings()), body).json()
    reversed_ = post(
        serve_searcher(make_settings(**settings_for(testbed, "reverse", enabled=True))), body
    ).json()
    assert not [e for e in reversed_["meta"]["errors"] if e["stage"] == "rerank"]
    scores = [i["score"]["components"]["rerank"] for i in reversed_["items"]]
    assert scores == sorted(scores, reverse=True)
    # The "reverse" model scores the last candidate sent (of 20) highest.
    urls = [i["url"] for i in reversed_["items"]]
    assert urls != [i["url"] for i in plain["items"]]
    assert "rerank" not in plain["items"][0]["score"]["components"]


def test_per_request_switch_and_what_is_sent(testbed, make_settings, serve_searcher):
    base = serve_searcher(make_settings(**settings_for(testbed, top_n=5, model="tiny")))
    testbed.reset()
    off = post(base, {"query": QUERY}).json()
    assert "rerank" not in off["items"][0]["score"]["components"]
    on = post(base, {"query": QUERY, "constraints": {"rerank": True}}).json()
    assert "rerank" in on["items"][0]["score"]["components"]
    [sent] = [b["body"] for b in testbed.app.bodies if b["path"] == "/rerank-api/rerank"]
    assert sent["query"] == QUERY and sent["model"] == "tiny"
    assert len(sent["documents"]) == 5 == sent["top_n"]
    # The token-overlap model: sent items come first, best overlap first.
    scored = [i["score"]["components"].get("rerank") for i in on["items"]]
    assert all(s is not None for s in scored[:5]) and all(s is None for s in scored[5:])
    assert scored[:5] == sorted(scored[:5], reverse=True)


@pytest.mark.parametrize(
    ("behaviour", "reason"),
    [("status/500", "HTTP 500"), ("garbage", "bad reply"), ("bad-index", "bad reply"),
     ("slow/5000", "no answer within")],
)  # fmt: skip
def test_failures_keep_the_heuristic_order_and_say_why(
    testbed, make_settings, serve_searcher, behaviour, reason
):
    body = {"query": QUERY, "budget": {"max_results": 8}}
    plain = post(serve_searcher(make_settings()), body).json()
    # Only the slow case needs a short timeout: a loaded machine must not turn an HTTP
    # error into a timeout.
    timeout_s = 0.3 if behaviour.startswith("slow/") else 5.0
    failing = make_settings(**settings_for(testbed, behaviour, enabled=True, timeout_s=timeout_s))
    data = post(serve_searcher(failing), body).json()
    assert [i["url"] for i in data["items"]] == [i["url"] for i in plain["items"]]
    [error] = [e for e in data["meta"]["errors"] if e["stage"] == "rerank"]
    assert reason in error["reason"] and "heuristic order kept" in error["reason"]
    assert all("rerank" not in i["score"]["components"] for i in data["items"])


def test_the_request_deadline_caps_the_call(testbed):
    settings = RerankSettings(base_url=testbed.url("/rerank-api/slow/5000"), timeout_s=30)
    outcome = asyncio.run(rerank(settings, "q", ["a b", "c d"], timeout_s=0.2))
    assert outcome.order == [0, 1] and "within 0.20 s" in (outcome.error or "")
    spent = asyncio.run(rerank(settings, "q", ["a", "b"], timeout_s=0.0))
    assert "deadline" in (spent.error or "")


def test_bad_rerank_options_get_422_naming_the_field(make_settings, serve_searcher):
    base = serve_searcher(make_settings())
    response = post(base, {"query": QUERY, "constraints": {"rerank": "yes please"}})
    assert response.status_code == 422
    assert "rerank" in response.text


def test_logits_become_relevances_in_order():
    from searcher.ranking.rerank import unit_scores

    assert unit_scores({0: 0.2, 1: 0.9}) == {0: 0.2, 1: 0.9}
    logits = unit_scores({0: -3.0, 1: 0.9, 2: 1.1})
    assert 0 < logits[0] < logits[1] < logits[2] < 1


def test_research_searches_are_reranked_too(testbed, make_settings, serve_searcher):
    from tests.test_research import QUESTION, follow, start

    base = serve_searcher(make_settings(**settings_for(testbed, enabled=True)))
    testbed.reset()
    job_id = start(base, {"query": QUESTION, "preset": "minimal"})
    follow(base, job_id)
    result = httpx.get(f"{base}/v1/research/{job_id}", timeout=10).json()["result"]
    asked = {t["query"] for t in result["search_trace"]}
    sent = [b["body"] for b in testbed.app.bodies if b["path"] == "/rerank-api/rerank"]
    assert sent and {b["query"] for b in sent} <= asked, (sent, asked)
    assert not [e for e in result["errors"] if e["stage"] == "rerank"]


def test_a_failing_reranker_leaves_research_its_order_and_says_why(
    testbed, make_settings, serve_searcher
):
    from tests.test_research import QUESTION, follow, start

    base = serve_searcher(make_settings(**settings_for(testbed, "status/500", enabled=True)))
    job_id = start(base, {"query": QUESTION, "preset": "minimal"})
    follow(base, job_id)
    result = httpx.get(f"{base}/v1/research/{job_id}", timeout=10).json()["result"]
    errors = [e for e in result["errors"] if e["stage"] == "rerank"]
    assert errors and all("heuristic order kept" in e["reason"] for e in errors), errors
    assert result["evidence"], result["stopped"]
