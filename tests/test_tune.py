"""``searcher tune`` over the testbed's SearXNG, and config files merged key by key.

Judgements are made from what the testbed's SearXNG answers over HTTP: pages one engine
returned are judged relevant, so that trusting that engine more is what the judgements
reward, and the tuner must find it."""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

import httpx
import pytest
import yaml
from click.testing import CliRunner

from searcher.cli import main
from searcher.config import deep_merge, load_settings
from searcher.ranking.tuning import split_folds
from tests.shared_data import AEB, require_shared

QUERIES = [
    "Google Stadia games", "electric cars battery", "climate change", "space rocket launch",
    "football world cup", "smartphone camera", "vaccine trial results", "stock market crash",
    "music streaming service", "video game console", "solar power plant", "artificial intelligence",
]  # fmt: skip


def _answers(testbed) -> dict[str, list[dict]]:
    """qid -> the testbed SearXNG's results for it, fetched over HTTP."""
    out = {}
    for n, text in enumerate(QUERIES, start=1):
        body = httpx.get(
            testbed.searxng_url() + "/search", params={"q": text, "format": "json"}
        ).json()
        if body["results"]:
            out[str(n)] = body["results"]
    return out


def _write(
    tmp_path: Path, answers: dict[str, list[dict]], relevant: Callable[[str, dict], bool]
) -> list[str]:
    """queries.tsv and judgements.qrels: a result is relevant to its query when
    ``relevant(qid, result)``, the rest are not."""
    queries = tmp_path / "queries.tsv"
    queries.write_text("".join(f"{q}\t{QUERIES[int(q) - 1]}\n" for q in answers))
    lines = []
    for qid, results in answers.items():
        for r in results:
            lines.append(f"{qid} 0 {r['url']} {2 if relevant(qid, r) else 0}\n")
    qrels = tmp_path / "judged.qrels"
    qrels.write_text("".join(lines))
    return ["--queries", str(queries), "--qrels", str(qrels)]


def _tune(config: str, files: list[str], out: Path, *extra: str):
    return CliRunner().invoke(
        main, ["tune", "--config", config, *files, "--out", str(out), *extra],
        catch_exceptions=False,
    )  # fmt: skip


def _held_out(stdout: str) -> tuple[float, float]:
    line = next(line for line in stdout.splitlines() if "held-out, all folds" in line)
    default = float(line.split("default ")[1].split(",")[0])
    tuned = float(line.split("tuned ")[1].split()[0])
    return default, tuned


def test_tune_fits_engine_weights_and_writes_a_fragment_that_merges_over_the_config(
    config_file, testbed, tmp_path
):
    require_shared(AEB)  # its pages and counts are the AEB set's, not the shipped pages'
    config = config_file(order=["searxng"], brave={"enabled": False})
    answers = _answers(testbed)
    assert len(answers) >= 8
    # The pages startpage returned (with at most one other engine) are the relevant ones.
    files = _write(
        tmp_path, answers, lambda _, r: "startpage" in r["engines"] and len(r["engines"]) <= 2
    )
    out = tmp_path / "tuned.yaml"
    result = _tune(config, files, out, "--folds", "3")
    assert result.exit_code == 0, result.output
    fold_rows = [ln for ln in result.stdout.splitlines() if re.match(r"\s+\d+\s+\d+\s+0\.", ln)]
    assert len(fold_rows) == 3  # before/after per fold
    default, tuned = _held_out(result.stdout)
    assert tuned > default
    fragment = yaml.safe_load(out.read_text())
    weights = fragment["backends"]["engine_weights"]
    assert weights["startpage"] > min(w for e, w in weights.items() if e != "startpage")
    assert set(fragment) <= {"backends", "fusion", "scoring"}
    # The fragment is a config file of its own: later --config files win key by key.
    merged = load_settings([config, str(out)])
    assert merged.backends.engine_weights == weights
    assert merged.fusion.rrf_k == fragment["fusion"]["rrf_k"]
    assert str(merged.backends.get("searxng").base_url).startswith(testbed.searxng_url())


def test_tune_refuses_to_write_settings_worse_than_the_defaults_on_held_out_folds(
    config_file, testbed, tmp_path
):
    require_shared(AEB)  # its pages and counts are the AEB set's, not the shipped pages'
    config = config_file(order=["searxng"], brave={"enabled": False})
    answers = _answers(testbed)
    # Two folds that want opposite things: in the first, startpage's pages are relevant,
    # in the second every other page is, so what one fold learns hurts the other.
    first, _ = split_folds(sorted(answers), 2, 0)

    def relevant(qid: str, result: dict) -> bool:
        return ("startpage" in result["engines"]) == (qid in first)

    out = tmp_path / "tuned.yaml"
    result = _tune(config, _write(tmp_path, answers, relevant), out, "--folds", "2")
    assert result.exit_code == 1
    default, tuned = _held_out(result.stdout)
    assert tuned < default
    assert "not written" in result.stderr and "held-out" in result.stderr
    assert not out.exists()


@pytest.mark.parametrize(
    ("queries", "qrels", "message"),
    [
        ("1 no tab here\n", "1 0 http://a.example/ 1\n", "queries.tsv:1: expected 'qid<TAB>"),
        ("1\tq\n", "1 0 http://a.example/\n", "judged.qrels:1: expected 4 fields"),
        ("7\tq\n", "1 0 http://a.example/ 1\n", "no judged query is in the queries file"),
        ("1\tq\n2\tr\n", "1 0 http://a.example/ 1\n", "cross-validation needs at least 2"),
        (
            "1\tq\n2\tr\n",
            "1 0 http://a.example/ 0\n2 0 http://b.example/ 0\n",
            "0 judged query has a relevant result",
        ),
    ],
)
def test_tune_bad_input_exits_2_naming_the_file_and_line(
    config_file, tmp_path, queries, qrels, message
):
    (tmp_path / "queries.tsv").write_text(queries)
    (tmp_path / "judged.qrels").write_text(qrels)
    files = ["--queries", str(tmp_path / "queries.tsv"), "--qrels", str(tmp_path / "judged.qrels")]
    result = _tune(config_file(), files, tmp_path / "out.yaml")
    assert result.exit_code == 2
    assert message in result.stderr
    assert "Traceback" not in result.output


def test_a_query_a_search_refuses_is_reported_not_a_traceback(config_file, testbed, tmp_path):
    answers = _answers(testbed)
    files = _write(tmp_path, answers, lambda _, r: "startpage" in r["engines"])
    long_query = "x " * 1500  # over a search's 2,000 characters
    with open(files[1], "a") as queries:
        queries.write(f"99\t{long_query}\n")
    with open(files[3], "a") as qrels:
        qrels.write("99 0 http://a.example/ 1\n")
    result = _tune(config_file(order=["searxng"], brave={"enabled": False}), files,
                   tmp_path / "out.yaml", "--folds", "2")  # fmt: skip
    assert result.exit_code in (0, 1), result.output  # fitted, or refused as no better
    assert "1 without an answer" in result.stdout


def test_config_files_merge_key_by_key_later_files_winning(tmp_path, monkeypatch):
    a = tmp_path / "a.yaml"
    a.write_text(
        "fusion: {rrf_k: 7, method: answer_order}\n"
        "backends: {engine_weights: {bing: 2.0, qwant: 0.5}, order: [searxng, brave]}\n"
    )
    b = tmp_path / "b.yaml"
    b.write_text("fusion: {rrf_k: 9}\nbackends: {engine_weights: {bing: 1.5}, order: [brave]}\n")
    settings = load_settings([str(a), str(b)], environ={})
    assert settings.fusion.rrf_k == 9 and settings.fusion.method == "answer_order"
    assert settings.backends.engine_weights == {"bing": 1.5, "qwant": 0.5}
    assert settings.backends.order == ["brave"]  # a list is a value: replaced, not merged
    # $SEARCHER_CONFIG may name several files, as `serve --workers` passes them on.
    import os

    joined = load_settings(None, environ={"SEARCHER_CONFIG": os.pathsep.join([str(a), str(b)])})
    assert joined.backends.engine_weights == {"bing": 1.5, "qwant": 0.5}
    # And through the CLI: --config given twice.
    shown = CliRunner().invoke(main, ["config", "--config", str(a), "--config", str(b)])
    assert shown.exit_code == 0, shown.output
    printed = yaml.safe_load(shown.stdout)
    assert printed["fusion"]["rrf_k"] == 9 and printed["fusion"]["method"] == "answer_order"
    assert printed["backends"]["engine_weights"] == {"bing": 1.5, "qwant": 0.5}


def test_deep_merge_leaves_its_inputs_alone():
    base = {"a": {"b": 1, "c": [1]}}
    over = {"a": {"c": [2], "d": None}}
    assert deep_merge(base, over) == {"a": {"b": 1, "c": [2], "d": None}}
    assert base == {"a": {"b": 1, "c": [1]}} and over == {"a": {"c": [2], "d": None}}


def test_a_judged_document_that_is_no_readable_url_matches_nothing_not_a_traceback(
    config_file, testbed, tmp_path
):
    answers = _answers(testbed)
    files = _write(tmp_path, answers, lambda _, r: "startpage" in r["engines"])
    with open(files[3], "a") as qrels:
        qrels.write(f"{next(iter(answers))} 0 http://[x/ 2\n")  # urlsplit: Invalid IPv6 URL
    result = _tune(config_file(order=["searxng"], brave={"enabled": False}), files,
                   tmp_path / "out.yaml", "--folds", "2")  # fmt: skip
    assert result.exit_code in (0, 1), result.output  # fitted, or refused as no better
    assert "held-out, all folds" in result.stdout


def test_tune_never_writes_its_fragment_over_a_file_it_reads(config_file, tmp_path, monkeypatch):
    config = config_file()
    (tmp_path / "queries.tsv").write_text("1\tq\n2\tr\n")
    (tmp_path / "judged.qrels").write_text("1 0 http://a.example/ 1\n2 0 http://b.example/ 1\n")
    files = ["--queries", str(tmp_path / "queries.tsv"), "--qrels", str(tmp_path / "judged.qrels")]
    before = {p: p.read_text() for p in tmp_path.iterdir() if p.is_file()}
    for out, option in ((config, "--config"), (tmp_path / "judged.qrels", "--qrels"),
                        (tmp_path / "queries.tsv", "--queries")):  # fmt: skip
        result = _tune(config, files, Path(out))
        assert result.exit_code == 2, result.output
        assert f"is the {option} file tune reads" in result.stderr
    # The configuration found without --config (./searcher.yaml) is read too.
    monkeypatch.chdir(tmp_path)
    monkeypatch.delenv("SEARCHER_CONFIG", raising=False)
    result = CliRunner().invoke(main, ["tune", *files, "--out", "searcher.yaml"])
    assert result.exit_code == 2 and "is the --config file" in result.stderr, result.output
    assert {p: p.read_text() for p in tmp_path.iterdir() if p.is_file()} == before
