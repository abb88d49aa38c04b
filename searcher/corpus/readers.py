"""A file's text, by kind: Markdown, plain text, reStructuredText, HTML (the main text,
as full mode extracts it), PDF (page by page, as full mode reads it) and DOCX (by its
heading styles).

A file that cannot give text raises ``Unreadable`` with a typed reason, which the indexer
records next to the path; nothing here raises anything else for a file's own content.
HTML's main text is extracted by the indexer in the fetcher's bounded worker pool
(``html_document`` assembles the document from it); ``read_document`` reads the others.
"""

from __future__ import annotations

import io
import re
import zipfile
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

from searcher.fetch.pdf import PdfUnreadable, pdf_text
from searcher.fetch.whitespace import normalise_plain_text

Kind = Literal["markdown", "text", "rst", "html", "pdf", "docx"]
# Why a file was not indexed: listed by ``searcher index status``.
SkipReason = Literal[
    "binary",  # not text (a NUL byte, or not UTF-8 / Latin-1 text) and no reader for it
    "empty",  # no text at all
    "too_large",  # over corpus.max_file_bytes
    "unreadable",  # the file system refused (permissions, vanished, broken link)
    "symlink_loop",  # a link back into a folder already being walked
    "pdf_unreadable",  # an encrypted, damaged or scanned (no text layer) PDF
    "outside_roots",  # a link that leads out of corpus.roots
    "extraction_failed",  # HTML too complex, or its extraction over the time or memory bound
    "docx_unreadable",  # a damaged or encrypted DOCX, or one that unpacks too large
]

KINDS_BY_SUFFIX: dict[str, Kind] = {
    ".md": "markdown", ".markdown": "markdown", ".mdown": "markdown",
    ".txt": "text", ".text": "text",
    ".rst": "rst", ".rest": "rst",
    ".html": "html", ".htm": "html", ".xhtml": "html",
    ".pdf": "pdf",
    ".docx": "docx",
}  # fmt: skip
# Bytes looked at to tell text from binary (as git and grep do: a NUL byte means binary).
_SNIFF_BYTES = 8192
PDF_MAX_PAGES = 2000


class Unreadable(Exception):
    """The file gives no text to index; ``reason`` says why, ``detail`` in words."""

    def __init__(self, reason: SkipReason, detail: str) -> None:
        super().__init__(f"{reason}: {detail}")
        self.reason: SkipReason = reason
        self.detail = detail


@dataclass(frozen=True)
class Section:
    """A run of text under one heading (``None`` before the first) on one PDF page
    (``None`` for other kinds)."""

    text: str
    heading: str | None = None
    page: int | None = None


@dataclass(frozen=True)
class Document:
    """A file's title and its text as sections, in reading order."""

    kind: Kind
    title: str
    sections: tuple[Section, ...]


def kind_of(path: Path, head: bytes) -> Kind:
    """The reader for ``path``: by suffix; a file with another suffix is plain text when
    its first bytes are text. Raises ``Unreadable("binary")`` otherwise."""
    known = KINDS_BY_SUFFIX.get(path.suffix.lower())
    if known is not None:
        return known
    if head.startswith(b"%PDF-"):
        return "pdf"
    if b"\x00" in head[:_SNIFF_BYTES] or _decoded(head[:_SNIFF_BYTES], strict=True) is None:
        raise Unreadable("binary", "not a text file and of no kind searcher reads")
    return "text"


def read_document(path: Path, body: bytes) -> Document:
    """The document in ``body`` (the bytes of ``path``). Raises ``Unreadable``."""
    kind = kind_of(path, body)
    if kind == "pdf":
        return _pdf(path, body)
    if kind == "docx":
        return docx_document(path, body)
    if kind == "html":
        raise ValueError("HTML is extracted in the worker pool: see html_document")
    if b"\x00" in body[:_SNIFF_BYTES]:
        raise Unreadable("binary", f"a NUL byte in a {kind} file")
    text = _decoded(body, strict=False) or ""
    named = None
    if kind == "markdown":
        named, text = front_matter(text)
    sections = _markdown_sections(text, named) if kind == "markdown" else None
    if kind == "rst":
        sections = _rst_sections(text)
    if sections is None:
        sections = [Section(normalise_plain_text(text))]
    return _document(kind, path, sections, named)


def _document(
    kind: Kind, path: Path, sections: list[Section], named: str | None = None
) -> Document:
    kept = tuple(s for s in sections if s.text.strip())
    if not kept:
        raise Unreadable("empty", "no text in the file")
    # The first heading names the document, even when no text stands under it directly.
    title = named or next((s.heading for s in sections if s.heading), None)
    return Document(kind, title or _first_line(kept[0].text) or path.name, kept)


def _first_line(text: str) -> str:
    line = text.strip().split("\n", 1)[0].strip()
    return line[:120]


def _decoded(body: bytes, strict: bool) -> str | None:
    """UTF-8 text (its byte-order mark dropped); else Latin-1 when not ``strict``."""
    try:
        return body.decode("utf-8-sig")
    except UnicodeDecodeError:
        # A sniffed head may end inside a character: that is no reason to call it binary.
        if strict:
            try:
                return body[:-4].decode("utf-8-sig") if len(body) > 4 else None
            except UnicodeDecodeError:
                return None
        return body.decode("latin-1")


# --- Markdown and reStructuredText: sections under headings ---------------------------

_ATX = re.compile(r"^(#{1,6})\s+(.+?)\s*#*\s*$")
_FENCE = re.compile(r"^(```|~~~)")
_SETEXT = re.compile(r"^(=+|-+)\s*$")
_RST_ADORNMENT = re.compile(r"^([=\-~^\"'`#*+:.])\1{2,}\s*$")


# A metadata block at the top of a Markdown file (Jekyll, Hugo, Obsidian...): YAML
# between ``---`` lines (or ended by ``...``), or TOML between ``+++`` lines.
_FRONT_MATTER = re.compile(r"\A(---|\+\+\+)[ \t]*\n(.*?)^(?:\1|\.\.\.)[ \t]*$\n?", re.M | re.S)
_FRONT_TITLE = re.compile(r"^title[ \t]*[:=][ \t]*(.+?)[ \t]*$", re.M)
_FRONT_MATTER_CHARS = 16_384


def front_matter(text: str) -> tuple[str | None, str]:
    """The title a Markdown file's front matter gives (``title: ...``), and the text
    without the block: metadata is not the document's text, and its closing ``---``
    would read as a Setext underline."""
    block = _FRONT_MATTER.match(text[:_FRONT_MATTER_CHARS])
    if block is None:
        return None, text
    found = _FRONT_TITLE.search(block.group(2))
    title = found.group(1).strip("'\"").strip()[:200] if found else ""
    return title or None, text[block.end() :]


def _markdown_sections(text: str, heading: str | None = None) -> list[Section]:
    """Sections of a Markdown text, one per ATX (``# ...``) or Setext heading; a heading
    inside a fenced code block is code. ``heading``: the text's before the first (the
    front matter's title)."""
    sections: list[Section] = []
    lines: list[str] = []
    fenced = False
    raw = text.splitlines()
    underline = -1  # the index of the Setext underline of the heading just taken
    for index, line in enumerate(raw):
        if index == underline:
            continue
        if _FENCE.match(line):
            fenced = not fenced
        atx = None if fenced else _ATX.match(line)
        if atx or (not fenced and _is_setext(raw, index)):
            sections.append(Section(normalise_plain_text("\n".join(lines)), heading))
            heading, lines = (atx.group(2) if atx else line.strip()), []
            underline = -1 if atx else index + 1
            continue
        lines.append(line)
    sections.append(Section(normalise_plain_text("\n".join(lines)), heading))
    return sections


def _is_setext(raw: list[str], index: int) -> bool:
    """Whether line ``index`` is a Setext heading: text, then a line of ``=`` or ``-``,
    with a blank line (or the start) before it (so that a list or table is not one)."""
    if index + 1 >= len(raw) or not raw[index].strip() or raw[index].startswith(("-", "|")):
        return False
    return _SETEXT.match(raw[index + 1]) is not None and (index == 0 or not raw[index - 1].strip())


def _rst_sections(text: str) -> list[Section]:
    """Sections of a reStructuredText text: a title is a line underlined (and maybe
    overlined) with one repeated punctuation character at least as long as it."""
    sections: list[Section] = []
    heading: str | None = None
    lines: list[str] = []
    raw = text.splitlines()
    skip = 0
    for index, line in enumerate(raw):
        if skip:
            skip -= 1
            continue
        under = raw[index + 1] if index + 1 < len(raw) else ""
        if (
            line.strip()
            and not _RST_ADORNMENT.match(line)
            and _RST_ADORNMENT.match(under)
            and len(under.rstrip()) >= len(line.rstrip())
        ):
            if lines and _RST_ADORNMENT.match(lines[-1]):
                lines.pop()  # the overline
            sections.append(Section(normalise_plain_text("\n".join(lines)), heading))
            heading, lines, skip = line.strip(), [], 1
            continue
        lines.append(line)
    sections.append(Section(normalise_plain_text("\n".join(lines)), heading))
    return sections


# --- HTML and PDF, through full mode's readers ------------------------------------------


def html_document(path: Path, body: bytes, markdown: str) -> Document:
    """The HTML file ``body`` as a document, from ``markdown``, its main text as full mode
    extracts it (so a local page reads as the same page on the web would); its markdown
    headings cut the sections, its ``<title>`` names it. Raises ``Unreadable``."""
    title = _html_title(body)
    document = _document("html", path, _markdown_sections(markdown))
    return Document("html", title or document.title, document.sections)


_TITLE = re.compile(rb"<title[^>]*>(.*?)</title>", re.IGNORECASE | re.DOTALL)


def _html_title(body: bytes) -> str | None:
    found = _TITLE.search(body[:65536])
    if found is None:
        return None
    import html

    title = " ".join(html.unescape(found.group(1).decode("utf-8", "replace")).split())
    return title[:200] or None


def _pdf(path: Path, body: bytes) -> Document:
    try:
        text = pdf_text(body, PDF_MAX_PAGES)
    except PdfUnreadable as exc:
        raise Unreadable("pdf_unreadable", str(exc)) from None
    # pdf_text separates pages with a form feed, which it removes from the pages' text.
    pages = text.split("\f")
    sections = [
        Section(normalise_plain_text(page), None, number)
        for number, page in enumerate(pages, start=1)
    ]
    return _document("pdf", path, sections)


# --- DOCX, by python-docx -----------------------------------------------------------------

# What a DOCX may unpack to: a zip of a few KB can inflate to gigabytes of XML.
DOCX_MAX_UNPACKED_BYTES = 200 * 1024 * 1024
_DOCX_HEADING = re.compile(r"^(Heading \d|Title)$")


def docx_document(path: Path, body: bytes) -> Document:
    """A Word document's paragraphs as sections under its headings (paragraph styles
    "Title" and "Heading N"), its tables' rows as lines. Raises ``Unreadable``."""
    _check_unpacked_size(body)
    import docx  # imported here: only DOCX files need it
    from docx.opc.exceptions import PackageNotFoundError
    from docx.table import Table
    from lxml.etree import LxmlError

    try:
        word = docx.Document(io.BytesIO(body))
    # lxml's own limits (a text run over 10 MB: "Text node too long") refuse this file,
    # not the run: the files beside it are still indexed.
    except (PackageNotFoundError, zipfile.BadZipFile, KeyError, ValueError, LxmlError) as exc:
        raise Unreadable("docx_unreadable", f"not a readable DOCX: {exc}") from None
    sections: list[Section] = []
    heading: str | None = None
    lines: list[str] = []
    for block in word.iter_inner_content():  # paragraphs and tables in reading order
        if isinstance(block, Table):
            lines += [" | ".join(c.text.strip() for c in row.cells) for row in block.rows]
            continue
        style = block.style.name if block.style is not None else ""
        text = block.text.strip()
        if text and _DOCX_HEADING.match(style or ""):
            sections.append(Section(normalise_plain_text("\n\n".join(lines)), heading))
            heading, lines = text, []
        elif text:
            lines.append(text)
    sections.append(Section(normalise_plain_text("\n\n".join(lines)), heading))
    return _document("docx", path, sections)


def _check_unpacked_size(body: bytes) -> None:
    try:
        with zipfile.ZipFile(io.BytesIO(body)) as archive:
            unpacked = sum(info.file_size for info in archive.infolist())
    except zipfile.BadZipFile:
        raise Unreadable("docx_unreadable", "not a DOCX (no zip archive)") from None
    if unpacked > DOCX_MAX_UNPACKED_BYTES:
        raise Unreadable(
            "docx_unreadable",
            f"unpacks to {unpacked} bytes, over {DOCX_MAX_UNPACKED_BYTES}",
        )
