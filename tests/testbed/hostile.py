"""Pages that attack their reader: structures whose extraction cost grows with the square
of their size (``/hostile/{kind}?n=``), a page that echoes its query string into its
text (``/reflect``), as a page would that tries to poison a cache keyed on a cleaned URL,
and a SearXNG answer as Python's ``json.dumps`` writes it from broken engine data
(``/python-json-searxng/search``: a lone surrogate, NaN, which strict parsers refuse;
URLs with no host or broken over lines); and a SearXNG whose results for a query that
says "hostile" are attacking pages, and for any other query plain text PDFs
(``/searxng/hostile/{kind}/search``: ``kind`` ``pdf-bombs`` or ``slow-pages``), so that
two clients of one searcher can be served a hostile and an ordinary answer."""

from __future__ import annotations

import html
import json
from urllib.parse import unquote_plus

from .asgi import HTML, JSON, TEXT, Request, Router
from .searxng import _result, envelope

router = Router()

_HEAD = b"<!doctype html><html><head><title>Hostile page</title></head><body>"
_TAIL = b"</body></html>"


def hostile_page(kind: str, n: int) -> bytes | None:
    """The body of a pathological page of ``n`` units, or None for an unknown kind."""
    if kind == "row":  # one table row of n cells (150,000: about 97 s of trafilatura)
        body = b"<table><tr>" + b"<td>cell</td>" * n + b"</tr></table>"
    elif kind == "attributes":  # one element with n attributes
        body = b"<div " + b" ".join(b'data-a%d="x"' % i for i in range(n)) + b">text</div>"
    elif kind == "paragraphs":  # n paragraphs
        body = b"<p>word word word</p>" * n
    elif kind == "nesting":  # n nested divs
        body = b"<div>" * n + b"deep text" + b"</div>" * n
    elif kind == "chains":  # 20 chains of n nested divs (2,000: about 27 s of trafilatura)
        body = (b"<div>" * n + b"<p>deep text</p>" + b"</div>" * n) * 20
    else:
        return None
    return _HEAD + body + _TAIL


@router.route("/hostile/{kind}")
async def hostile(req: Request) -> None:
    try:
        n = int(req.query.get("n") or 150_000)
    except ValueError:
        n = -1
    page = hostile_page(req.params["kind"], n) if 0 <= n <= 1_000_000 else None
    if page is None:
        await req.respond(400, b"unknown kind or bad n", TEXT)
        return
    await req.respond(200, page, HTML)


@router.route("/reflect")
async def reflect(req: Request) -> None:
    query = unquote_plus(req.scope.get("query_string", b"").decode("latin-1"))
    said = html.escape(query) if query else "nothing"
    paragraph = (
        "This article is about tides. The Moon pulls on the oceans and the Earth turns "
        "beneath the bulge, so most coasts see two high tides a day. "
    ) * 6
    body = (
        f"<!doctype html><html><head><title>Reflect</title></head><body><article>"
        f"<h1>Tides</h1><p>{paragraph}</p><p>The query string said: {said}.</p>"
        f"<p>{paragraph}</p></article></body></html>"
    )
    await req.respond(200, body.encode(), HTML)


@router.route("/python-json-searxng/search")
async def python_json_searxng(req: Request) -> None:
    # What json.dumps writes: an engine cut a UTF-16 string in half (a lone surrogate,
    # escaped) and a score came out NaN. Both are legal for Python, not for strict JSON.
    base = f"{req.base_url}/pages"
    results = [
        {"url": f"{base}/cut", "title": "Cloud gaming \ud83d cut", "content": "Cloud gaming "
         "services stream games \udc00 from servers.", "engines": ["a"], "positions": [1],
         "score": float("nan")},
        {"url": f"{base}/fine", "title": "Cloud gaming explained", "content": "How cloud "
         "gaming streams games from data centres.", "engines": ["a"], "positions": [2],
         "score": 1.0},
        # URLs an engine got wrong: no host to point at, and one broken over lines.
        {"url": "http://[::1", "title": "Cloud gaming broken", "content": "Cloud gaming.",
         "engines": ["a"], "positions": [3]},
        {"url": f"{base}/two words\n/line", "title": "Cloud gaming split", "content":
         "Cloud gaming, split.", "engines": ["a"], "positions": [4]},
    ]  # fmt: skip
    body = json.dumps({"query": "cloud gaming", "results": results, "unresponsive_engines": []})
    await req.respond(200, body.encode(), JSON)


# What a query saying "hostile" finds: the memory attacks of ``pdf_bombs``, or pages that
# take trafilatura minutes once the pre-scan is lifted (``fetch.max_table_row_cells``).
HOSTILE_RESULTS = {
    "pdf-bombs": (
        "/pdf/xobject-chain?depth=8&fan=10",
        "/pdf/flate-bomb?mb=1",
        "/pdf/flate-bomb?mb=2",
        "/pdf/flate-bomb?mb=9",
    ),
    "slow-pages": tuple(f"/hostile/row?n=150000&copy={i}" for i in range(6)),
}
# What any other query finds: text PDFs the testbed writes (no shared data needed).
PLAIN_RESULTS = tuple(f"/pdf/text?pages=2&copy={i}" for i in range(4))


@router.route("/searxng/hostile/{kind}/search")
async def hostile_or_plain_searxng(req: Request) -> None:
    q = req.query.get("q", "")
    hostile = HOSTILE_RESULTS.get(req.params["kind"])
    if req.query.get("format") != "json" or hostile is None:
        await req.respond(400, b"format=json and a kind of HOSTILE_RESULTS, please", TEXT)
        return
    paths = hostile if "hostile" in q.lower() else PLAIN_RESULTS
    if (req.query.get("pageno") or "1") != "1":
        paths = ()
    results = [
        _result(req.base_url + path, f"{q} ({n})", f"About {q}: result {n}.", ["bing"], n, 1.0,
                None)
        for n, path in enumerate(paths, start=1)
    ]  # fmt: skip
    await req.json(200, envelope(q, results, []))
