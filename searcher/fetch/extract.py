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
from lxml.etree import LxmlError, strip_tags
from lxml.html import HtmlElement, HTMLParser, fromstring
from trafilatura.utils import (
    decode_file,
    detect_encoding,
    is_dubious_html,
    load_html,
    repair_faulty_html,
)

from searcher.fetch.whitespace import normalise_plain_text

EXTRACTOR_NAME = "trafilatura"
_VERSION = ".".join(trafilatura.__version__.split(".")[:2])
# Keys cached text: a new trafilatura minor version or output format means new entries.
# "r2": inline markup stripped from the markdown (older cache entries still hold it).
# "r3": byte-order marks and web-only charsets decide the decoding, <template> dropped.
# "r4": markup inside words stripped, code kept as written, <time> text and deep elements
# kept.
# "r5": plain text without a charset decoded in the encoding detected, not as UTF-8;
# text/markdown read as text.
EXTRACTOR_TAG = f"{EXTRACTOR_NAME}-{_VERSION}-r5-md"

# Markup read by trafilatura; any other text/* type a configuration allows (text/plain,
# text/markdown, text/csv, ...) is read as the text it is: trafilatura found "no main
# text" in a Markdown file.
_MARKUP_TEXT_TYPES = frozenset({"text/html", "text/xml"})
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
# Markers are matched before the escapes go: the page's own "*" or "_" are escaped ("\*"),
# so an unescaped marker is markup even inside a word ("pre*mid*post", "a*b*").
_STRONG = re.compile(r"(?<!\\)(\*\*|__|~~)(?=\S)(.+?)(?<=[^\s\\])\1")
_ITALIC = re.compile(r"(?<!\\)\*(?=[^\s*])((?:\\.|[^*\\\n])+?)(?<=[^\s\\])\*")
# Code, whose text trafilatura does not escape ("x*y*z", "**kwargs", "a\.b" are the
# page's own): fenced blocks are kept as they are, inline spans lose their backticks.
_CODE = re.compile(r"^```[^\n]*\n.*?^```|(?<!\\)`([^`\n]+)`", re.MULTILINE | re.DOTALL)
# Stands for the code while the rest is stripped; lxml text, and so trafilatura's output,
# never holds a NUL.
_CODE_SLOT = re.compile("\x00([0-9]+)\x00")


# A byte-order mark names the encoding and beats the Content-Type's charset, as in
# browsers (WHATWG Encoding Standard, "BOM sniff"); the mark itself is not text.
_BYTE_ORDER_MARKS = (
    (codecs.BOM_UTF8, "utf-8"),
    (codecs.BOM_UTF16_BE, "utf-16-be"),
    (codecs.BOM_UTF16_LE, "utf-16-le"),
)
# The encodings of the WHATWG Encoding Standard (the ones browsers decode), by Python's
# codec name, each mapped to the codec that decodes it as a browser does (latin-1 and
# ASCII labels mean windows-1252 there, gb2312 means GBK, ...). Any other charset
# (rot13, base64, hex, unicode_escape, utf-7, ...) is no web page's encoding: it counts as
# missing, and the body's bytes decide.
_WEB_CODECS = {
    "utf-8": "utf-8",
    "utf-16": "utf-16-le",
    "utf-16-le": "utf-16-le",
    "utf-16-be": "utf-16-be",
    "cp866": "cp866",
    **{f"iso8859-{n}": f"iso8859-{n}" for n in (2, 3, 4, 5, 6, 7, 8, 10, 13, 14, 15, 16)},
    "iso8859-1": "cp1252",
    "ascii": "cp1252",
    "iso8859-9": "cp1254",
    "iso8859-11": "cp874",
    "koi8-r": "koi8-r",
    "koi8-u": "koi8-u",
    "mac-roman": "mac-roman",
    "mac-cyrillic": "mac-cyrillic",
    "cp874": "cp874",
    **{f"cp{n}": f"cp{n}" for n in range(1250, 1259)},
    "gbk": "gbk",
    "gb2312": "gbk",
    "gb18030": "gb18030",
    "big5": "big5hkscs",
    "big5hkscs": "big5hkscs",
    "euc_jp": "euc_jp",
    "iso2022_jp": "iso2022_jp",
    "shift_jis": "cp932",
    "cp932": "cp932",
    "euc_kr": "cp949",
    "cp949": "cp949",
}
# Removed before extraction: a <template>'s content is never shown by a browser.
_PRUNED = "//template"
# Unwrapped before extraction, their text kept: trafilatura's cleaning drops <time>
# elements whole, and with them dates in running text ("held on 5 March 2024 in ...").
_UNWRAPPED = ("time",)
# trafilatura's own parser settings plus huge_tree: without it libxml2 drops everything
# nested deeper than 255 elements, while the pre-scan lets containers nest 2,000 deep
# (libxml2 then keeps 2,048). The limits huge_tree lifts guard against large input, and
# the body is already cut at the download limit.
_PARSER = HTMLParser(
    collect_ids=False,
    default_doctype=False,
    encoding="utf-8",
    remove_comments=True,
    remove_pis=True,
    huge_tree=True,
)


def _web_codec(charset: str | None) -> str | None:
    """The codec to decode a page labelled ``charset`` with; ``None`` when the label is
    missing, unknown, or names no text encoding of the web."""
    if not charset:
        return None
    try:
        name = codecs.lookup(charset).name
    except LookupError:
        return None
    return _WEB_CODECS.get(name)


def _split_bom(body: bytes) -> tuple[str | None, bytes]:
    """The codec a leading byte-order mark names (or ``None``), and the body without it."""
    for mark, codec in _BYTE_ORDER_MARKS:
        if body.startswith(mark):
            return codec, body[len(mark) :]
    return None, body


def _is_plain_text(content_type: str) -> bool:
    media = content_type.lower()
    return media.startswith("text/") and media not in _MARKUP_TEXT_TYPES


def _decoded_plain_text(body: bytes, codec: str | None) -> str:
    """A plain-text body as text: in ``codec`` when the page named one, else in UTF-8 when
    the bytes are UTF-8 (a last character cut at the download limit aside), else in the
    web encoding detected from the bytes, as HTML without a charset is (and as browsers
    detect an unlabelled page's encoding); a Russian or Japanese text file served without
    a charset was read as UTF-8 and came out as replacement characters."""
    if codec is not None:
        return body.decode(codec, errors="replace")
    try:
        # Not final: a multi-byte character cut at the end is no sign of another encoding.
        return codecs.getincrementaldecoder("utf-8")().decode(body, final=False)
    except UnicodeDecodeError:
        pass
    for guess in detect_encoding(body):
        detected = _web_codec(guess)
        if detected is not None:
            return body.decode(detected, errors="replace")
    return body.decode("utf-8", errors="replace")


def extract_main_text(body: bytes, url: str, content_type: str, charset: str | None) -> str:
    """The main text of a page as markdown (the text itself for text/plain, text/markdown
    and other text that is not markup); "" if none is found."""
    bom_codec, body = _split_bom(body)
    codec = bom_codec or _web_codec(charset)
    if _is_plain_text(content_type):
        return normalise_plain_text(_decoded_plain_text(body, codec))
    # With a byte-order mark or the header's charset we decode; without, trafilatura
    # detects it from the bytes (meta tags, then statistics). Both score the same on the
    # benchmark.
    document: bytes | str = body.decode(codec, errors="replace") if codec else body
    # Not fast=True: trafilatura's fallback extractors (readability, jusText) rescue
    # pages its own pass cuts short. On trafilatura's evaluation pages that keeps 0.937
    # of the must-keep snippets instead of 0.924 (a direct default call: 0.941) for about
    # a third more time per page; see bench/extraction.py.
    tree = _page_tree(document)
    if tree is None:
        return ""
    strip_tags(tree, *_UNWRAPPED)
    text = trafilatura.extract(
        tree,
        url=url or None,
        output_format="markdown",
        include_comments=False,
        include_tables=True,
        prune_xpath=_PRUNED,
    )
    return strip_inline_markup(text or "").strip()


def _page_tree(document: bytes | str) -> HtmlElement | None:
    """The page's tree as trafilatura's ``load_html`` builds it (same decoding, repairs and
    not-HTML check), but parsed with ``_PARSER``; ``None`` when it is not HTML."""
    html = decode_file(document)
    beginning = html[:50].lower()
    html = repair_faulty_html(html, beginning)
    try:
        tree = _parse(html)
        if tree is None or len(tree) < 1:
            tree = _parse(html.encode("utf-8", "surrogatepass"))
    except ValueError:  # "Unicode strings with encoding declaration are not supported"
        tree = _parse(html.encode("utf-8", "surrogatepass"))
    if tree is None:
        return load_html(document)  # whatever trafilatura's own loader makes of it
    if is_dubious_html(beginning) and len(tree) < 2:
        return None
    return tree


def _parse(html: bytes | str) -> HtmlElement | None:
    try:
        tree: HtmlElement = fromstring(html, parser=_PARSER)
    except LxmlError:  # an empty document, a fragment lxml cannot make a tree of
        return None
    return tree


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
    code: list[str] = []

    def set_aside(match: re.Match[str]) -> str:
        code.append(match.group(0) if match.group(1) is None else match.group(1))
        return f"\x00{len(code) - 1}\x00"

    text = _CODE.sub(set_aside, markdown)
    text = _INLINE_TAGS.sub("", text)
    text = _STRONG.sub(r"\2", text)
    text = _ITALIC.sub(r"\1", text)
    text = _MD_ESCAPE.sub(r"\1", text)
    return _CODE_SLOT.sub(lambda match: code[int(match.group(1))], text)
