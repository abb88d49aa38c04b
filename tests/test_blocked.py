"""Blocked-page detection: walls are recognised, real pages never are, and a wall read in
full mode fails as ``blocked`` without entering the pack or the cache."""

from __future__ import annotations

import gzip
from collections.abc import AsyncIterator
from pathlib import Path

import pytest

from searcher.cache.extraction import ExtractionCache
from searcher.fetch.blocked import HEAD_BYTES, blocked_reason, page_title, visible_text
from searcher.fetch.extract import extract_main_text
from searcher.fetch.extractor import Extractor
from searcher.fetch.fetcher import FetchLimits, PageFetcher
from searcher.fetch.js_shell import needs_javascript
from searcher.fetch.page_reader import PageReader
from searcher.pack.layout import PackItem, render_context_pack
from tests.shared_data import AEB, require_shared
from tests.testbed import TestbedServer
from tests.testbed.blocked import PAGES

EXPECTED = {
    "cloudflare": "bot wall (cloudflare challenge)",
    "captcha": "captcha",
    "datadome": "bot wall (datadome)",
    "perimeterx": "bot wall (perimeterx press & hold)",
    "cookie-wall": "cookie wall",
    "access-denied": "access denied",
    "enable-js": "javascript required",
    "false-positive": None,
}
LIMITS = FetchLimits(
    timeout_s=10.0,
    max_bytes=2_000_000,
    allowed_content_types=("text/html", "text/plain"),
    max_redirects=5,
)


def judge(html: str, text: str | None = None, status: int = 200) -> str | None:
    """The verdict on ``html`` with its extracted text (extracted here unless given)."""
    raw = html.encode("utf-8")
    if text is None:
        text = extract_main_text(raw, "https://x.example/", "text/html", "utf-8")
    return blocked_reason(raw[:HEAD_BYTES], text, None, status)


# --- each kind of wall -------------------------------------------------------------------


@pytest.mark.parametrize("kind", sorted(EXPECTED))
def test_testbed_walls_are_recognised(kind: str) -> None:
    assert judge(PAGES[kind]) == EXPECTED[kind]


@pytest.mark.parametrize("kind", sorted(k for k, v in EXPECTED.items() if v))
def test_walls_are_recognised_even_when_nothing_was_extracted(kind: str) -> None:
    # The extractor often finds no main text on a wall: the HTML alone must tell.
    assert judge(PAGES[kind], text="") == EXPECTED[kind]


def test_cloudflare_block_page() -> None:
    html = (
        "<html><head><title>Attention Required! | Cloudflare</title></head><body>"
        '<div id="cf-wrapper"><div id="cf-error-details"><h1>Sorry, you have been blocked</h1>'
        "<h2>You are unable to access example.com</h2><p>This website is using a security "
        "service to protect itself from online attacks.</p><p>Cloudflare Ray ID: "
        "7e5c1f2a9b3d4e6f</p></div></div></body></html>"
    )
    assert judge(html) == "bot wall (cloudflare block)"


def test_title_alone_decides_on_a_tiny_text() -> None:
    assert blocked_reason(b"", "One moment.", "Just a moment...", 200) == (
        "bot wall (cloudflare challenge)"
    )
    assert blocked_reason(b"", "", "403 Forbidden", 200) == "access denied"
    assert blocked_reason(b"", "nginx", "Request blocked", 200) == "access denied"


def test_given_title_wins_over_the_html_title() -> None:
    html = b"<html><head><title>Just a moment...</title></head><body>Hi</body></html>"
    assert blocked_reason(html, "Hi", "A normal title", 200) is None
    assert blocked_reason(html, "Hi", None, 200) == "bot wall (cloudflare challenge)"


def test_cookie_wall_in_plain_text() -> None:
    text = (
        "Before you continue to Example\n"
        "We use cookies and data to deliver and maintain our services and to measure "
        "audience engagement. If you choose to Accept all, we will also use cookies for "
        "personalised content and ads. Select Manage preferences to see more options.\n"
        "Reject all\nAccept all\nPrivacy Policy · Terms of Service"
    )
    assert blocked_reason(b"", text, None, 200) == "cookie wall"


def test_bare_error_status_on_an_empty_page() -> None:
    assert blocked_reason(b"<html><body></body></html>", "", None, 403) == (
        "access denied (HTTP 403)"
    )
    assert blocked_reason(b"", "", None, 429) == "rate limited (HTTP 429)"
    assert blocked_reason(b"", "", None, 200) is None


# --- real pages are never flagged ----------------------------------------------------------

ARTICLE = " ".join(
    f"Paragraph {n} of a real story about online ticket sales, queues and prices, told at "
    "length with quotes from fans, promoters and consumer groups." * 3
    for n in range(20)
)


def test_long_article_mentioning_walls_is_content() -> None:
    text = (
        f"{ARTICLE}\nSome sites ask for a CAPTCHA. Access denied, said one fan; others saw "
        "'Just a moment' pages and had to enable JavaScript and accept cookies."
    )
    html = "<html><head><title>Just a moment: why ticket sites block you</title></head>"
    assert len(text) > 3000
    assert blocked_reason(html + '<div class="g-recaptcha"></div>', text, None, 200) is None
    assert blocked_reason(html, text, None, 403) is None


def test_short_page_mentioning_a_captcha_once_is_content() -> None:
    text = (
        "The council approved the new cycle lanes on Tuesday after a two-hour debate. "
        "Residents can comment online until the end of the month; the form asks for a "
        "captcha to keep spam out. Work is due to start in the spring and to last six "
        "months, the council said, with the busiest junctions rebuilt first."
    )
    assert blocked_reason(b'<div class="g-recaptcha"></div>', text, None, 200) is None


def test_short_page_with_a_cookie_footer_is_content() -> None:
    text = (
        "Storm warning for the coast\n"
        "Gales of up to 90 km/h are expected along the coast tonight, the weather service "
        "said, and ferries to the islands have been cancelled until Thursday morning. "
        "Residents are asked to secure loose objects and to avoid the seafront.\n"
        "We use cookies. Accept all"
    )
    assert blocked_reason(b"", text, None, 200) is None


def test_none_of_the_aeb_pages_is_flagged() -> None:
    paths = sorted((require_shared(AEB) / "html").glob("*.html.gz"))
    assert len(paths) == 121
    flagged = {}
    for path in paths:
        raw = gzip.decompress(path.read_bytes())
        text = extract_main_text(raw, "https://x.example/", "text/html", None)
        for given in (text, ""):  # with its text, and as if extraction had found none
            reason = blocked_reason(raw[:HEAD_BYTES], given, None, 200)
            if reason is not None:
                flagged[path.name] = reason
    assert flagged == {}


# --- helpers and bounds ------------------------------------------------------------------


def test_page_title_and_visible_text() -> None:
    head = "<html><head><title>\n A &amp; B </title><script>var x = '<p>no</p>';</script>"
    head += "<style>p{}</style></head><body><p>Hello</p><p>world &lt;3</p>"
    assert page_title(head) == "A & B"
    assert visible_text(head) == "A & B\nHello\nworld <3"
    assert page_title("<p>no title</p>") == ""


def test_hostile_html_is_bounded() -> None:
    # Unclosed scripts and a huge head: only HEAD_BYTES are looked at, linearly.
    hostile = "<script>" * 200_000 + "<title>Just a moment...</title>"
    assert blocked_reason(hostile, "", None, 200) is None  # the title is beyond the head
    assert blocked_reason(hostile.encode(), "x" * 10_000, None, 200) is None


# --- end to end: full-mode reading against the testbed ---------------------------------------


Reader = tuple[PageReader, ExtractionCache, Extractor]


@pytest.fixture
async def reader(testbed: TestbedServer, tmp_path: Path) -> AsyncIterator[Reader]:
    fetcher = PageFetcher([f"127.0.0.1:{testbed.port}"], "searcher-test")
    cache = ExtractionCache(tmp_path / "cache", ttl_s=3600)
    extractor = Extractor(in_thread=True)
    yield PageReader(fetcher, extractor, cache), cache, extractor
    await fetcher.aclose()
    extractor.close()


@pytest.mark.parametrize("kind", sorted(EXPECTED))
async def test_reader_fails_walls_as_blocked_and_never_caches_them(
    reader: Reader, testbed: TestbedServer, kind: str
) -> None:
    page_reader, cache, extractor = reader
    url = testbed.url(f"/blocked/{kind}")
    outcome = await page_reader.read(url, LIMITS, 100_000)
    cached = await cache.get(extractor.name, url)
    if EXPECTED[kind] is None:
        assert outcome.status == "fetched" and outcome.skip_reason is None
        assert outcome.content and "CAPTCHA" in outcome.content
        assert cached is not None
        return
    assert outcome.status == "failed"
    assert outcome.skip_reason == "blocked"
    assert outcome.error == EXPECTED[kind]
    assert outcome.http_status == 200
    assert outcome.content is None
    assert cached is None


async def test_a_wall_never_enters_the_pack(reader: Reader, testbed: TestbedServer) -> None:
    page_reader, _, _ = reader
    urls = [testbed.url("/blocked/cookie-wall"), testbed.url("/blocked/false-positive")]
    outcomes = [await page_reader.read(url, LIMITS, 100_000) for url in urls]
    items = [
        PackItem(f"T{n}", url, "s", o.content)
        for n, (url, o) in enumerate(zip(urls, outcomes, strict=True))
    ]
    pack = render_context_pack(
        items, query="tickets", backend="searxng", mode="full", max_chars=8000
    )
    assert "partners store and/or access information" not in pack
    assert "virtual queue" in pack


@pytest.mark.parametrize(
    ("path", "reason_part"),
    [("/blocked/cloudflare?status=403", "cloudflare"), ("/blocked/captcha?status=429", "captcha"),
     ("/status/403", "access denied")],
)  # fmt: skip
async def test_walls_behind_error_statuses_are_blocked_not_http_errors(testbed, path, reason_part):
    from searcher.errors import FetchHTTPError, PageBlocked
    from searcher.fetch.fetcher import FetchLimits, PageFetcher

    fetcher = PageFetcher([f"127.0.0.1:{testbed.port}"], "test-agent")
    limits = FetchLimits(5.0, 1_000_000, ("text/html",), 3)
    try:
        with pytest.raises(PageBlocked) as info:
            await fetcher.fetch(testbed.url(path), limits)
        assert reason_part in info.value.reason
        assert (info.value.status, info.value.skip_reason) == ("failed", "blocked")
        with pytest.raises(FetchHTTPError):  # a plain server error stays an HTTP error
            await fetcher.fetch(testbed.url("/status/503"), limits)
    finally:
        await fetcher.aclose()


# --- JavaScript shells: where the browser tier takes over (issue 29) ---------------------


@pytest.mark.parametrize(
    "html",
    [
        b"<html><body><div id='root'></div><script src='/app.js'></script></body></html>",
        b'<html><body><div id="__next"></div><script id="__NEXT_DATA__">{}</script></body></html>',
        b"<html><body><noscript>Please turn on JavaScript.</noscript><p>Menu</p></body></html>",
        b"<html><body><script>window.__NUXT__={}</script><p>Loading</p></body></html>",
    ],
)
def test_a_javascript_shell_needs_the_browser(html: bytes) -> None:
    assert needs_javascript(html, visible_text(html.decode()), None)


def test_content_and_walls_do_not_need_the_browser() -> None:
    article = ("A sentence of a real article about tides and harbours. " * 20).encode()
    page = b"<html><body><div id='root'></div><article>" + article + b"</article></body></html>"
    assert not needs_javascript(page, article.decode(), None)
    assert not needs_javascript(b"<html><body><p>Short.</p></body></html>", "Short.", None)
    shell = b"<html><body><div id='root'></div></body></html>"
    assert not needs_javascript(shell, "", "bot wall (cloudflare challenge)")
    assert needs_javascript(shell, "", "javascript required")
