"""The text-generation-webui plugin (integrations/text-generation-webui/searcher_search):
its hooks, called with the web UI's signatures, against searcher served on 127.0.0.1."""

from __future__ import annotations

import ast
import datetime
import importlib.util
import socket
import sys
from collections.abc import Iterator
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import pytest

from tests.testbed.server import ThreadedServer

SCRIPT = (
    Path(__file__).resolve().parents[1]
    / "integrations"
    / "text-generation-webui"
    / "searcher_search"
    / "script.py"
)
PACK_OPEN, PACK_CLOSE = "[CONTEXT_PACK ucp-1]", "[/CONTEXT_PACK]"


@pytest.fixture
def plugin() -> ModuleType:
    """A fresh copy of script.py, loaded by path as the web UI does (it is no package)."""
    spec = importlib.util.spec_from_file_location("tgwui_searcher_search_script", SCRIPT)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def today_candidates(call: Any) -> tuple[str, set[str]]:
    """Run call(); return its result and the ISO dates it may have seen (midnight-safe)."""
    before = datetime.date.today()
    result = call()
    after = datetime.date.today()
    return result, {before.isoformat(), after.isoformat()}


def searxng_requests(testbed: Any) -> list[Any]:
    return [entry for entry in testbed.log if entry.path.startswith("/searxng")]


@pytest.fixture
def closed_port() -> int:
    """A port on 127.0.0.1 that nothing listens on."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    port: int = sock.getsockname()[1]
    sock.close()
    return port


@pytest.fixture
def silent_port() -> Iterator[int]:
    """A port on 127.0.0.1 that accepts connections (the kernel's backlog) but never answers."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.bind(("127.0.0.1", 0))
    sock.listen(4)
    yield sock.getsockname()[1]
    sock.close()


def fixed_answer(status: int, body: bytes) -> Any:
    """An ASGI app that answers every request with this status and body."""

    async def app(scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            return
        await send(
            {
                "type": "http.response.start",
                "status": status,
                "headers": [(b"content-type", b"application/json")],
            }
        )
        await send({"type": "http.response.body", "body": body})

    return app


# --- the plugin's own rules -----------------------------------------------------------


def _module_level_imports(tree: ast.Module) -> Iterator[ast.Import | ast.ImportFrom]:
    # Everything outside function bodies runs when the web UI imports the extension.
    stack: list[ast.AST] = list(tree.body)
    while stack:
        node = stack.pop()
        if isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef | ast.Lambda):
            continue
        if isinstance(node, ast.Import | ast.ImportFrom):
            yield node
        stack.extend(ast.iter_child_nodes(node))


def test_script_imports_only_the_standard_library_at_module_level():
    tree = ast.parse(SCRIPT.read_text(encoding="utf-8"))
    roots: set[str] = set()
    for node in _module_level_imports(tree):
        if isinstance(node, ast.ImportFrom):
            assert node.level == 0, "relative import: the web UI loads script.py alone"
            roots.add((node.module or "").split(".")[0])
        else:
            roots.update(alias.name.split(".")[0] for alias in node.names)
    assert "urllib" in roots and "json" in roots  # the check did see the imports
    outside = {root for root in roots if root not in sys.stdlib_module_names | {"__future__"}}
    assert outside == set(), f"non-stdlib imports at module level: {outside}"

    # gradio is allowed only inside ui(), which the web UI calls with gradio installed.
    ui = next(n for n in tree.body if isinstance(n, ast.FunctionDef) and n.name == "ui")
    inner = [n for n in ast.walk(ui) if isinstance(n, ast.Import)]
    assert any(alias.name == "gradio" for node in inner for alias in node.names)


def test_params_carry_every_setting_with_the_documented_defaults(plugin):
    assert plugin.params["activate"] is True
    assert plugin.params["mode"] == "simple"
    assert plugin.params["max_results"] == 5
    assert plugin.params["api_url"] == "http://127.0.0.1:8080"
    assert plugin.params["timeout_s"] > 0
    assert plugin.params["max_context_chars"] == 0
    assert plugin.params["display_name"] and plugin.params["is_tab"] is False


# --- against a running searcher -------------------------------------------------------


def test_chat_input_gets_the_date_and_the_context_pack(
    plugin, make_settings, serve_searcher, matching_query, aeb_titles
):
    plugin.params["api_url"] = serve_searcher(make_settings())
    state = {"mode": "chat", "history": {"internal": [], "visible": []}}

    out, dates = today_candidates(
        lambda: plugin.input_modifier(matching_query, state, is_chat=True)
    )

    assert out != matching_query and out.endswith(f"\n\n{matching_query}")
    opened, closed = out.index(PACK_OPEN), out.index(PACK_CLOSE)
    assert opened < closed < out.rindex(matching_query)
    assert any(title in out[opened:closed] for title in aeb_titles.values())
    assert "mode=simple" in out[opened:closed]
    head = out[:opened]
    assert any(f"Current date: {day}" in head for day in dates)
    assert plugin.last_error is None
    assert plugin.last_response["request"]["query"] == {"text": matching_query}
    assert out[opened:].startswith(plugin.last_response["rendered_text"])


def test_notebook_prompt_gets_the_pack_in_front_and_keeps_the_prompt(
    plugin, make_settings, serve_searcher, matching_query, aeb_titles
):
    plugin.params["api_url"] = serve_searcher(make_settings())
    prompt = f"Question:\n  {matching_query}\n\nAnswer:"

    out = plugin.input_modifier(prompt, {"mode": "instruct"})

    assert out.startswith("Current date: ") and out.endswith(f"\n\n{prompt}")
    assert PACK_OPEN in out and PACK_CLOSE in out
    assert any(title in out for title in aeb_titles.values())
    sent = plugin.last_response["request"]["query"]["text"]
    assert sent == f"Question: {matching_query} Answer:"  # whitespace collapsed


def test_toggle_off_leaves_the_input_alone_and_does_not_search(
    plugin, make_settings, serve_searcher, testbed_clean, matching_query
):
    plugin.params["api_url"] = serve_searcher(make_settings())
    plugin.params["activate"] = False

    assert plugin.input_modifier(matching_query, {}, is_chat=True) == matching_query
    assert plugin.input_modifier(matching_query, {}) == matching_query
    assert plugin.last_response is None
    assert searxng_requests(testbed_clean) == []

    # And back on, the same plugin does search: the toggle is what held it back.
    plugin.params["activate"] = True
    assert PACK_OPEN in plugin.input_modifier(matching_query, {}, is_chat=True)
    assert searxng_requests(testbed_clean)


def test_mode_count_and_context_size_reach_searcher(
    plugin, make_settings, serve_searcher, matching_query
):
    plugin.params.update(
        api_url=serve_searcher(make_settings()),
        mode="full",
        max_results=2.0,  # what a gradio slider sends
        max_context_chars=3000,
        timeout_s=20,
    )

    out = plugin.input_modifier(matching_query, {}, is_chat=True)

    response = plugin.last_response
    assert response["request"]["constraints"] == {"search_mode": "full"}
    assert response["request"]["budget"]["max_results"] == 2
    assert response["request"]["budget"]["max_context_chars"] == 3000
    assert response["request"]["want"] == {"items": False, "rendered_text": True}
    assert response["meta"]["mode_used"] == "full"
    assert 1 <= response["usage"]["results_returned"] <= 2
    assert response["usage"]["fetch_pages_used"] >= 1
    pack = response["rendered_text"]
    assert len(pack) <= 3000 and "mode=full" in pack and pack in out
    assert "items" not in response


def test_empty_input_does_not_search(plugin, make_settings, serve_searcher, testbed_clean):
    plugin.params["api_url"] = serve_searcher(make_settings())
    assert plugin.input_modifier("  \n ", {}, is_chat=True) == "  \n "
    assert searxng_requests(testbed_clean) == []


# --- failures: the input passes through, one warning, nothing raised ------------------


def assert_one_warning(caplog: pytest.LogCaptureFixture, *fragments: str) -> None:
    records = [r for r in caplog.records if r.name == "searcher_search"]
    assert len(records) == 1 and records[0].levelname == "WARNING"
    message = records[0].getMessage()
    assert "\n" not in message and "unchanged" in message
    for fragment in fragments:
        assert fragment in message


def test_searcher_down_leaves_the_input_unchanged(plugin, closed_port, matching_query, caplog):
    plugin.params["api_url"] = f"http://127.0.0.1:{closed_port}"

    assert plugin.input_modifier(matching_query, {}, is_chat=True) == matching_query
    assert plugin.input_modifier(matching_query, {}) == matching_query

    assert plugin.last_response is None
    assert f"127.0.0.1:{closed_port}" in plugin.last_error
    records = [r for r in caplog.records if r.name == "searcher_search"]
    assert len(records) == 2  # one line per failed call


def test_timeout_leaves_the_input_unchanged(plugin, silent_port, matching_query, caplog):
    plugin.params.update(api_url=f"http://127.0.0.1:{silent_port}", timeout_s=0.3)

    assert plugin.input_modifier(matching_query, {}, is_chat=True) == matching_query
    assert "timed out" in plugin.last_error
    assert_one_warning(caplog, "timed out")


@pytest.mark.parametrize(
    ("status", "body", "reason"),
    [
        (500, b'{"error": {"type": "internal"}}', "HTTP 500"),
        (422, b'{"error": {"type": "invalid_request"}}', "HTTP 422"),
        (200, b"<html>not json</html>", "not JSON"),
        (200, b"[1, 2]", "not a JSON object"),
        (200, b'{"schema": "ucp-1"}', "no rendered_text"),
        (200, b'{"rendered_text": ""}', "no rendered_text"),
    ],
)
def test_bad_answers_leave_the_input_unchanged(plugin, status, body, reason, caplog):
    server = ThreadedServer(fixed_answer(status, body)).start()
    try:
        plugin.params["api_url"] = server.base_url
        assert plugin.input_modifier("what is bm25", {}, is_chat=True) == "what is bm25"
    finally:
        server.stop()
    assert reason in plugin.last_error
    assert_one_warning(caplog, reason)


def test_bad_settings_leave_the_input_unchanged(plugin, caplog):
    plugin.params.update(api_url="127.0.0.1:8080", max_results="many")
    assert plugin.input_modifier("what is bm25", {}, is_chat=True) == "what is bm25"
    assert_one_warning(caplog)


# --- ui(): every widget writes its setting -------------------------------------------


class _FakeWidget:
    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self.kwargs = kwargs
        self.handlers: list[Any] = []

    def change(self, fn: Any, inputs: Any, outputs: Any) -> None:
        assert inputs is self and outputs is None
        self.handlers.append(fn)


class _FakeRow:
    def __enter__(self) -> _FakeRow:
        return self

    def __exit__(self, *exc: Any) -> None:
        return None


def test_ui_binds_every_setting_to_params(plugin, monkeypatch):
    # gradio lives in the web UI's environment, not ours: a stand-in records the widgets.
    widgets: list[_FakeWidget] = []

    def factory(*args: Any, **kwargs: Any) -> _FakeWidget:
        widget = _FakeWidget(*args, **kwargs)
        widgets.append(widget)
        return widget

    fake = SimpleNamespace(
        Row=_FakeRow,
        Checkbox=factory,
        Radio=factory,
        Slider=factory,
        Number=factory,
        Textbox=factory,
    )
    monkeypatch.setitem(sys.modules, "gradio", fake)

    initial = dict(plugin.params)
    plugin.ui()

    # Feed each widget's handler a unique marker and see which setting it lands in.
    bound: dict[str, _FakeWidget] = {}
    for widget in widgets:
        assert len(widget.handlers) == 1
        marker = object()
        widget.handlers[0](marker)
        keys = [key for key, value in plugin.params.items() if value is marker]
        assert len(keys) == 1
        bound[keys[0]] = widget
        assert widget.kwargs["value"] == initial[keys[0]]  # shows the current setting
    settings = {"activate", "mode", "max_results", "max_context_chars", "api_url", "timeout_s"}
    assert set(bound) == settings and len(widgets) == len(settings)
