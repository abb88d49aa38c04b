"""A scripted OpenAI-compatible chat-completions API (``POST /llm/v1/chat/completions``).

A client configured with base URL ``{server}/llm/v1`` gets the answer its ``model`` field
scripts. The model is a JSON object (build it with ``script(...)``):

- ``{"reply": "text"}``             200, the message content is ``text``
- ``{"replies": ["a", "b"]}``       the n-th call with this exact script gets the n-th reply
                                    (the last one repeats; counters reset with ``/_reset``)
- ``"delay_ms": 200``               answer after that long (with any of the above)
- ``"trickle_ms": 100``             send the 200 headers at once, then the JSON body in 8
                                    pieces, this long apart (a slow stream)
- ``{"status": 500}``               that status with OpenAI's JSON error body
- ``{"hang": true}``                never answer
- ``{"garbage": true}``             200 ``application/json`` whose body is not JSON
- ``{"no_choices": true}``          200 with an empty ``choices`` list
- ``"usage": false``                leave ``usage`` out
- ``"message": <any JSON>``         that as ``choices[0].message`` (a malformed reply)
- ``"fields": {"usage": [1, 2]}``   those top-level fields of the body replaced as given
- ``"finish_reason": "length"``     that finish reason (a reply cut off at ``max_tokens``)
- ``"refuse": ["json_schema"]``     422 for a request that asks for JSON in one of these forms
                                    (``json_schema``, ``json_object``, ``guided_json``; ``none``:
                                    one that asks in none), as llama-cpp-python's server
                                    refuses OpenAI's ``json_schema`` (a 500 naming
                                    ``response_format``, with ``"refuse_status": 500``)
- ``"schema_reply": "text"``        that reply when a JSON Schema came in any form (else
                                    ``reply``): a server that enforces it

The context window, as servers report it (no body to script a GET with, so by path): the
same chat API under ``/llmctx/{n}/v1`` answers ``GET /llmctx/{n}/props`` as llama.cpp's
server does (``default_generation_settings.n_ctx``), and under ``/vllmctx/{n}/v1``
answers ``GET /vllmctx/{n}/v1/models`` as vLLM does (``max_model_len``).

Any other model name gets OpenAI's 404 "model not found". Every request body is recorded
(``GET /_bodies``) so tests can read the prompts, temperature and max_tokens sent.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import AsyncIterator
from typing import Any

from .asgi import JSON, Request, Router
from .openai_compat import _read_body, error_body

router = Router()

CHAT = "/llm/v1/chat/completions"
PIECES = 8


def script(**behaviour: Any) -> str:
    """The model name that scripts this behaviour (see the module docstring)."""
    return json.dumps(behaviour, sort_keys=True, separators=(",", ":"))


def _tokens(messages: Any) -> int:
    if not isinstance(messages, list):
        return 0
    return sum(len(str(m.get("content", "")).split()) for m in messages if isinstance(m, dict))


def completion(model: str, content: str, prompt_tokens: int, usage: bool = True) -> dict[str, Any]:
    body: dict[str, Any] = {
        "id": "chatcmpl-testbed",
        "object": "chat.completion",
        "created": 1_760_000_000,
        "model": model,
        "choices": [
            {
                "index": 0,
                "message": {"role": "assistant", "content": content},
                "finish_reason": "stop",
            }
        ],
    }
    if usage:
        done = len(content.split())
        body["usage"] = {
            "prompt_tokens": prompt_tokens,
            "completion_tokens": done,
            "total_tokens": prompt_tokens + done,
        }
    return body


async def _trickle(body: bytes, gap_s: float) -> AsyncIterator[bytes]:
    step = max(1, -(-len(body) // PIECES))
    for start in range(0, len(body), step):
        if start:
            await asyncio.sleep(gap_s)
        yield body[start : start + step]


def schema_form(request: dict[str, Any]) -> str:
    """How a request asks for JSON: ``json_schema``, ``json_object``, ``guided_json`` or
    ``none``."""
    if "guided_json" in request:
        return "guided_json"
    fmt = request.get("response_format")
    kind = fmt.get("type") if isinstance(fmt, dict) else None
    return kind if kind in ("json_schema", "json_object") else "none"


@router.route("/llmctx/{n:int}/props", methods=("GET",))
async def llama_cpp_props(req: Request) -> None:
    n_ctx = int(req.params["n"])
    await req.json(200, {"default_generation_settings": {"n_ctx": n_ctx}, "total_slots": 1})


@router.route("/vllmctx/{n:int}/v1/models", methods=("GET",))
async def vllm_models(req: Request) -> None:
    model = {"id": "served", "object": "model", "max_model_len": int(req.params["n"])}
    await req.json(200, {"object": "list", "data": [model]})


@router.route("/llmctx/{n:int}/v1/chat/completions", methods=("POST",))
async def chat_llama_cpp(req: Request) -> None:
    await chat(req)


@router.route("/vllmctx/{n:int}/v1/chat/completions", methods=("POST",))
async def chat_vllm(req: Request) -> None:
    await chat(req)


@router.route(CHAT, methods=("POST",))
async def chat(req: Request) -> None:
    raw = await _read_body(req)
    try:
        request = json.loads(raw or b"")
    except ValueError:
        request = None
    if not isinstance(request, dict) or not isinstance(request.get("messages"), list):
        await req.json(400, error_body(400, "'messages' is a required property"))
        return
    req.app.record_body(CHAT, request)
    model = request.get("model")
    try:
        plan = json.loads(model) if isinstance(model, str) else None
    except ValueError:
        plan = None
    if not isinstance(plan, dict):
        message = f"The model `{model}` does not exist or you do not have access to it."
        await req.json(404, error_body(404, message))
        return
    if plan.get("hang"):
        await req.hang()
        return
    if plan.get("delay_ms") and not await req.pause(plan["delay_ms"] / 1000):
        return
    if schema_form(request) in plan.get("refuse", ()):
        # As llama-cpp-python's server: its validation error comes back as a 500.
        code = int(plan.get("refuse_status", 422))
        message = f"testbed: response_format {schema_form(request)!r} is not supported"
        await req.json(code, error_body(code, message))
        return
    if "status" in plan:
        code = int(plan["status"])
        await req.json(code, error_body(code, f"testbed: HTTP {code} on demand"))
        return
    if plan.get("garbage"):
        await req.respond(200, b'{"id": "chatcmpl-1", "choices": [{"mess', JSON)
        return
    if "replies" in plan:
        replies = plan["replies"]
        content = replies[min(req.app.count(("chat", model)), len(replies)) - 1]
    else:
        content = plan.get("reply", "")
    if "schema_reply" in plan and schema_form(request) != "none":
        content = plan["schema_reply"]
    body = completion(model, content, _tokens(request["messages"]), plan.get("usage", True))
    if plan.get("no_choices"):
        body["choices"] = []
    if "finish_reason" in plan:
        body["choices"][0]["finish_reason"] = plan["finish_reason"]
    if "message" in plan:
        body["choices"][0]["message"] = plan["message"]
    body.update(plan.get("fields", {}))
    data = json.dumps(body).encode("utf-8")
    if plan.get("trickle_ms"):
        await req.stream(200, _trickle(data, plan["trickle_ms"] / 1000), JSON, len(data))
        return
    await req.respond(200, data, JSON)
