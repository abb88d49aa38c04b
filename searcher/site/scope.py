"""Which URLs belong to a site map: the root's host (and its subdomains, or any host when
external links are allowed), path and domain patterns, and one spelling per URL.

Patterns are the client's regular expressions; they run on the ``regex`` module with a
time limit, so that a pattern that backtracks without end cannot hold the event loop.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import regex

from searcher.errors import InvalidRequest

PATTERN_TIMEOUT_S = 0.05  # per match; a URL path is at most a few kilobytes
MAX_URL_CHARS = 2048
_DEFAULT_PORTS = {"http": 80, "https": 443}


def normalised_url(url: str) -> str | None:
    """``url`` without its fragment, scheme and host lower-cased, the default port dropped
    and an empty path as ``/``; None unless it is an http(s) URL with a host."""
    if len(url) > MAX_URL_CHARS:
        return None
    try:
        parts = urlsplit(url.strip())
        port = parts.port
    except ValueError:
        return None
    scheme = parts.scheme.lower()
    if scheme not in _DEFAULT_PORTS or not parts.hostname:
        return None
    host = parts.hostname.lower()
    if ":" in host:
        host = f"[{host}]"
    netloc = host if port in (None, _DEFAULT_PORTS[scheme]) else f"{host}:{port}"
    return urlunsplit((scheme, netloc, parts.path or "/", parts.query, ""))


def compile_patterns(patterns: Sequence[str], field_name: str) -> tuple[regex.Pattern[str], ...]:
    """The client's patterns compiled; ``InvalidRequest`` naming ``field_name`` for one
    that is not a regular expression."""
    compiled = []
    for index, pattern in enumerate(patterns):
        try:
            compiled.append(regex.compile(pattern))
        except regex.error as exc:
            problem = f"not a regular expression: {exc}"
            raise InvalidRequest(f"{field_name}.{index}", problem) from exc
    return tuple(compiled)


def _search(pattern: regex.Pattern[str], text: str) -> bool:
    try:
        return pattern.search(text, timeout=PATTERN_TIMEOUT_S) is not None
    except TimeoutError:
        return False  # a pattern too slow to decide does not admit the URL


@dataclass(frozen=True)
class SiteScope:
    """The filters of one map: a URL is in scope when its host is the root's (or a
    subdomain of it, or anything with ``allow_external``) and the patterns admit it."""

    root_host: str
    allow_external: bool = False
    select_paths: tuple[regex.Pattern[str], ...] = field(default=())
    exclude_paths: tuple[regex.Pattern[str], ...] = field(default=())
    select_domains: tuple[regex.Pattern[str], ...] = field(default=())
    exclude_domains: tuple[regex.Pattern[str], ...] = field(default=())

    def host_allowed(self, host: str) -> bool:
        """The host passes the same-site rule and the domain patterns."""
        same_site = host == self.root_host or host.endswith("." + self.root_host)
        if not same_site and not self.allow_external:
            return False
        if self.select_domains and not any(_search(p, host) for p in self.select_domains):
            return False
        return not any(_search(p, host) for p in self.exclude_domains)

    def admits(self, url: str) -> bool:
        """``url`` (normalised) belongs to the map."""
        parts = urlsplit(url)
        if not self.host_allowed(parts.hostname or ""):
            return False
        path = parts.path + (f"?{parts.query}" if parts.query else "")
        if self.select_paths and not any(_search(p, path) for p in self.select_paths):
            return False
        return not any(_search(p, path) for p in self.exclude_paths)
