"""Sitemaps (sitemaps.org): a ``urlset`` lists pages, a ``sitemapindex`` lists further
sitemaps; either may come gzip-compressed. Parsed without entities or network access, and
decompressed within a byte budget, so that a sitemap cannot expand past what was allowed."""

from __future__ import annotations

import zlib
from dataclasses import dataclass

from lxml import etree

GZIP_MAGIC = b"\x1f\x8b"


class SitemapTooLarge(ValueError):
    """A compressed sitemap expands past the byte budget."""


@dataclass(frozen=True)
class Sitemap:
    """What one sitemap document lists: page URLs and further sitemaps (an index)."""

    pages: tuple[str, ...] = ()
    sitemaps: tuple[str, ...] = ()


def gunzipped(data: bytes, max_bytes: int) -> bytes:
    """``data`` decompressed when it is gzip, as it is otherwise; ``SitemapTooLarge`` past
    ``max_bytes``, ``ValueError`` for a broken stream."""
    if not data.startswith(GZIP_MAGIC):
        return data
    inflater = zlib.decompressobj(wbits=16 + zlib.MAX_WBITS)
    try:
        out = inflater.decompress(data, max_bytes + 1)
    except zlib.error as exc:
        raise ValueError(f"broken gzip: {exc}") from exc
    if len(out) > max_bytes or inflater.unconsumed_tail:
        raise SitemapTooLarge(f"expands past {max_bytes} bytes")
    return out


def _local(tag: object) -> str:
    return tag.rsplit("}", 1)[-1] if isinstance(tag, str) else ""


def parse_sitemap(data: bytes) -> Sitemap:
    """The URLs a sitemap document lists; an empty ``Sitemap`` for what is not one."""
    parser = etree.XMLParser(
        resolve_entities=False, no_network=True, load_dtd=False, huge_tree=False, recover=True
    )
    try:
        root = etree.fromstring(data, parser)
    except etree.XMLSyntaxError:
        return Sitemap()
    if root is None:
        return Sitemap()
    kind = _local(root.tag)
    if kind not in ("urlset", "sitemapindex"):
        return Sitemap()
    locs = []
    for entry in root:
        for child in entry:
            if _local(child.tag) == "loc" and child.text and child.text.strip():
                locs.append(child.text.strip())
                break
    if kind == "urlset":
        return Sitemap(pages=tuple(locs))
    return Sitemap(sitemaps=tuple(locs))
