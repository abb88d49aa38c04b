"""A chat model's answer before it is put on the wire: the text with ``[n]`` citations,
the sources they number (``[n]`` is ``sources[n - 1]``, as Perplexity's ``citations``),
and the model's tokens."""

from __future__ import annotations

import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Protocol

from searcher.llm.answer import CITED

_CITATION = re.compile(CITED)


@dataclass(frozen=True)
class Source:
    url: str
    title: str


@dataclass(frozen=True)
class Tokens:
    """The model's tokens, as the LLM endpoint reported them."""

    prompt: int = 0
    completion: int = 0

    def __add__(self, other: Tokens) -> Tokens:
        return Tokens(self.prompt + other.prompt, self.completion + other.completion)


@dataclass(frozen=True)
class ChatReply:
    text: str
    sources: list[Source]
    cited: list[int]  # the numbers the text cites, in order of first use
    tokens: Tokens
    query: str  # what was searched (the standalone query)
    # A JSON answer (response_format json_schema): each field's JSON pointer -> the
    # numbers of its sources; None for prose, whose text cites [n] itself.
    field_citations: dict[str, list[int]] | None = None


class CountedCall(Protocol):
    """An LLM call with its token counts (``CallRecord``, ``meta.llm``'s ``LlmCall``)."""

    @property
    def prompt_tokens(self) -> int | None: ...

    @property
    def completion_tokens(self) -> int | None: ...


def tokens_of(records: Iterable[CountedCall]) -> Tokens:
    """The tokens of the calls the endpoint reported (a call it did not report counts 0)."""
    total = Tokens()
    for record in records:
        total = total + Tokens(record.prompt_tokens or 0, record.completion_tokens or 0)
    return total


def cited_numbers(text: str) -> list[int]:
    """The numbers ``text`` cites, in order of first use."""
    found: list[int] = []
    for match in _CITATION.finditer(text):
        for part in match.group(1).split(","):
            n = int(part.strip()[:9])
            if n not in found:
                found.append(n)
    return found


def renumbered(text: str, numbers: Mapping[int, int]) -> str:
    """``text`` with each cited ``n`` written as ``numbers[n]`` (repeats in one bracket
    merged; a number not in ``numbers`` left out, and a bracket left empty removed)."""

    def rewrite(match: re.Match[str]) -> str:
        parts = [int(p.strip()[:9]) for p in match.group(1).split(",")]
        new = list(dict.fromkeys(numbers[n] for n in parts if n in numbers))
        return f"[{', '.join(str(n) for n in new)}]" if new else ""

    return _CITATION.sub(rewrite, text)
