"""The engines on the wire: a SearXNG instance and a Brave endpoint on 127.0.0.1.

SearXNG (``GET /search?q=..&format=json&pageno=..``) asks each of its engines and merges
their results as SearXNG does: one result per page, with the ``engines`` that returned it
and, paired with them, its ``positions`` in their lists, ordered by SearXNG's score.
Brave (``GET /res/v1/web/search?q=..&count=..&offset=..``) serves one engine's list in
Brave's shape. Rankings are looked up (precomputed for the benchmark's queries) or
computed on the spot for any other query.

Result URLs are on ``scifact.example`` and name the document id. The two servers spell
them differently (Brave: ``www.``, a trailing slash and a tracking parameter), as real
engines do, so that merging the same page from both relies on searcher's URL
normalisation. Nothing fetches these URLs: the benchmark runs in simple mode.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import re
from collections.abc import Callable, Iterator, Mapping, Sequence
from typing import Any
from urllib.parse import parse_qsl

import aiohttp
import orjson

from bench.ranking_parts.methods import Weights, searxng_merge
from bench.ranking_parts.scifact import Doc
from searcher.backends import brave, searxng
from searcher.backends.base import BackendAnswer, BackendQuery, HttpBackend
from tests.testbed.searxng import envelope
from tests.testbed.server import ThreadedServer

Ranker = Callable[[str], Mapping[str, Sequence[str]]]  # query -> engine -> document ids
SEARXNG_PAGE = 20  # results per engine per page
BRAVE_KEY = "bench-key"
SNIPPET_CHARS = 300
_DOCID = re.compile(r"/doc/([^/?#]+)")
_SENTENCE = re.compile(r"(?<=[a-z0-9)%][.!?])\s*(?=[A-Z])")  # SciFact often omits the space
_WORD = re.compile(r"\w{3,}")
_STOP_WORDS = frozenset(
    {"the", "and", "for", "with", "that", "this", "from", "are", "was", "were", "has", "have",
     "had", "not", "but", "its", "their", "than", "into", "which", "when", "who", "what",
     "how", "does", "can", "may", "also"}
)  # fmt: skip


def doc_url(docid: str, spelling: str = "searxng") -> str:
    if spelling == "brave":
        return f"https://www.scifact.example/doc/{docid}/?utm_source=brave"
    return f"https://scifact.example/doc/{docid}"


def docid_of(url: str) -> str:
    match = _DOCID.search(url)
    if match is None:
        raise ValueError(f"not a SciFact document URL: {url}")
    return match.group(1)


def _terms(text: str) -> set[str]:
    return {w for w in _WORD.findall(text.lower()) if w not in _STOP_WORDS}


def _cut(text: str, limit: int) -> str:
    return text if len(text) <= limit else text[:limit].rsplit(" ", 1)[0] + " …"


def snippet(doc: Doc, query: str, limit: int = SNIPPET_CHARS) -> str:
    """A query-biased snippet, as search engines show: about ``limit`` characters from
    the start of the sentence after which they hold the most distinct query words (the
    earliest of equals)."""
    sentences = _SENTENCE.split(" ".join(doc.text.split()))
    wanted = _terms(query)
    windows = [_cut(" ".join(sentences[i:]), limit) for i in range(len(sentences))]
    hits = [len(wanted & _terms(w)) for w in windows]
    start = hits.index(max(hits))
    return ("… " if start else "") + windows[start]


def searxng_answer(
    query: str, lists: Mapping[str, Sequence[str]], docs: Mapping[str, Doc], weights: Weights
) -> dict[str, Any]:
    results = [
        {
            "url": doc_url(m.docid),
            "title": docs[m.docid].title,
            "content": snippet(docs[m.docid], query),
            "engine": m.engines[0],
            "engines": list(m.engines),
            "positions": list(m.positions),
            "score": m.score,
            "category": "science",
            "parsed_url": ["https", "scifact.example", f"/doc/{m.docid}", "", "", ""],
            "template": "default.html",
            "publishedDate": None,
            "priority": "",
        }
        for m in searxng_merge(lists, weights)
    ]
    return envelope(query, results, [])


def brave_answer(query: str, docids: Sequence[str], docs: Mapping[str, Doc]) -> dict[str, Any]:
    answer: dict[str, Any] = {
        "type": "search",
        "query": {"original": query, "more_results_available": False},
        "mixed": {"type": "mixed", "main": [], "top": [], "side": []},
    }
    if docids:  # Brave leaves ``web`` out when nothing matched
        results = [
            {
                "title": docs[d].title,
                "url": doc_url(d, "brave"),
                "description": snippet(docs[d], query),
                "type": "search_result",
                "language": "en",
                "family_friendly": True,
            }
            for d in docids
        ]
        answer["web"] = {"type": "search", "results": results, "family_friendly": True}
    return answer


Handler = Callable[[dict[str, str], dict[str, str]], tuple[int, Any]]


class JsonApp:
    """A minimal ASGI app: GET ``path`` -> handler(query params, headers) -> JSON."""

    def __init__(self, path: str, handler: Handler) -> None:
        self.path = path
        self.handler = handler

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        if scope["path"] != self.path:
            status, body = 404, {"error": "not found"}
        else:
            params = dict(parse_qsl(scope.get("query_string", b"").decode("latin-1")))
            headers = {k.decode("latin-1"): v.decode("latin-1") for k, v in scope["headers"]}
            status, body = self.handler(params, headers)
        data = orjson.dumps(body)
        headers_out = [
            (b"content-type", b"application/json"),
            (b"content-length", b"%d" % len(data)),
        ]
        await send({"type": "http.response.start", "status": status, "headers": headers_out})
        await send({"type": "http.response.body", "body": data})


def searxng_app(rank: Ranker, docs: Mapping[str, Doc], engines: Sequence[str]) -> JsonApp:
    """SearXNG over ``engines`` (equal weights, as SearXNG's default). Page 1 holds each
    engine's top ``SEARXNG_PAGE``; the engines here return nothing beyond that."""

    def handle(params: dict[str, str], _: dict[str, str]) -> tuple[int, Any]:
        query = params.get("q", "")
        if params.get("format") != "json":
            return 403, {"error": "format not allowed"}
        if not query.strip():
            return 400, {"error": "No query"}
        found = rank(query) if params.get("pageno", "1") == "1" else {}
        lists = {e: list(found.get(e, ()))[:SEARXNG_PAGE] for e in engines}
        return 200, searxng_answer(query, lists, docs, {})

    return JsonApp("/search", handle)


def brave_app(rank: Ranker, docs: Mapping[str, Doc], engine: str) -> JsonApp:
    """Brave's web search over one engine; ``count`` 1..20, ``offset`` 0..9 pages."""

    def handle(params: dict[str, str], headers: dict[str, str]) -> tuple[int, Any]:
        if headers.get("x-subscription-token") != BRAVE_KEY:
            return 401, {"type": "ErrorResponse", "error": {"status": 401}}
        query = params.get("q", "")
        try:
            count, offset = int(params.get("count", 20)), int(params.get("offset", 0))
        except ValueError:
            count = offset = -1
        if not query.strip() or not 1 <= count <= 20 or not 0 <= offset <= 9:
            return 422, {"type": "ErrorResponse", "error": {"status": 422}}
        docids = list(rank(query).get(engine, ()))[offset * count : (offset + 1) * count]
        return 200, brave_answer(query, docids, docs)

    return JsonApp("/res/v1/web/search", handle)


@contextlib.contextmanager
def servers(
    rank: Ranker, docs: Mapping[str, Doc], searxng_engines: Sequence[str], brave_engine: str | None
) -> Iterator[dict[str, str]]:
    """A SearXNG instance over ``searxng_engines`` and, unless ``brave_engine`` is None, a
    Brave endpoint over that engine, each on its own port; yields their base URLs."""
    apps = {"searxng": searxng_app(rank, docs, searxng_engines)}
    if brave_engine is not None:
        apps["brave"] = brave_app(rank, docs, brave_engine)
    with contextlib.ExitStack() as stack:
        yield {
            name: stack.enter_context(ThreadedServer(app)).base_url for name, app in apps.items()
        }


async def fetch_answers(
    urls: Mapping[str, str], queries: Mapping[str, str], depth: int, concurrency: int = 8
) -> dict[str, list[BackendAnswer]]:
    """Every query's answers from the servers, through searcher's own backend code (the
    request builders, HTTP runner and parsers the service uses), ``concurrency`` queries
    at a time."""
    async with aiohttp.ClientSession() as client:
        backends = [
            HttpBackend(
                "searxng", searxng.CAPABILITIES,
                functools.partial(searxng.build_request, urls["searxng"]),
                searxng.parse_response, client,
            )
        ]  # fmt: skip
        if "brave" in urls:
            request = functools.partial(brave.build_request, urls["brave"], BRAVE_KEY)
            backends.append(
                HttpBackend("brave", brave.CAPABILITIES, request, brave.parse_response, client)
            )
        gate = asyncio.Semaphore(concurrency)

        async def one(qid: str, text: str) -> tuple[str, list[BackendAnswer]]:
            query = BackendQuery(text=text, max_results=depth)
            async with gate:
                return qid, [await backend.search(query, 30.0) for backend in backends]

        return dict(await asyncio.gather(*(one(q, t) for q, t in queries.items())))
