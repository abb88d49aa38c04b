"""Extraction quality and speed of ``searcher.fetch.extract`` on the local evaluation data.

    .venv/bin/python -m bench.extraction [--repeat 3]

AEB: precision, recall and F1 with the benchmark's own metric (``bench.aeb_metric``) and
pages/s on one core, sequential and in-process (median of ``--repeat`` passes).
trafilatura-eval: share of ``with`` snippets kept and of ``without`` snippets dropped.
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

from bench.aeb_metric import AebPage, Scores, aggregate, load_aeb, score_page
from searcher.fetch.extract import EXTRACTOR_TAG, extract_main_text

TRAFILATURA_EVAL = Path(__file__).resolve().parents[2] / "shared" / "data" / "trafilatura-eval"
Extract = Callable[[bytes, str], str]


def extract_html(html: bytes, url: str) -> str:
    """The service's extraction of an HTML page whose charset the server did not name."""
    return extract_main_text(html, url, "text/html", None)


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
    scores = aeb_scores(aeb)
    rate = pages_per_second(aeb, extract_html, args.repeat)
    print(f"extractor {EXTRACTOR_TAG}")
    print(
        f"AEB ({len(aeb)} pages): precision {scores.precision:.3f}  recall {scores.recall:.3f}"
        f"  F1 {scores.f1:.3f}  {rate:.1f} pages/s (one core, median of {args.repeat})"
    )
    snippets = snippet_scores(list(load_trafilatura_eval()))
    print(
        f"trafilatura-eval ({snippets.pages} pages): with-snippets kept {snippets.kept:.3f}"
        f"  without-snippets dropped {snippets.dropped:.3f}"
    )


if __name__ == "__main__":
    main()
