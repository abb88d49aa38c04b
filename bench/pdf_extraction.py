"""PDF text extraction: pages per second and text quality on PDFs made from known text.

The 121 articles of the Article Extraction Benchmark (``../shared/data/aeb/``, their
ground-truth text) are typeset into PDFs at run time (Helvetica, 90 characters a line, 55
lines a page, by ``tests/testbed/pdfs.py``), then read back. Quality is the benchmark's own
metric (4-word shingles, precision / recall / F1) between the text put in and the text
read out; speed is pages per second on one core, the whole document in one call.

Compared side by side in one run: ``searcher.fetch.pdf.pdf_text`` (pypdfium2, what the
service uses) and, when it is installed, pypdf's ``extract_text`` (pure Python).

    PYTHONPATH=$PWD python -m bench.pdf_extraction
"""

from __future__ import annotations

import io
import textwrap
import time
from collections.abc import Callable

from bench.aeb_metric import aggregate, load_aeb, score_page
from searcher.fetch.pdf import pdf_text
from tests.testbed.pdfs import make_pdf

LINE_CHARS, PAGE_LINES = 90, 55


def typeset(text: str) -> tuple[bytes, str, int]:
    """A PDF of ``text`` (WinAnsi-safe), the text as typeset, and its page count."""
    safe = text.encode("latin-1", errors="replace").decode("latin-1")
    lines = [
        line
        for paragraph in safe.splitlines()
        for line in (textwrap.wrap(paragraph, LINE_CHARS) or [""])
    ]
    pages = [lines[i : i + PAGE_LINES] for i in range(0, len(lines), PAGE_LINES)] or [[]]
    return make_pdf(pages), "\n".join(lines), len(pages)


def pypdf_text() -> Callable[[bytes], str] | None:
    try:
        import pypdf
    except ImportError:
        return None

    def read(body: bytes) -> str:
        reader = pypdf.PdfReader(io.BytesIO(body))
        return "\n\n".join(page.extract_text() or "" for page in reader.pages)

    return read


def measure(name: str, read: Callable[[bytes], str], docs: list[tuple[bytes, str, int]]) -> None:
    scores = []
    pages = 0
    started = time.perf_counter()
    for body, truth, count in docs:
        scores.append(score_page(truth, read(body)))
        pages += count
    elapsed = time.perf_counter() - started
    agg = aggregate(scores)
    print(
        f"  {name:22s} {pages / elapsed:8.0f} pages/s   precision {agg.precision:.3f}  "
        f"recall {agg.recall:.3f}  F1 {agg.f1:.3f}"
    )


def main() -> None:
    docs = [typeset(page.truth) for page in load_aeb() if page.truth.strip()]
    pages = sum(count for _, _, count in docs)
    size = sum(len(body) for body, _, _ in docs)
    print(f"{len(docs)} PDFs typeset from AEB ground truth: {pages} pages, {size / 1e6:.1f} MB")
    readers: list[tuple[str, Callable[[bytes], str]]] = [
        ("pypdfium2 (searcher)", lambda body: pdf_text(body, 10_000))
    ]
    other = pypdf_text()
    if other is not None:
        readers.append(("pypdf", other))
    for _ in range(2):  # the second round is the one to quote (warm caches)
        print("round:")
        for name, read in readers:
            measure(name, read, docs)


if __name__ == "__main__":
    main()
