"""The testbed's pages and a small in-memory BM25 search over them.

The pages are the AEB set (121 real news/blog pages) when it is there, in
``../shared/data/aeb/`` (override the shared folder with ``SEARCHER_SHARED_DIR``), and
else the pages shipped in the repository (``shipped_pages.py``), so a fresh clone runs the
tests. Everything is loaded lazily, once per process.
"""

from __future__ import annotations

import gzip
import html
import json
import math
import re
import threading
from collections import Counter
from dataclasses import dataclass
from functools import cached_property, lru_cache
from pathlib import Path

from tests.shared_data import shared_dir

from .shipped_pages import BROAD_QUERY, MATCHING_QUERY, shipped_pages


def data_dir() -> Path:
    return shared_dir() / "data"


def aeb_dir() -> Path:
    return data_dir() / "aeb"


STOPWORDS = frozenset(
    [
        "a",
        "an",
        "and",
        "are",
        "as",
        "at",
        "be",
        "but",
        "by",
        "for",
        "from",
        "has",
        "have",
        "he",
        "her",
        "his",
        "how",
        "i",
        "in",
        "is",
        "it",
        "its",
        "of",
        "on",
        "or",
        "she",
        "that",
        "the",
        "their",
        "them",
        "they",
        "this",
        "to",
        "was",
        "were",
        "what",
        "when",
        "where",
        "which",
        "who",
        "why",
        "will",
        "with",
        "you",
        "your",
        "do",
        "does",
        "did",
        "not",
        "no",
        "so",
        "than",
        "then",
        "there",
        "these",
        "those",
        "we",
        "our",
        "us",
    ]
)

_WORD = re.compile(r"\w+")
_TITLE = re.compile(rb"<title[^>]*>(.*?)</title\s*>", re.IGNORECASE | re.DOTALL)
_SPACE = re.compile(r"\s+")

ENGINES = ("bing", "duckduckgo", "google", "brave", "qwant", "startpage")


def tokenize(text: str) -> list[str]:
    return _WORD.findall(text.lower())


def query_terms(query: str) -> list[str]:
    """Distinct non-stopword terms of ``query``, in order."""
    seen: dict[str, None] = {}
    for t in tokenize(query):
        if t not in STOPWORDS:
            seen.setdefault(t, None)
    return list(seen)


@dataclass(frozen=True)
class Hit:
    id: str
    score: float


@dataclass(frozen=True)
class Page:
    id: str
    url: str  # the original (internet) URL, from ground-truth.json
    title: str
    body: str  # articleBody

    @cached_property
    def _h(self) -> int:
        return int(self.id[:8], 16)

    @cached_property
    def flat_body(self) -> str:
        """The articleBody with runs of whitespace collapsed to one space."""
        return _SPACE.sub(" ", self.body).strip()

    @property
    def engines(self) -> list[str]:
        """1-3 engines, deterministic by id."""
        n = 1 + self._h % 3
        start = (self._h // 3) % len(ENGINES)
        return [ENGINES[(start + i) % len(ENGINES)] for i in range(n)]

    @property
    def published(self) -> str | None:
        """An ISO date for about two pages in three, None for the rest."""
        if self._h % 3 == 2:
            return None
        month = 1 + (self._h // 7) % 12
        day = 1 + (self._h // 101) % 28
        return f"2024-{month:02d}-{day:02d}T00:00:00"


def _read_aeb(root: Path) -> tuple[dict[str, dict[str, str]], dict[str, bytes]]:
    """``(ground_truth, html)`` of the AEB data in ``root``."""
    gt_path = root / "ground-truth.json"
    if not gt_path.is_file():
        raise FileNotFoundError(
            f"AEB data not found at {root} (set SEARCHER_SHARED_DIR to the folder "
            "that holds data/aeb/)"
        )
    gt = json.loads(gt_path.read_text(encoding="utf-8"))
    raw = {pid: gzip.decompress((root / "html" / f"{pid}.html.gz").read_bytes()) for pid in gt}
    return gt, raw


class Corpus:
    """The testbed's pages: ground truth, raw HTML, titles and a BM25 index. ``root``
    names an AEB folder that must exist; without it the shared AEB data is used when
    present, else the shipped pages (``is_aeb`` says which, once loaded)."""

    K1 = 1.2
    B = 0.75
    # Queries the tests use, by page set: one matching a score of pages, one matching most
    # (more than two result pages of ten).
    AEB_QUERIES = ("Google Stadia Microsoft xCloud Apple Arcade games", "new york")
    SHIPPED_QUERIES = (MATCHING_QUERY, BROAD_QUERY)

    def __init__(self, root: Path | None = None) -> None:
        self.explicit = root is not None
        self.root = root or aeb_dir()
        self.is_aeb = True
        self._lock = threading.Lock()
        self._loaded = False
        self._html: dict[str, bytes] = {}

    # ---- loading ---------------------------------------------------------------------

    def load(self) -> Corpus:
        if self._loaded:
            return self
        with self._lock:
            if self._loaded:
                return self
            if self.explicit or (self.root / "ground-truth.json").is_file():
                gt, self._html = _read_aeb(self.root)
            else:
                self.is_aeb = False
                gt, self._html = shipped_pages()
            pages: dict[str, Page] = {}
            for pid in sorted(gt):
                raw = self._html[pid]
                body = gt[pid].get("articleBody") or ""
                pages[pid] = Page(pid, gt[pid].get("url", ""), _title(raw, body), body)
            self.ground_truth: dict[str, dict[str, str]] = gt
            self.pages = pages
            self.ids: list[str] = list(pages)
            self._index()
            self._loaded = True
        return self

    def _index(self) -> None:
        self._postings: dict[str, dict[str, int]] = {}
        self._len: dict[str, int] = {}
        for pid, page in self.pages.items():
            toks = tokenize(page.title + "\n" + page.body)
            self._len[pid] = len(toks)
            for t, f in Counter(toks).items():
                self._postings.setdefault(t, {})[pid] = f
        n = len(self.pages)
        avgdl = sum(self._len.values()) / max(n, 1)
        self._norm = {
            pid: self.K1 * (1 - self.B + self.B * dl / avgdl) for pid, dl in self._len.items()
        }
        self._idf = {
            t: math.log(1 + (n - len(p) + 0.5) / (len(p) + 0.5)) for t, p in self._postings.items()
        }

    # ---- access ----------------------------------------------------------------------

    @property
    def matching_query(self) -> str:
        """A query that about twenty pages match."""
        return (self.AEB_QUERIES if self.load().is_aeb else self.SHIPPED_QUERIES)[0]

    @property
    def broad_query(self) -> str:
        """A query that more than twenty pages match."""
        return (self.AEB_QUERIES if self.load().is_aeb else self.SHIPPED_QUERIES)[1]

    def html(self, pid: str) -> bytes | None:
        self.load()
        return self._html.get(pid)

    def page(self, pid: str) -> Page | None:
        self.load()
        return self.pages.get(pid)

    @property
    def first_id(self) -> str:
        return self.load().ids[0]

    def search(self, query: str) -> list[Hit]:
        """All pages matching at least one query term, best first (ties by id)."""
        self.load()
        return list(self._search(query))

    @lru_cache(maxsize=2048)  # noqa: B019 - one Corpus per process, lives forever
    def _search(self, query: str) -> tuple[Hit, ...]:
        scores: dict[str, float] = {}
        for t in query_terms(query):
            idf = self._idf.get(t, 0.0)
            for pid, f in self._postings.get(t, {}).items():
                w = idf * f * (self.K1 + 1) / (f + self._norm[pid])
                scores[pid] = scores.get(pid, 0.0) + w
        hits = [Hit(pid, round(sc, 4)) for pid, sc in scores.items() if sc > 0]
        hits.sort(key=lambda h: (-h.score, h.id))
        return tuple(hits)

    def snippet(self, pid: str, query: str, size: int = 200) -> str:
        """About ``size`` characters of the articleBody around the first query-term match
        (the start of the body if only the title matches)."""
        body = self.pages[pid].flat_body
        terms = query_terms(query)
        start = 0
        if terms:
            m = re.search(r"\b(?:" + "|".join(map(re.escape, terms)) + r")\b", body, re.IGNORECASE)
            if m:
                start = max(0, m.start() - size // 4)
                if start:
                    space = body.find(" ", start)
                    start = space + 1 if 0 <= space < m.start() else m.start()
        end = start + size
        if end < len(body):
            space = body.rfind(" ", start, end)
            end = space if space > start else end
        return body[start:end].strip()


def _title(raw: bytes, body: str) -> str:
    m = _TITLE.search(raw)
    if m:
        title = _SPACE.sub(" ", html.unescape(m.group(1).decode("utf-8", "replace"))).strip()
        if title:
            return title
    return body[:60].strip() or "Untitled"


_CORPUS: Corpus | None = None
_CORPUS_LOCK = threading.Lock()


def corpus() -> Corpus:
    """The process-wide corpus (not yet loaded; call ``.load()`` or use it, it loads)."""
    global _CORPUS
    if _CORPUS is None:
        with _CORPUS_LOCK:
            if _CORPUS is None:
                _CORPUS = Corpus()
    return _CORPUS


def ground_truth() -> dict[str, dict[str, str]]:
    """``{id: {"url": ..., "articleBody": ...}}`` from ``aeb/ground-truth.json``."""
    return corpus().load().ground_truth


def aeb_ids() -> list[str]:
    """Sorted AEB page ids."""
    return list(corpus().load().ids)
