"""Reading the JSON object out of a model's reply.

The prompts ask for bare JSON, and servers with a JSON mode enforce it; small local models
still wrap it in a code fence or a sentence. The object is taken from the first ``{`` that
starts a valid JSON object, so "Sure! ```json {"pick": [1]} ```" reads as ``{"pick": [1]}``
while prose with no object in it is refused. So is a reply too long or too deeply nested
to be an answer to our small schemas: decoding it would only cost time or the stack.
"""

from __future__ import annotations

import json
from typing import Any

from searcher.errors import LlmBadReply
from searcher.text import whole_characters

_DECODER = json.JSONDecoder()
# Our replies are a pick list, a grade or a few short queries: far below either limit.
MAX_JSON_CHARS = 50_000


def json_object(text: str) -> dict[str, Any]:
    """The first JSON object in ``text``; ``LlmBadReply`` if there is none, or if the
    reply is longer than ``MAX_JSON_CHARS`` or nested deeper than the decoder's stack."""
    if len(text) > MAX_JSON_CHARS:
        raise LlmBadReply(f"reply of {len(text)} characters is too long for a JSON answer")
    start = text.find("{")
    while start != -1:
        try:
            value, _ = _DECODER.raw_decode(text, start)
        except RecursionError as exc:  # no answer of ours: refuse, do not retry deeper in
            raise LlmBadReply("JSON nested too deeply") from exc
        except ValueError:
            start = text.find("{", start + 1)
            continue
        if isinstance(value, dict):
            # An escaped half of a UTF-16 pair in the reply must not reach what is stored.
            return dict(whole_characters(value))
        start = text.find("{", start + 1)
    raise LlmBadReply(f"no JSON object in the reply: {text[:80]!r}")
