"""The one client for any OpenAI-compatible chat-completions endpoint.

Ollama, llama.cpp's server, vLLM, SGLang, text-generation-webui and OpenAI all speak this
API; the official ``openai`` package talks to every one of them. Its own retries are off:
every call counts against the request's ``max_tool_calls``, so a retry is a decision the
pipeline makes, not the transport. Foreign errors become our ``LlmError`` family here.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass
from typing import Any

import openai

from searcher.config import LlmSettings
from searcher.errors import LlmBadReply, LlmTimeout, LlmUnavailable

Message = dict[str, str]


@dataclass(frozen=True)
class Completion:
    """The text of one reply and what it cost."""

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
        "json_schema": {"name": options.schema_name, "schema": options.schema, "strict": True},
    }


def _status_reason(exc: openai.APIStatusError) -> str:
    body = exc.body
    message = None
    if isinstance(body, dict):
        error = body.get("error", body)
        message = error.get("message") if isinstance(error, dict) else error
    return f"HTTP {exc.status_code}" + (f": {str(message)[:200]}" if message else "")


class LlmClient:
    """Chat completions against one endpoint; ``complete`` raises only ``LlmError``s."""

    def __init__(self, settings: LlmSettings) -> None:
        if not settings.configured:
            raise LlmUnavailable("no LLM configured (set llm.base_url and llm.model)")
        self.settings = settings
        self._client = openai.AsyncOpenAI(
            base_url=settings.base_url,
            api_key=settings.api_key or "not-needed",  # local servers take any key
            max_retries=0,
            timeout=settings.timeout_s,
        )

    async def complete(self, messages: list[Message], options: CallOptions) -> Completion:
        """One chat completion. The whole call, body included, ends within
        ``options.timeout_s`` (a server trickling its reply cannot hold the request)."""
        extra: dict[str, Any] = {}
        fmt = response_format(self.settings.response_format, options)
        if fmt is not None:
            extra["response_format"] = fmt
        started = time.perf_counter()
        try:
            async with asyncio.timeout(options.timeout_s):
                reply = await self._client.chat.completions.create(
                    model=options.model,
                    messages=messages,  # type: ignore[arg-type]
                    max_tokens=options.max_tokens,
                    temperature=options.temperature,
                    timeout=options.timeout_s,
                    **extra,
                )
        except (TimeoutError, openai.APITimeoutError) as exc:
            raise LlmTimeout(f"no reply within {options.timeout_s:.2f} s") from exc
        except openai.APIStatusError as exc:
            raise LlmUnavailable(_status_reason(exc)) from exc
        except openai.APIConnectionError as exc:
            raise LlmUnavailable(f"cannot reach {self.settings.base_url}: {exc}") from exc
        except (openai.OpenAIError, ValueError) as exc:
            raise LlmBadReply(f"unreadable reply: {exc}") from exc
        latency_ms = int((time.perf_counter() - started) * 1000)
        if not isinstance(getattr(reply, "choices", None), list) or not reply.choices:
            raise LlmBadReply("the reply has no choices")
        text = reply.choices[0].message.content or ""
        if not text.strip():
            raise LlmBadReply("empty reply")
        usage = reply.usage
        return Completion(
            text=text,
            model=reply.model or options.model,
            latency_ms=latency_ms,
            prompt_tokens=usage.prompt_tokens if usage else None,
            completion_tokens=usage.completion_tokens if usage else None,
        )

    async def aclose(self) -> None:
        await self._client.close()
