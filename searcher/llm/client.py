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
from typing import Any, Literal

import httpx

from searcher.config import LlmSettings
from searcher.errors import LlmBadReply, LlmTimeout, LlmUnavailable
from searcher.llm.context_window import ContextWindow, read_context_window
from searcher.recording.httpx_tape import TapedTransport
from searcher.text import whole_characters

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
    truncated: bool = False  # finish_reason "length": cut off at max_tokens


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


# A form the server enforces, or "none" (the prompt alone asks for JSON).
StructuredForm = Literal["json_schema", "json_object", "guided_json", "none"]
# The order ``auto`` tries them in: OpenAI's form is the most widely served (OpenAI, vLLM,
# Ollama, llama-server); llama-cpp-python's server refuses it (422) but takes a schema in
# ``json_object``; vLLM's own parameter last; a server that refuses all three gets none.
PROBE_ORDER: tuple[StructuredForm, ...] = ("json_schema", "json_object", "guided_json", "none")
# Statuses with which a server refuses a request it cannot read: the form, most likely.
_REFUSED = (400, 422)
# The fields a form adds: a server error that names one refused the form too
# (llama-cpp-python answers OpenAI's json_schema with a 500 naming "response_format").
_FORM_FIELDS = ("response_format", "guided_json")


def refused_form(response: httpx.Response) -> bool:
    """Whether ``response`` refuses the request's JSON form: a 400 or 422, or a 5xx
    whose body names the field that carried it."""
    if response.status_code in _REFUSED:
        return True
    return response.status_code >= 500 and any(f in response.text for f in _FORM_FIELDS)


def structured_fields(form: StructuredForm, options: CallOptions) -> dict[str, Any]:
    """The body fields that ask the server for the step's JSON Schema in ``form``; none
    for a step that wants text."""
    if options.schema is None or form == "none":
        return {}
    if form == "json_object":  # llama-cpp-python's (and llama.cpp's) own form
        return {"response_format": {"type": "json_object", "schema": options.schema}}
    if form == "guided_json":
        return {"guided_json": options.schema}
    schema = {"name": options.schema_name, "schema": options.schema, "strict": options.strict}
    return {"response_format": {"type": "json_schema", "json_schema": schema}}


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


def _truncated(reply: Any) -> bool:
    """Whether the server says it stopped the reply at ``max_tokens``."""
    choices = _get(reply, "choices")
    first = choices[0] if isinstance(choices, list) and choices else None
    return _get(first, "finish_reason") == "length"


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
        body: Any = whole_characters(response.json())
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
        return whole_characters(response.json())
    except ValueError as exc:
        raise LlmBadReply(f"unreadable reply: {exc}") from exc


class LlmClient:
    """Chat completions against one endpoint; ``complete`` raises only ``LlmError``s.

    ``structured`` is how JSON steps ask for their schema: the configured form, or with
    ``llm.structured_output: auto`` the first one the endpoint accepted (None until a JSON
    step has called it). ``context_tokens`` is the model's context window, once read."""

    def __init__(self, settings: LlmSettings) -> None:
        if not settings.configured:
            raise LlmUnavailable("no LLM configured (set llm.base_url and llm.model)")
        self.settings = settings
        wanted = settings.structured_output
        self.structured: StructuredForm | None = None if wanted == "auto" else wanted
        self._context: ContextWindow | None = None
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

    async def context_tokens(self, timeout_s: float) -> int | None:
        """The model's context window: ``llm.context_tokens``, else what the server says
        (read once; asked again after a failed read), else None (unknown)."""
        if self.settings.context_tokens is not None:
            return self.settings.context_tokens
        if self._context is None:
            found = await read_context_window(self._client, self.settings.model or "", timeout_s)
            if found.answered:
                self._context = found
            return found.tokens
        return self._context.tokens

    @property
    def known_context_tokens(self) -> int | None:
        """The context window as known now (configured or read), without asking."""
        if self.settings.context_tokens is not None:
            return self.settings.context_tokens
        return self._context.tokens if self._context else None

    async def complete(self, messages: list[Message], options: CallOptions) -> Completion:
        """One chat completion. The whole call, body included, ends within
        ``options.timeout_s`` (a server trickling its reply cannot hold the request). A
        JSON step's first call with ``structured_output: auto`` may send up to four
        requests: each form the server refuses (``refused_form``) is followed by the next."""
        body: dict[str, Any] = {
            "model": options.model,
            "messages": messages,
            "max_tokens": options.max_tokens,
            "temperature": options.temperature,
        }
        started = time.perf_counter()
        try:
            async with asyncio.timeout(options.timeout_s):
                response = await self._post_structured(body, options)
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
            truncated=_truncated(reply),
        )

    async def _post_structured(self, body: dict[str, Any], options: CallOptions) -> httpx.Response:
        """POST ``body`` with the step's schema in the endpoint's form; while that form is
        not known, try each in ``PROBE_ORDER`` until one is not refused, and keep it."""
        if options.schema is None or self.structured is not None:
            fields = structured_fields(self.structured or "none", options)
            return await self._post(body | fields, options)
        response = None
        for form in PROBE_ORDER:
            response = await self._post(body | structured_fields(form, options), options)
            if not refused_form(response):
                # Only an answer proves the form: after another error, probe again later.
                if response.is_success:
                    self.structured = form
                return response
        # Refused even without a schema: not the form's fault, so nothing is kept.
        assert response is not None
        return response

    async def _post(self, body: dict[str, Any], options: CallOptions) -> httpx.Response:
        return await self._client.post("chat/completions", json=body, timeout=options.timeout_s)

    async def aclose(self) -> None:
        await self._client.aclose()
