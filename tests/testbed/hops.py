"""A tiny encyclopedia for two-hop questions, with its own SearXNG-format search.

``/hops/search?q=...&format=json`` ranks the pages by how many of the query's words
(lower case, stop words aside, matched on their first five letters) their title and text
hold, five at most; ``/hops/page/{n}`` serves page ``n``. The question "What government
position was held by the woman who starred in the film Paper Lanterns?" takes two hops:
the film's page names its star, whose own page (which holds none of the question's words)
names the position. Other pages hold "government position held" and nothing else of the
question: what evidence chosen by words alone puts first.
"""

from __future__ import annotations

import html
import re

from .asgi import HTML, Request, Router

router = Router()

TWO_HOP_QUESTION = (
    "What government position was held by the woman who starred in the film Paper Lanterns?"
)
TWO_HOP_ANSWER = "Chief of Protocol"
FIRST_HOP = "Paper Lanterns (1951 film)"
SECOND_HOP = "Marguerite Vell"

PAGES: tuple[tuple[str, str], ...] = (
    (
        FIRST_HOP,
        "Paper Lanterns is a 1951 American comedy film starring then 19-year-old Marguerite "
        "Vell as a shop girl in a harbour town. The film was shot in six weeks.",
    ),
    (
        SECOND_HOP,
        "Marguerite Vell (1932 – 2011) was an American actress and diplomat. As an adult, "
        "she served as Chief of Protocol of the United States.",
    ),
    (
        "Lord Keeper of the Seal",
        "The Lord Keeper of the Seal was a government position held by a senior officer of "
        "the crown. The position was held for life.",
    ),
    (
        "Village recorder",
        "The village recorder is a government position held in rural districts. The "
        "position is held by an elected resident.",
    ),
    (
        "Harbour master",
        "A harbour master is a government position held at a port. The position was held "
        "by a woman for the first time in 1977.",
    ),
    (
        "Lantern festival",
        "A lantern festival is a celebration with paper lanterns held in many towns.",
    ),
)
_STOP = frozenset(
    re.findall(r"\w+", "a an and as at by for from in is of on or the to was what which who")
)
PREFIX = 5


def _keys(text: str) -> set[str]:
    return {w[:PREFIX] for w in re.findall(r"[a-z0-9]+", text.lower()) if w not in _STOP}


def _ranked(query: str) -> list[int]:
    wanted = _keys(query)
    scores = [len(wanted & _keys(f"{title} {text}")) for title, text in PAGES]
    order = sorted(range(len(PAGES)), key=lambda i: (-scores[i], i))
    return [i for i in order if scores[i] > 0][:5]


@router.route("/hops/search")
async def search(req: Request) -> None:
    query = req.query.get("q", "")
    results = [
        {
            "url": f"{req.base_url}/hops/page/{i}",
            "title": PAGES[i][0],
            "content": PAGES[i][1].split(". ")[0] + ".",
            "engine": "hops",
            "engines": ["hops"],
            "positions": [rank],
            "score": 1.0 / rank,
            "category": "general",
        }
        for rank, i in enumerate(_ranked(query), start=1)
    ]
    await req.json(200, {"query": query, "results": results, "unresponsive_engines": []})


@router.route("/hops/page/{n:int}")
async def page(req: Request) -> None:
    n = int(req.params["n"])
    if not 0 <= n < len(PAGES):
        await req.respond(404, b"no such page", HTML)
        return
    title, text = (html.escape(part) for part in PAGES[n])
    body = (
        f"<!DOCTYPE html><html><head><meta charset='utf-8'><title>{title}</title></head>"
        f"<body><article><h1>{title}</h1><p>{text}</p></article></body></html>"
    )
    await req.respond(200, body.encode(), HTML)
