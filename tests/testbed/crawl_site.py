"""A small site to crawl under ``/crawl/``: pages with real paragraphs (each its own words
and numbers), linked from a home page whose anchors a query can rank; a page robots.txt
disallows (``/crawl/private/``), an exact copy of a page under another URL and a near copy
(one sentence changed), links that redirect on and off the site (``/crawl/away/``), paths
a file name cannot tell apart (``/crawl/names/``), and a link farm of pages that answer
slowly (``/crawl/farm/``), whose requests in flight and arrival times are recorded
(``FARM``) so that a test can see the crawl's per-host concurrency and politeness delay."""

from __future__ import annotations

import random
import threading
import time
from dataclasses import dataclass, field

from .asgi import HTML, Request, Router

router = Router()

_WORDS = (
    "river",
    "stone",
    "lantern",
    "copper",
    "meadow",
    "harbor",
    "violet",
    "canyon",
    "ember",
    "orchard",
    "glacier",
    "falcon",
    "willow",
    "marble",
    "thunder",
    "saffron",
    "compass",
    "juniper",
    "tundra",
    "beacon",
    "quartz",
    "prairie",
    "cobalt",
    "sparrow",
    "timber",
    "lagoon",
    "cedar",
    "velvet",
    "summit",
    "pebble",
    "horizon",
    "maple",
    "crystal",
    "dune",
    "fern",
    "granite",
    "ivory",
    "jasmine",
    "kettle",
    "lemon",
    "mosaic",
    "nectar",
    "olive",
    "pepper",
    "quill",
    "ribbon",
    "sage",
    "tulip",
)
FARM_SIZE = 12
FARM_PAUSE_S = 0.15  # each farm page answers this late: requests to it overlap

# The home page's links: (path, anchor text). A query for pricing ranks /pricing first.
HOME_LINKS = (
    ("/crawl/history", "Company history"),
    ("/crawl/garden", "Gardening tips"),
    ("/crawl/pricing", "Pricing plans and costs"),
    ("/crawl/private/notes", "Internal notes"),
    ("/crawl/copy", "History (mirror)"),
    ("/crawl/near-copy", "History (reprint)"),
    ("/crawl/team", "Our team"),
)
PRIVATE = "/crawl/private/notes"


def paragraphs(seed: str, count: int = 4) -> list[str]:
    """Distinct deterministic paragraphs for one page (its own words and numbers)."""
    rng = random.Random(seed)
    out = []
    for n in range(count):
        words = [rng.choice(_WORDS) for _ in range(45)]
        out.append(
            f"{seed.title()} part {n + 1} of {rng.randint(1000, 9999)}: " + " ".join(words) + "."
        )
    return out


def _html(title: str, texts: list[str], links: tuple[tuple[str, str], ...] = ()) -> bytes:
    body = "".join(f"<p>{t}</p>" for t in texts)
    nav = "".join(f'<li><a href="{href}">{text}</a></li>' for href, text in links)
    return (
        f"<html><head><title>{title}</title></head><body><nav><ul>{nav}</ul></nav>"
        f"<article><h1>{title}</h1>{body}</article></body></html>"
    ).encode()


def page_text(name: str) -> list[str]:
    """The paragraphs of page ``name`` (``history``, ``farm/3``, ...)."""
    return paragraphs(name)


@dataclass
class FarmLog:
    """Requests to the farm: how many were in flight at most, and when each arrived."""

    lock: threading.Lock = field(default_factory=threading.Lock)
    in_flight: int = 0
    max_in_flight: int = 0
    arrivals: list[float] = field(default_factory=list)  # time.monotonic()

    def reset(self) -> None:
        with self.lock:
            self.in_flight = self.max_in_flight = 0
            self.arrivals.clear()


FARM = FarmLog()


@router.route("/crawl/")
async def home(req: Request) -> None:
    await req.respond(200, _html("Crawl home", paragraphs("home"), HOME_LINKS), HTML)


@router.route("/crawl/copy")
async def exact_copy(req: Request) -> None:
    await req.respond(200, _html("History", page_text("history")), HTML)


@router.route("/crawl/near-copy")
async def near_copy(req: Request) -> None:
    texts = page_text("history")
    texts[-1] = texts[-1].rsplit(" ", 3)[0] + " reprinted here."
    await req.respond(200, _html("History", texts), HTML)


@router.route("/crawl/farm/")
async def farm_index(req: Request) -> None:
    links = tuple((f"/crawl/farm/{i}", f"Farm page {i}") for i in range(FARM_SIZE))
    await req.respond(200, _html("Farm", paragraphs("farm"), links), HTML)


@router.route("/crawl/farm/{n}")
async def farm_page(req: Request) -> None:
    with FARM.lock:
        FARM.arrivals.append(time.monotonic())
        FARM.in_flight += 1
        FARM.max_in_flight = max(FARM.max_in_flight, FARM.in_flight)
    try:
        if not await req.pause(FARM_PAUSE_S):
            return
        name = f"farm/{req.params['n']}"
        await req.respond(200, _html(name, page_text(name)), HTML)
    finally:
        with FARM.lock:
            FARM.in_flight -= 1


@router.route("/crawl/wide/")
async def wide_index(req: Request) -> None:
    """``?n=`` links to as many pages (``/crawl/wide/{i}``, each its own text): a site to
    measure crawl throughput on (bench/crawl.py)."""
    n = min(int(req.query.get("n", "100")), 5000)
    links = tuple((f"/crawl/wide/{i}?n={n}", f"Wide page {i}") for i in range(n))
    await req.respond(200, _html("Wide", paragraphs("wide"), links), HTML)


def other_host(origin: str) -> str:
    """The testbed under its other name (``localhost`` for ``127.0.0.1``): another site."""
    return origin.replace("127.0.0.1", "localhost")


@router.route("/crawl/away/")
async def away_index(req: Request) -> None:
    """Links that redirect: one off the site (to the testbed under another host name),
    one to another page of the site."""
    links = (("/crawl/away/out", "Our code on another site"), ("/crawl/away/moved", "Moved"))
    await req.respond(200, _html("Away", paragraphs("away"), links), HTML)


@router.route("/crawl/away/out")
async def away_out(req: Request) -> None:
    await req.redirect(f"{other_host(req.base_url)}/crawl/garden")


@router.route("/crawl/away/moved")
async def away_moved(req: Request) -> None:
    await req.redirect("/crawl/history")


# Pages whose paths differ only where a file name cannot (each its own text).
AWKWARD_PATHS = (
    "/crawl/names/v1.0", "/crawl/names/v1_0", "/crawl/names/docs", "/crawl/names/docs/",
    "/crawl/names/index", "/crawl/names/a/b/c/d/e/f", "/crawl/names/a/b/c/d/e/g",
)  # fmt: skip


@router.route("/crawl/names/")
async def awkward_names(req: Request) -> None:
    links = tuple((path, f"Page {n}") for n, path in enumerate(AWKWARD_PATHS))
    await req.respond(200, _html("Names", paragraphs("names"), links), HTML)


@router.route("/crawl/{name:path}")
async def plain_page(req: Request) -> None:
    name = req.params["name"]
    back = (("/crawl/", "Home"),)
    await req.respond(200, _html(name.title(), page_text(name), back), HTML)
