"""Chat replies on the wire, in OpenAI's shapes: a ``chat.completion``, or a stream of
``chat.completion.chunk`` objects as Server-Sent Events (``data: {...}``) ending with
``data: [DONE]``.

Beyond OpenAI's fields, as Perplexity's API has them: ``citations`` (the sources' URLs,
``[n]`` in the text being ``citations[n - 1]``) and ``search_results`` (title and URL of
each). Progress (the query searched, a research job's steps) streams as
``delta.reasoning_content``, where reasoning models put their thinking. The message
itself ends with the cited sources, numbered, so that a client that shows only the text
still shows where it comes from."""

from __future__ import annotations

import re
import secrets
import time
from dataclasses import dataclass, field
from typing import Any

import orjson

from searcher.chat.reply import ChatReply, Tokens

DONE = b"data: [DONE]\n\n"
KEEP_ALIVE = b": keep-alive\n\n"
# Words per content delta: small enough to show the answer growing, few enough events.
WORDS_PER_DELTA = 8
_WORD = re.compile(r"\s*\S+\s*")


def message_content(reply: ChatReply) -> str:
    """The answer, then its cited sources numbered as the text cites them; a JSON answer
    alone (its sources are in ``field_citations``)."""
    if reply.field_citations is not None:
        return reply.text
    refs = [
        f"[{n}] {reply.sources[n - 1].title} — {reply.sources[n - 1].url}"
        for n in reply.cited
        if 1 <= n <= len(reply.sources)
    ]
    return f"{reply.text}\n\nSources:\n" + "\n".join(refs) if refs else reply.text


def usage_body(tokens: Tokens) -> dict[str, int]:
    return {
        "prompt_tokens": tokens.prompt,
        "completion_tokens": tokens.completion,
        "total_tokens": tokens.prompt + tokens.completion,
    }


def sources_body(reply: ChatReply) -> dict[str, Any]:
    """``citations`` and ``search_results``, as Perplexity's API returns them; for a JSON
    answer also ``field_citations`` (JSON pointer -> numbers into ``citations``)."""
    body: dict[str, Any] = {
        "citations": [s.url for s in reply.sources],
        "search_results": [{"title": s.title, "url": s.url} for s in reply.sources],
    }
    if reply.field_citations is not None:
        body["field_citations"] = reply.field_citations
    return body


def content_pieces(text: str) -> list[str]:
    """``text`` in pieces of ``WORDS_PER_DELTA`` words, which join back into it."""
    words = _WORD.findall(text)
    pieces = [
        "".join(words[i : i + WORDS_PER_DELTA]) for i in range(0, len(words), WORDS_PER_DELTA)
    ]
    return pieces or [text]


@dataclass(frozen=True)
class Completion:
    """One completion's identity: the same in its body or in every chunk of its stream."""

    model: str
    id: str = field(default_factory=lambda: "chatcmpl-" + secrets.token_hex(12))
    created: int = field(default_factory=lambda: int(time.time()))

    def body(self, reply: ChatReply) -> dict[str, Any]:
        """The non-streamed ``chat.completion``."""
        message = {"role": "assistant", "content": message_content(reply)}
        return {
            "id": self.id,
            "object": "chat.completion",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "message": message, "finish_reason": "stop"}],
            "usage": usage_body(reply.tokens),
            **sources_body(reply),
        }

    def chunk(self, delta: dict[str, Any], finish_reason: str | None = None, **extra: Any) -> bytes:
        """One ``chat.completion.chunk`` as an SSE event."""
        body = {
            "id": self.id,
            "object": "chat.completion.chunk",
            "created": self.created,
            "model": self.model,
            "choices": [{"index": 0, "delta": delta, "finish_reason": finish_reason}],
            **extra,
        }
        return b"data: " + orjson.dumps(body) + b"\n\n"

    def opening(self) -> bytes:
        return self.chunk({"role": "assistant", "content": ""})

    def reasoning(self, line: str) -> bytes:
        return self.chunk({"reasoning_content": line + "\n"})

    def answer(self, reply: ChatReply, include_usage: bool) -> list[bytes]:
        """The reply's content deltas, the last chunk (``finish_reason``, the sources),
        and with ``include_usage`` the usage chunk (no choices), as OpenAI sends it."""
        events = [
            self.chunk({"content": piece}) for piece in content_pieces(message_content(reply))
        ]
        events.append(self.chunk({}, "stop", **sources_body(reply)))
        if include_usage:
            body = {
                "id": self.id,
                "object": "chat.completion.chunk",
                "created": self.created,
                "model": self.model,
                "choices": [],
                "usage": usage_body(reply.tokens),
            }
            events.append(b"data: " + orjson.dumps(body) + b"\n\n")
        return events


def error_event(error: dict[str, Any]) -> bytes:
    """An error after the stream began (its status was sent already): an event whose
    ``error`` OpenAI's clients raise."""
    return b"data: " + orjson.dumps({"error": error}) + b"\n\n"
