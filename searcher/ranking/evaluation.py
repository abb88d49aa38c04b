"""Ranking quality of a TREC run against relevance judgements (``searcher eval``).

Files are parsed here, strictly, so that a bad line is reported with its file and line
number; the metrics themselves come from ir-measures over pytrec-eval-terrier (trec_eval's
own code), never from arithmetic of ours. As in ``trec_eval -c``, every judged query
counts: a judged query the run has no results for scores 0, and run queries without
judgements are ignored. Documents are ordered by score, ties by document id (descending),
as trec_eval does; the run's rank column is read but not used for ordering.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

Run = dict[str, dict[str, float]]  # query id -> document id -> score
Qrels = dict[str, dict[str, int]]  # query id -> document id -> relevance grade

DEFAULT_METRICS: tuple[str, ...] = ("MRR", "nDCG@5", "nDCG@10", "P@5", "Recall@10")
_ALIASES = {"MRR": "RR", "MAP": "AP"}
CUTOFF = "cutoff"  # ir-measures' name for the k of nDCG@k
_BEIR_HEADER = ["query-id", "corpus-id", "score"]
# trec_eval keeps a relevance grade in a C int (pytrec_eval wraps larger values: 2**32
# reads as 0) and sizes a table of every level from the lowest grade to the highest, 4
# bytes each, per query: grades of -2**31 and 2**31 - 1 took 16 GB and minutes. Graded
# judgements use a handful of levels, so the parser refuses grades past +-65535 (0.5 MB).
_GRADE_MIN, _GRADE_MAX = -65535, 65535


class EvalError(ValueError):
    """A problem with the input files or the metric names, said in one line."""


class MetricsNotInstalled(EvalError):
    """The metrics library is an optional extra (``eval``): most servers never score runs,
    and it pulls in SciPy (143 MB of a 476 MB install)."""


EXTRA_HINT = (
    "searcher eval needs the 'eval' extra (ir-measures, pytrec-eval-terrier): "
    "pip install 'searcher[eval]' (in a checkout: .venv/bin/pip install -e '.[eval]')"
)


def _metrics_library() -> Any:
    """ir-measures, or MetricsNotInstalled naming the extra that brings it."""
    try:
        import ir_measures
    except ImportError:
        raise MetricsNotInstalled(EXTRA_HINT) from None
    return ir_measures


@dataclass(frozen=True)
class MetricScore:
    name: str
    mean: float
    queries: int


@dataclass(frozen=True)
class Evaluation:
    scores: tuple[MetricScore, ...]
    judged_queries: int  # queries in the qrels: the denominator of every mean
    run_queries: int
    missing_from_run: int  # judged queries the run has no results for (scored 0)

    def mean(self, name: str) -> float:
        """The mean of the metric called ``name`` (as it was asked for)."""
        for score in self.scores:
            if score.name == name:
                return score.mean
        raise KeyError(name)


# ---- parsing ---------------------------------------------------------------------------


def _int(text: str, what: str, where: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise EvalError(f"{where}: {what} must be an integer, got {text!r}") from None


def _grade(text: str, where: str) -> int:
    """A relevance grade, refused when trec_eval could not hold it."""
    grade = _int(text, "relevance", where)
    if not _GRADE_MIN <= grade <= _GRADE_MAX:
        raise EvalError(
            f"{where}: relevance must be between {_GRADE_MIN} and {_GRADE_MAX}, got {text!r}"
        )
    return grade


def _float(text: str, where: str) -> float:
    try:
        value = float(text)
    except ValueError:
        raise EvalError(f"{where}: score must be a number, got {text!r}") from None
    if not math.isfinite(value):
        raise EvalError(f"{where}: score must be finite, got {text!r}")
    return value


def parse_run(lines: Iterable[str], source: str) -> Run:
    """A run from TREC run lines ``qid Q0 docid rank score tag``."""
    run: Run = {}
    for number, line in enumerate(lines, start=1):
        fields = line.split()
        if not fields:
            continue
        where = f"{source}:{number}"
        if len(fields) != 6:
            raise EvalError(
                f"{where}: expected 6 fields 'qid Q0 docid rank score tag', got {len(fields)}"
            )
        qid, _, docid, rank, score, _ = fields
        _int(rank, "rank", where)
        docs = run.setdefault(qid, {})
        if docid in docs:
            raise EvalError(f"{where}: document {docid!r} listed twice for query {qid!r}")
        docs[docid] = _float(score, where)
    if not run:
        raise EvalError(f"{source}: no results in the run file")
    return run


def parse_qrels(lines: Iterable[str], source: str) -> Qrels:
    """Judgements from TREC qrels lines ``qid 0 docid rel`` or from BEIR's TSV, whose
    header is ``query-id corpus-id score``."""
    qrels: Qrels = {}
    width: int | None = None  # 4 for TREC, 3 for BEIR; fixed by the first line
    for number, line in enumerate(lines, start=1):
        fields = line.split()
        if not fields:
            continue
        where = f"{source}:{number}"
        if width is None:
            width = 3 if fields == _BEIR_HEADER else 4
            if width == 3:
                continue
        if len(fields) != width:
            shape = "'qid 0 docid rel'" if width == 4 else "'query-id corpus-id score'"
            raise EvalError(f"{where}: expected {width} fields {shape}, got {len(fields)}")
        qid, docid, grade = (fields[0], fields[2], fields[3]) if width == 4 else fields
        docs = qrels.setdefault(qid, {})
        if docid in docs:
            raise EvalError(f"{where}: document {docid!r} judged twice for query {qid!r}")
        docs[docid] = _grade(grade, where)
    if not qrels:
        raise EvalError(f"{source}: no judgements in the qrels file")
    return qrels


def _lines(path: str | Path) -> list[str]:
    """The lines of a UTF-8 file; a leading byte order mark (as Windows editors write it)
    is dropped, or it would become part of the first query id."""
    try:
        return Path(path).read_text(encoding="utf-8-sig").splitlines()
    except FileNotFoundError:
        raise EvalError(f"{path}: no such file") from None
    except IsADirectoryError:
        raise EvalError(f"{path}: is a directory, not a file") from None
    except UnicodeDecodeError as exc:
        raise EvalError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None
    except OSError as exc:
        raise EvalError(f"{path}: cannot read ({exc.strerror})") from None


def read_run(path: str | Path) -> Run:
    return parse_run(_lines(path), str(path))


def read_qrels(path: str | Path) -> Qrels:
    return parse_qrels(_lines(path), str(path))


def parse_queries(lines: Iterable[str], source: str) -> dict[str, str]:
    """Queries from ``qid<TAB>text`` lines (what ``searcher tune`` and ``judge`` read)."""
    queries: dict[str, str] = {}
    for number, line in enumerate(lines, start=1):
        if not line.strip():
            continue
        where = f"{source}:{number}"
        qid, tab, text = line.partition("\t")
        if not tab or not qid.strip() or not text.strip():
            raise EvalError(f"{where}: expected 'qid<TAB>query text'")
        if qid.strip() in queries:
            raise EvalError(f"{where}: query id {qid.strip()!r} listed twice")
        queries[qid.strip()] = text.strip()
    if not queries:
        raise EvalError(f"{source}: no queries in the file")
    return queries


def read_queries(path: str | Path) -> dict[str, str]:
    return parse_queries(_lines(path), str(path))


def format_queries(queries: Mapping[str, str], qids: Iterable[str] | None = None) -> str:
    """``qid<TAB>query`` lines (what ``parse_queries`` reads), for ``qids`` (default: all,
    in their order). A query's tabs and line breaks are spaces: one query, one line."""
    return "".join(
        f"{qid}\t{' '.join(queries[qid].split())}\n" for qid in (queries if qids is None else qids)
    )


def format_qrels(qrels: Mapping[str, Mapping[str, int]]) -> str:
    """TREC qrels text ``qid 0 docid grade``, queries and documents in sorted order."""
    return "".join(
        f"{qid} 0 {docid} {grade}\n"
        for qid in sorted(qrels)
        for docid, grade in sorted(qrels[qid].items())
    )


def run_from_rankings(rankings: Mapping[str, Sequence[str]]) -> Run:
    """A run from ranked document ids per query: scores that fall with the rank."""
    return {
        qid: {docid: float(len(docids) - i) for i, docid in enumerate(docids)}
        for qid, docids in rankings.items()
    }


def format_run(rankings: Mapping[str, Sequence[str]], tag: str) -> str:
    """TREC run text for ranked document ids per query (the input ``searcher eval`` reads)."""
    lines = [
        f"{qid} Q0 {docid} {rank} {len(docids) - rank + 1} {tag}"
        for qid, docids in rankings.items()
        for rank, docid in enumerate(docids, start=1)
    ]
    return "".join(line + "\n" for line in lines)


# ---- metrics ---------------------------------------------------------------------------


MAX_CUTOFF = 1_000_000  # deeper than any run a ranking is judged on


def _measure(name: str) -> Any:
    """The ir-measures measure for ``name``: its own names (``nDCG@10``, ``RR``, ``R@10``)
    and the aliases ``MRR``, ``MAP`` and ``Recall@k``."""
    ir_measures = _metrics_library()

    canonical = _ALIASES.get(name, name)
    if canonical.startswith("Recall@"):
        canonical = "R@" + canonical.removeprefix("Recall@")
    try:
        measure = ir_measures.parse_measure(canonical)
    except Exception:  # its parser raises several kinds; all mean "not a metric"
        raise EvalError(f"unknown metric {name!r} (e.g. {', '.join(DEFAULT_METRICS)})") from None
    cutoff = measure.params.get(CUTOFF)
    if cutoff is not None and not 1 <= cutoff <= MAX_CUTOFF:
        # ir-measures parses nDCG@0, but trec_eval asserts on it and aborts the process;
        # past a C int it reads another cutoff than the one asked for.
        raise EvalError(
            f"unknown metric {name!r}: the cutoff after @ must be from 1 to {MAX_CUTOFF:,}"
        )
    if not ir_measures.pytrec_eval.supports(measure):
        raise EvalError(f"metric {name!r} is not computed by trec_eval")
    return measure


def evaluate(run: Run, qrels: Qrels, metrics: Sequence[str] = DEFAULT_METRICS) -> Evaluation:
    """Mean of each metric over the judged queries (see the module's docstring)."""
    ir_measures = _metrics_library()

    names = list(dict.fromkeys(metrics)) or list(DEFAULT_METRICS)
    measures = {name: _measure(name) for name in names}
    if not run.keys() & qrels.keys():
        raise EvalError("the run and the qrels have no query in common")
    evaluator = ir_measures.pytrec_eval.evaluator(set(measures.values()), qrels)
    values: dict[Any, list[float]] = {measure: [] for measure in measures.values()}
    for metric in evaluator.iter_calc(run):
        values[metric.measure].append(metric.value)
    scores = tuple(
        MetricScore(name, sum(values[m]) / len(values[m]) if values[m] else 0.0, len(values[m]))
        for name, m in measures.items()
    )
    return Evaluation(
        scores=scores,
        judged_queries=len(qrels),
        run_queries=len(run),
        missing_from_run=len(qrels.keys() - run.keys()),
    )


def per_query(run: Run, qrels: Qrels, metric: str = "nDCG@10") -> dict[str, float]:
    """``metric`` for each judged query; a judged query the run lacks scores 0."""
    ir_measures = _metrics_library()

    measure = _measure(metric)
    scores = {qid: 0.0 for qid in qrels}
    known = {qid: docs for qid, docs in run.items() if qid in qrels and docs}
    if known:
        for value in ir_measures.pytrec_eval.evaluator([measure], qrels).iter_calc(known):
            scores[value.query_id] = value.value
    return scores


def evaluate_files(
    run_path: str | Path, qrels_path: str | Path, metrics: Sequence[str] = DEFAULT_METRICS
) -> Evaluation:
    return evaluate(read_run(run_path), read_qrels(qrels_path), metrics)


# ---- output ----------------------------------------------------------------------------


def format_table(evaluation: Evaluation) -> str:
    """An aligned table: metric, mean over the judged queries, number of queries."""
    rows = [("metric", "mean", "queries")]
    rows += [(s.name, f"{s.mean:.4f}", str(s.queries)) for s in evaluation.scores]
    width = max(len(row[0]) for row in rows)
    lines = [f"{name:<{width}}  {mean:>6}  {queries:>7}" for name, mean, queries in rows]
    lines.append(
        f"judged queries {evaluation.judged_queries}, run queries {evaluation.run_queries}, "
        f"judged but not in the run (scored 0) {evaluation.missing_from_run}"
    )
    return "\n".join(lines) + "\n"


def to_json(evaluation: Evaluation) -> dict[str, Any]:
    return {
        "metrics": {s.name: {"mean": s.mean, "queries": s.queries} for s in evaluation.scores},
        "judged_queries": evaluation.judged_queries,
        "run_queries": evaluation.run_queries,
        "missing_from_run": evaluation.missing_from_run,
    }
