"""The links of an HTML page, as absolute http(s) URLs in document order."""

from __future__ import annotations

from dataclasses import dataclass
from urllib.parse import urljoin

import lxml.html
from lxml import etree

from searcher.site.scope import normalised_url

MAX_ANCHOR_CHARS = 200  # of a link's text: what ranks it, not what it says at length


@dataclass(frozen=True)
class Link:
    """A link: its URL (normalised) and the text of its anchors (every ``<a>`` to it)."""

    url: str
    text: str


def page_anchors(html: bytes, page_url: str) -> list[Link]:
    """Each distinct ``<a href>`` of the page with its anchor text, resolved against the
    page's ``<base>`` (if any) and normalised; links to other schemes (``mailto:``,
    ``javascript:``) are left out."""
    try:
        document = lxml.html.document_fromstring(html)
    except (etree.ParserError, ValueError):
        return []
    base = page_url
    for href in document.xpath("//base/@href")[:1]:
        base = _joined(page_url, str(href)) or page_url
    texts: dict[str, list[str]] = {}
    for anchor in document.xpath("//a[@href]"):
        joined = _joined(base, str(anchor.get("href")))
        url = normalised_url(joined) if joined is not None else None
        if url is not None:
            text = " ".join(anchor.text_content().split())[:MAX_ANCHOR_CHARS]
            texts.setdefault(url, []).append(text)
    return [Link(url, " ".join(t for t in found if t)) for url, found in texts.items()]


def page_links(html: bytes, page_url: str) -> list[str]:
    """Each distinct link of the page (``page_anchors``), its URL only."""
    return [link.url for link in page_anchors(html, page_url)]


def _joined(base: str, href: str) -> str | None:
    """``href`` resolved against ``base``; None for one that is no URL (``http://[x/``:
    a page's malformed link is passed over, never the end of the map or crawl)."""
    try:
        return urljoin(base, href.strip())
    except ValueError:
        return None
