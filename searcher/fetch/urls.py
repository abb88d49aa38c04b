"""URL normalisation: one spelling per page, for item ids, cache keys and dedup.

Two URLs get the same key when they are spellings of one page: scheme and host case, a
default port, a leading ``www.``, a trailing slash, an in-page anchor, tracking parameters,
the order of query parameters (of different names), and percent-encoding of characters
that need none.

Decisions (``tests/test_urls.py`` holds them as properties):

- ``www.`` and a trailing slash are dropped although a server *may* serve different pages
  at ``www.x`` and ``x``, or at ``/a`` and ``/a/``. In practice both are one page (one
  redirects to the other) and engines spell them inconsistently, so keeping them apart
  would show the same page twice far more often than merging would lose a page.
- Percent-encoding is normalised as RFC 3986 (6.2.2) says: only unreserved characters are
  decoded. ``/a%2Fb`` and ``/a/b`` (or ``%3B`` and ``;``) are different paths, and stay so.
- A fragment is an anchor inside the page and is dropped, except a route of a hash-routed
  app (``#/docs/intro``, ``#!/item/3``), which engines list as a page of its own.
- Query parameters are sorted by name only: the values of a repeated name keep their order.
- The scheme stays in the normalised URL (item ids name the spelling shown), but fusion
  groups by ``page_key``, which takes http and https as one page, as SearXNG does.
"""

from __future__ import annotations

import functools
import hashlib
import re
import string
from urllib.parse import parse_qsl, quote, urlencode, urlsplit, urlunsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}
_TRACKING_PREFIXES = ("utm_",)
_TRACKING_PARAMS = frozenset(
    {"gclid", "fbclid", "dclid", "msclkid", "yclid", "mc_cid", "mc_eid", "igshid", "_ga", "ref_src"}
)
# Characters left as they are in paths; everything else is percent-encoded (as UTF-8).
_PATH_SAFE = "/:@!$&'()*+,;=-._~"
_UNRESERVED = frozenset(string.ascii_letters + string.digits + "-._~")
_PLAIN_PATH = re.compile(r"[A-Za-z0-9/:@!$&'()*+,;=._~-]*")
_ESCAPE = re.compile(r"%([0-9A-Fa-f]{2})")
_STRAY_PERCENT = re.compile(r"%(?![0-9A-Fa-f]{2})")
_WWW = re.compile(r"^(?:www\.)+")
_ROUTE_FRAGMENT = ("/", "!")


def ascii_host(host: str) -> str:
    """A host as DNS spells it: an internationalised name in its punycode form
    (``münchen.de`` -> ``xn--mnchen-3ya.de``), so both spellings are one host; a name the
    IDNA codec refuses stays as written."""
    if host.isascii():
        return host
    try:
        return host.encode("idna").decode("ascii")
    except UnicodeError:
        return host


def _is_tracking(key: str) -> bool:
    lowered = key.lower()
    return lowered in _TRACKING_PARAMS or lowered.startswith(_TRACKING_PREFIXES)


def _unescape_unreserved(match: re.Match[str]) -> str:
    char = chr(int(match.group(1), 16))
    return char if char in _UNRESERVED else "%" + match.group(1).upper()


def _normalise_path(path: str) -> str:
    if not _PLAIN_PATH.fullmatch(path):  # most paths need no encoding work: skip it
        # A lone "%" is a literal percent sign to browsers; spell it as one.
        path = _STRAY_PERCENT.sub("%25", path)
        path = _ESCAPE.sub(_unescape_unreserved, path)
        path = quote(path, safe=_PATH_SAFE + "%", errors="surrogatepass")
    path = path or "/"
    if len(path) > 1 and path.endswith("/"):
        path = path.rstrip("/") or "/"
    return path


def _normalise_query(query: str) -> str:
    if not query:
        return ""
    # surrogateescape keeps undecodable escapes (%FF) as they were instead of turning
    # every one of them into U+FFFD, which would merge different values.
    pairs = parse_qsl(query, keep_blank_values=True, errors="surrogateescape")
    # By name only: a stable sort keeps the order of a repeated name's values (?id=2&id=1
    # may list things in that order).
    kept = sorted(((k, v) for k, v in pairs if not _is_tracking(k)), key=lambda kv: kv[0])
    return urlencode(kept, errors="surrogateescape")


# Pure and called several times per result on the request path; results recur across
# requests (the same query, pick_ids follow-ups), so a bounded memo pays.
@functools.lru_cache(maxsize=8192)
def normalise_url(url: str) -> str:
    """Lower-case scheme and host, drop default port, ``www.``, fragment (but a hash
    route), tracking parameters and a trailing slash; sort query parameters by name;
    percent-encode uniformly. Idempotent."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = _WWW.sub("", ascii_host((parts.hostname or "").lower().rstrip(".")))
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host
    if ":" in host:  # IPv6 literal
        netloc = f"[{host}]"
    if port is not None and port != _DEFAULT_PORTS.get(scheme):
        netloc = f"{netloc}:{port}"
    fragment = parts.fragment if parts.fragment.startswith(_ROUTE_FRAGMENT) else ""
    return urlunsplit(
        (scheme, netloc, _normalise_path(parts.path), _normalise_query(parts.query), fragment)
    )


# Asked about three times per result per request (paging, fusion, novelty) and of the
# same results across requests: remembered as normalise_url is (bounded).
@functools.lru_cache(maxsize=8192)
def page_key(url: str) -> str:
    """The key under which hits are one page when fused: ``normalise_url`` with http and
    https taken as one scheme. Engines list both spellings of one site, and SearXNG's own
    merge ignores the scheme too; the URL shown and the item id stay those of a hit."""
    key = normalise_url(url)
    return "https" + key[4:] if key.startswith("http://") else key


@functools.lru_cache(maxsize=8192)  # a digest per item per request, of recurring URLs
def item_id(url: str) -> str:
    """The stable id of a web result: ``web:sha256:`` + hex digest of the normalised URL."""
    return "web:sha256:" + hashlib.sha256(normalise_url(url).encode("utf-8")).hexdigest()


# Hosts remembered by URL: the heuristic scores ask for every result's host, and results
# of a site come back across requests (a pure function of the URL; bounded).
@functools.lru_cache(maxsize=4096)
def host_of(url: str) -> str:
    """The lower-cased host of a URL (punycode for an internationalised name), without
    ``www.``."""
    host = ascii_host((urlsplit(url).hostname or "").lower().rstrip("."))
    return host[4:] if host.startswith("www.") else host


# Query parameters that carry a secret in connection URLs (redis-py reads ``password``
# from the query of a unix socket URL).
_SECRET_PARAM = re.compile(
    r"(?i)(?:^|[?&;])(?:password|passwd|pass|pwd|token|secret|key|api[-_]?key|access[-_]token)="
    r"[^&;#]*"
)


def without_password(url: str) -> str:
    """The URL with its password (if any) replaced by ``***``, in its user info and in a
    query parameter that names one (``?password=``, ``token=``, ``key=``...), for
    messages, health and printed config; a string that is not a URL comes back unchanged."""
    try:
        parts = urlsplit(url)
        password = parts.password
    except ValueError:  # e.g. a bad port or IPv6 literal: no URL, nothing to hide
        return url
    if parts.query:  # masked in place: putting the parts together again respells some
        head, _, rest = url.partition("?")
        query, hash_mark, fragment = rest.partition("#")
        masked = _SECRET_PARAM.sub(lambda m: m.group().split("=", 1)[0] + "=***", "?" + query)
        url = head + masked + hash_mark + fragment
        parts = urlsplit(url)
    if password is None:
        return url
    netloc = parts.netloc.rsplit("@", 1)[1]
    user = f"{parts.username}:***@" if parts.username else ":***@"
    return urlunsplit(parts._replace(netloc=user + netloc))


# A domain filter entry: a host name or a bracketed IPv6 address, optionally ``*.`` before
# it, a scheme and user info before it, a port or a path after it, spaces around it.
# Written so that Python's ``re`` and JSON Schema's (ECMA 262) regexes read it alike: the
# API schema states it, and the server must accept exactly what the schema does.
_HOST_CHAR = r"(?:[A-Za-z0-9_.-]|[^\x00-\x7F])"
DOMAIN_ENTRY = (
    r" *(?:\*\.)?(?:[A-Za-z][A-Za-z0-9+.-]*://)?(?:[^ /?#@]*@)?"
    rf"({_HOST_CHAR}*(?:[A-Za-z0-9_]|[^\x00-\x7F]){_HOST_CHAR}*|\[[0-9A-Fa-f:.]+\])"
    r"(?::[0-9]+)?(?:[/?#].*)? *"
)
_DOMAIN_ENTRY = re.compile(DOMAIN_ENTRY)


def domain_of(entry: str) -> str:
    """The domain a filter entry names, as hosts are compared (``host_of``): the entry, or
    the host of a URL or of ``host:port``, lower-cased, without ``*.`` or the dots around
    it. Raises ``ValueError`` for an entry that names no host (``DOMAIN_ENTRY``)."""
    found = _DOMAIN_ENTRY.fullmatch(entry)
    if found is None:
        raise ValueError(f"{entry!r} is not a domain (e.g. example.com)")
    return ascii_host(found.group(1).lower().strip("."))  # an IPv6 address keeps its []


_IPV4 = re.compile(r"\d{1,3}(?:\.\d{1,3}){3}")


def domain_matches(host: str, domain: str) -> bool:
    """Whether ``host`` (``host_of``) is ``domain`` or one of its subdomains. An address
    has no subdomains (``0.1`` is no domain of ``127.0.0.1``), and ``www.example.com``
    names that host, not the rest of example.com."""
    domain = ascii_host(domain.lower().strip().lstrip("."))
    if _IPV4.fullmatch(host) or ":" in host:
        return host == domain.strip("[]")
    if domain.startswith("www."):
        return host == domain[4:] or host.endswith("." + domain)
    return host == domain or host.endswith("." + domain)


def split_host(value: str) -> tuple[str, str | None]:
    """``host[:port]`` as (lowercased name, port or None); IPv6 names keep their
    brackets, and a bare IPv6 address (``::1``) gets them. The port is digits (or ``*``
    in ``server.allowed_hosts``); one trailing dot of a name is dropped. ``ValueError``
    for anything else (``[::1]evil.com``, ``[::1``, ``name:abc``)."""
    value = value.strip().lower()
    if value.startswith("["):
        name, closed, rest = value.partition("]")
        if not closed or (rest and not rest.startswith(":")):
            raise ValueError(f"malformed host {value!r}")
        return name + "]", _port(rest[1:], value)
    if value.count(":") > 1:  # a bare IPv6 address has no port
        return f"[{value}]", None
    name, _, port = value.partition(":")
    return name.removesuffix("."), _port(port, value)


def _port(port: str, value: str) -> str | None:
    if port and not (port.isdecimal() and port.isascii()) and port != "*":
        raise ValueError(f"malformed port in host {value!r}")
    return port or None
