"""Sitemaps (sitemaps.org): a ``urlset`` lists pages, a ``sitemapindex`` lists further
sitemaps; either may come gzip-compressed. Parsed without entities or network access, and
decompressed within a byte budget, so that a sitemap cannot expand past what was allowed."""

from __future__ import annotations

import io
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


def _is_entry(parent: etree._Element | None) -> bool:
    # An entry's own <loc>, not one nested deeper (an image sitemap's <image:loc>).
    return parent is not None and _local(parent.tag) in ("url", "sitemap")


def parse_sitemap(data: bytes) -> Sitemap:
    """The URLs a sitemap document lists; an empty ``Sitemap`` for what is not one. Read as
    a stream, each entry dropped once its ``loc`` is taken, so that a 50 MB sitemap never
    becomes a whole tree in memory."""
    events = etree.iterparse(
        io.BytesIO(data), events=("start", "end"), resolve_entities=False, no_network=True,
        load_dtd=False, huge_tree=False, recover=True,
    )  # fmt: skip
    kind, locs = None, []
    try:
        for event, element in events:
            name = _local(element.tag)
            if kind is None:
                kind = name
                if kind not in ("urlset", "sitemapindex"):
                    return Sitemap()
            elif event == "end" and name == "loc" and _is_entry(element.getparent()):
                if element.text and element.text.strip():
                    locs.append(element.text.strip())
            elif event == "end" and name in ("url", "sitemap"):
                element.clear()
                while element.getprevious() is not None:  # entries already read
                    del element.getparent()[0]
    except etree.XMLSyntaxError:
        pass  # what was read before the break counts, as a recovering parser keeps it
    if kind == "urlset":
        return Sitemap(pages=tuple(locs))
    if kind == "sitemapindex":
        return Sitemap(sitemaps=tuple(locs))
    return Sitemap()
