"""Structured research (``output_schema``) over real HTTP: the answer validates against the
caller's JSON Schema, with each field's sources; a reply that does not validate is sent
back with its errors, a bounded number of times, then the job fails with them; a schema
searcher cannot use is refused naming ``output_schema``, and without a model the request
is refused naming ``llm.base_url``. The scripted chat API stands in for the model."""

from __future__ import annotations

import json
import time
from typing import Any

import httpx
import pytest

from searcher.llm.output_schema import SchemaRefused, checked_schema, problems, validator
from searcher.llm.structured import field_citations, reply_schema
from searcher.research.evidence import Passage
from tests.testbed.chat import script

QUESTION = "Google Stadia Microsoft xCloud cloud gaming"
SCHEMA: dict[str, Any] = {
    "type": "object",
    "properties": {
        "service": {"type": "string"},
        "closed": {"type": "integer"},
        "rivals": {"type": "array", "items": {"$ref": "#/$defs/name"}},
    },
    "required": ["service", "closed"],
    "additionalProperties": False,
    "$defs": {"name": {"type": "string"}},
}


def _llm(testbed: Any, structured: str, key: str = "output_schema", **extra: Any) -> dict[str, Any]:
    return {
        "base_url": testbed.llm_url(),
        "model": script(status=503),  # every other step falls back
        "response_format": "json_schema",
        "steps": {key: {"model": structured, **extra}},
    }


def _finished(base: str, body: dict[str, Any]) -> dict[str, Any]:
    response = httpx.post(f"{base}/v1/research", json=body, timeout=30)
    assert response.status_code == 202, response.text
    job_id = response.json()["id"]
    deadline = time.monotonic() + 60
    while True:
        job = httpx.get(f"{base}/v1/research/{job_id}", timeout=30).json()
        if job["status"] not in ("queued", "running") or time.monotonic() > deadline:
            return dict(job)
        time.sleep(0.1)


def _calls(testbed: Any, model: str) -> list[dict[str, Any]]:
    return [b for b in testbed.chat_bodies() if b.get("model") == model]


def test_the_answer_validates_with_the_sources_of_each_field(
    make_settings, serve_searcher, testbed_clean
):
    reply = {
        "data": {"service": "Stadia", "closed": 2023, "rivals": ["xCloud"]},
        "citations": {
            "/service": [1, 999],  # 999: no passage of that number was shown
            "/closed": [1],
            "/nowhere": [1],  # no such field: dropped
        },
    }
    model = script(reply=json.dumps(reply), tag="validates")
    base = serve_searcher(make_settings(llm=_llm(testbed_clean, model)))
    job = _finished(base, {"query": QUESTION, "preset": "minimal", "output_schema": SCHEMA})
    assert job["status"] == "done", job
    result = job["result"]
    structured = result["structured"]
    assert structured["data"] == reply["data"] and structured["repairs"] == 0
    assert "/nowhere" not in structured["citations"]
    evidence = result["evidence"]
    first = f"{evidence[0]['title']} {evidence[0]['text']}".lower()
    # A number is kept where its passage holds the value, else listed as unsupported.
    holds_stadia = "stadia" in first
    assert (1 in structured["citations"].get("/service", [])) == holds_stadia
    assert 999 in structured["unsupported_citations"]["/service"]
    assert ("2023" in first) == (1 in structured["citations"].get("/closed", []))
    for pointer, numbers in structured["citations"].items():
        urls = [evidence[n - 1]["url"] for n in numbers]
        assert structured["citation_urls"][pointer] == urls
    # The server was asked for the caller's schema under "data", not in strict mode.
    sent = _calls(testbed_clean, model)
    assert len(sent) == 1
    fmt = sent[0]["response_format"]["json_schema"]
    assert fmt["strict"] is False
    assert fmt["schema"]["properties"]["data"]["properties"] == SCHEMA["properties"]
    assert fmt["schema"]["$defs"] == SCHEMA["$defs"]  # where "#/$defs/name" looks
    assert "[1] " in sent[0]["messages"][-1]["content"]  # the numbered evidence


def test_a_reply_that_does_not_validate_is_sent_back_with_its_errors(
    make_settings, serve_searcher, testbed_clean
):
    wrong = json.dumps({"data": {"service": "Stadia", "closed": "soon"}, "citations": {}})
    right = json.dumps({"data": {"service": "Stadia", "closed": 2023}, "citations": {}})
    model = script(replies=["Sure! Here it is.", wrong, right], tag="repairs")
    base = serve_searcher(make_settings(llm=_llm(testbed_clean, model)))
    job = _finished(base, {"query": QUESTION, "preset": "minimal", "output_schema": SCHEMA})
    assert job["status"] == "done", job
    assert job["result"]["structured"]["repairs"] == 2
    sent = _calls(testbed_clean, model)
    assert len(sent) == 3
    second, third = sent[1]["messages"], sent[2]["messages"]
    assert second[-2] == {"role": "assistant", "content": "Sure! Here it is."}
    assert "no JSON object in the reply" in second[-1]["content"]
    assert third[-2]["content"] == wrong
    assert "/closed: 'soon' is not of type 'integer'" in third[-1]["content"]


# The step's settings were first `llm.steps.structured_output`: still read as the same.
@pytest.mark.parametrize("key", ["output_schema", "structured_output"])
def test_a_model_that_never_validates_fails_the_job_with_the_errors(
    make_settings, serve_searcher, testbed_clean, key
):
    wrong = json.dumps({"data": {"service": 5}, "citations": {}})
    model = script(reply=wrong, tag=f"never-{key}")
    llm = _llm(testbed_clean, model, key, repairs=1)
    base = serve_searcher(make_settings(llm=llm))
    job = _finished(base, {"query": QUESTION, "preset": "minimal", "output_schema": SCHEMA})
    assert job["status"] == "failed"
    assert job["error"].startswith("output_schema: no reply validated after 1 repair(s)")
    assert "/: 'closed' is a required property" in job["error"]
    assert "/service: 5 is not of type 'string'" in job["error"]
    assert len(_calls(testbed_clean, model)) == 2  # the first reply and one repair


def test_an_unreachable_model_fails_the_job_saying_why(make_settings, serve_searcher, testbed):
    base = serve_searcher(make_settings(llm=_llm(testbed, script(status=500))))
    job = _finished(base, {"query": QUESTION, "preset": "minimal", "output_schema": SCHEMA})
    assert job["status"] == "failed"
    assert job["error"].startswith("output_schema: HTTP 500")


@pytest.mark.parametrize(
    ("schema", "says"),
    [
        ({"type": "wat"}, "not a valid JSON Schema"),
        ({"type": "object", "required": "service"}, "not a valid JSON Schema"),
        ({"properties": {"a": {"$ref": "#/$defs/nope"}}}, "does not resolve"),
        ({"$ref": "https://example.com/schema.json"}, "only references inside the schema"),
        ({"description": "x" * 30_000}, "over 20000"),
        ("not an object", "must be an object"),
        # jsonschema crashed looking the draft up (a 500).
        ({"$schema": 5}, "$schema must be a string"),
        ({"$schema": ["https://json-schema.org/draft/2020-12/schema"]}, "$schema must be"),
        ({"$schema": {}}, "$schema must be a string"),
    ],
)
def test_a_schema_searcher_cannot_use_is_a_422_naming_output_schema(
    make_settings, serve_searcher, testbed, schema, says
):
    base = serve_searcher(make_settings(llm=_llm(testbed, script(reply="{}"))))
    body = {"query": QUESTION, "output_schema": schema}
    response = httpx.post(f"{base}/v1/research", json=body, timeout=30)
    assert response.status_code == 422, response.text
    error = response.json()["error"]
    assert error["field"] == "output_schema" and says in error["message"]


def test_without_a_model_an_output_schema_fails_the_job_naming_llm_base_url(
    make_settings, serve_searcher, testbed_clean
):
    base = serve_searcher(make_settings())
    job = _finished(base, {"query": QUESTION, "output_schema": SCHEMA})
    assert job["status"] == "failed"
    assert job["error"] == (
        "output_schema: needs an LLM, and none is configured: set llm.base_url and llm.model"
    )
    assert not [entry for entry in testbed_clean.log if "/searxng" in entry[0]]  # no search


def test_tavily_research_answers_with_the_object_as_its_content(
    make_settings, serve_searcher, testbed_clean
):
    from tavily import TavilyClient

    reply = {"data": {"service": "Stadia", "closed": 2023}, "citations": {"/service": [1]}}
    model = script(reply=json.dumps(reply), tag="tavily")
    base = serve_searcher(make_settings(llm=_llm(testbed_clean, model)))
    tavily = TavilyClient(api_key="tvly-x", api_base_url=f"{base}/tavily")
    created = tavily.research(input=QUESTION, model="mini", output_schema=SCHEMA)
    deadline = time.monotonic() + 60
    while True:
        result = tavily.get_research(created["request_id"])
        if result["status"] not in {"pending", "in_progress"} or time.monotonic() > deadline:
            break
        time.sleep(0.2)
    assert result["status"] == "completed", result
    assert result["content"] == reply["data"]
    assert set(result["citations"]) <= {"/service"}
    bad = httpx.post(
        f"{base}/tavily/research", json={"input": QUESTION, "output_schema": {"type": 1}}
    )
    assert bad.status_code == 400 and bad.json()["detail"]["field"] == "output_schema"


# --- the pure parts --------------------------------------------------------------------


def test_validation_errors_name_the_field_and_formats_are_checked():
    checker = validator(checked_schema({"properties": {"day": {"format": "date"}}}))
    assert problems(checker, {"day": "2024-02-30x"}) == ["/day: '2024-02-30x' is not a 'date'"]
    assert problems(checker, {"day": "2024-02-03"}) == []
    with pytest.raises(SchemaRefused, match="nested deeper"):
        deep: dict[str, Any] = {}
        for _ in range(30):
            deep = {"items": deep}
        checked_schema(deep)


def test_patterns_are_matched_within_a_time_and_bounded_when_checked():
    # `regex` copies counted repeats when it compiles: a million copies is refused.
    with pytest.raises(SchemaRefused, match="counted repeats make 1,000,000 copies"):
        checked_schema({"properties": {"a": {"pattern": "((a{100}){100}){100}"}}})
    # Property names too: `re` took about 12 s for each keyword that matched this one.
    keys = {"patternProperties": {"^(a|a)*$": {"type": "integer"}}}
    checker = validator(checked_schema({**keys, "additionalProperties": False}))
    started = time.monotonic()
    found = problems(checker, {"a" * 26 + "!": 1, "aaa": "x"})
    assert time.monotonic() - started < 3
    assert (
        found[0]
        == "/: 'aaaaaaaaaaaaaaaaaaaaaaaaaa!' could not be matched against '^(a|a)*$' in time"
    )
    assert problems(checker, {"aaa": 1}) == []
    assert problems(checker, {"aaa": "x"}) == ["/aaa: 'x' is not of type 'integer'"]
    assert problems(checker, {"b": 1}) == [
        "/: Additional properties are not allowed ('b' was unexpected)"
    ]


def test_citations_keep_only_fields_that_exist_and_sources_that_hold_them():
    sources = [
        Passage("https://a.example/", "Stadia", "Google closed Stadia in 2023.", "page"),
        Passage("https://b.example/", "Arcade", "Apple Arcade is a subscription.", "page"),
    ]
    data = {"service": "Stadia", "year": 2023, "open": False, "list": ["Arcade"]}
    cited = {"/service": [1, 2, 3], "/year": [2, 1], "/open": [2], "/list/0": [2], "/x": [1]}
    kept, removed = field_citations(data, cited, sources, shown=2)
    assert kept == {"/service": [1], "/year": [1], "/open": [2], "/list/0": [2]}
    assert removed == {"/service": [2, 3], "/year": [2]}


def test_the_reply_schema_wraps_the_callers_and_lifts_its_definitions():
    wrapped = reply_schema(SCHEMA | {"$schema": "https://json-schema.org/draft/2020-12/schema"})
    assert wrapped["required"] == ["data", "citations"]
    assert "$defs" not in wrapped["properties"]["data"]
    checker = validator(wrapped)
    assert problems(
        checker, {"data": {"service": "a", "closed": 1, "rivals": [2]}, "citations": {}}
    ) == ["/data/rivals/0: 2 is not of type 'string'"]
