"""searcher as a chat model over real HTTP: ``/v1/chat/completions`` and ``/v1/models``
driven by the real ``openai`` SDK and LangChain's ``ChatOpenAI``, searcher's LLM being
the testbed's scripted chat API (``tests/testbed/chat.py``) and its backends the
testbed's; conversations (condensation by the model and by the fallback, sources shown
before demoted) and session novelty on ``/v1/search``."""

from __future__ import annotations

import json
import re
import time
from concurrent.futures import ThreadPoolExecutor
from typing import Any

import httpx
import openai
import pytest
from langchain_openai import ChatOpenAI

from tests.test_auth import bearer, create_key
from tests.testbed.chat import script

ANSWER = "Cloud gaming streams games from servers [1]. Several services compete [2]."


def start(make_settings: Any, serve_searcher: Any, testbed: Any, **steps: str) -> str:
    """searcher with its LLM on the testbed; ``steps`` scripts each step's model."""
    llm: dict[str, Any] = {
        "base_url": testbed.llm_url(),
        "model": script(status=503),
        "steps": {step: {"model": model} for step, model in steps.items()},
    }
    return str(serve_searcher(make_settings(llm=llm, backends={"hedge": False})))


def client(base: str, key: str = "unused") -> openai.OpenAI:
    return openai.OpenAI(base_url=f"{base}/v1", api_key=key, max_retries=0, timeout=60)


def chat(base: str, body: dict[str, Any], headers: dict[str, str] | None = None) -> httpx.Response:
    # json.dumps escapes what UTF-8 cannot carry (a lone surrogate), as a client may send it.
    sent = {"content-type": "application/json", **(headers or {})}
    return httpx.post(
        f"{base}/v1/chat/completions", content=json.dumps(body), headers=sent, timeout=60
    )


def searched(testbed: Any) -> list[str]:
    """The queries the testbed's SearXNG received, in order."""
    return [e.query["q"] for e in testbed.log if e.path == "/searxng/search"]


def ask(question: str, *history: tuple[str, str]) -> list[dict[str, str]]:
    return [*({"role": r, "content": c} for r, c in history), {"role": "user", "content": question}]


def sources_block(content: str) -> list[tuple[int, str]]:
    """The ``[n] title — url`` lines under the message's "Sources:"."""
    _, _, block = content.partition("\n\nSources:\n")
    return [(int(n), url) for n, url in re.findall(r"^\[(\d+)\] .* — (\S+)$", block, re.M)]


def prompt_of(testbed: Any, model: str) -> str:
    """The user message of the last call the LLM stand-in got for ``model``."""
    bodies = [b for b in testbed.chat_bodies() if b["model"] == model]
    assert bodies, f"no call for {model}"
    return str(bodies[-1]["messages"][-1]["content"])


# --- the models, through the real clients ---------------------------------------------


def test_models_are_listed_and_retrieved_with_the_openai_sdk(make_settings, serve_searcher):
    base = serve_searcher(make_settings())
    sdk = client(base)
    assert [m.id for m in sdk.models.list()] == ["searcher-search", "searcher-research"]
    assert sdk.models.retrieve("searcher-research").owned_by == "searcher"
    with pytest.raises(openai.NotFoundError) as missing:
        sdk.models.retrieve("gpt-4o")
    assert missing.value.body["code"] == "http_error"  # type: ignore[index]


def test_search_model_answers_with_citations_and_usage_through_the_sdk(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    answer_model = script(reply=ANSWER)
    base = start(make_settings, serve_searcher, testbed_clean, answer=answer_model)
    completion = client(base).chat.completions.create(
        model="searcher-search", messages=ask(matching_query)
    )
    assert completion.object == "chat.completion" and completion.model == "searcher-search"
    choice = completion.choices[0]
    assert choice.finish_reason == "stop" and choice.message.role == "assistant"
    content = choice.message.content or ""
    assert content.startswith(ANSWER)
    citations = (completion.model_extra or {})["citations"]
    assert len(citations) >= 2 and all(u.startswith("http") for u in citations)
    # [n] in the text is citations[n - 1], and the cited ones are listed under Sources.
    assert sources_block(content) == [(1, citations[0]), (2, citations[1])]
    results = (completion.model_extra or {})["search_results"]
    assert [r["url"] for r in results] == citations
    # usage: the answer step's tokens as the stand-in counted them (words).
    assert completion.usage is not None
    assert completion.usage.completion_tokens == len(ANSWER.split())
    assert completion.usage.prompt_tokens > 50  # the pack went to the model
    assert completion.usage.total_tokens == (
        completion.usage.prompt_tokens + completion.usage.completion_tokens
    )
    assert matching_query in prompt_of(testbed_clean, answer_model)
    assert searched(testbed_clean) == [matching_query]  # a first question: no condensing


def test_an_answer_from_the_result_cache_counts_no_tokens(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    answer_model = script(reply=ANSWER)
    base = start(make_settings, serve_searcher, testbed_clean, answer=answer_model)
    body = {"model": "searcher-search", "messages": ask(matching_query)}
    first, second = chat(base, body).json(), chat(base, body).json()
    assert first["usage"]["completion_tokens"] == len(ANSWER.split())
    assert second["choices"][0]["message"]["content"] == first["choices"][0]["message"]["content"]
    assert second["usage"] == {"prompt_tokens": 0, "completion_tokens": 0, "total_tokens": 0}
    assert len([b for b in testbed_clean.chat_bodies() if b["model"] == answer_model]) == 1


def test_search_model_streams_progress_then_the_answer_through_the_sdk(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    base = start(make_settings, serve_searcher, testbed_clean, answer=script(reply=ANSWER))
    stream = client(base).chat.completions.create(
        model="searcher-search",
        messages=ask(matching_query),
        stream=True,
        stream_options={"include_usage": True},
    )
    chunks = list(stream)
    assert all(c.object == "chat.completion.chunk" for c in chunks)
    assert len({c.id for c in chunks}) == 1
    with_choices = [c for c in chunks if c.choices]
    assert with_choices[0].choices[0].delta.role == "assistant"
    reasoning = "".join(
        (c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in with_choices
    )
    assert f"Searching the web for: {matching_query}" in reasoning
    content = "".join(c.choices[0].delta.content or "" for c in with_choices)
    assert content.startswith(ANSWER) and "\n\nSources:\n[1] " in content
    assert len([c for c in with_choices if c.choices[0].delta.content]) > 1  # in pieces
    last = with_choices[-1]
    assert last.choices[0].finish_reason == "stop"
    citations = (last.model_extra or {})["citations"]
    assert sources_block(content)[0] == (1, citations[0])
    assert chunks[-1].choices == [] and chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == len(ANSWER.split())


def test_a_stream_ends_with_an_sse_done(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    base = start(make_settings, serve_searcher, testbed_clean, answer=script(reply=ANSWER))
    body = {"model": "searcher-search", "messages": ask(matching_query), "stream": True}
    with httpx.stream("POST", f"{base}/v1/chat/completions", json=body, timeout=60) as response:
        assert response.status_code == 200
        assert response.headers["content-type"].startswith("text/event-stream")
        events = [line for line in response.iter_lines() if line]
    assert events[-1] == "data: [DONE]"
    assert all(e.startswith("data: {") for e in events[:-1])


def test_langchain_chat_openai_invokes_and_streams(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    base = start(make_settings, serve_searcher, testbed_clean, answer=script(reply=ANSWER))
    model = ChatOpenAI(
        base_url=f"{base}/v1", api_key="unused", model="searcher-search", max_retries=0
    )
    message = model.invoke(matching_query)
    assert isinstance(message.content, str) and message.content.startswith(ANSWER)
    assert [n for n, _ in sources_block(message.content)] == [1, 2]
    assert message.usage_metadata is not None
    assert message.usage_metadata["output_tokens"] == len(ANSWER.split())
    streamed = "".join(str(chunk.content) for chunk in model.stream(matching_query))
    assert streamed == message.content


def test_the_llm_failing_is_a_502_or_an_error_event_in_openais_shape(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    base = start(make_settings, serve_searcher, testbed_clean, answer=script(status=500))
    failed = chat(base, {"model": "searcher-search", "messages": ask(matching_query)})
    assert failed.status_code == 502
    error = failed.json()["error"]
    assert set(error) >= {"message", "type", "param", "code"}
    assert error["code"] == "llm_failed" and "HTTP 500" in error["message"]
    stream = client(base).chat.completions.create(
        model="searcher-search", messages=ask(matching_query), stream=True
    )
    with pytest.raises(openai.APIError, match="HTTP 500"):
        list(stream)


def test_a_research_answer_whose_searches_all_failed_says_so_in_openais_shape(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    llm = {"base_url": testbed_clean.llm_url(), "model": script(status=503)}
    dead = {"order": ["searxng"], "searxng": {"base_url": testbed_clean.searxng_url("status/500")}}
    base = str(serve_searcher(make_settings(llm=llm, backends=dead)))
    body = {"model": "searcher-research", "messages": ask(matching_query),
            "reasoning_effort": "minimal"}  # fmt: skip
    failed = chat(base, body)
    assert failed.status_code == 502, failed.text
    error = failed.json()["error"]  # (it was llm_failed, as if the LLM had failed)
    assert error["code"] == error["type"] == "all_backends_failed"
    assert "every search failed" in error["message"]
    stream = client(base).chat.completions.create(**body, stream=True)
    with pytest.raises(openai.APIError, match="every search failed") as raised:
        list(stream)
    assert raised.value.type == "all_backends_failed" or raised.value.code == "all_backends_failed"


# --- refusals: no LLM, keys and rate limits, bad input ---------------------------------


def test_without_an_llm_the_chat_is_a_503_naming_llm_base_url(make_settings, serve_searcher):
    base = serve_searcher(make_settings())
    refused = chat(base, {"model": "searcher-search", "messages": ask("cloud gaming")})
    assert refused.status_code == 503
    error = refused.json()["error"]
    assert error["param"] == "llm.base_url" and "llm.base_url" in error["message"]
    assert error["type"] == error["code"] == "llm_required"
    with pytest.raises(openai.InternalServerError, match=r"llm\.base_url"):
        client(base).chat.completions.create(model="searcher-search", messages=ask("x"))


def test_keys_and_rate_limits_apply_in_openais_shape(
    make_settings, serve_searcher, config_file, testbed
):
    config = config_file()
    llm = {"base_url": testbed.llm_url(), "model": script(reply=ANSWER)}
    base = serve_searcher(make_settings(auth={"enabled": True}, llm=llm))
    with pytest.raises(openai.AuthenticationError):
        client(base).models.list()
    missing = httpx.get(f"{base}/v1/models")
    assert missing.status_code == 401
    assert missing.json()["error"] == {
        "message": "an API key is required: one Authorization: Bearer <key>",
        "type": "unauthorized",
        "param": None,
        "code": "unauthorized",
    }
    secret = create_key(config, "chat", "--rate", "2/min")
    assert next(m.id for m in client(base, secret).models.list()) == "searcher-search"
    ok = chat(base, {"model": "searcher-search", "messages": ask("cloud gaming")}, bearer(secret))
    assert ok.status_code == 200, ok.text
    limited = chat(base, {"model": "searcher-search", "messages": ask("x")}, bearer(secret))
    assert limited.status_code == 429 and int(limited.headers["retry-after"]) >= 1
    assert limited.json()["error"]["code"] == "rate_limited"
    with pytest.raises(openai.RateLimitError):
        client(base, secret).models.list()


@pytest.mark.parametrize(
    ("change", "param"),
    [
        ({"model": "gpt-4o"}, "model"),
        ({"model": None}, "model"),
        ({"messages": []}, "messages"),
        ({"messages": [{"role": "assistant", "content": "hi"}]}, "messages"),
        ({"messages": [{"role": "user", "content": "  "}]}, "messages"),
        ({"messages": [{"role": "robot", "content": "hi"}]}, "messages.0.role"),
        ({"messages": [{"role": "user", "content": 5}]}, "messages.0.content"),
        ({"messages": [{"role": "user", "content": "x\ud800"}]}, "messages.0.content"),
        # Not "messages.0.content.str": pydantic's name of a union's member is no field.
        (
            {"messages": [{"role": "user", "content": [{"type": "text", "text": 5}]}]},
            "messages.0.content",
        ),
        ({"stream": "yes"}, "stream"),
        ({"n": 2}, "n"),
        ({"reasoning_effort": "extreme"}, "reasoning_effort"),
        ({"tool_choice": "required"}, "tool_choice"),
        ({"tool_choice": {"type": "function", "function": {"name": "Svc"}}}, "tool_choice"),
        ({"response_format": {"type": "json_object"}}, "response_format.type"),
        (
            {"response_format": {"type": "json_schema", "json_schema": {}}},
            "response_format.json_schema.schema",
        ),
        (
            {"response_format": {"type": "json_schema", "json_schema": {"schema": {"type": 5}}}},
            "response_format.json_schema.schema",
        ),
        (  # jsonschema crashed looking this draft up (a 500)
            {"response_format": {"type": "json_schema", "json_schema": {"schema": {"$schema": 5}}}},
            "response_format.json_schema.schema",
        ),
    ],
)
def test_bad_input_is_a_422_in_openais_shape_naming_the_field(
    make_settings, serve_searcher, testbed, change, param
):
    llm = {"base_url": testbed.llm_url(), "model": script(reply=ANSWER)}
    base = serve_searcher(make_settings(llm=llm))
    body = {"model": "searcher-search", "messages": ask("cloud gaming"), **change}
    refused = chat(base, body)
    assert refused.status_code == 422
    error = refused.json()["error"]
    assert error["param"] == param and error["code"] == "invalid_request"
    assert error["message"].startswith(f"{param}: ")


FOUND = {"type": "object", "properties": {"found": {"type": "boolean"}}, "required": ["found"]}


def test_json_schema_gets_a_json_answer_with_each_fields_sources(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    reply = json.dumps({"data": {"found": True}, "citations": {"/found": [2]}})
    shaper = script(reply=reply)
    base = start(make_settings, serve_searcher, testbed_clean, output_schema=shaper)
    completion = client(base).chat.completions.create(
        model="searcher-search",
        messages=ask(matching_query),
        response_format={"type": "json_schema", "json_schema": {"name": "found", "schema": FOUND}},
    )
    assert json.loads(completion.choices[0].message.content or "") == {"found": True}
    extra = completion.model_extra or {}
    assert extra["field_citations"] == {"/found": [2]} and extra["citations"][1].startswith("http")
    assert completion.usage is not None and completion.usage.completion_tokens == len(reply.split())
    assert matching_query in prompt_of(testbed_clean, shaper)
    # A model that never answers in the schema: 502 naming the validation errors.
    base = start(make_settings, serve_searcher, testbed_clean, output_schema=script(reply="{}"))
    body = {
        "model": "searcher-search",
        "messages": ask(matching_query),
        "response_format": {"type": "json_schema", "json_schema": {"schema": FOUND}},
    }
    failed = chat(base, body)
    assert failed.status_code == 502
    assert failed.json()["error"]["code"] == "structured_output_failed"
    assert "'found' is a required property" in failed.json()["error"]["message"]


def test_a_schema_pattern_that_backtracks_holds_neither_the_server_nor_the_answer(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    # jsonschema matched ^(a|a)*$ with `re`: against 26 a's and a "!" about 12 s on the
    # event loop per validation (twice as long per letter more), every other request
    # waiting. Matched within a time, an undecided match is a validation error.
    reply = json.dumps({"data": {"code": "a" * 26 + "!"}, "citations": {}})
    base = start(make_settings, serve_searcher, testbed_clean, output_schema=script(reply=reply))
    code = {"type": "string", "pattern": "^(a|a)*$"}
    schema = {"type": "object", "properties": {"code": code}, "required": ["code"]}
    body = {
        "model": "searcher-search",
        "messages": ask(matching_query),
        "response_format": {"type": "json_schema", "json_schema": {"schema": schema}},
    }
    slowest = 0.0
    with ThreadPoolExecutor(1) as pool:
        asked = pool.submit(chat, base, body)
        while not asked.done():
            started = time.monotonic()
            assert httpx.get(f"{base}/v1/models", timeout=60).status_code == 200
            slowest = max(slowest, time.monotonic() - started)
            time.sleep(0.05)
        failed = asked.result()
    assert slowest < 2, f"the server did not answer for {slowest:.1f} s"
    assert failed.status_code == 502, failed.text
    error = failed.json()["error"]
    assert error["code"] == "structured_output_failed"
    assert "could not be matched against '^(a|a)*$' in time" in error["message"]


# --- conversations ---------------------------------------------------------------------

FIRST = ("user", "What is the capital of France?")
FIRST_ANSWER = ("assistant", "Paris is the capital of France [1].")


def test_a_follow_up_is_condensed_by_the_model_from_the_history(
    make_settings, serve_searcher, testbed_clean
):
    condense = script(reply="Search query: France capital population")
    answer = script(reply=ANSWER)
    base = start(make_settings, serve_searcher, testbed_clean, condense=condense, answer=answer)
    done = chat(
        base,
        {"model": "searcher-search", "messages": ask("and its population?", FIRST, FIRST_ANSWER)},
    )
    assert done.status_code == 200, done.text
    assert searched(testbed_clean) == ["France capital population"]
    prompt = prompt_of(testbed_clean, condense)
    assert "User: What is the capital of France?" in prompt
    assert "Assistant: Paris is the capital of France [1]." in prompt
    assert prompt.endswith("Last question: and its population?\nSearch query:")
    # usage: the condense call's reply (5 words) and the answer's, if there was evidence.
    answered = any(b["model"] == answer for b in testbed_clean.chat_bodies())
    expected = 5 + (len(ANSWER.split()) if answered else 0)
    assert done.json()["usage"]["completion_tokens"] == expected


def test_without_the_model_a_follow_up_carries_the_previous_querys_entities(
    make_settings, serve_searcher, testbed_clean
):
    base = start(
        make_settings, serve_searcher, testbed_clean,
        condense=script(status=500), answer=script(reply=ANSWER),
    )  # fmt: skip
    history = [("user", "capital of France"), ("assistant", "Paris [1].")]
    done = chat(
        base, {"model": "searcher-search", "messages": ask("and its population?", *history)}
    )
    assert done.status_code == 200, done.text
    assert searched(testbed_clean) == ["France capital population"]
    # A third turn carries the second's standalone query; a question that stands on its
    # own is searched as asked.
    more = [*history, ("user", "and its population?"), ("assistant", "2.1 million [1].")]
    chat(base, {"model": "searcher-search", "messages": ask("what about its area?", *more)})
    chat(base, {"model": "searcher-search", "messages": ask("Tallest mountain in Japan", *more)})
    assert searched(testbed_clean)[1:] == [
        "France capital population area",
        "Tallest mountain in Japan",
    ]


def test_sources_shown_earlier_in_the_conversation_step_aside_unless_still_the_best(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    base = start(
        make_settings, serve_searcher, testbed_clean,
        answer=script(reply=ANSWER), condense=script(reply=matching_query),
    )  # fmt: skip
    first = chat(base, {"model": "searcher-search", "messages": ask(matching_query)}).json()
    before = first["citations"]
    assert len(before) >= 4
    earlier = ("assistant", first["choices"][0]["message"]["content"])  # cites [1] and [2]
    again = chat(
        base,
        {
            "model": "searcher-search",
            "messages": ask("tell me more", ("user", matching_query), earlier),
        },
    ).json()
    after = again["citations"]
    assert after[0] == before[0]  # shown, but still the best
    assert after[1] == before[2]  # the second, shown, stepped aside
    assert before[1] not in after[1 : len(before) - 1]


@pytest.mark.parametrize("stream", [False, True])
def test_a_question_led_by_control_characters_is_searched_on_one_line(
    make_settings, serve_searcher, testbed_clean, stream
):
    # Its first 2,000 characters (a query's limit) are control characters: cut as sent,
    # the query was blank and the chat a 500 (an internal error event when streamed).
    base = start(make_settings, serve_searcher, testbed_clean, answer=script(reply=ANSWER))
    question = "\x01" * 2500 + "\ncloud\x00gaming\r\n\tservices\x7f"
    body = {"model": "searcher-search", "messages": ask(question), "stream": stream}
    done = chat(base, body)
    assert done.status_code == 200, done.text
    assert "internal" not in done.text, done.text
    assert searched(testbed_clean) == ["cloud gaming services"]


def test_a_research_question_led_by_control_characters_is_researched(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    base = start(
        make_settings, serve_searcher, testbed_clean,
        research_plan=script(status=500), research_report=script(reply="Found it [1]."),
    )  # fmt: skip
    body = {"model": "searcher-research", "messages": ask("\x02" * 2100 + matching_query),
            "reasoning_effort": "minimal"}  # fmt: skip
    done = chat(base, body)
    assert done.status_code == 200, done.text
    assert matching_query in searched(testbed_clean)


def test_a_condensed_query_of_control_characters_takes_the_fallback(
    make_settings, serve_searcher, testbed_clean
):
    # The condense model's reply held no searchable character: it was searched as it was
    # (a 500); it is refused as an empty rewrite is, and the fallback carries the words.
    base = start(
        make_settings, serve_searcher, testbed_clean,
        condense=script(reply="\x01\x02"), answer=script(reply=ANSWER),
    )  # fmt: skip
    history = [("user", "capital of France"), ("assistant", "Paris [1].")]
    done = chat(
        base, {"model": "searcher-search", "messages": ask("and its population?", *history)}
    )
    assert done.status_code == 200, done.text
    assert searched(testbed_clean) == ["France capital population"]


@pytest.mark.parametrize("model", ["searcher-search", "searcher-research"])
def test_an_earlier_answer_with_a_placeholder_url_is_read_as_text(
    make_settings, serve_searcher, testbed_clean, matching_query, model
):
    # "http://[your-host]:8080/v1" is no URL any parser reads: it was taken for a source
    # shown, and reading it failed the turn with a 500.
    base = start(
        make_settings, serve_searcher, testbed_clean,
        answer=script(reply=ANSWER), research_plan=script(status=500),
        research_report=script(reply="Found it [1]."),
    )  # fmt: skip
    earlier = ("assistant", "Point it at http://[your-host]:8080/v1 and see https://a.example/x.")
    body = {"model": model, "messages": ask(matching_query, ("user", "how?"), earlier),
            "reasoning_effort": "minimal"}  # fmt: skip
    done = chat(base, body)
    assert done.status_code == 200, done.text


# --- session novelty on /v1/search -----------------------------------------------------


def test_a_session_is_shown_new_results_before_repeats(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    base = serve_searcher(make_settings())

    def urls(**constraints: Any) -> list[str]:
        body = {"query": matching_query, "budget": {"max_results": 4}, "constraints": constraints}
        response = httpx.post(f"{base}/v1/search", json=body, timeout=30)
        assert response.status_code == 200, response.text
        return [item["url"] for item in response.json()["items"]]

    plain = urls()
    first = urls(session_id="s-1")
    assert first == plain  # nothing shown yet: the answer everyone gets
    second = urls(session_id="s-1")
    assert second[0] == plain[0]  # still the best
    assert not set(second[1:]) & set(plain)  # the rest is new to the session
    assert urls(session_id="s-2") == plain  # another session has seen nothing
    assert urls() == plain  # and a search without a session is unchanged


def test_a_bad_session_id_is_a_422_naming_it(make_settings, serve_searcher):
    base = serve_searcher(make_settings())
    body = {"query": "cloud gaming", "constraints": {"session_id": "no spaces!"}}
    refused = httpx.post(f"{base}/v1/search", json=body, timeout=30)
    assert refused.status_code == 422
    assert refused.json()["error"]["field"] == "constraints.session_id"


# --- research --------------------------------------------------------------------------


def test_research_model_streams_its_steps_as_reasoning_then_the_report(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    report = "Cloud gaming is growing [1]. Services differ [2][1]."
    base = start(
        make_settings, serve_searcher, testbed_clean,
        research_plan=script(status=500), research_report=script(reply=report),
    )  # fmt: skip
    stream = client(base).chat.completions.create(
        model="searcher-research",
        messages=ask(matching_query),
        stream=True,
        stream_options={"include_usage": True},
        reasoning_effort="low",
    )
    chunks = list(stream)
    with_choices = [c for c in chunks if c.choices]
    reasoning = "".join(
        (c.choices[0].delta.model_extra or {}).get("reasoning_content") or "" for c in with_choices
    )
    assert reasoning.startswith(f"Researching: {matching_query}\nPlanning: ")
    assert "\nSearched “" in reasoning and "Writing the report" in reasoning
    content = "".join(c.choices[0].delta.content or "" for c in with_choices)
    citations = (with_choices[-1].model_extra or {})["citations"]
    cited = sources_block(content)
    assert content.startswith("Cloud gaming is growing [") and cited
    assert content.count("Sources") == 1
    assert all(url == citations[n - 1] for n, url in cited)
    assert chunks[-1].usage is not None
    assert chunks[-1].usage.completion_tokens == len(report.split())


def test_research_model_answers_whole_without_stream(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    base = start(
        make_settings, serve_searcher, testbed_clean,
        research_plan=script(status=500), research_report=script(reply="Found it [1]."),
    )  # fmt: skip
    done = chat(
        base,
        {"model": "searcher-research", "messages": ask(matching_query), "reasoning_effort": "low"},
    )
    assert done.status_code == 200, done.text
    body = done.json()
    content = body["choices"][0]["message"]["content"]
    assert (
        content.startswith("Found it [1].") and sources_block(content)[0][1] == body["citations"][0]
    )
    assert content.count("Sources") == 1  # the message's list, not the report's as well
    assert body["usage"]["completion_tokens"] == 3


def test_a_client_that_hangs_up_on_a_whole_answer_ends_its_research_job(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    from tests.test_research import wait_for

    llm = {
        "base_url": testbed_clean.llm_url(),
        "model": script(status=503),
        "steps": {
            "research_plan": {"model": script(status=500)},
            "research_report": {"model": script(reply="Late [1].", delay_ms=30_000)},
        },
    }
    settings = make_settings(
        llm=llm, backends={"hedge": False}, research={"max_concurrent_jobs": 1}
    )
    base = str(serve_searcher(settings))
    body = {"model": "searcher-research", "messages": ask(matching_query)}
    with pytest.raises(httpx.ReadTimeout):  # hangs up while the report is being written
        httpx.post(f"{base}/v1/chat/completions", json=body, timeout=3)
    # Its job is cancelled when the client leaves, so the one slot is free again at once
    # (not at the job's deadline, 45 s away).
    probe = {"query": matching_query, "preset": "minimal"}

    def slot_free() -> bool:
        started = httpx.post(f"{base}/v1/research", json=probe, timeout=10)
        assert started.status_code in (202, 429), started.text
        return started.status_code == 202

    wait_for(slot_free, 10, "the research slot to be freed")


def test_a_client_that_hangs_up_on_a_whole_search_answer_stops_it(
    make_settings, serve_searcher, testbed_clean, matching_query
):
    from tests.test_research import wait_for

    llm = {"base_url": testbed_clean.llm_url(), "model": script(reply="Late [1].", delay_ms=30_000)}
    base = str(serve_searcher(make_settings(llm=llm)))
    body = {"model": "searcher-search", "messages": ask(matching_query)}
    with pytest.raises(httpx.ReadTimeout):  # hangs up while the answer is being written
        httpx.post(f"{base}/v1/chat/completions", json=body, timeout=2)
    # The request ends when the client leaves (499 in the metrics), not when the answer
    # would have come, 30 s later.
    gone = 'route="/v1/chat/completions",status="499"} 1.0'

    def ended() -> bool:
        return gone in httpx.get(f"{base}/metrics", timeout=10).text

    wait_for(ended, 10, "the chat request to end as the client left")
