"""Real pages: ``/pages/{id}`` serves an AEB page, ``/slow/{ms}/pages/{id}`` the same late,
``/together/{n}/{group}/pages/{id}`` the same once ``n`` requests of ``group`` wait at once
(503 if they never do within ``TOGETHER_WAIT_S``: the client did not ask them together),
``/held/{key}/pages/{id}`` the same once ``/held/{key}/release`` is asked (a test says when
that download ends; ``/held/{key}/state`` tells whether one is waiting).
Made pages with one trait each: ``/shaped/dated`` (a date in a ``<time>`` mid-sentence),
``/shaped/deep?n=N`` (the article's paragraphs under N nested ``<div>``)."""

from __future__ import annotations

import asyncio

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


SHAPED_PARAGRAPHS = (
    "The committee met in the spring to settle the rules for the coming season of games.",
    "The vote was held on <time datetime='2024-03-05'>5 March 2024</time> in Geneva, and "
    "the rest of the delegates signed the agreement the same afternoon.",
    "Three clubs asked for more time, and the committee gave them until the summer break.",
)


def _shaped_page(paragraphs: str, depth: int = 0) -> bytes:
    body = "<div>" * depth + paragraphs + "</div>" * depth
    head = "<!doctype html><html><head><title>Shaped</title></head>"
    return f"{head}<body>{body}</body></html>".encode()


@router.route("/shaped/dated")
async def dated(req: Request) -> None:
    """Three paragraphs, the middle one with a date in a <time> element."""
    paragraphs = "".join(f"<p>{p}</p>" for p in SHAPED_PARAGRAPHS)
    await req.respond(200, _shaped_page(f"<article>{paragraphs}</article>"), HTML)


@router.route("/shaped/deep")
async def deep(req: Request) -> None:
    """Three paragraphs nested ``n`` <div> deep."""
    try:
        depth = int(req.query.get("n") or 300)
    except ValueError:
        depth = -1
    if not 0 <= depth <= 100_000:
        await req.respond(400, b"n must be 0-100000", TEXT)
        return
    paragraphs = "".join(f"<p>{p}</p>" for p in SHAPED_PARAGRAPHS)
    await req.respond(200, _shaped_page(paragraphs, depth), HTML)


TOGETHER_WAIT_S = 10.0
# group -> (requests waiting, set once ``n`` of them are): one entry per group, ever.
_together: dict[str, tuple[list[int], asyncio.Event]] = {}


@router.route("/together/{n:int}/{group}/pages/{id}")
async def together_page(req: Request) -> None:
    """The page, once ``n`` requests of the group are in at once: a client that asks them
    one after another, or fewer at a time, gets 503 for each after ``TOGETHER_WAIT_S``."""
    waiting, all_in = _together.setdefault(req.params["group"], ([0], asyncio.Event()))
    waiting[0] += 1
    if waiting[0] >= int(req.params["n"]):
        all_in.set()
    try:
        await asyncio.wait_for(all_in.wait(), TOGETHER_WAIT_S)
    except TimeoutError:
        await req.respond(503, b"the other requests of the group never came", TEXT)
        return
    finally:
        waiting[0] -= 1
    await serve_page(req, req.params["id"])


HELD_WAIT_S = 60.0
# key -> (requests waiting, set once released): one entry per key, ever.
_held: dict[str, tuple[list[int], asyncio.Event]] = {}


@router.route("/held/{key}/pages/{id}")
async def held_page(req: Request) -> None:
    """The page, once ``/held/{key}/release`` is asked; 503 if it never is within
    ``HELD_WAIT_S``. A test decides when this download ends, without a clock."""
    waiting, released = _held.setdefault(req.params["key"], ([0], asyncio.Event()))
    waiting[0] += 1
    try:
        await asyncio.wait_for(released.wait(), HELD_WAIT_S)
    except TimeoutError:
        await req.respond(503, b"never released", TEXT)
        return
    finally:
        waiting[0] -= 1
    await serve_page(req, req.params["id"])


@router.route("/held/{key}/state")
async def held_state(req: Request) -> None:
    """``waiting`` while a request for a held page of ``key`` waits, ``released`` once
    released, else ``idle``."""
    waiting, released = _held.setdefault(req.params["key"], ([0], asyncio.Event()))
    state = "released" if released.is_set() else "waiting" if waiting[0] else "idle"
    await req.respond(200, state.encode(), TEXT)


@router.route("/held/{key}/release")
async def release_held(req: Request) -> None:
    """Let the held pages of ``key`` answer (now and from now on)."""
    _held.setdefault(req.params["key"], ([0], asyncio.Event()))[1].set()
    await req.respond(200, b"released", TEXT)
