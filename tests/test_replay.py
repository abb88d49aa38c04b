"""Recorded searches over real HTTP and the CLI: ``constraints.record`` keeps what a search
got (backend answers, pages, LLM replies) under its request id; ``searcher replay`` runs it
again with every backend down, byte for byte the same under the same configuration, and
says what another configuration changes; ``searcher freeze`` writes an evaluation set that
``searcher tune --set`` and ``searcher eval`` read offline. A private testbed is stopped
halfway, so that nothing could answer but the recording."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from click.testing import CliRunner, Result

from searcher.cli import main
from searcher.config import Settings
from tests.conftest import _merge
from tests.testbed import TestbedServer
from tests.testbed.chat import script

ANSWER = "Cloud gaming streams games from a data centre [1]."


def _config(tb: TestbedServer, tmp_path: Path, **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "backends": {
            "order": ["searxng", "brave"],
            "searxng": {"base_url": tb.searxng_url()},
            "duckduckgo": {"enabled": False},
            "brave": {"base_url": tb.brave_url(), "api_key": "test-key"},
        },
        "fetch": {"allowed_hosts": [f"127.0.0.1:{tb.port}"], "extract_workers": 1},
        "service": {"cache": {"dir": str(tmp_path / "cache")}},
        "state": {"dir": str(tmp_path / "state")},
        "embeddings": {"provider": "none"},
        "scoring": {"hybrid_share": 0.0},
        "llm": {"base_url": tb.llm_url(), "model": script(reply=ANSWER)},
    }
    return _merge(base, extra)


def _write(tmp_path: Path, name: str, config: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _cli(*args: str) -> Result:
    return CliRunner().invoke(main, list(args), catch_exceptions=False)


def _record(base: str, query: str, request_id: str) -> dict[str, Any]:
    body = {
        "query": query,
        "constraints": {"search_mode": "full", "record": True},
        "budget": {"max_results": 6, "max_fetch_pages": 3},
        "want": {"answer": True},
    }
    response = httpx.post(
        f"{base}/v1/search", json=body, headers={"X-Request-ID": request_id}, timeout=60
    )
    assert response.status_code == 200, response.text
    assert response.headers["x-request-id"] == request_id
    data: dict[str, Any] = response.json()
    assert data["meta"]["request_id"] == request_id
    return data


@pytest.fixture
def private_testbed():
    tb = TestbedServer().start()
    yield tb
    tb.stop()


def test_a_recorded_search_replays_offline_byte_for_byte(
    private_testbed, tmp_path, serve_searcher, matching_query
):
    config = _config(private_testbed, tmp_path)
    base = serve_searcher(Settings.model_validate(config))
    recorded = _record(base, matching_query, "rec-1")
    fetched = [i["url"] for i in recorded["items"] if i["fetch"]["status"] == "fetched"]
    assert fetched and recorded["answer"] == ANSWER
    private_testbed.stop()  # every backend, page and the LLM are gone from here on
    path = _write(tmp_path, "searcher.yaml", config)

    first = _cli("replay", "rec-1", "--config", path, "--json")
    second = _cli("replay", "rec-1", "--config", path, "--json")
    assert first.exit_code == 0, first.output
    assert first.stdout == second.stdout  # byte for byte
    replayed = json.loads(first.stdout)
    assert [i["url"] for i in replayed["items"]] == [i["url"] for i in recorded["items"]]
    assert [i["url"] for i in replayed["items"] if i["fetch"]["status"] == "fetched"] == fetched
    assert replayed["rendered_text"] == recorded["rendered_text"]
    assert replayed["answer"] == ANSWER
    assert not [e for e in replayed["meta"]["errors"] if e["stage"] in ("search", "fetch")]
    assert "timing_ms" not in replayed["meta"]

    said = _cli("replay", "rec-1", "--config", path)
    assert said.exit_code == 0, said.output
    lines = said.stdout.splitlines()
    assert lines[0].startswith("replayed rec-1 (recorded 20") and matching_query in lines[0]
    assert lines[1] == f"items: the same {len(recorded['items'])}, in the same order"
    assert lines[2].startswith("pack: the same (")


def test_a_replay_under_another_configuration_says_what_changed(
    private_testbed, tmp_path, serve_searcher, matching_query
):
    config = _config(private_testbed, tmp_path)
    base = serve_searcher(Settings.model_validate(config))
    recorded = _record(base, matching_query, "rec-2")
    private_testbed.stop()
    # A smaller pack, and at most 3 results: the same recorded answers, cut otherwise.
    fewer = {
        "budget": {"max_context_chars": 400, "max_results": 3},
        "limits": {"max_results": 3},
    }
    other = _write(tmp_path, "other.yaml", _merge(config, fewer))
    said = _cli("replay", "rec-2", "--config", other)
    assert said.exit_code == 0, said.output
    out = said.stdout
    assert f"items: {len(recorded['items'])} -> 3" in out and "\n  - 4. " in out
    assert "pack: " in out and "pack: the same" not in out
    assert "--- recorded" in out and "+++ replayed" in out


def test_unknown_recordings_and_refused_recording_are_clear_errors(
    private_testbed, tmp_path, serve_searcher
):
    config = _config(private_testbed, tmp_path)
    path = _write(tmp_path, "searcher.yaml", config)
    missing = CliRunner().invoke(main, ["replay", "nope", "--config", path])
    assert missing.exit_code == 2
    assert "no recorded search 'nope'" in missing.stderr
    frozen = CliRunner().invoke(main, ["freeze", "nope", "--out", str(tmp_path / "x")])
    assert frozen.exit_code == 2
    off = _merge(config, {"recording": {"enabled": False}})
    base = serve_searcher(Settings.model_validate(off))
    body = {"query": "cloud gaming", "constraints": {"record": True}}
    response = httpx.post(f"{base}/v1/search", json=body, timeout=30)
    assert response.status_code == 422
    assert response.json()["error"]["field"] == "constraints.record"
    bad = httpx.post(f"{base}/v1/search", json={"query": "x", "constraints": {"record": 3}})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "constraints.record"


def test_freeze_writes_over_no_folder_but_an_earlier_set(private_testbed, tmp_path):
    path = _write(tmp_path, "searcher.yaml", _config(private_testbed, tmp_path))
    searched = _cli("search", "cloud gaming", "--record", "--config", path)
    request_id = searched.stderr.split("recorded as ")[1].split()[0]
    # The user's own folder, holding a file by a name a set uses: left as it was.
    mine = tmp_path / "work"
    mine.mkdir()
    (mine / "queries.tsv").write_text("q1\tmy own queries\n")
    refused = CliRunner().invoke(main, ["freeze", request_id, "--out", str(mine), "--config", path])
    assert refused.exit_code == 2, refused.output
    (line,) = refused.stderr.splitlines()
    assert line.startswith(f"searcher: --out {mine} holds files and is not a frozen set")
    assert sorted(p.name for p in mine.iterdir()) == ["queries.tsv"]
    assert (mine / "queries.tsv").read_text() == "q1\tmy own queries\n"
    # A new folder, an empty one, and an earlier set (frozen again) are written.
    for out in (tmp_path / "new", tmp_path / "new", tmp_path / "work" / "empty"):
        if out.name == "empty":
            out.mkdir()
        frozen = _cli("freeze", request_id, "--out", str(out), "--config", path)
        assert frozen.exit_code == 0, frozen.output


def test_a_recording_larger_than_its_bound_is_not_kept(
    private_testbed, tmp_path, serve_searcher, matching_query
):
    config = _config(private_testbed, tmp_path, recording={"max_bytes": 2048})
    base = serve_searcher(Settings.model_validate(config))
    body = {"query": matching_query, "constraints": {"search_mode": "full", "record": True}}
    data = httpx.post(f"{base}/v1/search", json=body, timeout=60).json()
    assert data["meta"]["request_id"] is None
    assert any(e["stage"] == "record" and "recording.max_bytes" in e["reason"]
               for e in data["meta"]["errors"])  # fmt: skip


def test_search_record_then_freeze_then_tune_and_eval_offline(
    private_testbed, tmp_path, matching_query
):
    config = _config(private_testbed, tmp_path)
    path = _write(tmp_path, "searcher.yaml", config)
    ids = []
    for query in (matching_query, "cloud gaming service"):
        searched = CliRunner().invoke(main, ["search", query, "--record", "--config", path])
        assert searched.exit_code == 0, searched.output
        ids.append(searched.stderr.split("recorded as ")[1].split()[0])
    private_testbed.stop()
    out = tmp_path / "set"
    frozen = _cli("freeze", *ids, "--out", str(out), "--config", path)
    assert frozen.exit_code == 0, frozen.output
    assert frozen.stdout.startswith(f"wrote {out}: 2 queries, ")
    queries = dict(line.split("\t") for line in (out / "queries.tsv").read_text().splitlines())
    assert queries == {ids[0]: matching_query, ids[1]: "cloud gaming service"}
    pooled = [line.split("\t") for line in (out / "pooled.tsv").read_text().splitlines()]
    assert pooled and {row[0] for row in pooled} == set(ids)
    recording = json.loads(gzip.decompress((out / "recordings" / f"{ids[0]}.json.gz").read_bytes()))
    assert {e["kind"] for e in recording["exchanges"]} == {"backend"}
    run = (out / "run.trec").read_text().splitlines()
    assert run and run[0].startswith(f"{ids[0]} Q0 http://127.0.0.1:{private_testbed.port}/")
    # Frozen again into the same folder with one query: the other's recording goes too.
    alone = tmp_path / "alone"
    assert _cli("freeze", *ids, "--out", str(alone), "--config", path).exit_code == 0
    assert _cli("freeze", ids[1], "--out", str(alone), "--config", path).exit_code == 0
    assert sorted(p.name for p in (alone / "recordings").iterdir()) == [f"{ids[1]}.json.gz"]

    # Judgements: the first half of each query's pooled results relevant.
    qrels = tmp_path / "judged.qrels"
    qrels.write_text("".join(
        f"{qid} 0 {url} {2 if i < 4 else 0}\n"
        for qid in ids
        for i, (_, url, *_) in enumerate(r for r in pooled if r[0] == qid)
    ))  # fmt: skip
    evaluated = _cli("eval", str(out / "run.trec"), str(qrels), "--format", "json")
    assert evaluated.exit_code == 0, evaluated.output
    tuned = _cli("tune", "--set", str(out), "--qrels", str(qrels), "--out",
                 str(tmp_path / "tuned.yaml"), "--folds", "2", "--config", path)  # fmt: skip
    assert "2 judged queries (0 without an answer" in tuned.stdout, tuned.output
    not_a_set = ["--set", str(tmp_path), "--qrels", str(qrels), "--out", str(tmp_path / "t")]
    broken = CliRunner().invoke(main, ["tune", *not_a_set, "--config", path])
    assert broken.exit_code == 2 and "cannot read the set" in broken.stderr
    # A set damaged by hand: one clear line, exit 2, no traceback.
    twice = tmp_path / "twice"  # an id named twice is frozen once: eval reads the run
    assert _cli("freeze", ids[1], ids[1], "--out", str(twice), "--config", path).exit_code == 0
    assert _cli("eval", str(twice / "run.trec"), str(qrels)).exit_code == 0
    (twice / "queries.tsv").unlink()
    for manifest in (None, "[]", '{"format": 1, "queries": "q1"}'):
        if manifest is not None:
            (twice / "manifest.json").write_text(manifest)
        damaged = ["--set", str(twice), "--qrels", str(qrels), "--out", str(tmp_path / "d")]
        refused = CliRunner().invoke(main, ["tune", *damaged, "--config", path])
        assert refused.exit_code == 2, (manifest, refused.output)
        assert "Traceback" not in refused.output and str(twice) in refused.stderr
