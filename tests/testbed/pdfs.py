"""PDF documents written from known text at run time (no files from elsewhere), and the
routes that serve them: ``/pdf/text?pages=N`` (N pages of known text; ``&type=`` labels it
otherwise), ``/download/archive`` (a ZIP's bytes as application/octet-stream), ``/pdf/scanned``
(a page with a drawing and no text layer), ``/pdf/broken`` (not a PDF at all),
``/pdf/missing-page`` (page 2 of 3 points at no object), ``/pdf/tail-padded?pages=N&pad=B``
(N text pages, then B bytes of padding), ``/pdf/dense?pages=N&lines=L&chars=C`` (a few
kilobytes: N pages drawing one compressed stream of L lines of C characters)."""

from __future__ import annotations

import zlib

from .asgi import TEXT, Request, Router

router = Router()

PDF = "application/pdf"


def _escape(line: str) -> str:
    return line.replace("\\", "\\\\").replace("(", "\\(").replace(")", "\\)")


def _content_stream(lines: list[str]) -> bytes:
    ops = ["BT", "/F1 11 Tf", "14 TL", "56 790 Td"]
    ops += [f"({_escape(line)}) Tj T*" for line in lines]
    ops.append("ET")
    return "\n".join(ops).encode("latin-1")


def make_pdf(pages: list[list[str]], *, drawing_only: bool = False) -> bytes:
    """A PDF with one page per entry of ``pages``, each line of text drawn in Helvetica;
    ``drawing_only`` draws a filled rectangle instead (a page with no text layer)."""
    objects: list[bytes] = []
    n = len(pages)
    kids = " ".join(f"{4 + 2 * i} 0 R" for i in range(n))
    objects.append(b"<< /Type /Catalog /Pages 2 0 R >>")
    objects.append(f"<< /Type /Pages /Kids [{kids}] /Count {n} >>".encode())
    objects.append(b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>")
    for i, lines in enumerate(pages):
        content = b"0.2 g 56 500 400 250 re f" if drawing_only else _content_stream(lines)
        objects.append(
            f"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents {5 + 2 * i} 0 R "
            "/Resources << /Font << /F1 3 0 R >> >> >>".encode()
        )
        objects.append(b"<< /Length %d >>\nstream\n%s\nendstream" % (len(content), content))
    return _serialised(objects)


def _serialised(objects: list[bytes]) -> bytes:
    """A PDF file of ``objects`` (numbered from 1; the first is the catalog)."""
    out = bytearray(b"%PDF-1.4\n%\xe2\xe3\xcf\xd3\n")
    offsets = []
    for number, body in enumerate(objects, start=1):
        offsets.append(len(out))
        out += b"%d 0 obj\n%s\nendobj\n" % (number, body)
    xref = len(out)
    out += b"xref\n0 %d\n0000000000 65535 f \n" % (len(objects) + 1)
    out += b"".join(b"%010d 00000 n \n" % offset for offset in offsets)
    out += b"trailer\n<< /Size %d /Root 1 0 R >>\nstartxref\n%d\n%%%%EOF\n" % (
        len(objects) + 1,
        xref,
    )
    return bytes(out)


def dense_pdf(pages: int, lines: int, chars: int) -> bytes:
    """A small PDF whose ``pages`` pages all draw one FlateDecode content stream of
    ``lines`` lines of ``chars`` characters: kilobytes that hold pages * lines * chars
    characters of text."""
    line = ("dense " * (chars // 6 + 1))[:chars]
    # Type small enough that every line fits on the page: PDFium reads only what is on it.
    ops = ["BT", "/F1 0.02 Tf", "0.03 TL", "10 830 Td", *[f"({line}) Tj T*"] * lines, "ET"]
    stream = zlib.compress("\n".join(ops).encode("latin-1"), 9)
    kids = " ".join(f"{5 + i} 0 R" for i in range(pages))
    objects = [
        b"<< /Type /Catalog /Pages 2 0 R >>",
        f"<< /Type /Pages /Kids [{kids}] /Count {pages} >>".encode(),
        b"<< /Type /Font /Subtype /Type1 /BaseFont /Helvetica >>",
        b"<< /Length %d /Filter /FlateDecode >>\nstream\n%s\nendstream" % (len(stream), stream),
    ]
    objects += [
        b"<< /Type /Page /Parent 2 0 R /MediaBox [0 0 595 842] /Contents 4 0 R "
        b"/Resources << /Font << /F1 3 0 R >> >> >>"
    ] * pages
    return _serialised(objects)


def page_lines(page: int, lines: int = 40) -> list[str]:
    """The known text of page ``page`` (1-based): numbered sentences anyone can check."""
    return [
        f"Page {page} line {n}: the quick brown fox jumps over the lazy dog {page * 100 + n}."
        for n in range(1, lines + 1)
    ]


@router.route("/pdf/text")
async def text_pdf(req: Request) -> None:
    try:
        pages = int(req.query.get("pages") or 2)
    except ValueError:
        pages = 0
    if not 1 <= pages <= 2000:
        await req.respond(400, b"pages must be 1-2000", TEXT)
        return
    # ?type=: the label a server that sends every file as a download gives it.
    label = req.query.get("type") or PDF
    await req.respond(200, make_pdf([page_lines(p) for p in range(1, pages + 1)]), label)


@router.route("/download/archive")
async def archive(req: Request) -> None:
    """A file that is no PDF (a ZIP's header), labelled as a download."""
    await req.respond(200, b"PK\x03\x04" + bytes(range(256)) * 8, "application/octet-stream")


@router.route("/pdf/dense")
async def dense(req: Request) -> None:
    try:
        pages, lines, chars = (int(req.query.get(k) or 1) for k in ("pages", "lines", "chars"))
    except ValueError:
        pages = lines = chars = 0
    if not (1 <= pages <= 50 and 1 <= lines <= 5000 and 1 <= chars <= 5000):
        await req.respond(400, b"pages must be 1-50, lines and chars 1-5000", TEXT)
        return
    await req.respond(200, dense_pdf(pages, lines, chars), PDF)


@router.route("/pdf/scanned")
async def scanned_pdf(req: Request) -> None:
    await req.respond(200, make_pdf([[], []], drawing_only=True), PDF)


@router.route("/pdf/broken")
async def broken_pdf(req: Request) -> None:
    await req.respond(200, b"%PDF-1.4\nthis is not really a PDF\n%%EOF\n", PDF)


def pdf_with_missing_page(pages: int = 3, missing: int = 2) -> bytes:
    """A PDF of ``pages`` pages of known text whose page tree points page ``missing``
    (1-based) at an object that does not exist: PDFium fails to load that page only."""
    pdf = make_pdf([page_lines(p) for p in range(1, pages + 1)])
    page_object = f"{4 + 2 * (missing - 1)} 0 R".encode()
    kids_start = pdf.index(b"/Kids [")
    kids_end = pdf.index(b"]", kids_start)
    kids = pdf[kids_start:kids_end].replace(page_object, b"99 0 R")
    return pdf[:kids_start] + kids + pdf[kids_end:]  # same length: offsets still hold


def tail_padded_pdf(pages: int, pad: int) -> bytes:
    """A PDF of ``pages`` pages of known text followed by ``pad`` bytes of an unreferenced
    stream (as an appended update would add): cut anywhere in the padding, the text
    pages are still readable."""
    padding = b"0" * pad
    tail = b"99 0 obj\n<< /Length %d >>\nstream\n%s\nendstream\nendobj\n" % (pad, padding)
    return make_pdf([page_lines(p) for p in range(1, pages + 1)]) + tail


@router.route("/pdf/missing-page")
async def missing_page_pdf(req: Request) -> None:
    await req.respond(200, pdf_with_missing_page(), PDF)


@router.route("/pdf/tail-padded")
async def padded_pdf(req: Request) -> None:
    try:
        pages, pad = int(req.query.get("pages") or 3), int(req.query.get("pad") or 1_000_000)
    except ValueError:
        pages = pad = 0
    if not (1 <= pages <= 200 and 0 <= pad <= 50_000_000):
        await req.respond(400, b"pages must be 1-200, pad 0-50000000", TEXT)
        return
    await req.respond(200, tail_padded_pdf(pages, pad), PDF)
