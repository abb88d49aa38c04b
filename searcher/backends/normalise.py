"""Small pure functions that backends share to normalise what engines send."""

from __future__ import annotations

import html
import re
from datetime import UTC, datetime
from urllib.parse import quote, urlsplit

_TAG = re.compile(r"<[^>]{0,500}>")
_SPACE = re.compile(r"\s+")
# Whitespace but the plain space, as a class of BMP characters (a table look-up per
# character, where \s is a category test): most text needs no folding, and this says so.
OTHER_SPACES = "".join(chr(c) for c in range(0x10000) if chr(c).isspace() and c != 0x20)
_OTHER_SPACE = re.compile("[" + re.escape(OTHER_SPACES) + "]")
# What a browser's URL parser removes from anywhere in a URL (WHATWG URL Standard).
_URL_DROPPED = str.maketrans("", "", "\t\n\r")
# A URL's netloc that is a host name and maybe a port (no IPv6 literal, no user info).
_PLAIN_NETLOC = re.compile(r"[^:\[\]@]+(?::(\d{1,5}))?")
# An http(s) URL whose netloc (what follows "//", up to / ? or #, as urlsplit reads it)
# is a host name and maybe a port; its host and its port.
_PLAIN_HTTP_NETLOC = re.compile(r"https?://([^:/?#\[\]@]+)(?::([0-9]{1,5}))?(?:[/?#]|\Z)")
_MAX_PORT = 65535


def fold_spaces(text: str) -> str:
    """Each run of whitespace as one space (``_SPACE.sub(" ", text)``, skipped when it
    would change nothing)."""
    # Every whitespace character but the plain space is unprintable, so a printable text
    # (the usual title or snippet) is tested by one C loop instead of a regex search.
    if "  " in text or (not text.isprintable() and _OTHER_SPACE.search(text)):
        return _SPACE.sub(" ", text)
    return text


def plain_text(value: object) -> str:
    """Text without HTML tags or entities, whitespace collapsed; non-strings become ""."""
    if not isinstance(value, str):
        return ""
    if "<" in value:
        value = _TAG.sub("", value)
    if "&" in value:
        value = html.unescape(value)
    return fold_spaces(value).strip()


def iso_utc(value: object) -> str | None:
    """An ISO 8601 UTC timestamp (``...Z``) from what engines send, or None if unparseable."""
    if not isinstance(value, str) or not value.strip():
        return None
    text = value.strip()
    if text.endswith("Z"):
        text = text[:-1] + "+00:00"
    try:
        moment = datetime.fromisoformat(text)
        if moment.tzinfo is not None:
            moment = moment.astimezone(UTC)
    except (ValueError, OverflowError):  # OverflowError: "0001-01-01T00:00:00+01:00"
        return None
    # What strftime("%Y-%m-%dT%H:%M:%SZ") writes (an unpadded year, as glibc's %Y), at a
    # fraction of its cost: a page of results carries a date on most items. isoformat()
    # starts with exactly that for a four-digit year (its tail, microseconds or an offset,
    # is cut off); a year before 1000 it pads, so that one is spelled out.
    if moment.year >= 1000:
        return moment.isoformat()[:19] + "Z"
    m = moment
    return f"{m.year}-{m.month:02d}-{m.day:02d}T{m.hour:02d}:{m.minute:02d}:{m.second:02d}Z"


def http_url(value: object) -> str | None:
    """The value if it is an absolute http(s) URL with a host, else None. As a browser
    reads one, tabs and line breaks are dropped; spaces and other invisible characters are
    percent-encoded, so that the URL stays one token wherever it is shown."""
    if not isinstance(value, str) or not value.startswith(("http://", "https://")):
        return None
    url = value.strip()
    if "\t" in url or "\n" in url or "\r" in url:
        url = url.translate(_URL_DROPPED)
    if not url.isprintable() or " " in url:
        url = "".join(c if c.isprintable() and c != " " else quote(c, safe="") for c in url)
    # A plain ASCII host and maybe a port: nearly every URL, read without urlsplit, whose
    # cache real traffic (new URLs every search) rarely hits. urlsplit takes such a netloc
    # as it is; any other goes through it, for its checks (brackets, non-ASCII hosts).
    plain = _PLAIN_HTTP_NETLOC.match(url)
    if plain is not None and plain[1].isascii():
        return url if _usable_port(plain[2]) else None
    try:
        plain = _PLAIN_NETLOC.fullmatch(urlsplit(url).netloc)
        if plain is not None:
            return url if _usable_port(plain.group(1)) else None
        parts = urlsplit(url)
        usable = bool(parts.hostname) and (parts.port is None or parts.port > 0)
    except ValueError:  # "http://[::1", a port that is no number: no page to point at
        return None
    return url if usable else None


def _usable_port(port: str | None) -> bool:
    return port is None or 0 < int(port) <= _MAX_PORT
