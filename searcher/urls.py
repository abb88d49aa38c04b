"""URL normalisation: one spelling per page, for item ids, cache keys and dedup."""

from __future__ import annotations

import functools
import hashlib
from urllib.parse import parse_qsl, quote, unquote, urlencode, urlsplit, urlunsplit

_DEFAULT_PORTS = {"http": 80, "https": 443}
_TRACKING_PREFIXES = ("utm_",)
_TRACKING_PARAMS = frozenset(
    {"gclid", "fbclid", "dclid", "msclkid", "yclid", "mc_cid", "mc_eid", "igshid", "_ga", "ref_src"}
)
# Characters left unescaped in paths; everything else is percent-encoded once, uniformly.
_PATH_SAFE = "/:@!$&'()*+,;=-._~"


def _is_tracking(key: str) -> bool:
    lowered = key.lower()
    return lowered in _TRACKING_PARAMS or lowered.startswith(_TRACKING_PREFIXES)


# Pure and called several times per result on the request path; results recur across
# requests (the same query, pick_ids follow-ups), so a bounded memo pays.
@functools.lru_cache(maxsize=8192)
def normalise_url(url: str) -> str:
    """Lower-case scheme and host, drop default port, ``www.``, fragment, tracking
    parameters and a trailing slash; sort query parameters. Idempotent."""
    parts = urlsplit(url.strip())
    scheme = parts.scheme.lower()
    host = (parts.hostname or "").lower().rstrip(".")
    if host.startswith("www."):
        host = host[4:]
    try:
        port = parts.port
    except ValueError:
        port = None
    netloc = host
    if ":" in host:  # IPv6 literal
        netloc = f"[{host}]"
    if port is not None and port != _DEFAULT_PORTS.get(scheme):
        netloc = f"{netloc}:{port}"
    path = quote(unquote(parts.path), safe=_PATH_SAFE) or "/"
    if len(path) > 1 and path.endswith("/"):
        path = path.rstrip("/") or "/"
    query_pairs = [
        (k, v) for k, v in parse_qsl(parts.query, keep_blank_values=True) if not _is_tracking(k)
    ]
    query = urlencode(sorted(query_pairs))
    return urlunsplit((scheme, netloc, path, query, ""))


def item_id(url: str) -> str:
    """The stable id of a web result: ``web:sha256:`` + hex digest of the normalised URL."""
    return "web:sha256:" + hashlib.sha256(normalise_url(url).encode("utf-8")).hexdigest()


def host_of(url: str) -> str:
    """The lower-cased host of a URL, without ``www.``."""
    host = (urlsplit(url).hostname or "").lower().rstrip(".")
    return host[4:] if host.startswith("www.") else host


def domain_matches(host: str, domain: str) -> bool:
    """Whether ``host`` is ``domain`` or one of its subdomains."""
    domain = domain.lower().strip().lstrip(".")
    if domain.startswith("www."):
        domain = domain[4:]
    return host == domain or host.endswith("." + domain)
