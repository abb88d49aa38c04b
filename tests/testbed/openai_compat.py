"""An OpenAI-compatible embeddings API (``POST /v1/embeddings``), with behaviours chosen
by base path.

An embedder configured with base URL ``{server}/openai[/<behaviour>]/v1`` posts to
``{base}/embeddings``:

- ``/openai/v1``                 deterministic vectors: the same text (case and spacing
                                 aside) always gets the same vector, different texts
                                 nearly orthogonal ones (hash-seeded, 64 dimensions)
- ``/openai/slow/{ms}/v1``       the same, after ``ms`` milliseconds
- ``/openai/status/{code}/v1``   that status with OpenAI's JSON error shape
- ``/openai/garbage/v1``         200 ``application/json`` whose body is not JSON
- ``/openai/short/v1``           200 with one embedding fewer than inputs

Like the real API: ``input`` is a string or a list of strings, ``model`` is required,
bad bodies get 400 with ``{"error": {"message", "type", ...}}``. Each answered request's
``{"model", "input"}`` is recorded (``GET /_bodies``), its input as a list.
"""

from __future__ import annotations

import hashlib
import json
import math
import random
from typing import Any

from .asgi import Request, Router

router = Router()

DIMENSIONS = 64
MAX_BODY_BYTES = 4 * 1024 * 1024
EMBEDDINGS = "/v1/embeddings"


def vector(text: str) -> list[float]:
    """The unit vector the testbed gives ``text``."""
    canonical = " ".join(text.lower().split())
    seed = int.from_bytes(hashlib.sha256(canonical.encode("utf-8")).digest()[:8], "big")
    rng = random.Random(seed)
    values = [rng.gauss(0.0, 1.0) for _ in range(DIMENSIONS)]
    norm = math.sqrt(sum(v * v for v in values))
    return [v / norm for v in values]


def error_body(status: int, message: str) -> dict[str, Any]:
    kind = "invalid_request_error" if 400 <= status < 500 else "server_error"
    return {"error": {"message": message, "type": kind, "param": None, "code": None}}


async def _read_body(req: Request) -> bytes | None:
    chunks, size = [], 0
    while True:
        message = await req.receive()
        if message["type"] == "http.disconnect":
            return None
        chunk = message.get("body", b"")
        size += len(chunk)
        if size > MAX_BODY_BYTES:
            return None
        chunks.append(chunk)
        if not message.get("more_body", False):
            return b"".join(chunks)


async def _inputs(req: Request) -> tuple[str, list[str]] | None:
    """(model, texts) of a valid request; otherwise answer 400 and return None."""
    raw = await _read_body(req)
    try:
        body = json.loads(raw or b"")
    except ValueError:
        body = None
    if not isinstance(body, dict):
        await req.json(400, error_body(400, "We could not parse the JSON body of your request."))
        return None
    model, texts = body.get("model"), body.get("input")
    if isinstance(texts, str):
        texts = [texts]
    if not isinstance(model, str) or not model:
        await req.json(400, error_body(400, "you must provide a model parameter"))
        return None
    if not isinstance(texts, list) or not texts or not all(isinstance(t, str) for t in texts):
        await req.json(400, error_body(400, "'input' must be a string or a list of strings"))
        return None
    return model, texts


def answer_body(model: str, texts: list[str]) -> dict[str, Any]:
    tokens = sum(len(t.split()) for t in texts)
    return {
        "object": "list",
        "data": [
            {"object": "embedding", "index": i, "embedding": vector(t)} for i, t in enumerate(texts)
        ],
        "model": model,
        "usage": {"prompt_tokens": tokens, "total_tokens": tokens},
    }


async def answer(req: Request) -> None:
    checked = await _inputs(req)
    if checked is not None:
        model, texts = checked
        # Kept (GET /_bodies), so that a test can count which texts were embedded.
        req.app.record_body(req.path, {"model": model, "input": texts})
        await req.json(200, answer_body(model, texts))


@router.route("/openai" + EMBEDDINGS, methods=("POST",))
async def normal(req: Request) -> None:
    await answer(req)


@router.route("/openai/slow/{ms:int}" + EMBEDDINGS, methods=("POST",))
async def slow(req: Request) -> None:
    if await req.pause(max(0, int(req.params["ms"])) / 1000):
        await answer(req)


@router.route("/openai/hang" + EMBEDDINGS, methods=("POST",))
async def hang(req: Request) -> None:
    await req.hang()


@router.route("/openai/status/{code:int}" + EMBEDDINGS, methods=("POST",))
async def status(req: Request) -> None:
    code = int(req.params["code"])
    if not 200 <= code <= 599:
        code = 500
    await req.json(code, error_body(code, f"testbed: HTTP {code} on demand"))


@router.route("/openai/garbage" + EMBEDDINGS, methods=("POST",))
async def garbage(req: Request) -> None:
    await req.respond(200, b'{"object": "list", "data": [{"embedding": [0.1,', "application/json")


@router.route("/openai/short" + EMBEDDINGS, methods=("POST",))
async def short(req: Request) -> None:
    checked = await _inputs(req)
    if checked is not None:
        model, texts = checked
        body = answer_body(model, texts)
        body["data"] = body["data"][:-1]
        await req.json(200, body)
