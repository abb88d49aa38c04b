"""Pages that attack their reader: structures whose extraction cost grows with the square
of their size (``/hostile/{kind}?n=``), and a page that echoes its query string into its
text (``/reflect``), as a page would that tries to poison a cache keyed on a cleaned URL."""

from __future__ import annotations

import html
from urllib.parse import unquote_plus

from .asgi import HTML, TEXT, Request, Router

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
