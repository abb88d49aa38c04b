"""Main-text extraction: the quality gate on real pages, plain text, garbage, the pool."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
import threading
from pathlib import Path

import pytest

from bench.aeb_metric import aggregate, load_aeb, score_page
from searcher.fetch.extract import (
    EXTRACTOR_NAME,
    EXTRACTOR_TAG,
    extract_main_text,
    normalise_plain_text,
    strip_inline_markup,
)
from searcher.fetch.extractor import Extractor
from tests.shared_data import AEB, require_shared
from tests.testbed.corpus import corpus

# Measured when the gate was set: F1 0.960 (precision 0.941, recall 0.979) over all 121
# pages; plain-text output scored 0.961. The floor is the design's requirement.
AEB_F1_FLOOR = 0.95

ARTICLE = (
    b"<!doctype html><html><head><title>Tides</title></head><body>"
    b"<nav><a href='/'>Home</a> <a href='/about'>About</a></nav>"
    b"<article><h1>How tides work</h1>"
    + b"<p>The Moon pulls on the oceans, and the water bulges towards it. " * 6
    + b"</p><p>Twice a day the coast sees high water, because of a second bulge. " * 5
    + b"</p></article><footer>Copyright 2024 Example Corp</footer></body></html>"
)


def test_aeb_quality_gate() -> None:
    require_shared(AEB)
    scores = aggregate(
        score_page(page.truth, extract_main_text(page.html, page.url, "text/html", None))
        for page in load_aeb()
    )
    assert scores.f1 >= AEB_F1_FLOOR, scores


def test_html_article_is_markdown_without_boilerplate() -> None:
    text = extract_main_text(ARTICLE, "https://example.com/tides", "text/html", "utf-8")
    assert "The Moon pulls on the oceans" in text
    assert "second bulge" in text
    assert "Copyright 2024" not in text


def test_markdown_escapes_are_removed() -> None:
    html = (
        b"<html><body><article><p>"
        + b"The variable snake_case_name holds [1] item * two. " * 10
        + b"</p></article></body></html>"
    )
    text = extract_main_text(html, "", "text/html", None)
    assert "snake_case_name holds [1] item * two" in text
    assert "\\" not in text


def _article(inner: bytes) -> bytes:
    filler = b"<p>Plain words follow here so that the page reads as an article body. </p>" * 4
    return (
        b"<html><body><article><h1>Notes</h1><p>"
        + inner
        + b" "
        + b"and more text " * 8
        + (b"</p>" + filler + b"</article></body></html>")
    )


@pytest.mark.parametrize(
    ("inner", "kept"),
    [
        (b"the <u>underlined claim</u> stands", "the underlined claim stands"),
        (b"water is H<sub>2</sub>O and E = mc<sup>2</sup>", "water is H2O and E = mc2"),
        (b"a <b>bold</b> and <strong>strong</strong> word", "a bold and strong word"),
        (b"an <i>italic</i> and <em>emphasised</em> word", "an italic and emphasised word"),
        (b"<strike>old</strike> <del>gone</del> <s>cut</s> price", "old gone cut price"),
        (b"call <code>snake_case()</code> now", "call snake_case() now"),
        (b"<mark>marked</mark> <small>small</small> <ins>new</ins> text", "marked small new text"),
        # Inside words too: the page's own stars are escaped by trafilatura, markers not.
        (b"The pre<i>mid</i>post word", "The premidpost word"),
        (b"a word<em>emph</em> here", "a wordemph here"),
        (b"<em>emph</em>word and <b><i>bi</i></b>x", "emphword and bix"),
        (b"<b>b</b><i>i</i>, <code>a</code><code>b</code>.", "bi, ab."),
        (b"<i>a*b</i> and <b>bold <code>c</code> end</b>", "a*b and bold c end"),
    ],
)
def test_inline_markup_does_not_leak_into_content(inner: bytes, kept: str) -> None:
    text = extract_main_text(_article(inner), "", "text/html", "utf-8")
    assert kept in text
    for marker in ("<u>", "</u>", "<sub>", "<sup>", "**", "~~", "`", "<mark>", "<del>"):
        assert marker not in text
    assert text.startswith("# Notes")  # block structure (headings) is kept


def test_code_keeps_its_own_stars_and_backslashes() -> None:
    code = b"def f(*args, **kwargs):\n    return a*b*c  # a\\.b"
    html = _article(b"see <code>x*y*z</code> then</p><pre><code>" + code + b"</code></pre><p>end")
    text = extract_main_text(html, "", "text/html", "utf-8")
    assert "see x*y*z then" in text
    assert "def f(*args, **kwargs):\n    return a*b*c  # a\\.b" in text


def test_literal_stars_and_underscores_survive_markup_stripping() -> None:
    html = _article(b"2 * 3 * 4 is 24, *not* a__b; a_b_c and &lt;u&gt; stay")
    text = extract_main_text(html, "", "text/html", "utf-8")
    assert "2 * 3 * 4 is 24, *not* a__b; a_b_c and <u> stay" in text


def test_strip_inline_markup_keeps_lists_and_escaped_markers() -> None:
    markdown = "# Head\n\n- **one** item\n- two \\*stars\\*\n\n| a | b |"
    assert strip_inline_markup(markdown) == "# Head\n\n- one item\n- two *stars*\n\n| a | b |"


def test_charset_from_the_header_decodes_the_page() -> None:
    html = (
        "<html><body><article><p>"
        + "Größere Straßen führen über die Brücke nach Zürich. " * 10
        + "</p></article></body></html>"
    ).encode("iso-8859-1")
    text = extract_main_text(html, "", "text/html", "ISO-8859-1")
    assert "Größere Straßen führen über die Brücke" in text


def test_unknown_charset_falls_back_to_detection() -> None:
    text = extract_main_text(ARTICLE, "", "text/html", "no-such-charset")
    assert "The Moon pulls on the oceans" in text


def test_text_plain_is_decoded_and_whitespace_normalised() -> None:
    body = "  Title\r\n\r\n\r\n\r\nFirst\t\tparagraph   here.  \n\n\n\nSecond, café.\n".encode()
    text = extract_main_text(body, "", "text/plain", "utf-8")
    assert text == "Title\n\nFirst paragraph here.\n\nSecond, café."


def test_text_plain_with_bad_bytes_does_not_raise() -> None:
    # Not UTF-8 and no charset: decoded in the encoding detected from the bytes.
    text = extract_main_text(b"caf\xe9 ok \xff\xfe", "", "text/plain", None)
    assert text.startswith("café ok")


@pytest.mark.parametrize("media", ["text/markdown", "text/x-markdown", "text/csv", "TEXT/Plain"])
def test_text_that_is_not_markup_is_read_as_it_is(media: str) -> None:
    body = b"# Prices\n\nitem,price\napple,1.20\npear,0.95\n"
    assert extract_main_text(body, "", media, "utf-8") == body.decode().strip()


def test_normalise_plain_text_is_idempotent() -> None:
    once = normalise_plain_text(" a  b \n\n\n\n c\t\n")
    assert normalise_plain_text(once) == once == "a b\n\nc"


@pytest.mark.parametrize(
    "body",
    [
        b"",
        b"   ",
        b"<html></html>",
        b"<html><body></body></html>",
        bytes(range(256)) * 40,
        b"\x00" * 5000,
        b"%PDF-1.4\n\xe2\xe3\xcf\xd3 binary",
    ],
)
def test_empty_or_garbage_html_gives_empty_text(body: bytes) -> None:
    assert extract_main_text(body, "", "text/html", None) == ""


@pytest.mark.parametrize(
    ("body", "text"),
    [(b"<<<>>><<<<<</p></div></html>", "<<<>>><<<<<"), (b'{"json": "not html"}', None)],
)
def test_text_with_no_html_around_it_comes_back_as_it_is(body: bytes, text: str | None) -> None:
    # trafilatura's fallback extractors (on since issue 12) keep the bare text of a body
    # that holds no markup; nothing is invented and no markup is added.
    assert extract_main_text(body, "", "text/html", None) == (text or body.decode())


def test_extractor_name_keys_the_version_and_format() -> None:
    assert Extractor(in_thread=True).name == EXTRACTOR_TAG
    assert EXTRACTOR_TAG.startswith(EXTRACTOR_NAME + "-")
    assert EXTRACTOR_TAG.endswith("-md")
    # r5: plain text without a charset decoded in the encoding detected; older entries
    # differ
    assert "-r5-" in EXTRACTOR_TAG


async def test_extractor_in_a_thread() -> None:
    extractor = Extractor(in_thread=True)
    text = await extractor.extract(ARTICLE, "https://example.com/", "text/html", None)
    assert "The Moon pulls on the oceans" in text
    extractor.close()


async def test_the_thread_mode_extracts_one_page_at_a_time_on_one_thread() -> None:
    # trafilatura shares lxml parsers between calls: pages extracted at once in several
    # threads corrupted memory (the research benchmark aborted in about one run in three;
    # a stress run here does not reproduce it reliably). So the thread mode must use one
    # thread of its own, never the loop's pool of many, and still give each page the
    # text a lone call gives it.
    # The testbed's pages: the AEB ones when present, else the pages shipped with the tests.
    testbed_pages = corpus().load()
    pages = [
        (testbed_pages.html(pid) or b"", page.url) for pid, page in testbed_pages.pages.items()
    ]
    pages = pages[:24]
    alone = [extract_main_text(html, url, "text/html", None) for html, url in pages]
    extractor = Extractor(in_thread=True)
    try:
        texts = await asyncio.gather(
            *(extractor.extract(html, url, "text/html", None) for html, url in pages)
        )
        assert texts == alone
        names = [t.name for t in threading.enumerate()]
        assert sum(n.startswith("searcher-extract") for n in names) == 1, names
        assert not [n for n in names if n.startswith("asyncio_")], names  # asyncio.to_thread
    finally:
        extractor.close()


async def test_extractor_process_pool_round_trip() -> None:
    extractor = Extractor(workers=2)
    try:
        texts = [
            await extractor.extract(ARTICLE, "https://example.com/", "text/html", None),
            await extractor.extract(b"plain  text", "", "text/plain", None),
            await extractor.extract(b"", "", "text/html", None),
        ]
    finally:
        extractor.close()
    assert "The Moon pulls on the oceans" in texts[0]
    assert texts[1:] == ["plain text", ""]


def _proc_children(pid: int) -> list[int]:
    children = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            stat = (entry / "stat").read_text()
        except OSError:
            continue
        # Fields after the parenthesised command name: state, ppid, ...
        if int(stat.rsplit(")", 1)[1].split()[1]) == pid:
            children.append(int(entry.name))
    return children


def _state(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except OSError:
        return "gone"


def _pool_workers() -> list[int]:
    """Worker processes: children of our forkserver child (forkserver forks the workers)."""
    workers = []
    for child in _proc_children(os.getpid()):
        try:
            cmdline = Path(f"/proc/{child}/cmdline").read_bytes()
        except OSError:
            continue
        if b"forkserver" in cmdline:
            workers += _proc_children(child)
    return workers


@pytest.mark.skipif(not Path("/proc/self/stat").exists(), reason="needs Linux /proc")
@pytest.mark.parametrize("at_once", [False, True])
async def test_a_worker_that_died_while_idle_is_replaced(at_once: bool) -> None:
    extractor = Extractor(workers=1)
    try:
        assert await extractor.extract(b"one", "", "text/plain", None) == "one"
        workers = _pool_workers()
        assert len(workers) == 1
        os.kill(workers[0], signal.SIGKILL)
        # At once: before the forkserver (its parent) has told the pool, so the worker still
        # looks alive and the job cannot be sent to it.
        while not at_once and Path(f"/proc/{workers[0]}").exists() and _state(workers[0]) != "Z":
            await asyncio.sleep(0.01)  # until the kernel has ended it
        # The next call gets a fresh worker (a death during a task: tests/test_worker_pool.py).
        assert await extractor.extract(b"three", "", "text/plain", None) == "three"
        assert extractor.pool.stats().started == 2
    finally:
        extractor.close()


def test_warm_up_loads_what_the_fallback_extractors_load_lazily() -> None:
    # Run in a fresh interpreter: this test process may have extracted pages already.
    # (JT_STOPLIST is trafilatura's internal; if it is renamed, this test says so.)
    code = (
        "import trafilatura.external as e\n"
        "assert e.JT_STOPLIST is None\n"
        "from searcher.fetch.extract import warm_up\n"
        "warm_up()\n"
        "assert e.JT_STOPLIST\n"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, timeout=120)
    assert done.returncode == 0, done.stderr.decode()
