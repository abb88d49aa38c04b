"""Reading what a response says about its body: media type, charset, content coding.

Decompression is done here rather than by httpx so that it is bounded: zlib's
``max_length`` keeps a small gzip bomb from inflating past the byte budget.
"""

from __future__ import annotations

import zlib

from searcher.errors import FetchError

_HTML_MARKERS = (b"<!doctype html", b"<html", b"<head", b"<body", b"<title", b"<meta")
_BOMS = (b"\xef\xbb\xbf", b"\xff\xfe", b"\xfe\xff")


def parse_content_type(header: str | None) -> tuple[str | None, str | None]:
    """``(media type, charset)`` from a Content-Type header, both lower-case; ``None`` for
    a missing or malformed value."""
    if not header:
        return None, None
    media, *params = header.split(";")
    media = media.strip().lower()
    charset = None
    for param in params:
        key, _, value = param.partition("=")
        if key.strip().lower() == "charset":
            charset = value.strip().strip("\"'").lower() or None
    if "/" not in media or " " in media:
        return None, charset
    return media, charset


def looks_like_html(prefix: bytes) -> bool:
    """Whether the first bytes of an unlabelled body look like an HTML document."""
    if b"\x00" in prefix:
        return False  # binary, or UTF-16 that no HTML page on the web uses unlabelled
    head = prefix[:1024]
    for bom in _BOMS:
        head = head.removeprefix(bom)
    head = head.lstrip().lower()
    return any(marker in head for marker in _HTML_MARKERS)


class BodyDecoder:
    """Turns raw wire bytes of one response into decoded bytes, never more than asked for.

    ``decode(raw, room)`` returns at most ``room`` bytes; input left over once ``room`` is
    reached is dropped, so callers stop reading when they have what they can keep.
    """

    def __init__(self, url: str, content_encoding: str | None) -> None:
        self._url = url
        self.coding = _single_coding(url, content_encoding)
        self._z = self._new_decompressor()
        # "deflate" is sent both zlib-wrapped (as the RFC says) and raw; until the first
        # output, a zlib error means "try raw".
        self._may_retry_raw = self.coding == "deflate"

    def _new_decompressor(self) -> zlib._Decompress | None:
        if self.coding in ("gzip", "x-gzip"):
            return zlib.decompressobj(16 + zlib.MAX_WBITS)
        if self.coding == "deflate":
            return zlib.decompressobj(zlib.MAX_WBITS)
        return None

    def decode(self, raw: bytes, room: int) -> bytes:
        """Up to ``room`` decoded bytes from the next raw chunk."""
        if room <= 0:
            return b""
        if self._z is None:
            return raw[:room]
        try:
            return self._inflate(raw, room)
        except zlib.error as exc:
            raise FetchError(self._url, f"corrupt {self.coding} body: {exc}") from exc

    def finish(self, room: int) -> bytes:
        """Whatever the decompressor still holds at the end of the stream, up to ``room``."""
        if self._z is None or room <= 0:
            return b""
        try:
            return self._z.flush(room)
        except zlib.error as exc:
            raise FetchError(self._url, f"corrupt {self.coding} body: {exc}") from exc

    def _inflate(self, data: bytes, room: int) -> bytes:
        out = bytearray()
        while data and len(out) < room and self._z is not None:
            try:
                chunk = self._z.decompress(data, room - len(out))
            except zlib.error:
                if not self._may_retry_raw:
                    raise
                self._may_retry_raw = False
                self._z = zlib.decompressobj(-zlib.MAX_WBITS)
                continue
            self._may_retry_raw = self._may_retry_raw and not chunk
            out += chunk
            if self._z.eof:
                data = self._z.unused_data
                if not data or self.coding == "deflate":
                    break
                # Concatenated gzip members form one body (RFC 1952, section 2.2).
                self._z = self._new_decompressor()
            else:
                data = self._z.unconsumed_tail
                if not chunk:
                    break
        return bytes(out)


def _single_coding(url: str, header: str | None) -> str:
    codings = [c.strip().lower() for c in (header or "").split(",")]
    codings = [c for c in codings if c and c != "identity"]
    if not codings:
        return "identity"
    if len(codings) > 1 or codings[0] not in ("gzip", "x-gzip", "deflate"):
        raise FetchError(url, f"unsupported content encoding {header!r}")
    return codings[0]
