"""A small reranking API in the shape TEI, Jina, Cohere and llama.cpp share, with
behaviours chosen by base path (a reranker configured with base URL ``{server}/rerank-api``
and ``path: /rerank`` posts to ``/rerank-api/rerank``):

- ``/rerank-api/rerank``              token-overlap scores: the share of the query's words
                                      (lower-case, 3+ letters) a document contains, plus a
                                      small tie-break for shorter documents; ``results``
                                      best first, ``top_n`` of them. Takes ``documents``
                                      (Cohere/Jina/llama.cpp) or ``texts`` (TEI).
- ``/rerank-api/reverse/rerank``      scores that put the documents in reverse order
- ``/rerank-api/slow/{ms}/rerank``    the normal answer after ``ms`` milliseconds
- ``/rerank-api/status/{code}/rerank`` that status, with an error body
- ``/rerank-api/garbage/rerank``      200 whose body is not JSON
- ``/rerank-api/bad-index/rerank``    200 with an index out of range

Request bodies are recorded (``GET /_bodies``) so tests can check what was sent.
"""

from __future__ import annotations

import json
import re
from typing import Any

from .asgi import Request, Router
from .openai_compat import _read_body

router = Router()
BASE = "/rerank-api"
_WORD = re.compile(r"[a-z0-9]{3,}")


def _words(text: str) -> set[str]:
    return set(_WORD.findall(text.lower()))


def overlap_scores(query: str, documents: list[str]) -> list[float]:
    wanted = _words(query)
    return [
        (len(wanted & _words(d)) / len(wanted) if wanted else 0.0) + 1e-4 / (1 + len(d))
        for d in documents
    ]


async def _request(req: Request) -> tuple[str, list[str], int] | None:
    raw = await _read_body(req)
    try:
        body = json.loads(raw or b"")
    except ValueError:
        body = None
    documents = body.get("documents", body.get("texts")) if isinstance(body, dict) else None
    query = body.get("query") if isinstance(body, dict) else None
    if not isinstance(query, str) or not isinstance(documents, list) or not documents:
        await req.json(422, {"error": "query and documents (or texts) are required"})
        return None
    req.app.record_body(req.path, body)
    texts = [d if isinstance(d, str) else str(d.get("text", "")) for d in documents]
    top_n = body.get("top_n") if isinstance(body.get("top_n"), int) else len(texts)
    return query, texts, top_n


def _results(scores: list[float], top_n: int) -> dict[str, Any]:
    order = sorted(range(len(scores)), key=lambda i: (-scores[i], i))[:top_n]
    return {"results": [{"index": i, "relevance_score": scores[i]} for i in order]}


async def _answer(req: Request) -> None:
    got = await _request(req)
    if got is not None:
        query, texts, top_n = got
        await req.json(200, _results(overlap_scores(query, texts), top_n))


@router.route(BASE + "/rerank", methods=("POST",))
async def normal(req: Request) -> None:
    await _answer(req)


@router.route(BASE + "/reverse/rerank", methods=("POST",))
async def reverse(req: Request) -> None:
    got = await _request(req)
    if got is not None:
        _, texts, top_n = got
        await req.json(200, _results([float(i) for i in range(len(texts))], top_n))


@router.route(BASE + "/slow/{ms:int}/rerank", methods=("POST",))
async def slow(req: Request) -> None:
    if await req.pause(max(0, int(req.params["ms"])) / 1000):
        await _answer(req)


@router.route(BASE + "/status/{code:int}/rerank", methods=("POST",))
async def status(req: Request) -> None:
    code = int(req.params["code"])
    await req.json(code if 200 <= code <= 599 else 500, {"error": f"testbed: HTTP {code}"})


@router.route(BASE + "/garbage/rerank", methods=("POST",))
async def garbage(req: Request) -> None:
    await req.respond(200, b'{"results": [{"index": 0, "relevance_sc', "application/json")


@router.route(BASE + "/bad-index/rerank", methods=("POST",))
async def bad_index(req: Request) -> None:
    await req.json(200, {"results": [{"index": 99, "relevance_score": 1.0}]})
