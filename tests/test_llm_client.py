"""LlmClient against the scripted chat-completions API of the testbed, over real HTTP."""

from __future__ import annotations

import re
import socket
from collections.abc import AsyncIterator, Callable, Iterator
from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st

from searcher.config import LlmSettings
from searcher.errors import LlmBadReply, LlmError, LlmTimeout, LlmUnavailable
from searcher.llm.client import CallOptions, LlmClient, Message, without_reasoning
from tests.testbed import TestbedServer
from tests.testbed.chat import script

MESSAGES: list[Message] = [
    {"role": "system", "content": "You are terse."},
    {"role": "user", "content": "Say hello to the world"},
]
SCHEMA = {"type": "object", "properties": {"pick": {"type": "array"}}, "required": ["pick"]}

MakeClient = Callable[..., LlmClient]


def opts(model: str, timeout_s: float = 10.0, **kw: Any) -> CallOptions:
    return CallOptions(model=model, max_tokens=42, temperature=0.15, timeout_s=timeout_s, **kw)


@pytest.fixture
async def make_client(testbed_clean: TestbedServer) -> AsyncIterator[MakeClient]:
    clients: list[LlmClient] = []

    def make(**settings: Any) -> LlmClient:
        values = {"base_url": testbed_clean.llm_url(), "model": "unused", **settings}
        client = LlmClient(LlmSettings(**values))
        clients.append(client)
        return client

    yield make
    for client in clients:
        await client.aclose()


@pytest.fixture
def closed_port() -> Iterator[int]:
    """A port on 127.0.0.1 that is bound (so nobody else takes it) but not listening."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    try:
        yield sock.getsockname()[1]
    finally:
        sock.close()


async def test_valid_reply_gives_text_model_and_usage(make_client: MakeClient) -> None:
    model = script(reply="Hello there, world!")
    done = await make_client().complete(MESSAGES, opts(model))
    assert done.text == "Hello there, world!"
    assert done.model == model  # the server's model field
    # The testbed counts words: 3 in the system message, 5 in the user message.
    assert (done.prompt_tokens, done.completion_tokens) == (8, 3)
    assert done.latency_ms >= 0


async def test_reply_without_usage_gives_none_tokens(make_client: MakeClient) -> None:
    done = await make_client().complete(MESSAGES, opts(script(reply="ok", usage=False)))
    assert done.text == "ok"
    assert done.prompt_tokens is None and done.completion_tokens is None


@pytest.mark.parametrize(
    ("model", "expected"),
    [
        (script(status=500), "HTTP 500"),
        (script(status=503), "HTTP 503"),
        (script(status=429), "HTTP 429"),
        ("no-such-model", "HTTP 404"),
    ],
)
async def test_http_errors_raise_unavailable_with_status(
    make_client: MakeClient, model: str, expected: str
) -> None:
    with pytest.raises(LlmUnavailable, match=expected):
        await make_client().complete(MESSAGES, opts(model))


async def test_unknown_model_message_is_the_servers(make_client: MakeClient) -> None:
    with pytest.raises(LlmUnavailable, match=r"no-such-model.*does not exist"):
        await make_client().complete(MESSAGES, opts("no-such-model"))


@pytest.mark.parametrize(
    ("model", "timeout_s"),
    [
        (script(hang=True), 0.3),
        (script(delay_ms=3000, reply="late"), 0.3),
        # 8 pieces 150 ms apart: every read is well within 0.5 s, the whole body is not.
        (script(trickle_ms=150, reply="slow " * 40), 0.5),
    ],
    ids=["hang", "delay", "trickle"],
)
async def test_slow_servers_raise_timeout(
    make_client: MakeClient, model: str, timeout_s: float
) -> None:
    # The client-level timeout is long: only the call's own timeout can end these.
    client = make_client(timeout_s=60.0)
    with pytest.raises(LlmTimeout, match=f"{timeout_s:.2f} s"):
        await client.complete(MESSAGES, opts(model, timeout_s=timeout_s))


async def test_fast_trickle_succeeds(make_client: MakeClient) -> None:
    done = await make_client().complete(
        MESSAGES, opts(script(trickle_ms=5, reply="in pieces"), timeout_s=10.0)
    )
    assert done.text == "in pieces"


async def test_client_still_works_after_a_timeout(make_client: MakeClient) -> None:
    client = make_client()
    with pytest.raises(LlmTimeout):
        await client.complete(MESSAGES, opts(script(hang=True), timeout_s=0.2))
    done = await client.complete(MESSAGES, opts(script(reply="back")))
    assert done.text == "back"


@pytest.mark.parametrize(
    ("model", "match"),
    [
        (script(garbage=True), "unreadable reply"),
        (script(no_choices=True), "no choices"),
        (script(reply=""), "empty reply"),
        (script(reply=" \n\t "), "empty reply"),
    ],
    ids=["garbage", "no_choices", "empty", "blank"],
)
async def test_bad_replies_raise_bad_reply(make_client: MakeClient, model: str, match: str) -> None:
    with pytest.raises(LlmBadReply, match=match):
        await make_client().complete(MESSAGES, opts(model))


async def test_unreachable_endpoint_raises_unavailable(closed_port: int) -> None:
    url = f"http://127.0.0.1:{closed_port}/v1"
    client = LlmClient(LlmSettings(base_url=url, model="m"))
    try:
        with pytest.raises(LlmUnavailable, match=f"cannot reach {url}"):
            await client.complete(MESSAGES, opts("m", timeout_s=5.0))
    finally:
        await client.aclose()


@pytest.mark.parametrize(
    "settings",
    [{}, {"base_url": "http://127.0.0.1:9/v1"}, {"model": "m"}, {"base_url": "", "model": "m"}],
)
def test_not_configured_raises_unavailable(settings: dict[str, Any]) -> None:
    with pytest.raises(LlmUnavailable, match="no LLM configured"):
        LlmClient(LlmSettings(**settings))


def test_errors_are_one_family() -> None:
    assert all(issubclass(e, LlmError) for e in (LlmBadReply, LlmTimeout, LlmUnavailable))


async def test_request_body_carries_the_call_options(
    make_client: MakeClient, testbed_clean: TestbedServer
) -> None:
    model = script(reply="fine")
    await make_client(structured_output="none").complete(MESSAGES, opts(model, schema=SCHEMA))
    (body,) = testbed_clean.chat_bodies()
    assert body["model"] == model
    assert body["messages"] == MESSAGES
    assert body["max_tokens"] == 42
    assert body["temperature"] == pytest.approx(0.15)
    assert "response_format" not in body  # structured_output="none": the prompt asks for JSON


async def test_api_key_is_sent_as_bearer(
    make_client: MakeClient, testbed_clean: TestbedServer
) -> None:
    await make_client(api_key="sk-test-123").complete(MESSAGES, opts(script(reply="x")))
    await make_client().complete(MESSAGES, opts(script(reply="y")))
    auth = [r.headers.get("authorization") for r in testbed_clean.log if r.path.startswith("/llm")]
    assert auth == ["Bearer sk-test-123", "Bearer not-needed"]


JSON_SCHEMA_FORM = {
    "type": "json_schema",
    "json_schema": {"name": "rank", "schema": SCHEMA, "strict": True},
}


@pytest.mark.parametrize(
    ("settings", "schema", "expected"),
    [
        ({"structured_output": "none"}, SCHEMA, {}),
        ({"structured_output": "json_object"}, None, {}),
        ({"structured_output": "json_schema"}, None, {}),
        ({"structured_output": "guided_json"}, None, {}),
        (
            {"structured_output": "json_object"},
            SCHEMA,
            {"response_format": {"type": "json_object", "schema": SCHEMA}},
        ),
        ({"structured_output": "json_schema"}, SCHEMA, {"response_format": JSON_SCHEMA_FORM}),
        ({"structured_output": "guided_json"}, SCHEMA, {"guided_json": SCHEMA}),
        ({"structured_output": "auto"}, SCHEMA, {"response_format": JSON_SCHEMA_FORM}),
        # The older setting still works, as the form it named.
        ({"response_format": "text"}, SCHEMA, {}),
        (
            {"response_format": "json_object_schema"},
            SCHEMA,
            {"response_format": {"type": "json_object", "schema": SCHEMA}},
        ),
    ],
)
async def test_schema_sent_in_the_configured_form_only_for_json_steps(
    make_client: MakeClient,
    testbed_clean: TestbedServer,
    settings: dict[str, str],
    schema: dict[str, Any] | None,
    expected: dict[str, Any],
) -> None:
    client = make_client(**settings)
    await client.complete(MESSAGES, opts(script(reply="{}"), schema=schema, schema_name="rank"))
    (body,) = testbed_clean.chat_bodies()
    sent = {k: body[k] for k in ("response_format", "guided_json") if k in body}
    assert sent == expected


@pytest.mark.parametrize(
    ("reply", "text"),
    [
        ("<think>\nplan: say hi\n</think>\nHello", "\nHello"),
        ('<think>{"pick": [0]}</think>{"pick": [3]}<think>more</think>', '{"pick": [3]}'),
        ("<Think>a</Think>b<THINK>c</THINK>", "b"),
        ("the template opened it, so only </think>Hello", "Hello"),
        ("Hello <think> is a tag name", "Hello <think> is a tag name"),
    ],
)
async def test_reasoning_blocks_are_taken_out_of_the_text(
    make_client: MakeClient, reply: str, text: str
) -> None:
    done = await make_client().complete(MESSAGES, opts(script(reply=reply)))
    assert done.text == text


def _reasoning_removed_by_regex(text: str) -> str:
    """The rule as regexes state it (quadratic on many unclosed tags): the oracle."""
    text = re.sub(r"<think>.*?</think>", "", text, flags=re.IGNORECASE | re.DOTALL)
    text = re.sub(r"^.*</think>", "", text, flags=re.IGNORECASE | re.DOTALL)
    return "" if re.match(r"\s*<think>", text, re.IGNORECASE) else text


@given(st.lists(st.sampled_from(["<think>", "</think>", "<THINK>", "</Think>", "a", " ", "\n"])))
def test_reasoning_is_removed_as_the_regexes_state_it(parts: list[str]) -> None:
    text = "".join(parts)
    assert without_reasoning(text) == _reasoning_removed_by_regex(text)


async def test_a_reply_of_many_unclosed_tags_is_read_in_one_pass(make_client: MakeClient) -> None:
    # 20,000 unclosed tags held the event loop 14 s with the regexes: every request waited.
    reply = "<think>" * 5 + "x" + "<think>" * 20_000
    done = await make_client().complete(MESSAGES, opts(script(reply="ok " + reply)))
    assert done.text == "ok " + reply


@pytest.mark.parametrize("reply", ["<think>still thinking when cut off", "<think>a</think> "])
async def test_a_reply_that_is_only_reasoning_is_empty(make_client: MakeClient, reply: str) -> None:
    with pytest.raises(LlmBadReply, match="empty reply"):
        await make_client().complete(MESSAGES, opts(script(reply=reply)))


@pytest.mark.parametrize(
    ("malformed", "reason"),
    [
        ({"message": {"role": "assistant", "content": [1, 2]}}, "not text"),
        ({"message": {"role": "assistant", "content": {"text": "hi"}}}, "not text"),
        ({"message": "hello"}, "has no message"),
        ({"fields": {"choices": [None]}}, "has no message"),
        ({"fields": {"choices": "hello"}}, "has no choices"),
    ],
)
async def test_a_malformed_200_is_a_bad_reply(
    make_client: MakeClient, malformed: dict[str, Any], reason: str
) -> None:
    with pytest.raises(LlmBadReply, match=reason):
        await make_client().complete(MESSAGES, opts(script(reply="x", **malformed)))


async def test_counts_that_are_no_whole_number_are_unknown(make_client: MakeClient) -> None:
    usage = {"prompt_tokens": -1, "completion_tokens": 3.5, "total_tokens": "x"}
    model = script(reply="ok", fields={"usage": usage, "model": ["m"]})
    done = await make_client().complete(MESSAGES, opts(model))
    assert (done.prompt_tokens, done.completion_tokens) == (None, None)
    assert done.model == model  # the model asked for, not the reply's list
    # Beyond any call's spending (2^64 once made every response a 500: JSON holds 64 bits).
    huge = {"prompt_tokens": 2**64, "completion_tokens": 10**9 + 1, "total_tokens": 1}
    done = await make_client().complete(MESSAGES, opts(script(reply="ok", fields={"usage": huge})))
    assert (done.prompt_tokens, done.completion_tokens) == (None, None)
    fits = {"prompt_tokens": 10**9, "completion_tokens": 0, "total_tokens": 10**9}
    done = await make_client().complete(MESSAGES, opts(script(reply="ok", fields={"usage": fits})))
    assert (done.prompt_tokens, done.completion_tokens) == (10**9, 0)
