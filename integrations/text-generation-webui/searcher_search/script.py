"""searcher_search: web search context for text-generation-webui, from a searcher server.

A thin plugin (seed section 10): before the model sees the user's input it asks searcher's
``POST /v1/search`` for a context pack, puts today's date and the pack in front of the input,
and leaves generation to the web UI unchanged. Standard library only at module level: this
file runs inside the web UI's own environment (gradio is imported inside ``ui()``, which the
web UI provides). If the search fails for any reason the input passes through unchanged.
"""

from __future__ import annotations

import datetime
import http.client
import json
import logging
import urllib.error
import urllib.request
from typing import Any

log = logging.getLogger("searcher_search")

# The web UI shows these in ui() and lets settings.yaml override them as
# "searcher_search-<key>: value" (e.g. searcher_search-api_url: http://10.0.0.2:8080).
params: dict[str, Any] = {
    "display_name": "Web search (searcher)",
    "is_tab": False,
    "activate": True,
    "mode": "simple",
    "max_results": 5,
    "api_url": "http://127.0.0.1:8080",
    "timeout_s": 15.0,
    "max_context_chars": 0,  # 0: searcher's configured budget.max_context_chars
}

MODES = ("simple", "full")
# searcher refuses queries over 2,000 characters; a notebook prompt keeps its tail, where
# the newest question is.
QUERY_MAX_CHARS = 2000
# The server's own deadline is this share of our timeout, so that it answers with what is
# ready before we give up on it.
SERVER_DEADLINE_SHARE = 0.8

# The outcome of the last search, for the curious (and the tests): the UCP-1 response of
# the last successful call, and why the last failed call failed.
last_response: dict[str, Any] | None = None
last_error: str | None = None


class SearchFailed(Exception):
    """Searcher could not give us a context pack; the message says why, in one line."""


def search_settings(values: dict[str, Any]) -> dict[str, Any]:
    """The search settings from ``params``, coerced and clamped (UI widgets send floats)."""
    mode = str(values.get("mode", "simple")).strip().lower()
    return {
        "mode": mode if mode in MODES else "simple",
        "max_results": min(max(int(values.get("max_results", 5)), 1), 100),
        "api_url": str(values.get("api_url", "")).strip().rstrip("/"),
        "timeout_s": max(float(values.get("timeout_s", 15.0)), 0.1),
        "max_context_chars": max(int(values.get("max_context_chars") or 0), 0),
    }


def query_from_input(text: str) -> str:
    """The search query for an input: whitespace collapsed, at most the last 2,000 chars."""
    return " ".join(text.split())[-QUERY_MAX_CHARS:].strip()


def build_request(query: str, settings: dict[str, Any]) -> dict[str, Any]:
    """The ``POST /v1/search`` body for a query under the given settings."""
    budget: dict[str, int] = {
        "max_results": settings["max_results"],
        "max_total_time_ms": int(settings["timeout_s"] * 1000 * SERVER_DEADLINE_SHARE),
    }
    if settings["max_context_chars"]:
        budget["max_context_chars"] = settings["max_context_chars"]
    return {
        "query": query,
        "constraints": {"search_mode": settings["mode"]},
        # Only the pack goes into the prompt; the items would be dead weight on the wire.
        "want": {"items": False, "rendered_text": True},
        "budget": budget,
    }


def post_search(api_url: str, body: dict[str, Any], timeout_s: float) -> dict[str, Any]:
    """POST the body to searcher and return the decoded JSON; raises SearchFailed."""
    try:
        request = urllib.request.Request(
            f"{api_url}/v1/search",
            data=json.dumps(body).encode("utf-8"),
            headers={"Content-Type": "application/json", "Accept": "application/json"},
            method="POST",
        )
    except ValueError as err:
        raise SearchFailed(f"bad api_url {api_url!r}: {err}") from None
    try:
        with urllib.request.urlopen(request, timeout=timeout_s) as response:
            status = response.status
            raw = response.read()
    except urllib.error.HTTPError as err:
        err.close()
        raise SearchFailed(f"searcher answered HTTP {err.code}") from None
    except (urllib.error.URLError, OSError, http.client.HTTPException) as err:
        reason = getattr(err, "reason", None) or err
        raise SearchFailed(f"no answer from searcher at {api_url}: {reason}") from None
    if status != 200:
        raise SearchFailed(f"searcher answered HTTP {status}")
    try:
        data = json.loads(raw)
    except ValueError:
        raise SearchFailed("searcher's answer is not JSON") from None
    if not isinstance(data, dict):
        raise SearchFailed("searcher's answer is not a JSON object")
    return data


def date_line(today: datetime.date) -> str:
    """The date note for the model (seed 16.2): local models confuse past and future."""
    return (
        f"Current date: {today.isoformat()} ({today.strftime('%A')}). "
        "Anything dated on or before it has already happened."
    )


def inject(text: str, pack: str, today: datetime.date) -> str:
    """The input with the date and the context pack in front of it."""
    return f"{date_line(today)}\n\n{pack}\n\n{text}"


def fetch_pack(query: str, settings: dict[str, Any]) -> str:
    """Search and return the non-empty ``rendered_text``; raises SearchFailed."""
    global last_response
    data = post_search(settings["api_url"], build_request(query, settings), settings["timeout_s"])
    last_response = data
    pack = data.get("rendered_text")
    if not isinstance(pack, str) or not pack.strip():
        raise SearchFailed("searcher's answer has no rendered_text")
    return pack


def input_modifier(string: str, state: dict[str, Any], is_chat: bool = False) -> str:
    """Web UI hook: put today's date and searcher's context pack in front of the input.

    In chat mode ``string`` is the user's message (as the model sees it; the visible
    message stays as typed), otherwise the whole prompt. Never raises.
    """
    global last_error, last_response
    if not params.get("activate"):
        return string
    query = query_from_input(string)
    if not query:
        return string
    last_response = None
    try:
        pack = fetch_pack(query, search_settings(params))
    except Exception as err:  # generation must never break because search failed
        reason = str(err) if isinstance(err, SearchFailed) else f"{type(err).__name__}: {err}"
        last_error = " ".join(reason.split())  # one log line, whatever the exception said
        log.warning("searcher_search: no web context, input left unchanged (%s)", last_error)
        return string
    last_error = None
    return inject(string, pack, datetime.date.today())


def ui() -> None:
    """Web UI hook: the settings widgets, each writing straight into ``params``."""
    import gradio as gr  # the web UI has it; a module-level import would tie us to it

    with gr.Row():
        activate = gr.Checkbox(value=params["activate"], label="Search the web before replying")
        mode = gr.Radio(list(MODES), value=params["mode"], label="Mode (full reads the pages)")
    with gr.Row():
        max_results = gr.Slider(1, 20, step=1, value=params["max_results"], label="Results")
        max_context_chars = gr.Number(
            value=params["max_context_chars"],
            precision=0,
            label="Max context characters (0: searcher's default)",
        )
    with gr.Row():
        api_url = gr.Textbox(value=params["api_url"], label="searcher API URL")
        timeout_s = gr.Number(value=params["timeout_s"], label="Timeout (seconds)")

    widgets = {
        "activate": activate,
        "mode": mode,
        "max_results": max_results,
        "max_context_chars": max_context_chars,
        "api_url": api_url,
        "timeout_s": timeout_s,
    }
    for key, widget in widgets.items():
        widget.change(_setter(key), widget, None)


def _setter(key: str) -> Any:
    # A function per key: a lambda in the loop would capture only the last key.
    def set_param(value: Any) -> None:
        params[key] = value

    return set_param
