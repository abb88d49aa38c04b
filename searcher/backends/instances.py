"""The configured instances as the app uses them: which are usable (``backend_status``),
building them (``build_backends``), and the key under which workers share each one's
breaker and pace (``upstream_key``)."""

from __future__ import annotations

import hashlib
import json
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

from searcher.backends import duckduckgo
from searcher.backends.base import Backend, BuildContext
from searcher.backends.registry import Registry, default_registry
from searcher.config import Settings
from searcher.config_sections import InstanceSettings

if TYPE_CHECKING:  # loaded by whoever opens the client
    import aiohttp


@dataclass(frozen=True)
class BackendStatus:
    name: str
    adapter: str
    enabled: bool
    configured: bool
    note: str | None = None

    @property
    def usable(self) -> bool:
        return self.enabled and self.configured


def backend_status(
    settings: Settings, registry: Registry | None = None
) -> dict[str, BackendStatus]:
    """Enabled/configured state of every instance, with what is missing."""
    registry = registry or default_registry()
    statuses: dict[str, BackendStatus] = {}
    for name in settings.backends.names:
        cfg = settings.backends.get(name)
        missing = registry.spec(cfg.adapter).missing(cfg)
        note = "disabled" if not cfg.enabled else missing
        statuses[name] = BackendStatus(name, cfg.adapter, cfg.enabled, missing is None, note)
    return statuses


def build_backends(
    settings: Settings,
    client: aiohttp.ClientSession,
    ddgs_factory: duckduckgo.SearcherFactory | None = None,
    registry: Registry | None = None,
    clock: Callable[[], float] = time.monotonic,
    corpus: Any = None,
    embedder: Callable[[], Any] = lambda: None,
) -> dict[str, Backend]:
    """Instances of every usable backend, by name, in configuration order; ``corpus``
    (a ``CorpusReader``) and ``embedder`` serve the ``local`` instances."""
    registry = registry or default_registry()
    context = BuildContext(client, ddgs_factory, clock, corpus, embedder)
    return {
        name: registry.spec(status.adapter).build(name, settings.backends.get(name), context)
        for name, status in backend_status(settings, registry).items()
        if status.usable
    }


def answer_settings(settings: Settings, registry: Registry | None = None) -> dict[str, Any]:
    """Every instance's settings that change its answers, by name, as its adapter
    declares them (``BackendSpec.answer_settings``): what the result cache's fingerprint
    holds of the instances."""
    registry = registry or default_registry()
    backends = settings.backends
    return {
        name: registry.spec(backends.get(name).adapter).answer_shaping(backends.get(name))
        for name in backends.names
    }


# What an instance's settings say about how searcher uses it, not about which upstream it is.
_USAGE_KEYS = frozenset({"enabled", "timeout_s", "weight", "breaker", "rate", "engine_health"})


def upstream_key(name: str, instance: InstanceSettings) -> str:
    """The key under which workers and replicas share an instance's breaker and pace: its
    name and a digest of what names its upstream (adapter, base URL, API key...). Two
    configurations that give one name to different upstreams (another SearXNG, another
    key) share nothing; the digest keeps a key out of the store."""
    upstream = {k: v for k, v in instance.model_dump(mode="json").items() if k not in _USAGE_KEYS}
    if isinstance(upstream.get("base_url"), str):
        # Adapters join paths to it either way: ".../searx" and ".../searx/" are one upstream.
        upstream["base_url"] = upstream["base_url"].rstrip("/")
    digest = hashlib.sha256(json.dumps(upstream, sort_keys=True).encode()).hexdigest()[:16]
    return f"{name}@{digest}"


def upstream_of(key: str) -> str:
    """The upstream part of an ``upstream_key`` (without the instance's name): what two
    instances of one upstream (one SearXNG, one Brave key) share, their pacing allowance;
    the upstream's limit counts their calls together."""
    return key.rpartition("@")[2]


def upstream_keys(settings: Settings) -> dict[str, str]:
    """``upstream_key`` of every instance, by name."""
    backends = settings.backends
    return {name: upstream_key(name, backends.get(name)) for name in backends.names}
