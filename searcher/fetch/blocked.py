"""Recognising pages that are a wall, not content: bot challenges, CAPTCHAs, cookie walls,
"access denied" and "enable JavaScript" stubs.

Such a page answers 200 with a few lines of text that would otherwise enter the context
pack as if they were the page. Every wall is short, so only short pages are judged: a long
text is content, however often it says "captcha". On a short page the evidence is

- the title (``Just a moment...``, ``Attention Required! | Cloudflare``, ``Access Denied``),
- vendor fingerprints in the HTML (``/cdn-cgi/challenge-platform/``,
  ``captcha-delivery.com``, ``px-captcha``), searched in the page's first bytes only,
- and the share of the text taken up by sentences that speak of the wall.

A fingerprint or title counts on a very short text, or with wall sentences making up a
good part of it; wall sentences alone must make up most of the text. Generic widgets
(a reCAPTCHA on a comment form, a consent-manager script) never count on their own: real
pages carry them too.
"""

from __future__ import annotations

import html
import re
from collections.abc import Sequence
from dataclasses import dataclass

# HTML looked at: challenge pages carry their fingerprints early; bounds the work.
HEAD_BYTES = 64 * 1024
# Longer texts are content, whatever they mention: no wall says this much.
_MAX_WALL_CHARS = 3000
# A title or fingerprint alone decides on a text this short ("Ray ID: …", one sentence).
_TINY_CHARS = 400
# Share of the text in wall sentences that decides with a title or fingerprint / alone.
_SHARE_WITH_SIGNAL = 0.2
_SHARE_ALONE = 0.5

_TITLE = re.compile(r"<title[^>]*>(.{0,500}?)</title", re.IGNORECASE | re.DOTALL)
_NOISE_OPEN = re.compile(r"<(script|style|template)\b", re.IGNORECASE)
_NOISE_CLOSE = {
    name: re.compile(f"</{name}", re.IGNORECASE) for name in ("script", "style", "template")
}
_TAG = re.compile(r"<[^>]*>")
_SPACES = re.compile(r"\s+")
# Sentences and lines: the units whose share of the text is measured.
_SEGMENT = re.compile(r"[^\n.!?…]+[.!?…]*")


@dataclass(frozen=True)
class WallKind:
    """One kind of wall and the evidence for it (all lower-case)."""

    reason: str
    titles: Sequence[str] = ()  # substrings of the page title
    fingerprints: Sequence[str] = ()  # substrings of the raw HTML, specific to the wall
    phrases: Sequence[str] = ()  # substrings of wall sentences in the text


# Most specific first: the first kind with enough evidence names the reason.
KINDS: tuple[WallKind, ...] = (
    WallKind(
        "bot wall (cloudflare challenge)",
        titles=("just a moment", "checking your browser", "one more step"),
        fingerprints=(
            "/cdn-cgi/challenge-platform/", "_cf_chl_opt", "cf-browser-verification",
            "cf-chl-", "cf_chl_", "challenges.cloudflare.com",
        ),
        phrases=(
            "checking your browser", "checking if the site connection is secure",
            "needs to review the security of your connection", "verifying you are human",
            "verify you are human", "performance & security by cloudflare",
            "performance and security by cloudflare", "ddos protection by cloudflare",
            "enable javascript and cookies to continue", "ray id",
        ),
    ),
    WallKind(
        "bot wall (cloudflare block)",
        titles=("attention required! | cloudflare",),
        fingerprints=("cf-error-details", "cf-error-overview"),
        phrases=(
            "sorry, you have been blocked", "you are unable to access",
            "this website is using a security service to protect itself",
            "cloudflare ray id", "what can i do to resolve this",
        ),
    ),
    WallKind(
        "bot wall (datadome)",
        fingerprints=("captcha-delivery.com", "ct.captcha-delivery", "datadome captcha"),
        phrases=("datadome",),
    ),
    WallKind(
        "bot wall (perimeterx press & hold)",
        titles=("access to this page has been denied",),
        fingerprints=("px-captcha", "_pxcaptcha", "perimeterx captcha"),
        phrases=(
            "press & hold", "press and hold", "human verification challenge",
            "before we continue", "powered by perimeterx", "perimeterx",
        ),
    ),
    WallKind(
        "bot wall (imperva)",
        titles=("pardon our interruption",),
        fingerprints=("_incapsula_resource", "incapsula incident id"),
        phrases=(
            "incapsula incident id", "pardon our interruption",
            "something about your browser made us think you were a bot",
        ),
    ),
    WallKind(
        "captcha",
        titles=("captcha", "are you a robot", "are you human", "robot check", "security check",
                "human verification", "verify you are human"),
        phrases=(
            "captcha", "are you a robot", "not a robot", "i'm not a robot", "are you human",
            "verify you are human", "verify you are a human", "prove you are human",
            "complete the security check", "unusual traffic from your computer network",
            "automated queries", "type the characters you see", "solve the puzzle",
            "select all images", "confirm you are not a bot", "security check",
        ),
    ),
    WallKind(
        "access denied",
        titles=("access denied", "403 forbidden", "error 403", "http 403",
                "request blocked", "request rejected", "you have been blocked"),
        phrases=(
            "access denied", "you don't have permission to access",
            "you do not have permission to access", "403 forbidden", "request blocked",
            "the request could not be satisfied", "the requested url was rejected",
            "your request has been blocked", "your ip has been blocked",
            "your access to this site has been limited", "reference #", "support id",
            "generated by cloudfront", "forbidden",
        ),
    ),
    WallKind(
        "javascript required",
        titles=("javascript is required", "enable javascript"),
        phrases=(
            "enable javascript", "javascript is disabled", "javascript is required",
            "requires javascript", "javascript must be enabled", "turn on javascript",
            "javascript is not enabled", "browser does not support javascript",
            "need to enable javascript", "activate javascript",
        ),
    ),
    WallKind(
        "cookie wall",
        titles=("before you continue", "cookie consent", "privacy consent", "cookie settings",
                "your privacy choices"),
        phrases=(
            "cookie", "consent", "privacy settings", "privacy choices", "privacy policy",
            "accept all", "reject all", "manage preferences", "manage options",
            "legitimate interest", "our partners", "personalised ads", "personalized ads",
            "personalised content", "personalized content", "store and/or access information",
            "ad and content measurement", "audience insights", "withdraw", "vendors",
        ),
    ),
)  # fmt: skip


def _decoded_head(html_head: bytes | str) -> str:
    """The first ``HEAD_BYTES`` of the page as lower-case text."""
    if isinstance(html_head, bytes):
        return html_head[:HEAD_BYTES].decode("utf-8", errors="replace").lower()
    return html_head[:HEAD_BYTES].lower()


def page_title(head: str) -> str:
    """The ``<title>`` of an HTML head, unescaped, on one line ("" when there is none)."""
    match = _TITLE.search(head)
    return _SPACES.sub(" ", html.unescape(match.group(1))).strip() if match else ""


def _without_code(head: str) -> str:
    """``head`` without its script, style and template elements (an unclosed one runs to
    the end). A find loop rather than one lazy regex: linear on hostile markup."""
    parts, at = [], 0
    while (match := _NOISE_OPEN.search(head, at)) is not None:
        parts.append(head[at : match.start()])
        close = _NOISE_CLOSE[match.group(1).lower()].search(head, match.end())
        if close is None:
            return " ".join(parts)
        at = close.start()
    parts.append(head[at:])
    return " ".join(parts)


def visible_text(head: str) -> str:
    """The text of an HTML fragment: scripts, styles and tags dropped, entities unescaped."""
    text = _TAG.sub("\n", _without_code(head))
    return "\n".join(line.strip() for line in html.unescape(text).splitlines() if line.strip())


def _wall_share(segments: Sequence[str], total: int, phrases: Sequence[str]) -> float:
    """The share of the text's characters in segments holding one of ``phrases``."""
    if total == 0 or not phrases:
        return 0.0
    covered = sum(len(s) for s in segments if any(p in s for p in phrases))
    return covered / total


def _judge(kind: WallKind, title: str, head: str, segments: Sequence[str], total: int) -> bool:
    """Whether the evidence for ``kind`` is enough on this short page."""
    signal = any(t in title for t in kind.titles) or any(f in head for f in kind.fingerprints)
    share = _wall_share(segments, total, kind.phrases)
    if signal and (total <= _TINY_CHARS or share >= _SHARE_WITH_SIGNAL):
        return True
    return share >= _SHARE_ALONE


def _status_reason(status_code: int, total: int) -> str | None:
    """A bare error status on a page with next to no text."""
    if total > _TINY_CHARS:
        return None
    if status_code in (401, 403):
        return f"access denied (HTTP {status_code})"
    if status_code == 429:
        return "rate limited (HTTP 429)"
    return None


def blocked_reason(
    html_head: bytes | str, extracted_text: str, title: str | None, status_code: int
) -> str | None:
    """Why this page is a wall rather than content (e.g. "bot wall (cloudflare
    challenge)"), or None. ``html_head`` is the start of the raw HTML (more than
    ``HEAD_BYTES`` is ignored), ``title`` the page title if known (else read from the
    HTML). When the extractor found no text, the visible text of the HTML is judged."""
    text = extracted_text.strip()
    if len(text) > _MAX_WALL_CHARS:
        return None
    head = _decoded_head(html_head)
    if not text:
        text = visible_text(head)
        if len(text) > _MAX_WALL_CHARS:
            return None
    text = text.lower()
    title_text = (title if title is not None else page_title(head)).lower()
    segments = [m.group().strip() for m in _SEGMENT.finditer(text)]
    segments = [s for s in segments if s]
    total = sum(len(s) for s in segments)
    for kind in KINDS:
        if _judge(kind, title_text, head, segments, total):
            return kind.reason
    return _status_reason(status_code, total)
