"""Pages that misbehave: hangs, error statuses, huge and bomb bodies, slow drips,
redirect chains and loops, wrong or mislabelled content types, byte-order marks and odd
charsets (``/bom/{kind}``, ``/charset/{label}``, ``/legacy-text/{name}``), Markdown
(``/markdown``), never-shown markup (``/template``)."""

from __future__ import annotations

import asyncio
import json
import struct
import threading
import zlib
from collections.abc import AsyncIterator

from .asgi import HTML, TEXT, Request, Router
from .corpus import corpus

router = Router()

MB = 1024 * 1024


def _int(req: Request, name: str, default: int, lo: int = 0, hi: int = 1 << 40) -> int | None:
    raw = req.query.get(name)
    if raw is None or raw == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        return None
    return value if lo <= value <= hi else None


@router.route("/hang")
async def hang(req: Request) -> None:
    await req.hang()


@router.route("/status/{code:int}")
async def status(req: Request) -> None:
    code = int(req.params["code"])
    if not 200 <= code <= 599:
        await req.respond(400, b"status must be 200-599", TEXT)
        return
    body = f"<html><head><title>{code}</title></head><body><h1>Status {code}</h1></body></html>"
    # ?retry_after=V: a Retry-After header (seconds or an HTTP date), as 429 and 503 send.
    retry_after = req.query.get("retry_after")
    headers = [("retry-after", retry_after)] if retry_after else []
    await req.respond(code, body.encode(), headers=headers)


# ---- /huge ---------------------------------------------------------------------------

_HUGE_HEAD = b"<!doctype html><html><head><title>Huge page</title></head><body>\n"
_HUGE_TAIL = b"</body></html>\n"
_HUGE_LINE = b"<p>All work and no play makes Jack a dull boy. " * 8 + b"</p>\n"
_HUGE_CHUNK = (_HUGE_LINE * (64 * 1024 // len(_HUGE_LINE) + 1))[: 64 * 1024]


async def _huge_chunks(n: int) -> AsyncIterator[bytes]:
    if n < len(_HUGE_HEAD) + len(_HUGE_TAIL):
        yield (_HUGE_HEAD + _HUGE_TAIL)[:n]
        return
    yield _HUGE_HEAD
    left = n - len(_HUGE_HEAD) - len(_HUGE_TAIL)
    while left > 0:
        chunk = _HUGE_CHUNK if left >= len(_HUGE_CHUNK) else _HUGE_CHUNK[:left]
        left -= len(chunk)
        yield chunk
    yield _HUGE_TAIL


@router.route("/huge")
async def huge(req: Request) -> None:
    n = _int(req, "bytes", 50 * MB)
    if n is None:
        await req.respond(400, b"bad bytes", TEXT)
        return
    await req.stream(200, _huge_chunks(n), HTML, length=n)


# ---- /gzip-bomb ----------------------------------------------------------------------

GZIP_BOMB_SIZE = 1 << 30  # decompressed size, 1 GiB
_bomb: bytes | None = None
_bomb_lock = threading.Lock()


def gzip_bomb() -> bytes:
    """A ~1 MB gzip member that inflates to 1 GiB of HTML-ish text (built once, cached).

    A 1 MiB block of one repeated byte is deflated once after a full flush; since a full
    flush resets the compressor's state, the same compressed segment is valid again and
    again, so it is repeated instead of compressing a gigabyte.
    """
    global _bomb
    with _bomb_lock:
        if _bomb is not None:
            return _bomb
        head = b"<!doctype html><html><head><title>Bomb</title></head><body>\n<p>"
        block = b"A" * MB
        n = (GZIP_BOMB_SIZE - len(head)) // MB - 1
        tail = b"A" * (GZIP_BOMB_SIZE - len(head) - n * MB - 32) + b"</p>\n</body></html>\n"
        tail = tail.ljust(GZIP_BOMB_SIZE - len(head) - n * MB, b"\n")
        comp = zlib.compressobj(9, zlib.DEFLATED, -15, 9)
        first = comp.compress(head) + comp.flush(zlib.Z_FULL_FLUSH)
        segment = comp.compress(block) + comp.flush(zlib.Z_FULL_FLUSH)
        last = comp.compress(tail) + comp.flush()
        crc = zlib.crc32(head)
        for _ in range(n):
            crc = zlib.crc32(block, crc)
        crc = zlib.crc32(tail, crc)
        header = b"\x1f\x8b\x08\x00\x00\x00\x00\x00\x02\xff"
        trailer = struct.pack("<II", crc & 0xFFFFFFFF, GZIP_BOMB_SIZE & 0xFFFFFFFF)
        _bomb = b"".join([header, first, segment * n, last, trailer])
        return _bomb


async def _chunks(data: bytes, size: int = 64 * 1024) -> AsyncIterator[bytes]:
    view = memoryview(data)
    for i in range(0, len(data), size):
        yield bytes(view[i : i + size])


@router.route("/gzip-bomb")
async def bomb(req: Request) -> None:
    data = _bomb if _bomb is not None else await asyncio.to_thread(gzip_bomb)
    await req.stream(
        200, _chunks(data), "text/html", length=len(data), headers=[("content-encoding", "gzip")]
    )


# ---- /drip ---------------------------------------------------------------------------


async def _drip_chunks(req: Request, n: int, interval: float) -> AsyncIterator[bytes]:
    body = (_HUGE_HEAD + _HUGE_LINE * (n // len(_HUGE_LINE) + 1))[: max(0, n - len(_HUGE_TAIL))]
    body = (body + _HUGE_TAIL)[:n]
    for i in range(0, n, 10):
        if i:
            await asyncio.sleep(interval)
            if req.app.shutting_down.is_set():  # finish at once so shutdown is quick
                yield body[i:]
                return
        yield body[i : i + 10]


@router.route("/drip")
async def drip(req: Request) -> None:
    n = _int(req, "bytes", 1000)
    ms = _int(req, "interval_ms", 100)
    if n is None or ms is None:
        await req.respond(400, b"bad bytes or interval_ms", TEXT)
        return
    await req.stream(200, _drip_chunks(req, n, ms / 1000), HTML, length=n)


# ---- redirects -----------------------------------------------------------------------


@router.route("/redirect-loop/a")
async def loop_a(req: Request) -> None:
    await req.redirect("/redirect-loop/b")


@router.route("/redirect-loop/b")
async def loop_b(req: Request) -> None:
    await req.redirect("/redirect-loop/a")


@router.route("/redirect/{n:int}")
async def chain(req: Request) -> None:
    n = int(req.params["n"])
    if n < 0:
        await req.respond(400, b"negative n", TEXT)
    elif n == 0:
        await req.redirect(f"/pages/{corpus().first_id}")
    else:
        await req.redirect(f"/redirect/{n - 1}")


@router.route("/redirect-to")
async def redirect_to(req: Request) -> None:
    url = req.query.get("url")
    if not url:
        await req.respond(400, b"missing url", TEXT)
        return
    await req.redirect(url)


# ---- wrong or mislabelled types ------------------------------------------------------

# An empty ZIP archive with a few KB of comment: a type no reader handles (PDFs are read
# now; see testbed/pdfs.py).
_ZIP_COMMENT = b"padding so the archive is a few kilobytes long. " * 80
_ZIP = b"PK\x05\x06" + b"\x00" * 16 + len(_ZIP_COMMENT).to_bytes(2, "little") + _ZIP_COMMENT


def _png(width: int = 16, height: int = 16) -> bytes:
    def chunk(kind: bytes, data: bytes) -> bytes:
        return (
            struct.pack(">I", len(data))
            + kind
            + data
            + struct.pack(">I", zlib.crc32(kind + data) & 0xFFFFFFFF)
        )

    rows = b"".join(b"\x00" + b"\xcc\x33\x33" * width for _ in range(height))
    return (
        b"\x89PNG\r\n\x1a\n"
        + chunk(b"IHDR", struct.pack(">IIBBBBB", width, height, 8, 2, 0, 0, 0))
        + chunk(b"IDAT", zlib.compress(rows))
        + chunk(b"IEND", b"")
    )


_PNG = _png()

TEXT_PAGE = (
    "Plain text page\n\n"
    "This document is served as text/plain rather than HTML. It has a few paragraphs so "
    "that an extractor has something to keep.\n\n"
    "The second paragraph talks about the testbed: a local web on 127.0.0.1 that speaks the "
    "real wire formats of SearXNG and Brave and serves real news pages.\n\n"
    "The third paragraph has non-ASCII text to check decoding: café, naïve, Zürich, 東京.\n"
)

MISLABELLED = json.dumps(
    {"note": "this is JSON served as text/html", "items": [1, 2, 3], "ok": True}
).encode()


@router.route("/wrong-type")
async def wrong_type(req: Request) -> None:
    await req.respond(200, _ZIP, "application/zip")


@router.route("/image")
async def image(req: Request) -> None:
    await req.respond(200, _PNG, "image/png")


@router.route("/text")
async def text(req: Request) -> None:
    await req.respond(200, TEXT_PAGE.encode("utf-8"), TEXT)


@router.route("/mislabelled")
async def mislabelled(req: Request) -> None:
    await req.respond(200, MISLABELLED, "text/html")


# ---- byte-order marks, charsets and markup that is never shown --------------------------

# (content type, body) by kind: a byte-order mark that contradicts the header, or that the
# header does not mention. Each body is TEXT_PAGE (or HTML around it) after its mark.
BOM_PAGES = {
    "utf8-text": ("text/plain; charset=utf-8", b"\xef\xbb\xbf" + TEXT_PAGE.encode("utf-8")),
    "utf16le-text": ("text/plain", b"\xff\xfe" + TEXT_PAGE.encode("utf-16-le")),
    "utf16be-text": ("text/plain; charset=utf-8", b"\xfe\xff" + TEXT_PAGE.encode("utf-16-be")),
    "utf8-html-as-latin1": (
        "text/html; charset=iso-8859-1",
        b"\xef\xbb\xbf"
        + (
            "<!doctype html><html><head><title>BOM</title></head><body><article>"
            + "".join(f"<p>{p}</p>" for p in TEXT_PAGE.split("\n\n"))
            + "</article></body></html>"
        ).encode("utf-8"),
    ),
}


@router.route("/bom/{kind}")
async def bom(req: Request) -> None:
    page = BOM_PAGES.get(req.params["kind"])
    if page is None:
        await req.respond(400, b"unknown kind", TEXT)
        return
    content_type, body = page
    await req.respond(200, body, content_type)


@router.route("/charset/{label}")
async def charset(req: Request) -> None:
    """TEXT_PAGE in UTF-8, labelled text/plain with any charset (rot13, base64, ...)."""
    await req.respond(200, TEXT_PAGE.encode("utf-8"), f"text/plain; charset={req.params['label']}")


# Text files in a legacy encoding, served as text/plain with no charset: (codec, text).
LEGACY_TEXTS = {
    "windows-1251": (
        "cp1251",
        "Новости дня\n\nСегодня в Москве прошёл большой городской праздник. Жители и гости "
        "столицы гуляли по улицам, слушали музыку и смотрели салют над рекой.\n",
    ),
    "shift_jis": (
        "shift_jis",
        "今日のニュース\n\n東京では大きな祭りが開かれました。多くの人々が通りを歩き、"
        "音楽を聞き、川の上の花火を見ました。\n",
    ),
    "gb18030": (
        "gb18030",
        "今日新闻\n\n北京今天举行了盛大的城市节日。市民和游客在街上散步，听音乐，观看河上的烟花。\n",
    ),
}


@router.route("/legacy-text/{name}")
async def legacy_text(req: Request) -> None:
    """A text file in a legacy encoding, labelled ``text/plain`` with no charset."""
    entry = LEGACY_TEXTS.get(req.params["name"])
    if entry is None:
        await req.respond(400, b"unknown encoding", TEXT)
        return
    codec, text = entry
    await req.respond(200, text.encode(codec), "text/plain")


MARKDOWN_PAGE = (
    "# Release notes\n\n"
    "Version 2.1 adds *faster* start-up and a `--quiet` flag.\n\n"
    "- Fixed: the cache is pruned on start.\n"
    "- Changed: logs go to stderr.\n"
)


@router.route("/markdown")
async def markdown(req: Request) -> None:
    """A Markdown file served as such (``text/markdown``), as llms.txt files and docs are."""
    await req.respond(200, MARKDOWN_PAGE.encode(), "text/markdown; charset=utf-8")


TEMPLATE_TEXT = "TEMPLATE_ONLY words that a browser never shows on the page"


@router.route("/template")
async def template(req: Request) -> None:
    """An article with a <template> element: markup for scripts to clone, never rendered."""
    paragraphs = "".join(f"<p>{p}</p>" for p in TEXT_PAGE.split("\n\n"))
    body = (
        "<!doctype html><html><head><title>Template</title></head><body><article>"
        f"{paragraphs}<template><p>{TEMPLATE_TEXT}.</p></template></article></body></html>"
    )
    await req.respond(200, body.encode(), HTML)
