"""The testbed's pages when the AEB data (``../shared/data/aeb``) is absent: the demo
web's pages (``demo/pages.txt``, written for this repository) plus one long page, a digest
of them all, for the tests that page through a long article. Same shape as the AEB data
(``{id: {"url", "articleBody"}}`` and raw HTML per id), so every test that only needs
*real-looking pages* runs on a fresh clone; tests that measure quality against the AEB
pages themselves require the shared data (``tests.shared_data.AEB``).
"""

from __future__ import annotations

import hashlib
import html

from demo.web import PAGES_FILE, parse_pages

DIGEST_SLUG = "demo-web-digest"
DIGEST_TITLE = "The demo web in one page: every article, one after another"
# Where the pages "originally" live (AEB's ground truth holds internet URLs too).
ORIGIN = "https://demo.searcher.invalid/pages/"
# Queries the tests use: one matching a score of pages, one matching most of them.
MATCHING_QUERY = "Google Stadia Microsoft xCloud Apple Arcade games cloud service search"
BROAD_QUERY = "search data cloud service time"

# A site's chrome around the article, as on real pages: what extraction must leave out.
_HEAD = (
    '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
    '<meta name="viewport" content="width=device-width, initial-scale=1">'
    "<title>{title}</title>{meta}"
    "<style>body{{font-family:sans-serif;max-width:42em;margin:auto}}nav a{{margin:0 .5em}}"
    "aside{{font-size:.9em;color:#555}}</style></head>\n<body>"
    '<div class="cookie-notice">This site keeps no cookies. <button>Fine</button></div>\n'
    '<header><a class="logo" href="/">Demo web</a><nav><a href="/">Home</a>'
    '<a href="/topics/search">Search</a><a href="/topics/systems">Systems</a>'
    '<a href="/topics/games">Games</a><a href="/about">About</a></nav></header>\n'
)
_TAIL = (
    '<aside class="related"><h3>Related reading</h3><ul><li><a href="/">All articles</a></li>'
    '<li><a href="/topics/search">More about search</a></li>'
    '<li><a href="/topics/systems">More about systems</a></li></ul></aside>\n'
    '<footer><p>Written for searcher\'s offline demo.</p><p><a href="/about">About</a> · '
    '<a href="/contact">Contact</a> · <a href="/privacy">Privacy</a></p></footer>'
    "</body></html>"
)


def page_id(slug: str) -> str:
    """A stable hex id like the AEB ids (the testbed derives engines and dates from it)."""
    return hashlib.sha256(slug.encode()).hexdigest()


def page_html(title: str, paragraphs: tuple[str, ...], published: str | None) -> bytes:
    """A page in a site's chrome; the article is the paragraphs (the title stays in
    ``<title>``, as the AEB ground truth leaves headlines out of the article body)."""
    meta = f'<meta name="date" content="{published}">' if published else ""
    dated = f'<p class="byline"><time datetime="{published}">{published}</time></p>\n'
    body = "\n".join(f"<p>{html.escape(p)}</p>" for p in paragraphs)
    article = f"<main><article>{dated if published else ''}{body}</article></main>\n"
    return (_HEAD.format(title=html.escape(title), meta=meta) + article + _TAIL).encode()


def shipped_pages() -> tuple[dict[str, dict[str, str]], dict[str, bytes]]:
    """``(ground_truth, html)`` keyed by page id, like the AEB data on disk."""
    pages = parse_pages(PAGES_FILE.read_text(encoding="utf-8"))
    truth: dict[str, dict[str, str]] = {}
    raw: dict[str, bytes] = {}
    for page in pages:
        pid = page_id(page.slug)
        truth[pid] = {"url": ORIGIN + page.slug, "articleBody": page.text}
        raw[pid] = page_html(page.title, page.paragraphs, page.published)
    # One long page (about 15,000 characters) for the tests that read a page in slices.
    paragraphs = tuple(p for page in pages for p in page.paragraphs)
    digest_id = page_id(DIGEST_SLUG)
    truth[digest_id] = {"url": ORIGIN + DIGEST_SLUG, "articleBody": "\n\n".join(paragraphs)}
    raw[digest_id] = page_html(DIGEST_TITLE, paragraphs, None)
    return truth, raw
