"""Text from PDF documents, page by page, with pypdfium2 (PDFium; Apache-2.0/BSD-3).

PDFium (the engine Chrome uses) rather than pure-Python pypdf: on PDFs typeset from the
extraction benchmark's texts both keep the text equally well (F1 0.989), and pypdfium2 reads
2-3 times as many pages per second (``bench/pdf_extraction.py``).
It runs inside the extraction worker pool, so a PDF that makes it loop is killed with its
worker at the extraction time limit like any page.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from searcher.fetch.whitespace import normalise_plain_text

if TYPE_CHECKING:
    import pypdfium2

PDF_MEDIA_TYPE = "application/pdf"
# Between the text of two pages: a blank line, a form feed (the page break plain-text tools
# use), another blank line; passages never run across a page break.
PAGE_BREAK = "\n\n\f\n\n"


class PartialText(str):
    """The text of a document read in part: it has pages beyond ``fetch.pdf_max_pages``.
    A ``str`` (it crosses the extraction workers' pipe as one); its reader marks the page
    ``truncated``, as a download cut at the byte limit is."""

    __slots__ = ()


class PdfUnreadable(Exception):
    """The PDF cannot be opened (damaged, truncated, encrypted) or has no text to give."""


def pdf_text(body: bytes, max_pages: int, max_chars: int | None = None) -> str:
    """The text of the first ``max_pages`` pages, pages separated by ``PAGE_BREAK``, cut at
    ``max_chars`` characters (``None``: not cut); a ``PartialText`` when pages were left.
    A page that cannot be loaded or read (a damaged or missing object) counts as empty.

    Raises ``PdfUnreadable`` when the file cannot be opened, when not one of its pages can
    be read, or when none of them has a text layer (a scanned document: we do not run
    OCR)."""
    import pypdfium2  # here: only extraction workers need it (preloaded by their server)

    try:
        document = pypdfium2.PdfDocument(body)
    except pypdfium2.PdfiumError as exc:
        raise PdfUnreadable(f"cannot open the PDF: {exc}") from None
    try:
        dropped = len(document) > max_pages
        pages = _pages_text(document, min(len(document), max_pages), max_chars)
    finally:
        document.close()
    if pages and all(page is None for page in pages):
        raise PdfUnreadable("cannot read any page of the PDF (damaged page objects)")
    if not any(pages):
        raise PdfUnreadable("the PDF has no text layer (a scanned document?); OCR is not done")
    # An unreadable page keeps its page break, so that the pages after it keep their place.
    text = PAGE_BREAK.join(page or "" for page in pages)[:max_chars]
    return PartialText(text) if dropped else text


def _pages_text(
    document: pypdfium2.PdfDocument, count: int, max_chars: int | None
) -> list[str | None]:
    """The text of the first ``count`` pages (``None`` for an unreadable one), stopping
    after the page that brings the total to ``max_chars``: a few kilobytes of compressed
    content stream can draw millions of characters on every page."""
    pages: list[str | None] = []
    total = 0
    for index in range(count):
        if max_chars is not None and total >= max_chars:
            break
        page = _readable_page_text(document, index)
        pages.append(page)
        total += len(page or "") + len(PAGE_BREAK)
    return pages


def _readable_page_text(document: pypdfium2.PdfDocument, index: int) -> str | None:
    """The page's text, or ``None`` when PDFium cannot load or read the page: one bad page
    (a missing object, a broken content stream) should not cost the rest of the file."""
    import pypdfium2

    try:
        return _page_text(document, index)
    except pypdfium2.PdfiumError:
        return None


def _page_text(document: pypdfium2.PdfDocument, index: int) -> str:
    page = document[index]
    try:
        text_page = page.get_textpage()
        try:
            text = text_page.get_text_bounded()
        finally:
            text_page.close()
    finally:
        page.close()
    return normalise_plain_text(text.replace("\f", "\n"))
