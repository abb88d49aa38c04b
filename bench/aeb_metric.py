"""The Article Extraction Benchmark's own metric (Zyte/Scrapinghub ``evaluate.py``).

Per page: 4-word shingles of ``\\w+`` tokens (case kept), TP/FP/FN counted over the shingle
multisets and normalised to sum to 1. Precision is averaged over pages that predicted
something, recall over pages whose truth has text; F1 is taken of the two averages.
"""

from __future__ import annotations

import gzip
import json
import re
import statistics
from collections import Counter
from collections.abc import Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.shared_data import shared_path

AEB_DIR = shared_path("data/aeb")
_TOKEN = re.compile(r"\w+", re.UNICODE)


@dataclass(frozen=True)
class PageScore:
    """Normalised shingle counts of one page (they sum to 1, or are all 0)."""

    tp: float
    fp: float
    fn: float


@dataclass(frozen=True)
class Scores:
    precision: float
    recall: float
    f1: float


def _shingles(text: str, n: int = 4) -> Counter[tuple[str, ...]]:
    tokens = _TOKEN.findall(text or "")
    # A text shorter than n tokens is one short shingle, as in the benchmark.
    grams = [tuple(tokens[i : i + n]) for i in range(max(1, len(tokens) - n + 1))]
    return Counter(g for g in grams if g)


def score_page(truth: str, prediction: str) -> PageScore:
    """TP/FP/FN of one page over 4-word shingles, normalised so long pages weigh no more."""
    true_sh, pred_sh = _shingles(truth), _shingles(prediction)
    tp = float(sum((true_sh & pred_sh).values()))
    fp = float(sum((pred_sh - true_sh).values()))
    fn = float(sum((true_sh - pred_sh).values()))
    total = tp + fp + fn
    if total == 0:
        return PageScore(0.0, 0.0, 0.0)
    return PageScore(tp / total, fp / total, fn / total)


def _precision(s: PageScore) -> float:
    if s.fp == s.fn == 0:
        return 1.0
    return s.tp / (s.tp + s.fp)


def _recall(s: PageScore) -> float:
    if s.fp == s.fn == 0:
        return 1.0
    return s.tp / (s.tp + s.fn)


def aggregate(pages: Iterable[PageScore]) -> Scores:
    """Mean precision over pages that predicted text, mean recall over pages with truth."""
    pages = list(pages)
    precisions = [_precision(s) for s in pages if s.tp + s.fp > 0]
    recalls = [_recall(s) for s in pages if s.tp + s.fn > 0]
    precision = statistics.mean(precisions) if precisions else 0.0
    recall = statistics.mean(recalls) if recalls else 0.0
    f1 = 2 * precision * recall / (precision + recall) if precision + recall else 0.0
    return Scores(precision, recall, f1)


@dataclass(frozen=True)
class AebPage:
    page_id: str
    url: str
    html: bytes
    truth: str


def load_aeb(directory: Path = AEB_DIR) -> Iterator[AebPage]:
    """The benchmark's pages in a stable order, HTML as the raw (decompressed) bytes."""
    truth = json.loads((directory / "ground-truth.json").read_text(encoding="utf-8"))
    for page_id in sorted(truth):
        html = gzip.decompress((directory / "html" / f"{page_id}.html.gz").read_bytes())
        entry = truth[page_id]
        yield AebPage(page_id, entry.get("url", ""), html, entry.get("articleBody", "") or "")
