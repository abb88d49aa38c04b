"""The links of an HTML page, as absolute http(s) URLs in document order."""

from __future__ import annotations

from urllib.parse import urljoin

import lxml.html
from lxml import etree

from searcher.site.scope import normalised_url


def page_links(html: bytes, page_url: str) -> list[str]:
    """Each distinct ``<a href>`` of the page, resolved against its ``<base>`` (if any) and
    normalised; links to other schemes (``mailto:``, ``javascript:``) are left out."""
    try:
        document = lxml.html.document_fromstring(html)
    except (etree.ParserError, ValueError):
        return []
    base = page_url
    for href in document.xpath("//base/@href")[:1]:
        base = urljoin(page_url, str(href).strip())
    seen: dict[str, None] = {}
    for href in document.xpath("//a/@href"):
        url = normalised_url(urljoin(base, str(href).strip()))
        if url is not None:
            seen.setdefault(url, None)
    return list(seen)
