"""Main-text extraction (trafilatura, markdown output); run in the worker pool by
``searcher.fetch.extractor``.

Measured with ``bench/extraction.py``, side by side with a direct ``trafilatura.extract``
call: see the README's extraction figures. The markdown is cleaned of backslash escapes and
inline markup (``<u>``, ``**``, ``~~``, ``*``, backticks) so that words stay whole.
"""

from __future__ import annotations

import codecs
import re

import trafilatura

EXTRACTOR_NAME = "trafilatura"
_VERSION = ".".join(trafilatura.__version__.split(".")[:2])
# Keys cached text: a new trafilatura minor version or output format means new entries.
# "r2": inline markup stripped from the markdown (older cache entries still hold it).
EXTRACTOR_TAG = f"{EXTRACTOR_NAME}-{_VERSION}-r2-md"

_PLAIN_TYPES = frozenset({"text/plain"})
_SPACES = re.compile(r"[^\S\n]+")
_BLANK_LINES = re.compile(r"\n{3,}")
# Backslash escapes trafilatura's markdown puts before punctuation (``snake\_case``,
# ``\[1\]``). Readers of this text are LLMs and keyword scorers, not markdown renderers:
# the escapes split words (AEB F1 0.958 with them, 0.960 without).
_MD_ESCAPE = re.compile(r"\\([\\`*_{}\[\]()#+\-.!<>~|])")
# Inline markup trafilatura's markdown keeps from the page: HTML tags it has no markdown
# for (<u>, <sub>, <sup>, ...), **bold**, __bold__, ~~struck~~, *italic* and `code`.
# Headings, lists and tables stay; inline markers go: they split words for keyword
# scoring and substring checks, and an LLM reads the words, not the emphasis.
_INLINE_TAGS = re.compile(
    r"(?<!\\)</?(?:u|ins|del|s|strike|sub|sup|mark|small|big|em|strong|b|i|tt|kbd|abbr|span)\s*>",
    re.IGNORECASE,
)
# Markers are matched before the escapes go: the page's own "*" or "_" are escaped ("\*").
_STRONG = re.compile(r"(?<!\\)(\*\*|__|~~)(?=\S)(.+?)(?<=[^\s\\])\1")
_ITALIC = re.compile(r"(?<![\w*\\])\*(?=[^\s*])([^*\n]+?)(?<=[^\s*\\])\*(?![\w*])")
_CODE = re.compile(r"(?<![`\\])`([^`\n]+)`(?!`)")


def _known_codec(charset: str | None) -> str | None:
    if not charset:
        return None
    try:
        return codecs.lookup(charset).name
    except LookupError:
        return None


def normalise_plain_text(text: str) -> str:
    """Runs of spaces and tabs become one space, lines are trimmed, at most one blank line."""
    text = text.replace("\r\n", "\n").replace("\r", "\n")
    lines = (_SPACES.sub(" ", line).strip() for line in text.split("\n"))
    return _BLANK_LINES.sub("\n\n", "\n".join(lines)).strip()


def extract_main_text(body: bytes, url: str, content_type: str, charset: str | None) -> str:
    """The main text of a page as markdown (plain text for text/plain); "" if none is found."""
    codec = _known_codec(charset)
    if content_type.lower() in _PLAIN_TYPES:
        return normalise_plain_text(body.decode(codec or "utf-8", errors="replace"))
    # With the header's charset we decode; without, trafilatura detects it from the bytes
    # (meta tags, then statistics). Both score the same on the benchmark.
    document: bytes | str = body.decode(codec, errors="replace") if codec else body
    # Not fast=True: trafilatura's fallback extractors (readability, jusText) rescue
    # pages its own pass cuts short. On trafilatura's evaluation pages that keeps 0.937
    # of the must-keep snippets instead of 0.924 (a direct default call: 0.941) for about
    # a third more time per page; see bench/extraction.py.
    text = trafilatura.extract(
        document,
        url=url or None,
        output_format="markdown",
        include_comments=False,
        include_tables=True,
    )
    return strip_inline_markup(text or "").strip()


_WARM_UP_PAGE = (
    "<html><body><article><h1>Warm up</h1>"
    + "<p>A paragraph of plain words so that every extraction stage runs once.</p>" * 3
    + "</article></body></html>"
)


def warm_up() -> None:
    """Run one small extraction, so that a new worker loads what trafilatura's fallback
    extractors load lazily (jusText's stop lists: ~0.3 s, more on a busy machine) before
    its first real page rather than during it. Meant as the pool's worker initializer."""
    extract_main_text(_WARM_UP_PAGE.encode(), "", "text/html", "utf-8")


def strip_inline_markup(markdown: str) -> str:
    """trafilatura's markdown without backslash escapes and inline markup (HTML tags such
    as ``<u>``, bold, struck, italic and code markers); block structure is kept."""
    text = _INLINE_TAGS.sub("", markdown)
    text = _STRONG.sub(r"\2", text)
    text = _ITALIC.sub(r"\1", text)
    text = _CODE.sub(r"\1", text)
    return _MD_ESCAPE.sub(r"\1", text)
