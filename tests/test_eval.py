"""``searcher eval`` and searcher.ranking.evaluation: hand-computed metrics, output, errors."""

from __future__ import annotations

import json
import math
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from searcher.cli import main
from searcher.ranking.evaluation import (
    EvalError,
    evaluate,
    format_run,
    parse_qrels,
    parse_run,
    read_qrels,
    read_run,
    run_from_rankings,
)

REPO = Path(__file__).resolve().parents[1]


def ranked(**queries: str) -> dict[str, dict[str, float]]:
    """A run from space-separated document ids per query, best first."""
    return run_from_rankings({qid: docs.split() for qid, docs in queries.items()})


def mean(metric: str, run: dict, qrels: dict) -> float:
    return evaluate(run, qrels, [metric]).scores[0].mean


# ---- the metrics, computed by hand ----------------------------------------------------


def test_mrr_relevant_at_rank_two_is_one_half():
    assert mean("MRR", ranked(q1="a b c"), {"q1": {"b": 1}}) == pytest.approx(0.5)


def test_mrr_is_the_mean_over_queries():
    run = ranked(q1="a b c", q2="x y z")
    qrels = {"q1": {"a": 1}, "q2": {"z": 1}}
    assert mean("MRR", run, qrels) == pytest.approx((1 + 1 / 3) / 2)


def test_ndcg_of_one_relevant_document_at_rank_two():
    run, qrels = ranked(q1="a b c"), {"q1": {"b": 1}}
    assert mean("nDCG@5", run, qrels) == pytest.approx(1 / math.log2(3))


def test_ndcg_uses_graded_relevance_as_gain():
    # DCG = 2/log2(2) + 1/log2(4) = 2.5; ideal = 2/log2(2) + 1/log2(3).
    run, qrels = ranked(q1="a b c"), {"q1": {"a": 2, "c": 1}}
    assert mean("nDCG@10", run, qrels) == pytest.approx(2.5 / (2 + 1 / math.log2(3)))


def test_ndcg_cut_off():
    run, qrels = ranked(q1="a b c d e f g"), {"q1": {"g": 1}}
    assert mean("nDCG@5", run, qrels) == 0
    assert mean("nDCG@10", run, qrels) == pytest.approx(1 / math.log2(8))


def test_precision_at_five_divides_by_five():
    assert mean("P@5", ranked(q1="a b c d e f"), {"q1": {"b": 1, "e": 1, "f": 1}}) == 0.4
    assert mean("P@5", ranked(q1="a b c"), {"q1": {"a": 1}}) == pytest.approx(0.2)


def test_recall_at_ten():
    run = ranked(q1=" ".join(f"d{i}" for i in range(12)))
    assert mean("Recall@10", run, {"q1": {"d3": 1, "d11": 1}}) == 0.5


def test_judged_query_missing_from_the_run_scores_zero():
    result = evaluate(ranked(q1="a b"), {"q1": {"a": 1}, "q2": {"a": 1}}, ["MRR"])
    assert result.scores[0].mean == 0.5 and result.scores[0].queries == 2
    assert result.missing_from_run == 1


def test_unjudged_run_queries_are_ignored():
    result = evaluate(ranked(q1="a b", q9="a"), {"q1": {"b": 1}}, ["MRR"])
    assert result.scores[0].mean == 0.5 and result.scores[0].queries == 1
    assert result.run_queries == 2


def test_order_comes_from_the_score_column():
    run = parse_run(["q1 Q0 a 1 0.5 t", "q1 Q0 b 2 0.9 t"], "run")
    assert mean("MRR", run, {"q1": {"b": 1}}) == 1


def test_default_metrics_and_lookup_by_name():
    result = evaluate(ranked(q1="a b c"), {"q1": {"b": 1}})
    assert [s.name for s in result.scores] == ["MRR", "nDCG@5", "nDCG@10", "P@5", "Recall@10"]
    assert result.mean("MRR") == 0.5 and result.mean("Recall@10") == 1


# ---- parsing --------------------------------------------------------------------------


def test_qrels_in_trec_and_beir_formats_agree():
    trec = parse_qrels(["1 0 31715818 1", "", "3 0 14717500 2"], "trec")
    beir = parse_qrels(["query-id\tcorpus-id\tscore", "1\t31715818\t1", "3\t14717500\t2"], "b")
    assert trec == beir == {"1": {"31715818": 1}, "3": {"14717500": 2}}


def test_format_run_reads_back():
    rankings = {"q1": ["a", "b"], "q2": ["c"]}
    text = format_run(rankings, "mine")
    assert text.splitlines()[1] == "q1 Q0 b 2 1 mine"
    assert parse_run(text.splitlines(), "x") == run_from_rankings(rankings)


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["q1 Q0 a 1 0.5 t", "q1 Q0 b 2"], "run:2: expected 6 fields"),
        (["q1 Q0 a one 0.5 t"], "run:1: rank must be an integer, got 'one'"),
        (["q1 Q0 a 1 high t"], "run:1: score must be a number, got 'high'"),
        (["q1 Q0 a 1 nan t"], "run:1: score must be finite"),
        (["q1 Q0 a 1 1 t", "q1 Q0 a 2 0.5 t"], "run:2: document 'a' listed twice"),
        (["", "  "], "run: no results"),
    ],
)
def test_bad_run_lines(lines, message):
    with pytest.raises(EvalError, match=message):
        parse_run(lines, "run")


@pytest.mark.parametrize(
    ("lines", "message"),
    [
        (["q1 0 a 1", "q1 0 b"], "qrels:2: expected 4 fields"),
        (["q1 0 a yes"], "qrels:1: relevance must be an integer"),
        (["query-id corpus-id score", "q1 a 1 extra"], "qrels:2: expected 3 fields"),
        (["q1 0 a 1", "q1 0 a 0"], "qrels:2: document 'a' judged twice"),
        (["query-id corpus-id score"], "qrels: no judgements"),
        (["q1 0 a 4294967296"], "qrels:1: relevance must be between -65535 and 65535"),
        (["q1 0 a 2147483647"], "qrels:1: relevance must be between"),
        (["q1 0 a 65536"], "qrels:1: relevance must be between"),
        (["q1 0 a -65536"], "qrels:1: relevance must be between"),
        (["query-id corpus-id score", "q1 a 99999999999999999999999"], "qrels:2: relevance must"),
    ],
)
def test_bad_qrels_lines(lines, message):
    with pytest.raises(EvalError, match=message):
        parse_qrels(lines, "qrels")


def test_relevance_grades_at_the_limits_are_kept():
    qrels = parse_qrels(["q1 0 a 65535", "q1 0 b -65535", "q1 0 c -1"], "qrels")
    assert qrels == {"q1": {"a": 65535, "b": -65535, "c": -1}}
    # A negative grade still means "not relevant", and the top grade is relevant.
    assert mean("MRR", ranked(q1="b c a"), qrels) == pytest.approx(1 / 3)


def test_a_byte_order_mark_is_not_part_of_the_first_query_id(tmp_path):
    run, qrels = tmp_path / "bom.run", tmp_path / "bom.qrels"
    run.write_bytes(b"\xef\xbb\xbfq1 Q0 d1 1 1 run\n")
    qrels.write_bytes(b"\xef\xbb\xbfq1 0 d1 1\n")
    assert list(read_run(run)) == ["q1"]
    assert list(read_qrels(qrels)) == ["q1"]
    assert invoke(str(run), str(qrels), "--metrics", "MRR").stdout.split()[3:5] == ["MRR", "1.0000"]


def test_no_common_query_and_unknown_metric():
    with pytest.raises(EvalError, match="no query in common"):
        evaluate(ranked(q1="a"), {"q2": {"a": 1}})
    with pytest.raises(EvalError, match="unknown metric 'nDCG@ten'"):
        evaluate(ranked(q1="a"), {"q1": {"a": 1}}, ["nDCG@ten"])


def test_missing_file(tmp_path):
    with pytest.raises(EvalError, match="no such file"):
        read_run(tmp_path / "absent.run")


# ---- the command ----------------------------------------------------------------------


@pytest.fixture
def files(tmp_path: Path) -> tuple[str, str]:
    run = tmp_path / "bm25.run"
    run.write_text(format_run({"1": ["x", "a", "y"], "2": ["b", "z"]}, "bm25"))
    qrels = tmp_path / "test.tsv"
    qrels.write_text("query-id\tcorpus-id\tscore\n1\ta\t1\n2\tb\t1\n")
    return str(run), str(qrels)


def invoke(*args: str):
    return CliRunner().invoke(main, ["eval", *args], catch_exceptions=False)


def test_command_prints_an_aligned_table(files):
    result = invoke(*files)
    assert result.exit_code == 0, result.output
    lines = result.stdout.splitlines()
    assert lines[0].split() == ["metric", "mean", "queries"]
    assert lines[1].split() == ["MRR", "0.7500", "2"]  # (1/2 + 1) / 2
    assert lines[5].split() == ["Recall@10", "1.0000", "2"]
    assert len({len(line) for line in lines[:6]}) == 1  # right-aligned columns
    assert "judged queries 2" in lines[6]


def test_command_prints_json_with_chosen_metrics(files):
    result = invoke(*files, "--format", "json", "--metrics", "MRR,P@5", "--metrics", "MAP")
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert list(data["metrics"]) == ["MRR", "P@5", "MAP"]
    assert data["metrics"]["MRR"] == {"mean": 0.75, "queries": 2}
    assert data["metrics"]["P@5"]["mean"] == pytest.approx(0.2)
    assert data["judged_queries"] == 2 and data["missing_from_run"] == 0


def assert_one_line_error(result, *fragments: str) -> None:
    assert result.exit_code == 2
    assert result.stdout == ""
    assert result.stderr.count("\n") == 1 and "Traceback" not in result.stderr
    assert result.stderr.startswith("searcher: ")
    for fragment in fragments:
        assert fragment in result.stderr


def test_command_errors(files, tmp_path):
    run, qrels = files
    assert_one_line_error(invoke(str(tmp_path / "nope.run"), qrels), "nope.run", "no such file")
    assert_one_line_error(invoke(run, str(tmp_path)), "is a directory")
    bad = tmp_path / "bad.run"
    bad.write_text("1 Q0 a 1 1.0 t\n1 Q0 b 2 0.5\n")
    assert_one_line_error(invoke(str(bad), qrels), f"{bad}:2: expected 6 fields")
    other = tmp_path / "other.tsv"
    other.write_text("7 0 a 1\n")
    assert_one_line_error(invoke(run, str(other)), "no query in common")
    assert_one_line_error(invoke(run, qrels, "--metrics", "bogus"), "unknown metric 'bogus'")


@pytest.mark.parametrize("grade", ["99999999999999999999999", "4294967296"])
def test_command_refuses_a_relevance_grade_trec_eval_cannot_hold(files, tmp_path, grade):
    # The first overflowed inside pytrec_eval (a traceback), the second scored as not relevant.
    qrels = tmp_path / "huge.qrels"
    qrels.write_text(f"1 0 a 1\n2 0 b {grade}\n")
    assert_one_line_error(invoke(files[0], str(qrels)), f"{qrels}:2: relevance must be between")


@pytest.mark.parametrize(
    "metric",
    ["nDCG@0", "P@0", "Recall@0", "nDCG@00", "RR(rel=2)@0", "nDCG@99999999999999999999",
     "P@9223372036854775808", "nDCG@1000001"],
)  # fmt: skip
def test_a_cutoff_out_of_range_is_refused_before_trec_eval_sees_it(files, metric):
    # trec_eval asserts on a zero cutoff and aborts the whole process (SIGABRT), so this
    # runs the real command in a process of its own.
    done = subprocess.run(
        [sys.executable, "-m", "searcher", "eval", *files, "--metrics", metric],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"searcher: unknown metric {metric!r}: the cutoff after @ must be from 1 to 1,000,000\n"
    )


# The metrics are an extra (``eval``): without it the command names the extra to install.
_WITHOUT_METRICS = (
    "import sys; sys.modules['ir_measures'] = None; "  # None: as if it were not installed
    "from searcher.cli import main; main()"
)


def test_without_the_eval_extra_the_command_names_it(files):
    done = subprocess.run(
        [sys.executable, "-c", _WITHOUT_METRICS, "eval", *files],
        capture_output=True, text=True, timeout=60, cwd=REPO,
    )  # fmt: skip
    assert done.returncode == 1, done.stderr
    assert done.stderr.count("\n") == 1, done.stderr  # one line, no traceback
    assert "'eval' extra" in done.stderr and "pip install 'searcher[eval]'" in done.stderr


def test_queries_written_with_tabs_and_line_breaks_read_back_as_one_line_each():
    from searcher.ranking.evaluation import format_queries, parse_queries

    queries = {"f1": "cloud\tgaming\nStadia", "f2": "Black Friday\r\ndeals  "}
    written = format_queries(queries)
    assert written.count("\n") == 2
    assert parse_queries(written.splitlines(), "q.tsv") == {
        "f1": "cloud gaming Stadia", "f2": "Black Friday deals",
    }  # fmt: skip
