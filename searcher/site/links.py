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
        base = urljoin(page_url, str(href).strip())
    texts: dict[str, list[str]] = {}
    for anchor in document.xpath("//a[@href]"):
        url = normalised_url(urljoin(base, str(anchor.get("href")).strip()))
        if url is not None:
            text = " ".join(anchor.text_content().split())[:MAX_ANCHOR_CHARS]
            texts.setdefault(url, []).append(text)
    return [Link(url, " ".join(t for t in found if t)) for url, found in texts.items()]


def page_links(html: bytes, page_url: str) -> list[str]:
    """Each distinct link of the page (``page_anchors``), its URL only."""
    return [link.url for link in page_anchors(html, page_url)]
