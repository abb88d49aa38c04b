"""``searcher judge`` with the testbed's LLM stand-in: the plumbing (pooling, the fixed
prompt at temperature 0, the strict JSON contract, the cache, the qrels ``tune`` reads)."""

from __future__ import annotations

import json

import httpx
import pytest
import yaml
from click.testing import CliRunner

from searcher.cli import main
from searcher.pipeline.judge import MAX_FAILURES_IN_A_ROW
from searcher.ranking.evaluation import read_qrels
from tests.testbed.chat import script

QUERIES = "1\tGoogle Stadia games\n2\tcloud gaming services\n"


def _config(tmp_path, testbed, reply: str | None) -> str:
    config = {
        "backends": {
            "order": ["searxng", "brave"], "auto": "fanout",
            "searxng": {"base_url": testbed.searxng_url()}, "duckduckgo": {"enabled": False},
            "brave": {"base_url": testbed.brave_url(), "api_key": "test-key"},
        },
        "state": {"dir": str(tmp_path / "state")},
        "embeddings": {"provider": "none"},
    }  # fmt: skip
    if reply is not None:
        config["llm"] = {"base_url": testbed.llm_url(), "model": script(reply=reply)}
    path = tmp_path / "searcher.yaml"
    path.write_text(yaml.safe_dump(config))
    return str(path)


def judge(config: str, *args: str):
    return CliRunner().invoke(main, ["judge", "--config", config, *args], catch_exceptions=False)


def _pooled(testbed, query: str, depth: int) -> set[str]:
    """The URLs both testbed backends return first for ``query``, fetched over HTTP."""
    sx = httpx.get(testbed.searxng_url() + "/search", params={"q": query, "format": "json"})
    brave = httpx.get(
        testbed.brave_url() + "/res/v1/web/search",
        params={"q": query, "count": 20}, headers={"X-Subscription-Token": "test-key"},
    )  # fmt: skip
    urls = [r["url"] for r in sx.json()["results"][:depth]]
    urls += [r["url"] for r in brave.json()["web"]["results"][:depth]]
    return set(urls)


def test_judge_pools_every_backend_asks_once_and_writes_qrels(testbed_clean, tmp_path):
    config = _config(tmp_path, testbed_clean, '{"grade": 2}')
    (tmp_path / "q.tsv").write_text(QUERIES)
    out = tmp_path / "judged.qrels"
    result = judge(config, "--queries", str(tmp_path / "q.tsv"), "--out", str(out), "--depth", "3")
    assert result.exit_code == 0, result.output
    assert "judged 1 (1/2)" in result.stderr and "judged 2 (2/2)" in result.stderr
    qrels = read_qrels(out)
    assert set(qrels) == {"1", "2"}
    from searcher.fetch.urls import page_key

    assert {page_key(u) for u in qrels["1"]} == {
        page_key(u) for u in _pooled(testbed_clean, "Google Stadia games", 3)
    }
    assert all(grade == 2 for docs in qrels.values() for grade in docs.values())
    assert (tmp_path / "judged.tsv").read_text() == QUERIES
    bodies = testbed_clean.chat_bodies()
    assert len(bodies) == sum(len(d) for d in qrels.values())
    assert all(b["temperature"] == 0 for b in bodies)
    assert "Reply with JSON only" in bodies[0]["messages"][0]["content"]
    # A second run reads every grade from the cache in the state directory.
    again = judge(config, "--queries", str(tmp_path / "q.tsv"), "--out", str(out), "--depth", "3")
    assert again.exit_code == 0, again.output
    assert "0 grades asked of the LLM" in again.stderr
    assert len(testbed_clean.chat_bodies()) == len(bodies)


def test_a_reply_outside_the_json_contract_is_refused_not_guessed(testbed_clean, tmp_path):
    config = _config(tmp_path, testbed_clean, '{"grade": 3}')
    (tmp_path / "q.tsv").write_text(QUERIES)
    result = judge(config, "--queries", str(tmp_path / "q.tsv"), "--out", str(tmp_path / "j.qrels"))
    assert result.exit_code == 1
    # Each reply refused; five in a row stop it (a dead LLM is not asked every pair).
    asked = len(testbed_clean.chat_bodies())
    assert asked == MAX_FAILURES_IN_A_ROW
    assert f"{asked} grades asked of the LLM, 0 from the cache, {asked} unjudged" in result.stderr
    assert "judging stopped: 5 grades failed in a row" in result.stderr
    assert "grade" in result.stderr.split("failed in a row")[1]
    assert not (tmp_path / "j.qrels").exists()


def test_without_an_llm_judge_exits_2_saying_what_to_set(testbed, tmp_path):
    (tmp_path / "q.tsv").write_text(QUERIES)
    result = judge(
        _config(tmp_path, testbed, None), "--queries", str(tmp_path / "q.tsv"),
        "--out", str(tmp_path / "j.qrels"),
    )  # fmt: skip
    assert result.exit_code == 2
    assert "no LLM configured" in result.stderr and "llm.base_url" in result.stderr


def test_judge_never_writes_over_its_queries_or_its_qrels(testbed_clean, tmp_path):
    config = _config(tmp_path, testbed_clean, '{"grade": 2}')
    (tmp_path / "mine.tsv").write_text(QUERIES)
    for out, says in (("mine.qrels", "would write its queries over --queries"),
                      ("judged.tsv", "give the qrels another suffix")):  # fmt: skip
        result = judge(config, "--queries", str(tmp_path / "mine.tsv"), "--sample", "1",
                       "--out", str(tmp_path / out))  # fmt: skip
        assert result.exit_code == 2 and says in result.stderr, result.output
    assert (tmp_path / "mine.tsv").read_text() == QUERIES
    assert not (tmp_path / "mine.qrels").exists() and not (tmp_path / "judged.tsv").exists()
    assert testbed_clean.chat_bodies() == []  # refused before any work


def test_judge_samples_recent_queries_from_the_query_log(testbed_clean, tmp_path):
    config = _config(tmp_path, testbed_clean, '{"grade": 1}')
    lines = [json.dumps({"route": "/v1/search", "query": f"old query {n}"}) for n in range(30)]
    lines += ["INFO:     uvicorn says hello", json.dumps({"route": "/v1/health"})]
    lines += [json.dumps({"route": "/v1/search", "query": "Google Stadia games"})] * 2
    log = tmp_path / "access.log"
    log.write_text("\n".join(lines) + "\n")
    out = tmp_path / "log.qrels"
    result = judge(config, "--query-log", str(log), "--sample", "2", "--out", str(out))
    assert result.exit_code == 0, result.output
    texts = [line.split("\t")[1] for line in (tmp_path / "log.tsv").read_text().splitlines()]
    assert len(texts) <= 2 and set(texts) <= {f"old query {n}" for n in range(22, 30)} | {
        "Google Stadia games"
    }
    empty = tmp_path / "empty.log"
    empty.write_text(json.dumps({"route": "/v1/search"}) + "\n")
    refused = judge(config, "--query-log", str(empty), "--out", str(out))
    assert refused.exit_code == 2 and "logging.queries" in refused.stderr


def test_a_damaged_judgement_cache_is_read_around_and_a_folder_in_its_place_refused(tmp_path):
    from searcher.errors import StateUnavailable
    from searcher.llm.judge import CACHE_FILE, JudgementCache, Pair

    pair, other = Pair("q", "http://a.example/", "A", "text"), Pair("q", "http://b/", "B", "t")
    cache = JudgementCache(tmp_path, "m")
    cache.put(pair, 2)
    with (tmp_path / CACHE_FILE).open("ab") as raw:
        raw.write(b'\xff\xfe not json\n{"key": "torn')  # bad bytes, then a torn last line
    again = JudgementCache(tmp_path, "m")
    assert again.get(pair) == 2 and again.get(other) is None
    again.put(other, 1)  # not swallowed by the torn line
    assert JudgementCache(tmp_path, "m").get(other) == 1
    folder = tmp_path / "in-its-place"
    (folder / CACHE_FILE).mkdir(parents=True)
    with pytest.raises(StateUnavailable, match=CACHE_FILE):
        JudgementCache(folder, "m")


def test_options_the_chosen_source_does_not_read_are_refused_not_ignored(testbed, tmp_path):
    config = _config(tmp_path, testbed, '{"grade": 1}')
    out = str(tmp_path / "j.qrels")
    deep = judge(config, "--from-feedback", "--depth", "3", "--out", out)
    assert deep.exit_code == 2 and "--depth applies" in deep.stderr
    sampled = judge(config, "--set", str(tmp_path), "--sample", "2", "--out", out)
    assert sampled.exit_code == 2 and "--sample applies" in sampled.stderr
    sampled = judge(config, "--from-feedback", "--sample", "2", "--out", out)
    assert sampled.exit_code == 2 and "--sample applies" in sampled.stderr


def test_a_query_id_a_qrels_line_cannot_hold_is_refused_before_any_grade(testbed_clean, tmp_path):
    config = _config(tmp_path, testbed_clean, '{"grade": 2}')
    out = tmp_path / "j.qrels"
    # A space, and a no-break space: qrels fields are split on either, so `searcher tune`
    # read the qrels judge wrote as lines of five fields, and refused them.
    for qid in ("q 1", "q\u00a01"):
        (tmp_path / "q.tsv").write_text(f"{qid}\tGoogle Stadia games\n2\tcloud gaming\n")
        result = judge(config, "--queries", str(tmp_path / "q.tsv"), "--out", str(out))
        assert result.exit_code == 2, result.output
        assert repr(qid) in result.stderr and "whitespace" in result.stderr
    assert testbed_clean.chat_bodies() == [] and not out.exists()


def test_judgements_keep_only_urls_a_qrels_line_can_hold():
    from searcher.contract import FeedbackOutcome
    from searcher.feedback.book import SearchRecord, feedback_qrels

    items = {"a": "http://a.example/x\ty", "b": "http://b.example/\u00a0", "c": "http://c/"}
    record = SearchRecord("r1", "q", "general", "simple", items)
    given = {i: FeedbackOutcome.used for i in items}
    _, qrels = feedback_qrels([(record, given)])
    assert qrels == {"f1": {"http://c/": 1}}


def test_judge_never_writes_over_the_log_or_the_config_it_reads(testbed_clean, tmp_path):
    config = _config(tmp_path, testbed_clean, '{"grade": 2}')
    log = tmp_path / "access.log"
    log.write_text(json.dumps({"route": "/v1/search", "query": "Google Stadia games"}) + "\n")
    before = {p: p.read_text() for p in (log, tmp_path / "searcher.yaml")}
    refused = judge(config, "--query-log", str(log), "--out", str(log))
    assert refused.exit_code == 2 and "its qrels over --query-log" in refused.stderr
    refused = judge(config, "--from-feedback", "--out", config)
    assert refused.exit_code == 2 and "its qrels over --config" in refused.stderr
    assert {p: p.read_text() for p in before} == before
    assert testbed_clean.chat_bodies() == []
