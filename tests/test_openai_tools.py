"""GET /v1/tools/openai: the tool definitions are valid JSON schema, arguments valid
against them make successful /v1/search and /v1/fetch calls, and the tool loop in
docs/integrations/openai-tools.md runs."""

import json
import re
from pathlib import Path

import httpx
import pytest
from jsonschema import Draft7Validator, Draft202012Validator
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from searcher.errors import InvalidRequest
from searcher.tools.specs import search_body, tool_specs
from tests.ddgs_fake import FakeDDGS
from tests.testbed.server import ThreadedServer


@pytest.fixture
def served(make_settings, serve_searcher, testbed, aeb_titles):
    """searcher with DuckDuckGo on (a fake whose rows are testbed pages), so every backend
    the schema names can answer."""
    rows = [
        {"title": title, "href": testbed.page_url(pid), "body": f"{title}, a page on games."}
        for pid, title in sorted(aeb_titles.items())[:8]
    ]
    settings = make_settings(backends={"duckduckgo": {"enabled": True}})
    return serve_searcher(settings, ddgs=FakeDDGS(rows=rows))


def definitions(base):
    response = httpx.get(f"{base}/v1/tools/openai", timeout=10)
    assert response.status_code == 200
    return {t["function"]["name"]: t for t in response.json()}


def test_definitions_are_openai_function_tools_with_valid_schemas(served):
    tools = definitions(served)
    assert list(tools) == ["web_search", "fetch_page"]
    for tool in tools.values():
        assert tool["type"] == "function" and set(tool["function"]) == {
            "name", "description", "parameters"
        }  # fmt: skip
        assert len(tool["function"]["description"]) > 40
        schema = tool["function"]["parameters"]
        Draft202012Validator.check_schema(schema)
        Draft7Validator.check_schema(schema)  # what older tool-calling stacks speak
        assert schema["type"] == "object" and schema["additionalProperties"] is False
        assert all(p.get("description") for p in schema["properties"].values())
    search = tools["web_search"]["function"]["parameters"]
    assert search["required"] == ["query"]
    assert set(search["properties"]) == {
        "query", "mode", "max_results", "backend", "time_range", "include_domains",
        "exclude_domains", "session_id",
    }  # fmt: skip
    page = tools["fetch_page"]["function"]["parameters"]
    assert page["required"] == ["url"] and set(page["properties"]) == {
        "url", "max_chars", "start_char"
    }  # fmt: skip
    assert page["properties"]["max_chars"]["default"] == 20_000  # mcp.max_output_chars


def web_search_arguments(query):
    """Valid arguments covering every property and every enum value."""
    return [
        {"query": query},
        {"query": query, "mode": "full", "max_results": 2, "backend": "searxng"},
        {"query": query, "mode": "simple", "max_results": 20, "backend": "brave"},
        {"query": query, "backend": "duckduckgo", "time_range": "day"},
        {"query": query, "backend": "auto", "time_range": "week", "include_domains": ["127.0.0.1"]},
        {"query": query, "time_range": "month", "exclude_domains": ["example.com"]},
        {"query": query, "time_range": "year", "include_domains": [], "exclude_domains": []},
        {"query": "  x  ", "max_results": 1},
        {"query": query, "session_id": "agent-7:task.2"},
    ]


def test_valid_web_search_arguments_make_successful_searches(served, testbed, matching_query):
    schema = definitions(served)["web_search"]["function"]["parameters"]
    validator = Draft202012Validator(schema)
    for arguments in web_search_arguments(matching_query):
        validator.validate(arguments)
        response = httpx.post(f"{served}/v1/search", json=search_body(arguments), timeout=30)
        assert response.status_code == 200, (arguments, response.text)
        data = response.json()
        assert data["meta"]["mode_used"] == arguments.get("mode", "simple")
        if arguments.get("backend", "auto") != "auto":
            assert data["meta"]["backend_used"] == arguments["backend"]
        if "max_results" in arguments:
            assert len(data["items"]) <= arguments["max_results"]
        if arguments["query"] == matching_query:
            assert data["items"]
            assert all(i["url"].startswith(testbed.base_url) for i in data["items"])


def test_valid_fetch_page_arguments_make_successful_fetches(served, testbed, aeb_ids):
    schema = definitions(served)["fetch_page"]["function"]["parameters"]
    url = testbed.page_url(aeb_ids[0])
    for arguments in [
        {"url": url},
        {"url": url, "max_chars": 1, "start_char": 0},
        {"url": url.replace("http://", "HTTP://"), "max_chars": 200_000, "start_char": 10},
    ]:
        Draft202012Validator(schema).validate(arguments)
        response = httpx.post(f"{served}/v1/fetch", json=arguments, timeout=30)
        assert response.status_code == 200, (arguments, response.text)
        data = response.json()
        assert data["status"] == "fetched" and data["content"]
        assert len(data["content"]) <= arguments.get("max_chars", 20_000)


@pytest.mark.parametrize(
    ("name", "arguments", "field"),
    [
        ("web_search", {"query": " \t "}, "query"),
        ("web_search", {"query": "x" * 2001}, "query"),
        ("web_search", {"query": "x", "mode": "deep"}, "mode"),
        ("web_search", {"query": "x", "max_results": 0}, "max_results"),
        ("web_search", {"query": "x", "backend": 3}, "backend"),  # names: the server checks
        ("web_search", {"query": "x", "time_range": "decade"}, "time_range"),
        ("web_search", {"query": "x", "include_domains": "a.com"}, "include_domains"),
        ("web_search", {"query": "x", "lang": "de"}, "arguments"),
        ("web_search", {"query": "x", "session_id": "no spaces"}, "session_id"),
        ("web_search", {"query": "x", "session_id": "s" * 129}, "session_id"),
        ("fetch_page", {"url": "ftp://a.example/"}, "url"),
        # What POST /v1/fetch refuses, the schema refuses: the tool takes that body.
        ("fetch_page", {"url": "http://a.example/?q=café"}, "url"),
        ("fetch_page", {"url": "http://a.example/#section 2"}, "url"),
        ("fetch_page", {"url": "http://bücher.example/"}, "url"),
        ("fetch_page", {"url": "http://a.example/", "max_chars": 200_001}, "max_chars"),
        ("fetch_page", {"url": "http://a.example/", "start_char": -1}, "start_char"),
        ("fetch_page", {}, "arguments"),
    ],
)
def test_the_schemas_refuse_bad_arguments_naming_the_field(name, arguments, field):
    spec = {s.name: s for s in tool_specs(20_000)}[name]
    with pytest.raises(InvalidRequest) as caught:
        spec.validate(arguments)
    assert caught.value.field == field


def test_a_refusal_does_not_repeat_a_huge_value_and_defaults_fit_their_maximum():
    web_search, fetch_page = tool_specs(20_000)
    with pytest.raises(InvalidRequest) as caught:
        web_search.validate({"query": "q" * 60_000})
    assert str(caught.value) == "query: has 60000 characters; at most 2000 allowed"
    with pytest.raises(InvalidRequest) as caught:
        fetch_page.validate({"url": "http://a.example/" + "x" * 60_000})
    assert len(str(caught.value)) < 400
    # A server whose MCP results may be longer than a fetch may ask still states a
    # default its own maximum allows.
    (_, big) = tool_specs(500_000)
    max_chars = big.parameters["properties"]["max_chars"]
    assert max_chars["default"] == max_chars["maximum"] == 200_000


# --- the loop in docs/integrations/openai-tools.md, against a scripted model -------------

DOC = Path(__file__).resolve().parents[1] / "docs" / "integrations" / "openai-tools.md"


def documented_loop() -> str:
    (code,) = re.findall(r"```python\n(.*?)```", DOC.read_text(encoding="utf-8"), re.S)
    return code


def scripted_model(query: str) -> Starlette:
    """A chat-completions API whose model calls web_search, then fetch_page on the first
    URL of the pack, then answers with the start of what it read."""
    requests: list[dict] = []

    def reply(message: dict) -> JSONResponse:
        choice = {"index": 0, "message": message, "finish_reason": "stop"}
        return JSONResponse(
            {
                "id": "c",
                "object": "chat.completion",
                "created": 1,
                "model": "m",
                "choices": [choice],
            }
        )

    def tool_call(name: str, arguments: dict) -> dict:
        function = {"name": name, "arguments": json.dumps(arguments)}
        call = {"id": f"call-{len(requests)}", "type": "function", "function": function}
        return {"role": "assistant", "content": None, "tool_calls": [call]}

    async def chat(request: Request) -> JSONResponse:
        body = await request.json()
        requests.append(body)
        last = body["messages"][-1]["content"]
        if len(requests) == 1:
            return reply(tool_call("web_search", {"query": query, "max_results": 2}))
        if len(requests) == 2:
            url = re.search(r"URL: (\S+)", last).group(1)
            return reply(tool_call("fetch_page", {"url": url, "max_chars": 400}))
        return reply({"role": "assistant", "content": "ANSWER " + json.loads(last)["content"]})

    app = Starlette(routes=[Route("/v1/chat/completions", chat, methods=["POST"])])
    app.state.requests = requests
    return app


def test_the_documented_tool_loop_runs(
    make_settings, serve_searcher, testbed, matching_query, capsys
):
    searcher = serve_searcher(make_settings())
    model = scripted_model(matching_query)
    llm = ThreadedServer(model).start()
    try:
        code = documented_loop().replace("http://127.0.0.1:8080", searcher)
        code = code.replace("OpenAI()", f"OpenAI(base_url='{llm.base_url}/v1', api_key='k')")
        exec(compile(code, str(DOC), "exec"), {})
    finally:
        llm.stop()
    requests = model.state.requests
    assert len(requests) == 3
    assert [t["function"]["name"] for t in requests[0]["tools"]] == ["web_search", "fetch_page"]
    pack = requests[1]["messages"][-1]["content"]
    assert pack.startswith("[CONTEXT_PACK ucp-1]") and f"URL: {testbed.base_url}/pages/" in pack
    page = json.loads(requests[2]["messages"][-1]["content"])
    assert page["status"] == "fetched" and len(page["content"]) == 400
    assert page["next_start_char"] == 400
    assert capsys.readouterr().out == f"ANSWER {page['content']}\n"
