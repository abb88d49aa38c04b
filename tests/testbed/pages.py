"""Real pages: ``/pages/{id}`` serves an AEB page, ``/slow/{ms}/pages/{id}`` the same late."""

from __future__ import annotations

from .asgi import HTML, TEXT, Request, Router
from .corpus import corpus

router = Router()

_content_types: dict[str, str] = {}


def page_content_type(pid: str, raw: bytes) -> str:
    """``text/html; charset=utf-8`` when the bytes are valid UTF-8 (all AEB pages are),
    else plain ``text/html`` so the client has to sniff."""
    ctype = _content_types.get(pid)
    if ctype is None:
        try:
            raw.decode("utf-8")
            ctype = HTML
        except UnicodeDecodeError:
            ctype = "text/html"
        _content_types[pid] = ctype
    return ctype


async def serve_page(req: Request, pid: str) -> None:
    raw = corpus().html(pid)
    if raw is None:
        await req.respond(404, b"<html><body><h1>404 Not Found</h1></body></html>", HTML)
        return
    await req.respond(200, raw, page_content_type(pid, raw))


@router.route("/pages/{id}")
async def page(req: Request) -> None:
    await serve_page(req, req.params["id"])


@router.route("/slow/{ms:int}/pages/{id}")
async def slow_page(req: Request) -> None:
    ms = int(req.params["ms"])
    if ms < 0:
        await req.respond(400, b"negative delay", TEXT)
        return
    if await req.pause(ms / 1000):
        await serve_page(req, req.params["id"])
