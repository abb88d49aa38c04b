"""The demo web: the pages of ``pages.txt`` as HTML (``/pages/<slug>``), searched by BM25
and answered in SearXNG's JSON format (``/search?q=...&format=json``, ``/config``), on
127.0.0.1 only. Standard library (and searcher's own SearXNG answer format) only: it
runs in the lean runtime environment."""

from __future__ import annotations

import html
import json
import math
import re
import threading
from collections import Counter
from dataclasses import dataclass
from functools import cached_property
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any
from urllib.parse import parse_qs, urlsplit

from searcher.api.compat.searxng_format import searxng_envelope

PAGES_FILE = Path(__file__).with_name("pages.txt")
HOST = "127.0.0.1"
PER_PAGE = 10
ENGINE = "demo"
_WORD = re.compile(r"[a-z0-9]+")
_STOPWORDS = frozenset(
    _WORD.findall(
        "a an and are as at be by did do does for from how in is it of on or the to was what "
        "when where which who why with"
    )
)


@dataclass(frozen=True)
class Page:
    slug: str
    title: str
    published: str
    paragraphs: tuple[str, ...]

    @property
    def text(self) -> str:
        return "\n\n".join(self.paragraphs)


def parse_pages(text: str) -> list[Page]:
    """The pages of ``pages.txt``: a ``=== slug | title | date`` line, then paragraphs."""
    pages: list[Page] = []
    for block in text.split("\n=== ")[1:]:
        head, _, body = block.partition("\n")
        slug, title, published = (part.strip() for part in head.split("|"))
        paragraphs = tuple(p.strip() for p in body.strip().split("\n\n") if p.strip())
        pages.append(Page(slug, title, published, paragraphs))
    return pages


def words(text: str) -> list[str]:
    return [w for w in _WORD.findall(text.lower()) if w not in _STOPWORDS]


class Index:
    """BM25 over title and text (the title counted twice)."""

    def __init__(self, pages: list[Page], k1: float = 1.2, b: float = 0.75) -> None:
        self.pages = pages
        self.k1, self.b = k1, b
        self.terms = [Counter(words(f"{p.title} {p.title} {p.text}")) for p in pages]
        self.lengths = [sum(t.values()) for t in self.terms]
        self.average = sum(self.lengths) / max(1, len(pages))
        df = Counter(w for t in self.terms for w in t)
        n = len(pages)
        self.idf = {w: math.log(1 + (n - d + 0.5) / (d + 0.5)) for w, d in df.items()}

    def search(self, query: str) -> list[tuple[Page, float]]:
        scored = []
        for page, terms, length in zip(self.pages, self.terms, self.lengths, strict=True):
            score = 0.0
            for word in set(words(query)):
                tf = terms.get(word, 0)
                if tf:
                    norm = self.k1 * (1 - self.b + self.b * length / self.average)
                    score += self.idf[word] * tf * (self.k1 + 1) / (tf + norm)
            if score > 0:
                scored.append((page, score))
        return sorted(scored, key=lambda item: (-item[1], item[0].slug))


def snippet(page: Page, query: str, size: int = 240) -> str:
    """The paragraph sharing most words with the query, cut at a word near ``size``."""
    wanted = set(words(query))
    best = max(page.paragraphs, key=lambda p: len(wanted & set(words(p))))
    if len(best) <= size:
        return best
    return best[:size].rsplit(" ", 1)[0] + " …"


def page_html(page: Page) -> str:
    body = "\n".join(f"<p>{html.escape(p)}</p>" for p in page.paragraphs)
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>{html.escape(page.title)}</title>"
        f'<meta name="date" content="{page.published}"></head>\n<body>'
        '<header><nav><a href="/">Demo web</a></nav></header>\n'
        f"<main><article><h1>{html.escape(page.title)}</h1>\n"
        f'<p><time datetime="{page.published}">{page.published}</time></p>\n{body}'
        "</article></main>\n<footer>Written for searcher's offline demo.</footer></body></html>"
    )


def index_html(pages: list[Page]) -> str:
    items = "\n".join(
        f'<li><a href="/pages/{p.slug}">{html.escape(p.title)}</a></li>' for p in pages
    )
    return (
        '<!doctype html>\n<html lang="en"><head><meta charset="utf-8">'
        f"<title>Demo web</title></head>\n<body><h1>Demo web</h1><ul>\n{items}\n</ul></body></html>"
    )


class DemoWeb:
    """The pages and their index; answers one request at a time as (status, type, body)."""

    def __init__(self, pages: list[Page]) -> None:
        self.pages = {p.slug: p for p in pages}
        self.index = Index(pages)

    @cached_property
    def config(self) -> bytes:
        engines = [{"name": ENGINE, "enabled": True, "categories": ["general"], "shortcut": "d"}]
        return json.dumps({"engines": engines, "categories": ["general"]}).encode()

    def answer(self, base: str, target: str) -> tuple[int, str, bytes]:
        parts = urlsplit(target)
        query = {k: v[-1] for k, v in parse_qs(parts.query).items()}
        path = parts.path.rstrip("/") or "/"
        if path == "/search":
            return self._search(base, query)
        if path == "/config":
            return 200, "application/json", self.config
        if path == "/":
            return 200, "text/html; charset=utf-8", index_html(list(self.pages.values())).encode()
        page = self.pages.get(path.removeprefix("/pages/")) if path.startswith("/pages/") else None
        if page is None:
            return 404, "text/plain; charset=utf-8", b"not found\n"
        return 200, "text/html; charset=utf-8", page_html(page).encode()

    def _search(self, base: str, query: dict[str, str]) -> tuple[int, str, bytes]:
        if query.get("format") != "json":
            return 403, "text/plain; charset=utf-8", b"only format=json is served here\n"
        text = query.get("q", "")
        try:
            pageno = max(1, int(query.get("pageno", "1")))
        except ValueError:
            pageno = 1
        start = (pageno - 1) * PER_PAGE
        hits = self.index.search(text)[start : start + PER_PAGE]
        results = [_result(base, page, text, start + i + 1, score) for i, (page, score) in
                   enumerate(hits)]  # fmt: skip
        return 200, "application/json", json.dumps(searxng_envelope(text, results)).encode()


def _result(base: str, page: Page, query: str, rank: int, score: float) -> dict[str, Any]:
    return {
        "url": f"{base}/pages/{page.slug}",
        "title": page.title,
        "content": snippet(page, query),
        "engine": ENGINE,
        "engines": [ENGINE],
        "positions": [rank],
        "score": round(score, 4),
        "category": "general",
        "publishedDate": f"{page.published}T00:00:00",
    }


def load() -> DemoWeb:
    return DemoWeb(parse_pages(PAGES_FILE.read_text(encoding="utf-8")))


class DemoServer:
    """The demo web on 127.0.0.1:``port`` in a background thread (0: a free port)."""

    def __init__(self, port: int = 0, web: DemoWeb | None = None) -> None:
        demo = web or load()

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                base = f"http://{HOST}:{self.server.server_address[1]}"
                status, kind, body = demo.answer(base, self.path)
                self.send_response(status)
                self.send_header("content-type", kind)
                self.send_header("content-length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:  # quiet: searcher's log is the one
                return

        self._server = ThreadingHTTPServer((HOST, port), Handler)
        self._server.daemon_threads = True
        self.port: int = self._server.server_address[1]
        self.base_url = f"http://{HOST}:{self.port}"
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True)

    def __enter__(self) -> DemoServer:
        self._thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._server.shutdown()
        self._server.server_close()
