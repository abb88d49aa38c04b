"""Graded relevance by the configured LLM (``searcher judge``): one fixed prompt, temperature
0, a strict JSON reply ``{"grade": 0|1|2}``, and a cache in the state directory so that a
pair is asked once per model and prompt version.

Unlike the serving steps this one has no fallback: a judgement nobody made is not a
judgement. A reply that breaks the contract is reported and the pair left unjudged.
"""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from pathlib import Path

from searcher.config import LlmSettings
from searcher.errors import LlmBadReply, StateUnavailable
from searcher.llm.client import CallOptions, LlmClient, Message
from searcher.llm.json_reply import json_object

PROMPT_VERSION = "judge-1"  # part of every cache key: a changed prompt asks again
SYSTEM = (
    "You judge search results. Given a search query and one result (title, URL, text), "
    "grade how relevant the result is to the query:\n"
    "2 = highly relevant: it answers the query or holds the evidence it asks for;\n"
    "1 = partly relevant: on the topic, but does not answer it;\n"
    "0 = not relevant.\n"
    'Reply with JSON only, exactly {"grade": 0}, {"grade": 1} or {"grade": 2}.'
)
SCHEMA = {
    "type": "object",
    "properties": {"grade": {"type": "integer", "enum": [0, 1, 2]}},
    "required": ["grade"],
    "additionalProperties": False,
}
MAX_TEXT_CHARS = 1_500  # of the result's text in the prompt
CACHE_FILE = "judgements.jsonl"


@dataclass(frozen=True)
class Pair:
    """One query and one result to grade."""

    query: str
    url: str
    title: str
    text: str


def messages(pair: Pair) -> list[Message]:
    text = pair.text[:MAX_TEXT_CHARS]
    user = f"Query: {pair.query}\n\nResult title: {pair.title}\nURL: {pair.url}\nText: {text}"
    return [{"role": "system", "content": SYSTEM}, {"role": "user", "content": user}]


def read_grade(reply: str) -> int:
    """The grade of a reply that keeps the contract; ``LlmBadReply`` otherwise."""
    value = json_object(reply)
    grade = value.get("grade")
    if set(value) != {"grade"} or isinstance(grade, bool) or grade not in (0, 1, 2):
        raise LlmBadReply(f'expected {{"grade": 0|1|2}}, got {json.dumps(value)[:80]}')
    return int(grade)


class JudgementCache:
    """Grades by (model, prompt version, pair), one JSON line each, appended as made."""

    def __init__(self, directory: Path, model: str) -> None:
        """The cache in ``directory``; ``StateUnavailable`` when its file cannot be read."""
        self.path = directory / CACHE_FILE
        self.model = model
        self._grades: dict[str, int] = {}
        try:
            raw = self.path.read_bytes() if self.path.exists() else b""
        except OSError as exc:  # a folder in its place, no permission
            raise StateUnavailable(f"cannot read {self.path}: {exc.strerror or exc}") from None
        # A torn last line (an interrupted run) is ended before the next grade is added,
        # which it swallowed; it and any damaged line (bad bytes, not JSON) are misses.
        self._torn = raw != b"" and not raw.endswith(b"\n")
        for line in raw.decode("utf-8", "replace").splitlines():
            try:
                entry = json.loads(line)
                self._grades[entry["key"]] = int(entry["grade"])
            except (ValueError, KeyError, TypeError):
                continue

    def key(self, pair: Pair) -> str:
        raw = json.dumps([self.model, PROMPT_VERSION, pair.query, pair.url, pair.title, pair.text])
        return hashlib.sha256(raw.encode("utf-8")).hexdigest()

    def get(self, pair: Pair) -> int | None:
        return self._grades.get(self.key(pair))

    def put(self, pair: Pair, grade: int) -> None:
        key = self.key(pair)
        self._grades[key] = grade
        line = json.dumps({"key": key, "grade": grade}) + "\n"
        try:
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a", encoding="utf-8") as out:
                out.write("\n" + line if self._torn else line)
        except OSError as exc:
            raise StateUnavailable(f"cannot write {self.path}: {exc.strerror or exc}") from None
        self._torn = False


async def grade(client: LlmClient, settings: LlmSettings, pair: Pair) -> int:
    """Ask the model for one grade (temperature 0). Raises ``LlmError``s."""
    options = CallOptions(
        model=settings.model or "",
        max_tokens=16,
        temperature=0.0,
        timeout_s=settings.timeout_s,
        schema=SCHEMA,
        schema_name="relevance",
    )
    completion = await client.complete(messages(pair), options)
    return read_grade(completion.text)
