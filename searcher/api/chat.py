"""``POST /v1/chat/completions`` and ``GET /v1/models``: searcher as an OpenAI chat model
(``searcher/chat/``), for any client that speaks OpenAI's API (the ``openai`` SDK,
LangChain's ``ChatOpenAI``, Open WebUI, LibreChat) with ``base_url`` set to ``…/v1``.

API keys and rate limits apply as on every route; errors come in OpenAI's shape
(``searcher/api/errors.py``)."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator, Coroutine
from typing import Any, TypeVar

from fastapi import APIRouter, HTTPException, Request
from fastapi.responses import Response, StreamingResponse
from starlette.types import Receive

from searcher.api.auth import collection_access, key_of
from searcher.api.errors import stream_error
from searcher.api.json_body import json_response
from searcher.api.observe import client_identity
from searcher.chat.conversation import read_conversation
from searcher.chat.render import DONE, Completion, error_event
from searcher.chat.search_model import Caller
from searcher.chat.turns import search_turn, search_turn_stream, start_research_turn
from searcher.chat.wire import ChatModel, ChatRequest, OpenAIErrorResponse
from searcher.errors import LlmRequired
from searcher.runtime import Runtime

router = APIRouter(tags=["chat"])
SSE = "text/event-stream"
_SSE_HEADERS = {"Cache-Control": "no-cache", "X-Accel-Buffering": "no"}
# The status logged for a request whose client left before its answer (nginx's "client
# closed request"); nobody receives it.
CLIENT_GONE = 499
_T = TypeVar("_T")
_ERRORS: dict[int | str, dict[str, Any]] = {
    200: {"content": {SSE: {}}, "description": "A chat.completion, or its chunks (stream)."},
    422: {
        "model": OpenAIErrorResponse,
        "description": "Invalid request; `error.param` names the field.",
    },
    429: {"model": OpenAIErrorResponse, "description": "Rate limit, or no research slot free."},
    502: {
        "model": OpenAIErrorResponse,
        "description": "The LLM gave no answer, or every backend failed.",
    },
    503: {"model": OpenAIErrorResponse, "description": "No LLM configured (`llm.base_url`)."},
}


def _model_entry(model: ChatModel) -> dict[str, Any]:
    return {"id": model.value, "object": "model", "created": 0, "owned_by": "searcher"}


@router.get("/v1/models", summary="The chat models (OpenAI's model list)")
async def list_models() -> Response:
    return json_response({"object": "list", "data": [_model_entry(m) for m in ChatModel]})


@router.get(
    "/v1/models/{model_id}",
    summary="One chat model",
    responses={404: {"model": OpenAIErrorResponse}},
)
async def get_model(model_id: str) -> Response:
    if model_id not in {m.value for m in ChatModel}:
        raise HTTPException(404, f"no model {model_id[:100]!r}; see GET /v1/models")
    return json_response(_model_entry(ChatModel(model_id)))


async def _sse(events: AsyncIterator[bytes]) -> AsyncIterator[bytes]:
    """The events, then ``[DONE]``; a failure midway ends the stream with its error."""
    try:
        async for event in events:
            yield event
    except Exception as exc:
        yield error_event(stream_error(exc))
    yield DONE


def _stream(events: AsyncIterator[bytes]) -> StreamingResponse:
    return StreamingResponse(_sse(events), media_type=SSE, headers=_SSE_HEADERS)


@router.post(
    "/v1/chat/completions",
    summary="Ask searcher as a chat model: a cited answer from a search or a research job",
    responses=_ERRORS,
)
async def chat_completions(body: ChatRequest, request: Request) -> Response:
    runtime: Runtime = request.app.state.runtime
    if not runtime.settings.llm.configured:
        raise LlmRequired("a chat answer")
    conversation = read_conversation(body.asked)
    caller = Caller(client_identity(request.scope), collection_access(request.scope))
    completion = Completion(body.model)
    request.state.log = {"query": conversation.question, "mode": body.model}
    service, schema = runtime.service, body.output_schema
    if body.chat_model is ChatModel.search:
        if body.stream:
            return _stream(
                search_turn_stream(
                    service, conversation, caller, completion, body.include_usage, schema
                )
            )
        answer = await unless_hung_up(request, search_turn(service, conversation, caller, schema))
        if answer is None:  # the search and its answer stopped when the client left
            return Response(status_code=CLIENT_GONE)
        return json_response(completion.body(answer))
    jobs = request.app.state.jobs
    turn = await start_research_turn(
        service, jobs, conversation, body.research_preset, caller, key_of(request.scope), schema
    )
    if body.stream:
        return _stream(turn.stream(completion, body.include_usage))
    reply = await unless_hung_up(request, turn.reply())
    if reply is None:  # nobody to answer (the access log shows the client left)
        return Response(status_code=CLIENT_GONE)
    return json_response(completion.body(reply))


async def unless_hung_up(request: Request, work: Coroutine[Any, Any, _T]) -> _T | None:
    """What ``work`` returns, or None when the client hangs up first: ``work`` is then
    cancelled (a server does not cancel a handler whose client left)."""
    answer = asyncio.ensure_future(work)
    gone = asyncio.ensure_future(_hung_up(request.receive))
    try:
        await asyncio.wait({answer, gone}, return_when=asyncio.FIRST_COMPLETED)
    finally:
        gone.cancel()
        if not answer.done():
            answer.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await answer
    return None if answer.cancelled() else answer.result()


async def _hung_up(receive: Receive) -> None:
    """Returns once the client's connection has closed (its body was read already)."""
    while (await receive())["type"] != "http.disconnect":
        pass
