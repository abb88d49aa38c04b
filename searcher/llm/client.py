"""The one client for any OpenAI-compatible chat-completions endpoint.

Ollama, llama.cpp's server, vLLM, SGLang, text-generation-webui and OpenAI all speak this
API: one POST of JSON to ``{base_url}/chat/completions``, sent with httpx (already ours for
fetching) rather than the ``openai`` SDK, which added 30 MB to the install for that one
call (issue 25). No retries: every call counts against the request's ``max_tool_calls``,
so a retry is a decision the pipeline makes, not the transport. Foreign errors become our
``LlmError`` family here.
"""

from __future__ import annotations

import asyncio
import re
import time
from dataclasses import dataclass
from typing import Any

import httpx

from searcher.config import LlmSettings
from searcher.errors import LlmBadReply, LlmTimeout, LlmUnavailable
from searcher.recording.httpx_tape import TapedTransport

Message = dict[str, str]


@dataclass(frozen=True)
class Completion:
    """The text of one reply (its ``<think>`` reasoning left out) and what it cost; a
    token count is None when the server did not report it."""

    text: str
    model: str
    latency_ms: int
    prompt_tokens: int | None = None
    completion_tokens: int | None = None


@dataclass(frozen=True)
class CallOptions:
    """Generation settings of one call, resolved from the step's and the client's config."""

    model: str
    max_tokens: int
    temperature: float
    timeout_s: float
    schema: dict[str, Any] | None = None  # the JSON the step wants, if it wants JSON
    schema_name: str = "reply"
    # OpenAI's strict mode takes only schemas of its own subset: a caller's schema
    # (``output_schema``) is sent without it.
    strict: bool = True


def response_format(kind: str, options: CallOptions) -> dict[str, Any] | None:
    """The ``response_format`` parameter for a JSON step, or None to rely on the prompt."""
    if options.schema is None or kind == "text":
        return None
    if kind == "json_object":
        return {"type": "json_object"}
    if kind == "json_object_schema":  # llama.cpp's and llama-cpp-python's own form
        return {"type": "json_object", "schema": options.schema}
    return {
        "type": "json_schema",
        "json_schema": {
            "name": options.schema_name,
            "schema": options.schema,
            "strict": options.strict,
        },
    }


# Reasoning models (DeepSeek-R1, Qwen3, QwQ) think aloud in <think>...</think> before the
# answer, and many servers pass that on in the content; a step must read only the answer.
_THINK_TAG = re.compile(r"<(/?)think>", re.IGNORECASE)
_THINK_OPEN = re.compile(r"\s*<think>", re.IGNORECASE)


def without_reasoning(text: str) -> str:
    """``text`` without its ``<think>`` blocks (each from a ``<think>`` to the next
    ``</think>``) and without everything up to a closing tag that none opened (the chat
    template opened that block, not the reply); empty if the reply never stopped thinking
    (an unclosed leading ``<think>``: it was cut off before its answer). One pass over the
    tags: a reply of many unclosed tags costs no more than its length."""
    kept, at, opened = [], 0, -1
    for tag in _THINK_TAG.finditer(text):
        if opened < 0 and not tag.group(1):
            opened = tag.start()
        elif opened >= 0 and tag.group(1):
            kept.append(text[at:opened])
            at, opened = tag.end(), -1
    kept.append(text[at:])
    text = "".join(kept)
    last_close = None
    for tag in _THINK_TAG.finditer(text):
        if tag.group(1):
            last_close = tag
    if last_close is not None:
        text = text[last_close.end() :]
    return "" if _THINK_OPEN.match(text) else text


def _get(obj: Any, name: str) -> Any:
    """A field of a reply part if it is a JSON object, else None (a broken server may
    send anything in any field)."""
    return obj.get(name) if isinstance(obj, dict) else None


def _content_text(content: Any) -> str:
    """The text of a message's content: a string, or the text parts of a list of OpenAI
    content parts (other parts, an image say, left out), joined. ``LlmBadReply`` for
    anything else."""
    if content is None or isinstance(content, str):
        return content or ""
    if isinstance(content, list) and all(isinstance(_get(p, "type"), str) for p in content):
        texts = [_get(part, "text") for part in content if _get(part, "type") == "text"]
        if all(isinstance(t, str) for t in texts):
            return "".join(texts)
    raise LlmBadReply(f"the message content is not text but {type(content).__name__}")


def _reply_text(reply: Any) -> str:
    """The answer text of a 200 reply, its reasoning left out; ``LlmBadReply`` if there
    is none (no choices, no message, content that is not text, only reasoning)."""
    choices = _get(reply, "choices")
    if not isinstance(choices, list) or not choices:
        raise LlmBadReply("the reply has no choices")
    message = _get(choices[0], "message")
    if not isinstance(message, dict):
        raise LlmBadReply("the reply's first choice has no message")
    text = without_reasoning(_content_text(_get(message, "content")))
    if not text.strip():
        raise LlmBadReply("empty reply")
    return text


# No call spends more: a larger count is a broken server's (and would not fit JSON's
# 64-bit integers once summed over a research job).
MAX_TOKEN_COUNT = 1_000_000_000


def _token_count(usage: Any, name: str) -> int | None:
    """A token count of ``usage`` if it is a whole number from 0 to ``MAX_TOKEN_COUNT``,
    else None (unknown)."""
    value = _get(usage, name) if usage is not None and not isinstance(usage, list) else None
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= MAX_TOKEN_COUNT:
        return None
    return value


def _status_reason(response: httpx.Response) -> str:
    """``HTTP <status>``, with the server's error message when its body carries one."""
    try:
        body: Any = response.json()
    except ValueError:
        body = response.text.strip() or None
    message = None
    if isinstance(body, dict):
        error = body.get("error", body)
        message = error.get("message") if isinstance(error, dict) else error
    elif body is not None:
        message = body
    return f"HTTP {response.status_code}" + (f": {str(message)[:200]}" if message else "")


def _reply_json(response: httpx.Response) -> Any:
    """The JSON body of a 2xx reply; ``LlmUnavailable`` for an error status,
    ``LlmBadReply`` for a body that is not JSON."""
    if response.is_error:
        raise LlmUnavailable(_status_reason(response))
    try:
        return response.json()
    except ValueError as exc:
        raise LlmBadReply(f"unreadable reply: {exc}") from exc


class LlmClient:
    """Chat completions against one endpoint; ``complete`` raises only ``LlmError``s."""

    def __init__(self, settings: LlmSettings) -> None:
        if not settings.configured:
            raise LlmUnavailable("no LLM configured (set llm.base_url and llm.model)")
        self.settings = settings
        # A trailing slash, so that "chat/completions" joins after the path (…/v1/).
        base_url = str(settings.base_url).rstrip("/") + "/"
        self._client = httpx.AsyncClient(
            base_url=base_url,
            # Local servers take any key; OpenAI-compatible ones all read this header.
            headers={"Authorization": f"Bearer {settings.api_key or 'not-needed'}"},
            timeout=settings.timeout_s,
            # A recorded request keeps the replies; a replayed one gets them back.
            transport=TapedTransport(httpx.AsyncHTTPTransport(), "llm"),
        )

    async def complete(self, messages: list[Message], options: CallOptions) -> Completion:
        """One chat completion. The whole call, body included, ends within
        ``options.timeout_s`` (a server trickling its reply cannot hold the request)."""
        body: dict[str, Any] = {
            "model": options.model,
            "messages": messages,
            "max_tokens": options.max_tokens,
            "temperature": options.temperature,
        }
        fmt = response_format(self.settings.response_format, options)
        if fmt is not None:
            body["response_format"] = fmt
        started = time.perf_counter()
        try:
            async with asyncio.timeout(options.timeout_s):
                response = await self._client.post(
                    "chat/completions", json=body, timeout=options.timeout_s
                )
        except (TimeoutError, httpx.TimeoutException) as exc:
            raise LlmTimeout(f"no reply within {options.timeout_s:.2f} s") from exc
        except httpx.TransportError as exc:
            reason = str(exc) or type(exc).__name__
            raise LlmUnavailable(f"cannot reach {self.settings.base_url}: {reason}") from exc
        reply = _reply_json(response)
        latency_ms = int((time.perf_counter() - started) * 1000)
        # Nothing validates a 200 body: anything may be in any field.
        usage, model = _get(reply, "usage"), _get(reply, "model")
        return Completion(
            text=_reply_text(reply),
            model=model if isinstance(model, str) and model else options.model,
            latency_ms=latency_ms,
            prompt_tokens=_token_count(usage, "prompt_tokens"),
            completion_tokens=_token_count(usage, "completion_tokens"),
        )

    async def aclose(self) -> None:
        await self._client.aclose()
