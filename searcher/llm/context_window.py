"""The model's context window, as an OpenAI-compatible server tells it.

There is no standard field. llama.cpp's ``llama-server`` reports the context it was
started with in ``GET /props`` (``default_generation_settings.n_ctx``, at the server's
root, not under ``/v1``); vLLM puts ``max_model_len`` on each model of ``GET /v1/models``,
LM Studio ``max_context_length``, others ``context_length``; llama.cpp's ``/v1/models``
has the model's training context in ``meta.n_ctx_train`` (the last resort: a server may
run a smaller one). Ollama and llama-cpp-python say nothing: ``llm.context_tokens`` then.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass
from typing import Any

import httpx

# Fields of a /v1/models entry that hold the served context, most telling first.
_MODEL_FIELDS = ("max_model_len", "max_context_length", "context_length", "context_window")
# A context window outside this range is a broken field, not a model's.
_MIN_TOKENS, _MAX_TOKENS = 256, 100_000_000


@dataclass(frozen=True)
class ContextWindow:
    tokens: int | None  # None: the server did not say
    answered: bool  # False: it could not be asked (unreachable, timed out): ask again later


def _tokens(value: Any) -> int | None:
    if isinstance(value, bool) or not isinstance(value, int):
        return None
    return value if _MIN_TOKENS <= value <= _MAX_TOKENS else None


def from_props(body: Any) -> int | None:
    """The context of llama.cpp's ``/props`` body (``n_ctx`` at the top or in
    ``default_generation_settings``), or None."""
    if not isinstance(body, dict):
        return None
    settings = body.get("default_generation_settings")
    nested = settings.get("n_ctx") if isinstance(settings, dict) else None
    return _tokens(body.get("n_ctx")) or _tokens(nested)


def from_models(body: Any, model: str) -> int | None:
    """The context of ``model`` (else of the first model) in a ``/v1/models`` body, or
    None when no field of ``_MODEL_FIELDS`` or ``meta.n_ctx_train`` holds one."""
    data = body.get("data") if isinstance(body, dict) else None
    entries = [e for e in data if isinstance(e, dict)] if isinstance(data, list) else []
    entries.sort(key=lambda e: e.get("id") != model)  # the configured model first
    for entry in entries[:1]:
        for name in _MODEL_FIELDS:
            if (found := _tokens(entry.get(name))) is not None:
                return found
        meta = entry.get("meta")
        if isinstance(meta, dict):
            return _tokens(meta.get("n_ctx_train"))
    return None


def _server_root(base_url: httpx.URL) -> httpx.URL:
    """``http://host:8080/`` for ``http://host:8080/v1/``: where llama.cpp serves /props."""
    path = base_url.path.rstrip("/")
    if path.endswith("/v1"):
        path = path[: -len("/v1")]
    return base_url.copy_with(path=path.rstrip("/") + "/")


async def _get_json(client: httpx.AsyncClient, url: httpx.URL | str) -> Any:
    """The JSON body of a 200 reply to GET ``url``; None for any other reply."""
    response = await client.get(url)
    if response.status_code != 200:
        return None
    try:
        return response.json()
    except ValueError:
        return None


async def read_context_window(
    client: httpx.AsyncClient, model: str, timeout_s: float
) -> ContextWindow:
    """Ask the server behind ``client`` (its base URL ends in ``/v1/``) for the context
    window of ``model``, within ``timeout_s``; never raises."""
    try:
        async with asyncio.timeout(timeout_s):
            props = await _get_json(client, _server_root(client.base_url).join("props"))
            if (found := from_props(props)) is not None:
                return ContextWindow(found, True)
            return ContextWindow(from_models(await _get_json(client, "models"), model), True)
    except (TimeoutError, httpx.HTTPError):
        return ContextWindow(None, False)
