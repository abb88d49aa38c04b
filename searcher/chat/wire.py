"""The chat request as OpenAI's clients send it: the boundary models of
``POST /v1/chat/completions``.

Clients send more than this server reads (``temperature``, ``top_p``, ``user``, their
own extensions): fields not named here are accepted and ignored, as the OpenAI-compatible
servers these clients also talk to do. Fields that are read are checked strictly; a bad
one is a 422 naming it (``param``)."""

from __future__ import annotations

import enum
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_validator

from searcher.contract import NOT_BLANK, Preset, is_blank, refused_at, wire_problem
from searcher.llm.output_schema import SchemaRefused, checked_schema


class ChatModel(enum.StrEnum):
    """The models this server offers."""

    search = "searcher-search"
    research = "searcher-research"


MAX_MESSAGES = 200
_PRESETS: dict[str, Preset] = {
    "minimal": "minimal",
    "low": "minimal",
    "medium": "balanced",
    "high": "research",
}


class _Lenient(BaseModel):
    # Unknown fields ignored (clients send many), known ones strictly typed.
    model_config = ConfigDict(extra="ignore", strict=True)


# The schema's way of saying what ``ChatRequest`` checks: some user message has text.
_TEXT: dict[str, Any] = {"type": "string", "pattern": NOT_BLANK}
_A_QUESTION: dict[str, Any] = {
    "type": "object",
    "properties": {
        "role": {"const": "user"},
        "content": {
            "anyOf": [
                _TEXT,
                {
                    "type": "array",
                    "contains": {
                        "type": "object",
                        "properties": {"type": {"const": "text"}, "text": _TEXT},
                        "required": ["type", "text"],
                    },
                },
            ]
        },
    },
    "required": ["role", "content"],
}


class ContentPart(_Lenient):
    """One part of a message's content: text is read, other parts (images) are not."""

    type: str
    text: str | None = None


class ChatMessage(_Lenient):
    role: Literal["system", "developer", "user", "assistant", "tool", "function"]
    content: str | list[ContentPart] | None = None

    @field_validator("content", mode="before")
    @classmethod
    def _text_or_parts(cls, value: Any) -> Any:
        # Checked here, so that the 422 names the content, not a branch of the union.
        parts_ok = isinstance(value, list) and all(
            isinstance(part, dict) and isinstance(part.get("type"), str) for part in value
        )
        if value is None or isinstance(value, str) or parts_ok:
            return value
        raise ValueError("must be a string or a list of content parts ({'type': ...})")

    @property
    def text(self) -> str:
        """The message's text: its content, or the text parts of it joined."""
        if self.content is None or isinstance(self.content, str):
            return self.content or ""
        return "\n".join(part.text or "" for part in self.content if part.type == "text")


def _only(value: Any, names: set[str]) -> Any:
    """``value`` with only the keys ``names`` if it is an object; else as it is."""
    return {k: v for k, v in value.items() if k in names} if isinstance(value, dict) else value


def _read_parts(data: Any) -> Any:
    """The request body with only the fields this server reads, at every level."""
    if not isinstance(data, dict):
        return data
    body = _only(data, set(ChatRequest.model_fields))
    if isinstance(body.get("messages"), list):
        messages = [_only(m, {"role", "content"}) for m in body["messages"]]
        for message in messages:
            if isinstance(message, dict) and isinstance(message.get("content"), list):
                message["content"] = [_only(p, {"type", "text"}) for p in message["content"]]
        body["messages"] = messages
    if "stream_options" in body:
        body["stream_options"] = _only(body["stream_options"], {"include_usage"})
    if "response_format" in body:
        fmt = body["response_format"] = _only(body["response_format"], {"type", "json_schema"})
        if isinstance(fmt, dict) and "json_schema" in fmt:
            fmt["json_schema"] = _only(fmt["json_schema"], {"name", "schema", "strict"})
    return body


def _is_question(message: ChatMessage) -> bool:
    return message.role == "user" and not is_blank(message.text)


class StreamOptions(_Lenient):
    include_usage: bool = False


class JsonSchemaFormat(_Lenient):
    """OpenAI's ``response_format.json_schema``: the answer's JSON Schema, named."""

    name: str = Field(default="answer", max_length=64)
    schema_: dict[str, Any] = Field(alias="schema")
    strict: bool | None = None

    @field_validator("schema_")
    @classmethod
    def _usable(cls, value: dict[str, Any]) -> dict[str, Any]:
        try:
            return checked_schema(value)
        except SchemaRefused as exc:
            raise ValueError(str(exc)) from None


def _schema_when_json(schema: dict[str, Any]) -> None:
    # The schema's way of saying ``_schema_given``: json_schema comes with its object.
    schema["anyOf"] = [
        {"properties": {"type": {"const": "text"}}},
        {
            "properties": {"type": {"const": "json_schema"}, "json_schema": {"type": "object"}},
            "required": ["type", "json_schema"],
        },
    ]


class ResponseFormat(_Lenient):
    """``text`` (the default: prose citing ``[n]``) or ``json_schema`` (a JSON answer that
    validates against the schema, with each field's sources); ``json_object`` is refused
    (no schema to hold the answer to)."""

    model_config = ConfigDict(json_schema_extra=_schema_when_json)

    type: str = Field(json_schema_extra={"enum": ["text", "json_schema"]})
    json_schema: JsonSchemaFormat | None = None

    @field_validator("type")
    @classmethod
    def _supported(cls, value: str) -> str:
        if value not in ("text", "json_schema"):
            raise ValueError(
                f"{value!r} is not supported: ask for json_schema with the answer's schema"
            )
        return value

    @model_validator(mode="after")
    def _schema_given(self) -> ResponseFormat:
        if self.type == "json_schema" and self.json_schema is None:
            raise ValueError("json_schema needs response_format.json_schema.schema")
        return self


class ChatRequest(_Lenient):
    """``POST /v1/chat/completions`` body."""

    model: str = Field(
        description="searcher-search or searcher-research (GET /v1/models).",
        json_schema_extra={"enum": [m.value for m in ChatModel]},
    )
    messages: list[ChatMessage] = Field(
        min_length=1,
        max_length=MAX_MESSAGES,
        description="The conversation; the last user message with text is the question.",
        json_schema_extra=lambda schema: schema.update(contains=_A_QUESTION),
    )
    stream: bool = False
    stream_options: StreamOptions | None = None
    n: int | None = Field(default=None, ge=1, le=1, description="One choice only.")
    response_format: ResponseFormat | None = None
    reasoning_effort: Literal["minimal", "low", "medium", "high"] | None = Field(
        default=None,
        description="searcher-research: the preset of its job (minimal, low: minimal; "
        "medium: balanced, the default; high: research).",
    )
    tool_choice: Literal["none", "auto"] | None = Field(
        default=None,
        description="`none` or `auto` (the answer is text either way); a tool call cannot "
        "be forced: searcher answers with text and its sources, never a tool call.",
    )

    @model_validator(mode="before")
    @classmethod
    def _carriable(cls, data: Any) -> Any:
        # What a client adds beyond the fields read is dropped unseen, at every level (a
        # message's "name", a part's "image_url"); what is read must be carriable
        # (``wire_problem``), else a 422 naming the place.
        data = _read_parts(data)
        found = wire_problem(data)
        if found is None:
            return data
        path, message = found
        raise refused_at(cls.__name__, path, "wire_value", message)

    @field_validator("model")
    @classmethod
    def _known_model(cls, value: str) -> str:
        if value not in {m.value for m in ChatModel}:
            offered = ", ".join(m.value for m in ChatModel)
            raise ValueError(f"unknown model {value[:100]!r}; this server offers {offered}")
        return value

    @field_validator("tool_choice", mode="before")
    @classmethod
    def _no_forced_call(cls, value: Any) -> Any:
        # A client that forces a call (LangChain's with_structured_output, bind_tools with
        # a tool named) would get prose it reads as "no call made": say so instead.
        if value is None or value in ("none", "auto"):
            return value
        raise ValueError(
            "searcher answers with text and its sources, never a tool call: leave "
            "tool_choice out or set it to auto or none (for a JSON answer, use "
            "response_format json_schema)"
        )

    @field_validator("messages")
    @classmethod
    def _asks_a_question(cls, value: list[ChatMessage]) -> list[ChatMessage]:
        if not any(_is_question(m) for m in value):
            raise ValueError("no user message with text to answer")
        return value

    @property
    def asked(self) -> list[ChatMessage]:
        """The messages up to the question (the last user message with text); what
        follows it (a client's own notes) is not part of what is asked."""
        last = max(i for i, m in enumerate(self.messages) if _is_question(m))
        return self.messages[: last + 1]

    @property
    def chat_model(self) -> ChatModel:
        return ChatModel(self.model)

    @property
    def research_preset(self) -> Preset:
        """The research preset ``reasoning_effort`` asks for."""
        return _PRESETS[self.reasoning_effort or "medium"]

    @property
    def output_schema(self) -> dict[str, Any] | None:
        """The answer's JSON Schema (``response_format: json_schema``), if one is asked."""
        fmt = self.response_format
        return fmt.json_schema.schema_ if fmt and fmt.json_schema and fmt.type != "text" else None

    @property
    def include_usage(self) -> bool:
        return self.stream_options is not None and self.stream_options.include_usage


class OpenAIErrorBody(BaseModel):
    """An error as OpenAI's API words it (the chat routes' errors)."""

    message: str
    type: str
    param: str | None = Field(default=None, description="The field at fault, if one is.")
    code: str | None = None


class OpenAIErrorResponse(BaseModel):
    error: OpenAIErrorBody
