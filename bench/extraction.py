"""Extraction quality and speed of ``searcher.fetch.extract`` on the local evaluation data.

    .venv/bin/python -m bench.extraction [--repeat 3]

AEB: precision, recall and F1 with the benchmark's own metric (``bench.aeb_metric``) and
pages/s on one core, sequential and in-process (median of ``--repeat`` passes).
trafilatura-eval: share of ``with`` snippets kept and of ``without`` snippets dropped.
Each figure is printed for the service's extraction and, side by side in the same run,
for a direct ``trafilatura.extract(html, url=url)`` call (its recommended default
settings, plain-text output), which the service must not fall below (issue 12).
"""

from __future__ import annotations

import argparse
import json
import statistics
import tarfile
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import trafilatura

from bench.aeb_metric import AebPage, Scores, aggregate, load_aeb, score_page
from searcher.fetch.extract import EXTRACTOR_TAG, extract_main_text
from tests.shared_data import shared_path

TRAFILATURA_EVAL = shared_path("data/trafilatura-eval")
Extract = Callable[[bytes, str], str]


def extract_html(html: bytes, url: str) -> str:
    """The service's extraction of an HTML page whose charset the server did not name."""
    return extract_main_text(html, url, "text/html", None)


def extract_direct(html: bytes, url: str) -> str:
    """trafilatura called directly with its recommended (default) settings."""
    return trafilatura.extract(html, url=url) or ""


def aeb_scores(pages: list[AebPage], extract: Extract = extract_html) -> Scores:
    """The AEB metric over ``pages``."""
    return aggregate(score_page(p.truth, extract(p.html, p.url)) for p in pages)


def pages_per_second(pages: list[AebPage], extract: Extract, repeat: int) -> float:
    """Median over ``repeat`` sequential passes."""
    rates = []
    for _ in range(repeat):
        started = time.perf_counter()
        for page in pages:
            extract(page.html, page.url)
        rates.append(len(pages) / (time.perf_counter() - started))
    return statistics.median(rates)


@dataclass(frozen=True)
class SnippetPage:
    url: str
    html: bytes
    with_snippets: list[str]
    without_snippets: list[str]


def load_trafilatura_eval(directory: Path = TRAFILATURA_EVAL) -> Iterator[SnippetPage]:
    """Pages of trafilatura's evaluation set with their must-keep and must-drop snippets."""
    with tarfile.open(directory / "pages.tar.gz") as tar:
        members = {m.name: m for m in tar.getmembers() if m.isfile()}

        def read(name: str) -> bytes:
            handle = tar.extractfile(members[name])
            assert handle is not None
            return handle.read()

        evaldata = json.loads(read("evaldata.json"))
        for url in sorted(evaldata):
            entry = evaldata[url]
            name = f"pages/{entry['file']}"
            if name in members:
                yield SnippetPage(url, read(name), entry["with"], entry["without"])


@dataclass(frozen=True)
class SnippetScores:
    pages: int
    kept: float  # share of `with` snippets found in the output
    dropped: float  # share of `without` snippets absent from it


def snippet_scores(pages: list[SnippetPage], extract: Extract = extract_html) -> SnippetScores:
    """Substring checks, as trafilatura's own evaluation does them."""
    kept = with_total = dropped = without_total = 0
    for page in pages:
        text = extract(page.html, page.url)
        kept += sum(snippet in text for snippet in page.with_snippets)
        dropped += sum(snippet not in text for snippet in page.without_snippets)
        with_total += len(page.with_snippets)
        without_total += len(page.without_snippets)
    return SnippetScores(len(pages), kept / max(1, with_total), dropped / max(1, without_total))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeat", type=int, default=3, help="timed passes over AEB")
    args = parser.parse_args()

    aeb = list(load_aeb())
    evaluation = list(load_trafilatura_eval())
    print(f"extractor {EXTRACTOR_TAG}; trafilatura {trafilatura.__version__}")
    for name, extract in (("service", extract_html), ("direct trafilatura", extract_direct)):
        scores = aeb_scores(aeb, extract)
        rate = pages_per_second(aeb, extract, args.repeat)
        snippets = snippet_scores(evaluation, extract)
        print(
            f"{name:<19} AEB ({len(aeb)} pages): P {scores.precision:.3f}  "
            f"R {scores.recall:.3f}  F1 {scores.f1:.3f}  {rate:.1f} pages/s (one core, "
            f"median of {args.repeat}) | trafilatura-eval ({snippets.pages} pages): "
            f"kept {snippets.kept:.4f}  dropped {snippets.dropped:.4f}  "
            f"sum {snippets.kept + snippets.dropped:.4f}"
        )


if __name__ == "__main__":
    main()
