"""Which URLs belong to a site map: the root's host (and its subdomains, or any host when
external links are allowed), path and domain patterns, and one spelling per URL.

Patterns are the client's regular expressions; they run on the ``regex`` module with a
time limit per match, off the event loop (``admitted`` runs in a worker thread, matches
release the GIL) and within the map's deadline, so that a pattern that backtracks without
end cannot hold the server. A counted repeat is expanded when compiled: nested ones
(``((a{100}){100}){100}``) are refused before compiling, as they would take gigabytes.
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from urllib.parse import urlsplit, urlunsplit

import regex

from searcher.errors import InvalidRequest

PATTERN_TIMEOUT_S = 0.05  # per match; a URL path is at most a few kilobytes
# Copies a pattern's counted repeats make when compiled, nested ones multiplied: 10,000
# compiles in a few milliseconds; ((((a{100}){100}){100}){4}) made 4 million and 1.5 GB.
MAX_REPEAT_COPIES = 10_000
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
        copies = repeat_copies(pattern)
        if copies > MAX_REPEAT_COPIES:
            problem = (
                f"its counted repeats ({{n}}) make {copies:,} copies when nested; "
                f"at most {MAX_REPEAT_COPIES:,}"
            )
            raise InvalidRequest(f"{field_name}.{index}", problem)
        try:
            compiled.append(regex.compile(pattern))
        except regex.error as exc:
            problem = f"not a regular expression: {exc}"
            raise InvalidRequest(f"{field_name}.{index}", problem) from exc
    return tuple(compiled)


_COUNTED = re.compile(r"\{(\d*),?(\d*)\}")


def repeat_copies(pattern: str) -> int:
    """How many copies the counted repeats of ``pattern`` make at most: each group's
    bound times those of the groups around it (``(a{3}){4}``: 12). Read from the
    pattern's text (escapes and ``[...]`` classes read as one atom): an upper bound,
    which is all a refusal needs."""
    stack = [1]  # per open group: the most copies one thing in it makes so far
    index = 0
    while index < len(pattern):
        char = pattern[index]
        if char == "(":
            stack.append(1)
            index += 1
            continue
        if char == ")":
            inner = stack.pop() if len(stack) > 1 else stack[0]
            end = index + 1
        else:
            inner = 1
            end = _atom_end(pattern, index)
        stack[-1] = max(stack[-1], inner * _bound_after(pattern, end))
        index = end
    while len(stack) > 1:  # a group left open counts as closed
        inner = stack.pop()
        stack[-1] = max(stack[-1], inner)
    return stack[0]


def _atom_end(pattern: str, index: int) -> int:
    """Where the atom at ``index`` ends: an escape is two characters, a class runs to
    its closing bracket (a ``]`` first in it is a member), anything else is one."""
    if pattern[index] == "\\":
        return index + 2
    if pattern[index] != "[":
        return index + 1
    at = index + 1
    if at < len(pattern) and pattern[at] == "^":
        at += 1
    if at < len(pattern) and pattern[at] == "]":
        at += 1
    while at < len(pattern) and pattern[at] != "]":
        at += 2 if pattern[at] == "\\" else 1
    return at + 1


def _bound_after(pattern: str, index: int) -> int:
    """The bound of a counted repeat starting at ``index`` (``{n}``, ``{m,n}``; ``{m,}``
    counts ``m``: an open end is a loop, not copies), else 1."""
    found = _COUNTED.match(pattern, index)
    if found is None or not (found.group(1) or found.group(2)):
        return 1
    return max(int(found.group(1) or 0), int(found.group(2) or 0), 1)


def _search(pattern: regex.Pattern[str], text: str) -> bool:
    try:
        # concurrent: the GIL is let go while it matches, for the event loop's sake.
        return pattern.search(text, timeout=PATTERN_TIMEOUT_S, concurrent=True) is not None
    except TimeoutError:
        return False  # a pattern too slow to decide does not admit the URL


def admitted(
    urls: Sequence[str], keep: Callable[[str], bool], deadline: float, most: int
) -> tuple[list[str], bool]:
    """The ``urls`` that ``keep`` admits, in order, at most ``most`` of them, checked
    until ``deadline`` (``time.monotonic()``); and whether every URL was checked. Meant
    for a worker thread (``searcher.site.off_loop``): thousands of pattern matches are
    seconds of work."""
    kept: list[str] = []
    for url in urls:
        if len(kept) >= most or time.monotonic() >= deadline:
            return kept, False
        if keep(url):
            kept.append(url)
    return kept, True


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

    def same_site(self, host: str) -> bool:
        """``host`` is the root's or one of its subdomains."""
        return host == self.root_host or host.endswith("." + self.root_host)

    def host_allowed(self, host: str) -> bool:
        """The host passes the same-site rule and the domain patterns."""
        if not self.same_site(host) and not self.allow_external:
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
