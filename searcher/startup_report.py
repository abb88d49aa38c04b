"""What ``searcher serve`` and ``searcher search`` print before they start: the config file
read (or none), each backend instance and whether its address answered a cheap probe,
the embedder, the LLM endpoint, environment variables that look like ours but are
ignored, and old key names the config still uses. A short block on stderr, so that a first
run that cannot reach anything says so at once instead of in a vague failure later."""

from __future__ import annotations

import asyncio
import os
import socket
from collections.abc import Mapping
from dataclasses import dataclass
from urllib.parse import urlsplit

from searcher import __version__
from searcher.backends.instances import backend_status
from searcher.config import ENV_VARS, Settings, deprecations
from searcher.config_hints import ConfigFile, lookalike_env_vars
from searcher.embedding.loading import needs_network
from searcher.fetch.browser_process import find_browser
from searcher.fetch.renderer import browser_missing
from searcher.fetch.urls import without_password

PROBE_TIMEOUT_S = 1.5
# Adapters that have no base_url to configure call a fixed public address.
_FIXED_ADDRESSES = {"duckduckgo": ("html.duckduckgo.com", 443)}


@dataclass(frozen=True)
class BackendReach:
    """One instance as configured, and what a TCP connection to its address found."""

    name: str
    adapter: str
    address: tuple[str, int] | None  # None: disabled, not configured or nowhere to probe
    note: str | None  # why it is not used ("disabled", "no api_key"), None when it is
    problem: str | None = None  # why the probe failed; None when it answered


def _address(settings: Settings, name: str) -> tuple[str, int] | None:
    instance = settings.backends.get(name)
    base_url = getattr(instance, "base_url", None)
    if base_url is None:
        return _FIXED_ADDRESSES.get(instance.adapter)
    parts = urlsplit(str(base_url))
    if not parts.hostname:
        return None
    return parts.hostname, parts.port or (443 if parts.scheme == "https" else 80)


async def _probe(address: tuple[str, int], timeout_s: float) -> str | None:
    """None when ``address`` accepts a TCP connection in time, else why not in words."""
    host, port = address
    try:
        async with asyncio.timeout(timeout_s):
            _, writer = await asyncio.open_connection(host, port)
    except TimeoutError:
        return f"no answer from {host}:{port} within {timeout_s:g} s"
    except socket.gaierror:
        return f"cannot resolve {host} (no network or DNS?)"
    except OSError as exc:
        reason = os.strerror(exc.errno).lower() if exc.errno else str(exc)
        return f"cannot connect to {host}:{port}: {reason}"
    writer.close()
    return None


async def probe_backends(
    settings: Settings, timeout_s: float = PROBE_TIMEOUT_S
) -> list[BackendReach]:
    """Every instance in configuration order; the usable ones probed, all at once."""
    statuses = backend_status(settings)
    reaches = [
        BackendReach(
            name, status.adapter, _address(settings, name) if status.usable else None, status.note
        )
        for name, status in statuses.items()
    ]
    problems = await asyncio.gather(
        *(_probe(r.address, timeout_s) for r in reaches if r.address is not None)
    )
    probed = iter(problems)
    return [
        r if r.address is None else BackendReach(**{**vars(r), "problem": next(probed)})
        for r in reaches
    ]


def _backend_line(reach: BackendReach) -> str:
    label = reach.name if reach.name == reach.adapter else f"{reach.name} ({reach.adapter})"
    if reach.note is not None:
        return f"    {label}: off, {reach.note}"
    if reach.address is None:
        return f"    {label}: on (no address to probe)"
    host, port = reach.address
    return f"    {label}: " + (
        f"reachable at {host}:{port}" if reach.problem is None else reach.problem
    )


def _embedder_line(settings: Settings) -> str:
    embeddings = settings.embeddings
    if embeddings.provider == "none":
        return "  embedder: none (embeddings.provider: none; near-duplicate removal off)"
    if embeddings.provider == "openai":
        return f"  embedder: {embeddings.model} at an OpenAI-compatible endpoint"
    if embeddings.provider == "onnx":
        return f"  embedder: ONNX {embeddings.model} (local, onnxruntime)"
    source = "from the model hub" if needs_network(embeddings) else "local directory"
    return f"  embedder: model2vec {embeddings.model} ({source})"


def _llm_line(settings: Settings) -> str:
    llm = settings.llm
    if not llm.configured:
        return "  llm: none (llm.base_url and llm.model unset: LLM steps use their fallbacks)"
    return f"  llm: {llm.model} at {without_password(str(llm.base_url))}"


def _browser_line(settings: Settings) -> str:
    browser = settings.browser
    if not browser.enabled:
        return "  browser: off (browser.enabled: false; pages only JavaScript fills stay unread)"
    found = find_browser(browser.executable)
    if found is None:
        return (
            f"  browser: none ({browser_missing(browser)}; pages only JavaScript fills stay unread)"
        )
    return f"  browser: {found} (for pages only JavaScript fills)"


def report_lines(
    config: ConfigFile | None,
    settings: Settings,
    reaches: list[BackendReach],
    environ: Mapping[str, str],
) -> list[str]:
    """The block, line by line."""
    lines = [
        f"searcher {__version__}, config: "
        + (
            f"{config.path} (from {config.origin})" if config else "none (defaults and environment)"
        ),
        "  backends:",
        *(_backend_line(r) for r in reaches),
        _embedder_line(settings),
        _llm_line(settings),
        _browser_line(settings),
    ]
    lines += [f"  warning: {w}" for w in lookalike_env_vars(environ, ENV_VARS)]
    lines += [f"  warning: {w}" for w in deprecations(settings)]
    return lines
