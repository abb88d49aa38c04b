"""SearXNG's JSON API (``/search?format=json``), with behaviours chosen by base path.

A backend configured with base URL ``{server}/searxng[/<behaviour>]`` calls
``{base}/search?q=...&format=json&pageno=...``:

- ``/searxng``                   normal answers from the in-memory search (10 per page)
- ``/searxng/slow/{ms}``         the same, after ``ms`` milliseconds
- ``/searxng/hang``              never answers
- ``/searxng/status/{code}``     that status, small HTML body
- ``/searxng/garbage``           200 ``application/json`` whose body is not JSON
- ``/searxng/html``              200 ``text/html`` page instead of JSON
- ``/searxng/unresponsive``      200, no results, its two engines unresponsive (its
  ``/config`` lists those two)
- ``/searxng/empty``             200, no results
- ``/searxng/fixed/{n}``         200 at once with ``n`` canned results (overhead benchmark)
- ``/searxng/fresh/{n}``         the same, the query ending every snippet: no two queries
  share a text (what a cache of texts or vectors sees in real traffic)
- ``/searxng/crowded/{n}/{e}``   a broken instance: ``n`` results, each named by the same
  ``e`` engines at positions that disagree (result i at i+1 .. i+e)
- ``/searxng/long-snippet/{kb}`` the canned 20 results, the first with a ``kb`` KB snippet
- ``/searxng/flaky/{k}``         the first ``k`` requests answer 500, later ones normally
- ``/searxng/fail-on/{word}``    500 for queries containing ``word``, normal answers otherwise
- ``/searxng/fail-after/{k}``    the first ``k`` requests answer normally, later ones 500
- ``/searxng/fail-at/{n-m-...}``  the requests numbered ``n``, ``m``... (from 1) answer 500,
  the others normally
- ``/searxng/strict-lang``       400 for a ``language`` other than en, de, all (as SearXNG)
- ``/searxng/mixed``             normal results with misbehaving URLs interleaved
- ``/searxng/delayed/{lo}/{hi}`` ten results on pages delayed lo..hi ms
- ``/searxng/together/{n}/{group}`` ``n`` results on pages that answer only when all ``n``
  are asked at once (``/together/...`` in pages.py)
- ``/searxng/held/{key}``      ten results, the last on a page held until released
  (``/held/{key}/...`` in pages.py)
- ``/searxng/foreign-loopback``  results on localhost / 127.0.0.2 (loopback, not allow-listed)
- ``/searxng/json-off``          403 for every search, as an instance without the JSON format
- ``/searxng/captcha``           200 with a Cloudflare challenge page instead of JSON
- ``/searxng/ratelimit/{s}``     429 with ``Retry-After: s``
- ``/searxng/engine-fails/{engine}/{how}``  normal answers, except that ``engine``, whenever
  it is asked (named in ``engines``, or no engines named), fails as ``how`` says
  (``captcha``, ``ratelimit``, ``suspended``, ``timeout``) and is in ``unresponsive_engines``
- ``/searxng/engine-fails-for/{engine}/{k}``  the same (CAPTCHA), for the first ``k`` times
  the engine is asked; answers normally after that

Every behaviour also answers ``{base}/config`` (SearXNG's ``/config``): the testbed's
engines (``corpus.ENGINES``), all enabled, category ``general``.
"""

from __future__ import annotations

import itertools
import json
from typing import Any
from urllib.parse import urlsplit

from .asgi import HTML, JSON, Request, Router
from .blocked import CLOUDFLARE
from .corpus import ENGINES, Corpus, corpus

router = Router()

PER_PAGE = 10

# URL paths (on the testbed itself) that misbehave when fetched; ``mixed`` results use them.
MISBEHAVING_PATHS = (
    "/hang",
    "/status/500",
    "/gzip-bomb",
    "/redirect-loop/a",
    "/wrong-type",
    "/huge",
    "/drip?bytes=100000&interval_ms=200",
    "/status/404",
    "/image",
    "/redirect-to?url=http://169.254.169.254/latest/meta-data/",
)


def envelope(query: str, results: list[dict[str, Any]], unresponsive: list[list[str]]) -> dict:
    """A SearXNG JSON answer around ``results`` (also used by bench/ranking_parts)."""
    return {
        "query": query,
        "number_of_results": 0,
        "results": results,
        "answers": [],
        "corrections": [],
        "infoboxes": [],
        "suggestions": [],
        "unresponsive_engines": unresponsive,
    }


def result(c: Corpus, base: str, pid: str, query: str, rank: int, score: float) -> dict[str, Any]:
    page = c.pages[pid]
    url = f"{base}/pages/{pid}"
    return _result(
        url, page.title, c.snippet(pid, query), page.engines, rank, score, page.published
    )


def _result(
    url: str,
    title: str,
    content: str,
    engines: list[str],
    rank: int,
    score: float,
    published: str | None,
) -> dict[str, Any]:
    parts = urlsplit(url)
    return {
        "url": url,
        "title": title,
        "content": content,
        "engine": engines[0],
        "engines": engines,
        "positions": [rank + i for i in range(len(engines))],
        "score": score,
        "category": "general",
        "publishedDate": published,
        "parsed_url": [parts.scheme, parts.netloc, parts.path, "", parts.query, parts.fragment],
        "template": "default.html",
        "thumbnail": "",
        "img_src": "",
        "priority": "",
    }


def search_results(base: str, query: str, pageno: int) -> list[dict[str, Any]]:
    c = corpus().load()
    hits = c.search(query)
    start = (pageno - 1) * PER_PAGE
    return [
        result(c, base, h.id, query, start + i + 1, h.score)
        for i, h in enumerate(hits[start : start + PER_PAGE])
    ]


async def _check(req: Request) -> tuple[str, int] | None:
    """Validate like SearXNG does; answer the error and return None when invalid."""
    if req.query.get("format") != "json":
        await req.respond(403, b"<html><body><h1>403 Forbidden</h1></body></html>", HTML)
        return None
    q = req.query.get("q", "")
    if not q.strip():
        await req.json(400, {"error": "No query"})
        return None
    try:
        pageno = int(req.query.get("pageno") or 1)
    except ValueError:
        pageno = 0
    if pageno < 1:
        await req.json(400, {"error": "search error: invalid pageno"})
        return None
    return q, pageno


async def answer(req: Request) -> None:
    checked = await _check(req)
    if checked is None:
        return
    q, pageno = checked
    await req.json(200, envelope(q, search_results(req.base_url, q, pageno), []))


@router.route("/searxng/search")
async def normal(req: Request) -> None:
    await answer(req)


@router.route("/searxng/slow/{ms:int}/search")
async def slow(req: Request) -> None:
    if await req.pause(max(0, int(req.params["ms"])) / 1000):
        await answer(req)


_unreliable_calls = itertools.count()


@router.route("/searxng/unreliable/{fail:int}/{hang:int}/search")
async def unreliable(req: Request) -> None:
    """Of every 100 calls, the first ``fail`` answer HTTP 500 and the next ``hang`` never
    answer; the rest answer normally (a fixed, repeating pattern: no randomness)."""
    slot = next(_unreliable_calls) % 100
    fail, hang = int(req.params["fail"]), int(req.params["hang"])
    if slot < fail:
        await req.respond(500, b"<html><body><h1>Error 500</h1></body></html>")
    elif slot < fail + hang:
        await req.hang()
    else:
        await answer(req)


@router.route("/searxng/hang/search")
async def hang(req: Request) -> None:
    await req.hang()


@router.route("/searxng/status/{code:int}/search")
async def status(req: Request) -> None:
    code = int(req.params["code"])
    if not 200 <= code <= 599:
        code = 500
    body = f"<html><head><title>{code}</title></head><body><h1>Error {code}</h1></body></html>"
    await req.respond(code, body.encode())


@router.route("/searxng/garbage/search")
async def garbage(req: Request) -> None:
    await req.respond(200, b'{"query": "x", "results": [{"url": "http://', JSON)


@router.route("/searxng/html/search")
async def html_page(req: Request) -> None:
    body = (
        "<!DOCTYPE html><html><head><title>SearXNG</title></head><body>"
        "<form id='search' action='/search'><input name='q'></form>"
        "<article class='result'><h3><a href='https://example.org/'>Example</a></h3></article>"
        "</body></html>"
    )
    await req.respond(200, body.encode())


# /searxng/unresponsive: every engine of the instance failed, each as it says.
UNRESPONSIVE = {"google": "timeout", "bing": "CAPTCHA"}


@router.route("/searxng/unresponsive/search")
async def unresponsive(req: Request) -> None:
    checked = await _check(req)
    if checked is not None:
        await req.json(200, envelope(checked[0], [], [list(e) for e in UNRESPONSIVE.items()]))


@router.route("/searxng/empty/search")
async def empty(req: Request) -> None:
    checked = await _check(req)
    if checked is not None:
        await req.json(200, envelope(checked[0], [], []))


@router.route("/searxng/flaky/{k:int}/search")
async def flaky(req: Request) -> None:
    if req.app.count(("searxng-flaky", int(req.params["k"]))) <= int(req.params["k"]):
        await req.respond(500, b"<html><body><h1>500 Internal Server Error</h1></body></html>")
    else:
        await answer(req)


@router.route("/searxng/fail-after/{k:int}/search")
async def fail_after(req: Request) -> None:
    if req.app.count(("searxng-fail-after", int(req.params["k"]))) > int(req.params["k"]):
        await req.respond(500, b"<html><body><h1>500 Internal Server Error</h1></body></html>")
    else:
        await answer(req)


@router.route("/searxng/fail-at/{numbers}/search")
async def fail_at(req: Request) -> None:
    numbers = req.params["numbers"]
    failing = {int(n) for n in numbers.split("-")}
    if req.app.count(("searxng-fail-at", numbers)) in failing:
        await req.respond(500, b"<html><body><h1>500 Internal Server Error</h1></body></html>")
    else:
        await answer(req)


@router.route("/searxng/strict-lang/search")
async def strict_lang(req: Request) -> None:
    """Like SearXNG, a ``language`` it does not know is a 400 (only en and de known)."""
    if req.query.get("language", "en").split("-")[0] not in ("en", "de", "all"):
        await req.json(400, {"error": "search error: invalid language"})
    else:
        await answer(req)


@router.route("/searxng/fail-on/{word}/search")
async def fail_on(req: Request) -> None:
    if req.params["word"].lower() in req.query.get("q", "").lower():
        await req.respond(500, b"<html><body><h1>500 Internal Server Error</h1></body></html>")
    else:
        await answer(req)


@router.route("/searxng/mixed/search")
async def mixed(req: Request) -> None:
    checked = await _check(req)
    if checked is None:
        return
    q, pageno = checked
    base = req.base_url
    good = search_results(base, q, pageno)
    out: list[dict[str, Any]] = []
    for i, r in enumerate(good):
        out.append(r)
        path = MISBEHAVING_PATHS[i % len(MISBEHAVING_PATHS)]
        bad = _result(
            base + path,
            f"Misbehaving {path}",
            f"This result points at {path}.",
            ["bing"],
            len(out) + 1,
            0.1,
            None,
        )
        out.append(bad)
    for i, r in enumerate(out):
        r["positions"] = [i + 1]
    await req.json(200, envelope(q, out, []))


@router.route("/searxng/foreign-loopback/search")
async def foreign_loopback(req: Request) -> None:
    """Normal results whose URLs name this server as ``localhost`` and ``127.0.0.2``:
    loopback, but not the allow-listed ``127.0.0.1:PORT``, so a fetch must refuse them."""
    checked = await _check(req)
    if checked is None:
        return
    q, pageno = checked
    port = urlsplit(req.base_url).port
    out = search_results(req.base_url, q, pageno)[:4]
    for i, r in enumerate(out):
        host = "localhost" if i % 2 == 0 else "127.0.0.2"
        r["url"] = r["url"].replace(f"127.0.0.1:{port}", f"{host}:{port}")
    await req.json(200, envelope(q, out, []))


@router.route("/searxng/delayed/{low}/{high}/search")
async def delayed(req: Request) -> None:
    """Ten results whose pages answer after delays spread evenly from ``low`` to ``high``
    ms (``/slow/{ms}/pages/{id}``): the full-mode latency benchmark's search."""
    checked = await _check(req)
    if checked is None:
        return
    q, _ = checked
    low, high = int(req.params["low"]), int(req.params["high"])
    ids = sorted(corpus().load().pages)[:10]
    out = []
    for i, pid in enumerate(ids):
        delay = low + (high - low) * i // max(1, len(ids) - 1)
        r = result(corpus(), req.base_url, pid, q, i + 1, 1.0 / (i + 1))
        r["url"] = f"{req.base_url}/slow/{delay}/pages/{pid}"
        out.append(r)
    await req.json(200, envelope(q, out, []))


@router.route("/searxng/held/{key}/search")
async def held(req: Request) -> None:
    """Ten results; the tenth's page answers only once the test releases it
    (``/held/{key}/pages/{id}``): what was read before that, was read meanwhile."""
    checked = await _check(req)
    if checked is None:
        return
    q, _ = checked
    out = []
    for i, pid in enumerate(sorted(corpus().load().pages)[:10]):
        r = result(corpus(), req.base_url, pid, q, i + 1, 1.0 / (i + 1))
        if i == 9:
            r["url"] = f"{req.base_url}/held/{req.params['key']}/pages/{pid}"
        out.append(r)
    await req.json(200, envelope(q, out, []))


@router.route("/searxng/together/{n}/{group}/search")
async def together(req: Request) -> None:
    """``n`` results whose pages answer once all ``n`` are asked at once."""
    checked = await _check(req)
    if checked is None:
        return
    q, _ = checked
    n, group = int(req.params["n"]), req.params["group"]
    out = []
    for i, pid in enumerate(sorted(corpus().load().pages)[:n]):
        r = result(corpus(), req.base_url, pid, q, i + 1, 1.0 / (i + 1))
        r["url"] = f"{req.base_url}/together/{n}/{group}/pages/{pid}"
        out.append(r)
    await req.json(200, envelope(q, out, []))


# ---- fixed: canned answers, precomputed bytes ------------------------------------------

_fixed_cache: dict[tuple[str, int, bool], bytes] = {}
# Where ``fresh`` answers put the query: in no corpus text, and JSON-safe as it is.
_QUERY_MARK = "@@query@@"


def canned_results(base: str, n: int) -> list[dict[str, Any]]:
    """``n`` results made from the corpus pages in order, the same on every call, merged
    as a real SearXNG merges: each engine ranks its own results 1, 2, 3, ...; a result's
    ``engines`` is a set (here in a fixed order of its own) and its ``positions`` follow
    the order in which the engines answered, so the two lists are not aligned; ``score``
    is SearXNG's (hits x the sum of 1/position) and the results come best first."""
    c = corpus().load()
    results = []
    ranks: dict[str, int] = {}  # how many results each engine has ranked so far
    for i in range(n):
        pid = c.ids[i % len(c.ids)]
        page = c.pages[pid]
        url = f"{base}/pages/{pid}" + (f"?v={i // len(c.ids)}" if i >= len(c.ids) else "")
        body = " ".join(page.body.split())[:200]
        engines = page.engines
        for engine in engines:
            ranks[engine] = ranks.get(engine, 0) + 1
        positions = [ranks[e] for e in sorted(engines, key=_ANSWERED.index)]
        raw = _result(url, page.title, body, engines, 0, 0.0, page.published)
        raw["engines"] = sorted(engines, key=_SET_ORDER.index)
        raw["positions"] = positions
        raw["score"] = round(len(positions) * sum(1.0 / p for p in positions), 4)
        results.append(raw)
    return sorted(results, key=lambda r: -r["score"])


# The order the canned engines' answers arrive in, and the order a set of their names
# comes out of SearXNG's JSON: two different orders, as on a real instance.
_ANSWERED = ("google", "duckduckgo", "brave", "bing", "startpage", "qwant")
_SET_ORDER = ("qwant", "bing", "startpage", "brave", "google", "duckduckgo")


def fixed_tail(base: str, n: int, query_in_snippets: bool = False) -> bytes:
    """Everything after ``{"query": <q>`` for ``n`` canned results (cached); with
    ``query_in_snippets`` every snippet ends with ``_QUERY_MARK``, for the query."""
    key = (base, n, query_in_snippets)
    tail = _fixed_cache.get(key)
    if tail is None:
        results = canned_results(base, n)
        if query_in_snippets:
            for r in results:
                r["content"] = f"{r['content']} {_QUERY_MARK}"
        env = envelope("", results, [])
        del env["query"]
        tail = b", " + json.dumps(env, ensure_ascii=False).encode()[1:]
        _fixed_cache[key] = tail
    return tail


@router.route("/searxng/fixed/{n:int}/search")
async def fixed(req: Request) -> None:
    if req.query.get("format") != "json":
        await req.respond(403, b"<html><body><h1>403 Forbidden</h1></body></html>", HTML)
        return
    n = max(0, int(req.params["n"]))
    q = req.query.get("q", "")
    body = b'{"query": ' + json.dumps(q, ensure_ascii=False).encode() + fixed_tail(req.base_url, n)
    await req.respond(200, body, JSON)


@router.route("/searxng/fresh/{n:int}/search")
async def fresh(req: Request) -> None:
    if req.query.get("format") != "json":
        await req.respond(403, b"<html><body><h1>403 Forbidden</h1></body></html>", HTML)
        return
    q = req.query.get("q", "")
    quoted = json.dumps(q, ensure_ascii=False).encode()
    # The canned bytes with the query spliced in: as cheap as ``fixed``, so that under
    # load the testbed does not take the CPU the server measured needs.
    tail = fixed_tail(req.base_url, max(0, int(req.params["n"])), query_in_snippets=True)
    body = b'{"query": ' + quoted + tail.replace(_QUERY_MARK.encode(), quoted[1:-1])
    await req.respond(200, body, JSON)


@router.route("/searxng/crowded/{n:int}/{e:int}/search")
async def crowded(req: Request) -> None:
    n, e = max(0, int(req.params["n"])), max(1, int(req.params["e"]))
    engines = [f"engine{k}" for k in range(e)]
    results = [
        {"url": f"{req.base_url}/pages/crowded-{i}", "title": f"Result {i}",
         "content": f"Snippet of result {i}", "engine": engines[0], "engines": engines,
         "positions": list(range(i + 1, i + 1 + e)), "score": 1.0 / (i + 1)}
        for i in range(n)
    ]  # fmt: skip
    await req.json(200, envelope(req.query.get("q", ""), results, []))


@router.route("/searxng/long-snippet/{kb:int}/search")
async def long_snippet(req: Request) -> None:
    results = canned_results(req.base_url, 20)
    size = max(0, int(req.params["kb"])) * 1024
    # Words never seen before (an embedder that remembers words gains nothing).
    text, length = [], 0
    for word in (f"gaming{i:x}" for i in itertools.count()):
        if length >= size:
            break
        text.append(word)
        length += len(word) + 1
    results[0]["content"] = " ".join(text)
    await req.json(200, envelope(req.query.get("q", ""), results, []))


@router.route("/searxng/long-url/{n:int}/{chars:int}/search")
async def long_url(req: Request) -> None:
    """``n`` canned results, each behind a result link ``chars`` long, as Google gives
    them (a redirect carrying the target and tracking parameters)."""
    results = canned_results(req.base_url, max(0, int(req.params["n"])))
    for r in results:
        target = r["url"].replace(":", "%3A").replace("/", "%2F")
        link = f"https://www.google.com/url?sa=t&source=web&rct=j&url={target}&ved="
        link += ("0ahUKEwjX" * 256)[: max(0, int(req.params["chars"]) - len(link))]
        parts = urlsplit(link)
        r["url"] = link
        r["parsed_url"] = [parts.scheme, parts.netloc, parts.path, "", parts.query, ""]
    await req.json(200, envelope(req.query.get("q", ""), results, []))


# ---- engine failures, /config ---------------------------------------------------------

# How an engine fails -> SearXNG's message for it (searx/webutils.py).
ENGINE_FAILURES = {
    "captcha": "CAPTCHA",
    "ratelimit": "too many requests",
    "suspended": "Suspended: CAPTCHA",
    "timeout": "timeout",
}


@router.route("/searxng/config")
@router.route("/searxng/{behaviour:path}/config")
async def config(req: Request) -> None:
    # /searxng/unresponsive stands for an instance whose every engine failed: its own.
    names = UNRESPONSIVE if req.params.get("behaviour") == "unresponsive" else ENGINES
    engines = [{"name": e, "categories": ["general"], "enabled": True} for e in names]
    await req.json(200, {"engines": engines, "categories": ["general"], "version": "testbed"})


@router.route("/searxng/json-off/search")
async def json_off(req: Request) -> None:
    await req.respond(403, b"<html><body><h1>403 Forbidden</h1></body></html>", HTML)


@router.route("/searxng/captcha/search")
async def captcha(req: Request) -> None:
    await req.respond(200, CLOUDFLARE.encode(), HTML)


@router.route("/searxng/ratelimit/{seconds:int}/search")
async def ratelimit(req: Request) -> None:
    headers = [("Retry-After", req.params["seconds"])]
    await req.respond(
        429, b"<html><body><h1>429 Too Many Requests</h1></body></html>", HTML, headers
    )


def _asked(req: Request) -> list[str]:
    named = [e for e in req.query.get("engines", "").split(",") if e]
    return named or list(ENGINES)


async def _answer_without(req: Request, engine: str, message: str | None) -> None:
    """Normal results from the asked engines; ``engine``, if asked, fails with ``message``
    (None: it answers)."""
    checked = await _check(req)
    if checked is None:
        return
    q, pageno = checked
    asked = set(_asked(req))
    failing = engine in asked and message is not None
    answering = asked - {engine} if failing else asked
    out = []
    for r in search_results(req.base_url, q, pageno):
        pairs = [
            (e, p) for e, p in zip(r["engines"], r["positions"], strict=True) if e in answering
        ]
        if pairs:
            r["engines"], r["positions"] = [e for e, _ in pairs], [p for _, p in pairs]
            r["engine"] = pairs[0][0]
            out.append(r)
    await req.json(200, envelope(q, out, [[engine, message]] if failing and message else []))


@router.route("/searxng/engine-fails/{engine}/{how}/search")
async def engine_fails(req: Request) -> None:
    await _answer_without(
        req, req.params["engine"], ENGINE_FAILURES.get(req.params["how"], "HTTP error")
    )


@router.route("/searxng/engine-fails-for/{engine}/{k:int}/search")
async def engine_fails_for(req: Request) -> None:
    engine, k = req.params["engine"], int(req.params["k"])
    fails = engine in _asked(req) and req.app.count(("engine-fails-for", engine, k)) <= k
    await _answer_without(req, engine, "CAPTCHA" if fails else None)


@router.route("/searxng/pdf/search")
async def pdf_results(req: Request) -> None:
    """Two PDF results on the testbed: one with text, one scanned (no text layer)."""
    checked = await _check(req)
    if checked is None:
        return
    q, _ = checked
    results = [
        _result(f"{req.base_url}/pdf/text?pages=2", "Manual (PDF)", f"{q} manual", ["pdf"], 1,
                2.0, None),
        _result(f"{req.base_url}/pdf/scanned", "Scan (PDF)", f"{q} scan", ["pdf"], 2, 1.0, None),
    ]  # fmt: skip
    await req.json(200, envelope(q, results, []))
