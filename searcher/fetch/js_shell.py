"""Recognising a page that only JavaScript fills: what the static read got is a shell.

A single-page app answers with a framework's empty mount point (``<div id="root"></div>``,
``<div id="__next">``), a ``<noscript>`` asking for JavaScript, or its data in a script
(``__NEXT_DATA__``, ``window.__NUXT__``) and next to no text. Such a page is worth a
browser; a short page with none of these signs is just short, and a long text is content.
"""

from __future__ import annotations

import re

from searcher.fetch.blocked import HEAD_BYTES, visible_text

# Less extracted text than this, with a sign of a shell, sends the page to the browser.
SHELL_MAX_CHARS = 500
_JAVASCRIPT_WALL = "javascript required"

# An empty mount point of a client-side framework (React, Next, Nuxt, Vue, Angular, Svelte).
_MOUNT_POINT = re.compile(
    rb"<(?:div|main|section|app-root)\b[^>]*\bid\s*=\s*[\"']?"
    rb"(?:root|app|__next|__nuxt|___gatsby|svelte|main-app|application)[\"'\s>]"
    rb"[^<]{0,200}</(?:div|main|section|app-root)>",
    re.IGNORECASE,
)
_ANGULAR_ROOT = re.compile(rb"<app-root\b[^>]*>\s*</app-root>", re.IGNORECASE)
_NOSCRIPT = re.compile(rb"<noscript\b[^>]*>(.{0,2000}?)</noscript", re.IGNORECASE | re.DOTALL)
# Client-side data an app draws its page from.
_DATA_ISLANDS = (
    b"__NEXT_DATA__", b"window.__NUXT__", b"__INITIAL_STATE__", b"__APOLLO_STATE__",
    b"__PRELOADED_STATE__", b"ng-version=", b"data-reactroot", b"__remixContext",
)  # fmt: skip
_SCRIPT_SRC = re.compile(rb"<script\b[^>]*\bsrc\s*=", re.IGNORECASE)
_BODY = re.compile(rb"<body[\s>]", re.IGNORECASE)


def shell_window(html: bytes) -> bytes:
    """What a page's shell signs are read from: its first ``HEAD_BYTES``, or, when its
    ``<body>`` starts beyond them (a head of inline CSS or scripts), as many from there:
    the mount point and the scripts are in the body, and cut-off CSS reads as text."""
    if _BODY.search(html[:HEAD_BYTES]):
        return html[:HEAD_BYTES]
    found = _BODY.search(html)
    return html[found.start() : found.start() + HEAD_BYTES] if found else html[:HEAD_BYTES]


def shell_signs(html_head: bytes) -> list[str]:
    """The signs of a JavaScript shell in a page's ``shell_window`` (empty when none): a
    mount point, a noscript asking for JavaScript, a data island."""
    head = html_head[:HEAD_BYTES]
    signs = []
    if _MOUNT_POINT.search(head) or _ANGULAR_ROOT.search(head):
        signs.append("framework root")
    for match in _NOSCRIPT.finditer(head):
        if b"javascript" in match.group(1).lower():
            signs.append("noscript asks for javascript")
            break
    if any(marker in head for marker in _DATA_ISLANDS):
        signs.append("data island")
    return signs


def needs_javascript(html: bytes, extracted_text: str, wall: str | None) -> bool:
    """Whether a page (its HTML as fetched) whose static read gave ``extracted_text`` (and
    was judged ``wall`` by ``searcher.fetch.blocked``) needs a browser to show its
    content; its ``shell_window`` is looked at only when its text is short."""
    if wall == _JAVASCRIPT_WALL:
        return True
    if wall is not None:
        return False  # a bot wall or CAPTCHA: a browser would meet the same wall
    text = extracted_text.strip()
    if len(text) >= SHELL_MAX_CHARS:
        return False
    head = shell_window(html)
    if shell_signs(head):
        return True
    # No text at all, but scripts to run: what there is, they write.
    return (
        not text
        and not visible_text(head.decode("utf-8", "replace")).strip()
        and bool(_SCRIPT_SRC.search(head) or b"<script" in head.lower())
    )
