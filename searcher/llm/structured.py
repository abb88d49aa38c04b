"""An answer shaped by the caller's JSON Schema (``output_schema``), from numbered sources,
with the sources of each field.

The model replies ``{"data": <value>, "citations": {"/json/pointer": [n, ...]}}``; ``data``
is validated against the schema with the real validator, and a reply that does not
validate is sent back with its validation errors, ``repairs`` times at most, before the
step fails with them (``StructuredOutputFailed``). There is no fallback without a model:
filling a caller's fields from passages by rule would pass off guesses as answers.

Citations are kept only where they mean something: a pointer to a field that ``data``
has, numbers of sources the model was shown, and, for a field holding text or a number,
a source that holds the value's words (else the number is listed as unsupported).

Any caller with sources calls ``structured_output``: research jobs (their evidence) and
the chat endpoint's ``response_format: json_schema`` (its context pack's items).
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

from searcher.errors import LlmBadReply, StructuredOutputFailed
from searcher.llm.client import Message
from searcher.llm.json_reply import json_object
from searcher.llm.output_schema import problems, validator
from searcher.llm.prompts import REPAIR, messages
from searcher.llm.runner import StepRunner
from searcher.text import STOP_WORDS, words

# A cited value is borne out by a source holding this share of its words.
SUPPORTED_AT = 0.5


class Source(Protocol):
    """What a source needs for this step: a research passage or a pack item."""

    @property
    def url(self) -> str: ...
    @property
    def title(self) -> str: ...
    @property
    def text(self) -> str: ...


@dataclass(frozen=True)
class Structured:
    """A validated answer: ``data`` follows the schema; ``citations`` maps JSON pointers
    into it to the (1-based) numbers of the sources stating them."""

    data: Any
    citations: dict[str, list[int]]
    unsupported: dict[str, list[int]] = field(default_factory=dict)  # numbers removed
    repairs: int = 0  # replies sent back before this one validated


@dataclass(frozen=True)
class _Reply:
    text: str  # as the model wrote it: sent back with its errors for repair
    data: Any
    citations: Any
    unreadable: str | None = None  # why the reply is no JSON answer at all


def numbered_sources(sources: Sequence[Source], max_chars: int) -> tuple[str, int]:
    """``[n] title (url)`` then the text, for the model, within ``max_chars``; and how
    many sources that holds (the first ones)."""
    blocks: list[str] = []
    used = 0
    for n, source in enumerate(sources, start=1):
        block = f"[{n}] {source.title} ({source.url})\n{' '.join(source.text.split())}"
        if blocks and used + len(block) > max_chars:
            break
        blocks.append(block[:max_chars])
        used += len(block) + 2
    return "\n\n".join(blocks), len(blocks)


def reply_schema(schema: Mapping[str, Any]) -> dict[str, Any]:
    """The schema of the whole reply: the caller's under ``data`` (its ``$defs`` lifted
    to the top, where its ``#/$defs/...`` references look), citations beside it."""
    inner = {k: v for k, v in schema.items() if k not in ("$defs", "definitions", "$schema")}
    wrapped: dict[str, Any] = {
        "type": "object",
        "properties": {
            "data": inner,
            "citations": {
                "type": "object",
                "additionalProperties": {"type": "array", "items": {"type": "integer"}},
            },
        },
        "required": ["data", "citations"],
        "additionalProperties": False,
    }
    for key in ("$defs", "definitions"):
        if key in schema:
            wrapped[key] = schema[key]
    return wrapped


def _read(text: str) -> _Reply:
    """The reply's data and citations. A bare value (no ``data`` wrapper) is taken as the
    data, uncited: small models often answer the schema itself."""
    try:
        found = json_object(text)
    except LlmBadReply as exc:
        return _Reply(text, None, None, str(exc))
    if "data" in found and set(found) <= {"data", "citations"}:
        return _Reply(text, found["data"], found.get("citations"))
    return _Reply(text, found, None)


def _at(data: Any, pointer: str) -> tuple[bool, Any]:
    """Whether the JSON pointer names a value in ``data``, and that value."""
    if pointer == "":
        return True, data
    if not pointer.startswith("/"):
        return False, None
    node = data
    for raw in pointer[1:].split("/"):
        part = raw.replace("~1", "/").replace("~0", "~")
        if isinstance(node, dict) and part in node:
            node = node[part]
        elif isinstance(node, list) and part.isdigit() and int(part) < len(node):
            node = node[int(part)]
        else:
            return False, None
    return True, node


def _holds(source: Source, value: Any) -> bool:
    """Whether ``source`` holds enough of a text or number value's words to state it
    (other values, objects and booleans, are taken as cited)."""
    if isinstance(value, bool) or not isinstance(value, str | int | float):
        return True
    wanted = {w for w in words(str(value)) if w not in STOP_WORDS}
    if not wanted:
        return True
    present = set(words(f"{source.title} {source.text}"))
    return len(wanted & present) / len(wanted) >= SUPPORTED_AT


def field_citations(
    data: Any, cited: Any, sources: Sequence[Source], shown: int
) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """The model's citations kept (pointers into ``data``, numbers of shown sources that
    hold the value) and the numbers removed as unsupported, per pointer."""
    kept: dict[str, list[int]] = {}
    removed: dict[str, list[int]] = {}
    if not isinstance(cited, dict):
        return kept, removed
    for pointer in sorted(k for k in cited if isinstance(k, str)):
        exists, value = _at(data, pointer)
        numbers = cited[pointer] if isinstance(cited[pointer], list) else [cited[pointer]]
        numbers = [n for n in numbers if isinstance(n, int) and not isinstance(n, bool)]
        if not exists or not numbers:
            continue
        for n in dict.fromkeys(numbers):
            good = 1 <= n <= shown and _holds(sources[n - 1], value)
            (kept if good else removed).setdefault(pointer, []).append(n)
    return kept, removed


async def structured_output(
    runner: StepRunner,
    question: str,
    sources: Sequence[Source],
    schema: Mapping[str, Any],
    *,
    repairs: int,
    max_source_chars: int = 12_000,
    reserve: int = 0,
) -> Structured:
    """The answer to ``question`` shaped by ``schema`` (a ``checked_schema``) from
    ``sources``, after at most ``repairs`` replies sent back with their validation errors;
    ``StructuredOutputFailed`` with the last errors, or with why the model could not be
    asked (none configured, budget, deadline, unreachable)."""
    evidence, shown = numbered_sources(sources, max_source_chars)
    schema_text = json.dumps(schema, ensure_ascii=False, sort_keys=True)
    chat: list[Message] = messages(
        "output_schema", runner.today, schema=schema_text, evidence=evidence,
        question=question,
    )  # fmt: skip
    checker = validator(schema)
    wrapped = reply_schema(schema)
    found: list[str] = []
    for attempt in range(repairs + 1):
        outcome = await runner.run("output_schema", chat, _read, reserve, wrapped)
        if outcome.value is None:
            raise StructuredOutputFailed(outcome.reason or "the model gave no reply", found)
        reply = outcome.value
        found = [f"/: {reply.unreadable}"] if reply.unreadable else problems(checker, reply.data)
        if not found:
            kept, removed = field_citations(reply.data, reply.citations, sources, shown)
            return Structured(reply.data, kept, removed, attempt)
        if attempt < repairs:
            chat = [
                *chat,
                {"role": "assistant", "content": reply.text},
                {"role": "user", "content": REPAIR.format(problems="\n".join(found))},
            ]
    raise StructuredOutputFailed(
        f"no reply validated after {repairs} repair(s); the last one's errors", found
    )
