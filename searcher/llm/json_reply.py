"""Reading the JSON object out of a model's reply.

The prompts ask for bare JSON, and servers with a JSON mode enforce it; small local models
still wrap it in a code fence or a sentence. The object is taken from the first ``{`` that
starts a valid JSON object, so "Sure! ```json {"pick": [1]} ```" reads as ``{"pick": [1]}``
while prose with no object in it is refused.
"""

from __future__ import annotations

import json
from typing import Any

from searcher.errors import LlmBadReply

_DECODER = json.JSONDecoder()


def json_object(text: str) -> dict[str, Any]:
    """The first JSON object in ``text``; ``LlmBadReply`` if there is none."""
    start = text.find("{")
    while start != -1:
        try:
            value, _ = _DECODER.raw_decode(text, start)
        except ValueError:
            start = text.find("{", start + 1)
            continue
        if isinstance(value, dict):
            return value
        start = text.find("{", start + 1)
    raise LlmBadReply(f"no JSON object in the reply: {text[:80]!r}")
