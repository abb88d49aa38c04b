"""Brave Search's web API (``GET /res/v1/web/search``), with behaviours chosen by base path.

A backend configured with base URL ``{server}/brave[/<behaviour>]`` calls
``{base}/res/v1/web/search?q=...&count=..&offset=..`` with ``X-Subscription-Token``:

- ``/brave``                 normal answers (token ``test-key`` required, else 401)
- ``/brave/slow/{ms}``       the same, after ``ms`` milliseconds
- ``/brave/hang``            never answers
- ``/brave/status/{code}``   that status with Brave's JSON error shape
- ``/brave/garbage``         200 ``application/json`` whose body is not JSON
- ``/brave/empty``           200, no ``web`` key (what Brave does when nothing matches)
- ``/brave/flaky/{k}``       the first ``k`` requests answer 500, later ones normally
- ``/brave/fixed/{n}``       200 at once with ``n`` canned results (n <= 20)
- ``/brave/redirect``        302 to ``/brave`` (the API moved; backends do not follow)
- ``/brave/bad-encoding``    200 JSON labelled ``Content-Encoding: gzip`` but not gzipped

Like the real API: ``count`` is 1..20 (default 20), ``offset`` is a page offset 0..9
(results ``offset*count`` onwards), out-of-range values get 422; descriptions carry
``<strong>`` highlights; ``web`` is omitted when nothing matches.
"""

from __future__ import annotations

import re
from datetime import datetime
from typing import Any
from urllib.parse import urlsplit

from .asgi import Request, Router
from .corpus import corpus, query_terms

router = Router()

API_KEY = "test-key"
SEARCH = "/res/v1/web/search"

_RATE_HEADERS = [
    ("x-ratelimit-limit", "1, 15000"),
    ("x-ratelimit-policy", "1;w=1, 15000;w=2592000"),
    ("x-ratelimit-remaining", "0, 14999"),
    ("x-ratelimit-reset", "1, 1419704"),
]

_ERRORS = {
    400: ("REQUEST_INVALID", "The request is invalid."),
    401: ("SUBSCRIPTION_TOKEN_INVALID", "The provided subscription token is invalid."),
    402: ("PAYMENT_REQUIRED", "Payment required."),
    403: ("OPTION_NOT_IN_PLAN", "The option is not subscribed in the plan."),
    404: ("RESOURCE_NOT_FOUND", "Resource not found."),
    422: ("VALIDATION", "Unable to validate request parameter(s)."),
    429: ("RATE_LIMITED", "Request rate limit exceeded for plan."),
}


def error_body(status: int, detail: str | None = None) -> dict[str, Any]:
    code, default = _ERRORS.get(status, ("INTERNAL_ERROR", "Internal error."))
    return {
        "type": "ErrorResponse",
        "error": {
            "id": "00000000-0000-4000-8000-000000000000",
            "status": status,
            "code": code,
            "detail": detail or default,
            "meta": {"component": "api"},
        },
        "time": 1714521600,
    }


def _highlight(text: str, terms: list[str]) -> str:
    if not terms:
        return text
    rx = re.compile(r"\b(" + "|".join(map(re.escape, terms)) + r")\b", re.IGNORECASE)
    return rx.sub(r"<strong>\1</strong>", text)


def _age(published: str) -> str:
    d = datetime.fromisoformat(published)
    return f"{d:%B} {d.day}, {d.year}"


def web_result(base: str, pid: str, description: str) -> dict[str, Any]:
    page = corpus().pages[pid]
    url = f"{base}/pages/{pid}"
    parts = urlsplit(url)
    r: dict[str, Any] = {
        "title": page.title,
        "url": url,
        "is_source_local": False,
        "is_source_both": False,
        "description": description,
        "profile": {
            "name": parts.hostname,
            "url": url,
            "long_name": parts.netloc,
            "img": "",
        },
        "language": "en",
        "family_friendly": True,
        "type": "search_result",
        "subtype": "generic",
        "meta_url": {
            "scheme": parts.scheme,
            "netloc": parts.netloc,
            "hostname": parts.hostname,
            "favicon": "",
            "path": parts.path,
        },
    }
    if page.published:
        r["page_age"] = page.published
        r["age"] = _age(page.published)
    return r


def envelope(q: str, results: list[dict[str, Any]], more: bool) -> dict[str, Any]:
    body: dict[str, Any] = {
        "type": "search",
        "query": {
            "original": q,
            "show_strict_warning": False,
            "is_navigational": False,
            "is_news_breaking": False,
            "spellcheck_off": True,
            "country": "us",
            "bad_results": False,
            "should_fallback": False,
            "postal_code": "",
            "city": "",
            "header_country": "",
            "more_results_available": more,
            "state": "",
        },
        "mixed": {
            "type": "mixed",
            "main": [{"type": "web", "index": i, "all": False} for i in range(len(results))],
            "top": [],
            "side": [],
        },
    }
    if results:
        body["web"] = {"type": "search", "results": results, "family_friendly": True}
    return body


async def _check(req: Request, auth: bool = True) -> tuple[str, int, int] | None:
    """Validate like Brave; answer the error and return None when invalid."""
    if auth and req.header("x-subscription-token") != API_KEY:
        await req.json(401, error_body(401))
        return None
    q = req.query.get("q", "")
    try:
        count = int(req.query.get("count") or 20)
        offset = int(req.query.get("offset") or 0)
    except ValueError:
        count = offset = -1
    if not q.strip() or not 1 <= count <= 20 or not 0 <= offset <= 9:
        await req.json(422, error_body(422))
        return None
    return q, count, offset


async def answer(req: Request) -> None:
    checked = await _check(req)
    if checked is None:
        return
    q, count, offset = checked
    c = corpus().load()
    hits = c.search(q)
    start = offset * count
    terms = query_terms(q)
    base = req.base_url
    results = [
        web_result(base, h.id, _highlight(c.snippet(h.id, q), terms))
        for h in hits[start : start + count]
    ]
    await req.json(200, envelope(q, results, len(hits) > start + count), _RATE_HEADERS)


@router.route("/brave" + SEARCH)
async def normal(req: Request) -> None:
    await answer(req)


@router.route("/brave/slow/{ms:int}" + SEARCH)
async def slow(req: Request) -> None:
    if await req.pause(max(0, int(req.params["ms"])) / 1000):
        await answer(req)


@router.route("/brave/hang" + SEARCH)
async def hang(req: Request) -> None:
    await req.hang()


@router.route("/brave/status/{code:int}" + SEARCH)
async def status(req: Request) -> None:
    code = int(req.params["code"])
    if not 200 <= code <= 599:
        code = 500
    await req.json(code, error_body(code), _RATE_HEADERS if code == 429 else ())


@router.route("/brave/garbage" + SEARCH)
async def garbage(req: Request) -> None:
    await req.respond(
        200, b'{"type": "search", "web": {"results": [{"url": "http', "application/json"
    )


@router.route("/brave/empty" + SEARCH)
async def empty(req: Request) -> None:
    checked = await _check(req)
    if checked is not None:
        await req.json(200, envelope(checked[0], [], False), _RATE_HEADERS)


@router.route("/brave/flaky/{k:int}" + SEARCH)
async def flaky(req: Request) -> None:
    k = int(req.params["k"])
    if req.app.count(("brave-flaky", k)) <= k:
        await req.json(500, error_body(500))
    else:
        await answer(req)


@router.route("/brave/fixed/{n:int}" + SEARCH)
async def fixed(req: Request) -> None:
    checked = await _check(req)
    if checked is None:
        return
    c = corpus().load()
    n = max(0, min(20, int(req.params["n"])))
    base = req.base_url
    results = [web_result(base, pid, c.pages[pid].body[:200]) for pid in c.ids[:n]]
    await req.json(200, envelope(checked[0], results, False), _RATE_HEADERS)


@router.route("/brave/redirect" + SEARCH)
async def redirect(req: Request) -> None:
    await req.redirect(f"{req.base_url}/brave{SEARCH}")


@router.route("/brave/bad-encoding" + SEARCH)
async def bad_encoding(req: Request) -> None:
    body = b'{"type": "search", "web": {"results": []}}'
    await req.respond(200, body, "application/json", [("content-encoding", "gzip")])
