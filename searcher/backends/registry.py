"""Which backends exist, which are usable, and building them from settings."""

from __future__ import annotations

from dataclasses import dataclass

import aiohttp

from searcher.backends import brave, duckduckgo, searxng
from searcher.backends.base import Backend, BackendQuery, HttpBackend, RequestParts
from searcher.config import BACKEND_NAMES, Settings


@dataclass(frozen=True)
class BackendStatus:
    name: str
    enabled: bool
    configured: bool
    note: str | None = None

    @property
    def usable(self) -> bool:
        return self.enabled and self.configured


def backend_status(settings: Settings) -> dict[str, BackendStatus]:
    """Enabled/configured state of every known backend, with what is missing."""
    statuses: dict[str, BackendStatus] = {}
    for name in BACKEND_NAMES:
        cfg = settings.backends.get(name)
        configured, note = True, None
        if name == "searxng" and not cfg.base_url:
            configured, note = False, "no base_url (set SEARXNG_BASE_URL)"
        elif name == "brave" and not cfg.api_key:
            configured, note = False, "no api_key (set BRAVE_API_KEY)"
        if not cfg.enabled:
            note = "disabled"
        statuses[name] = BackendStatus(name, cfg.enabled, configured, note)
    return statuses


def build_backends(
    settings: Settings,
    client: aiohttp.ClientSession,
    ddgs_factory: duckduckgo.SearcherFactory | None = None,
) -> dict[str, Backend]:
    """Instances of every usable backend, by name."""
    usable = {name for name, status in backend_status(settings).items() if status.usable}
    backends: dict[str, Backend] = {}
    if "searxng" in usable:
        base = settings.backends.searxng.base_url or ""

        def searxng_request(query: BackendQuery) -> RequestParts:
            return searxng.build_request(base, query)

        backends["searxng"] = HttpBackend(
            "searxng", searxng.CAPABILITIES, searxng_request, searxng.parse_response, client
        )
    if "brave" in usable:
        brave_cfg = settings.backends.brave
        brave_base, key = brave_cfg.base_url or "", brave_cfg.api_key or ""

        def brave_request(query: BackendQuery) -> RequestParts:
            return brave.build_request(brave_base, key, query)

        backends["brave"] = HttpBackend(
            "brave", brave.CAPABILITIES, brave_request, brave.parse_response, client
        )
    if "duckduckgo" in usable:
        backends["duckduckgo"] = duckduckgo.DuckDuckGoBackend(
            ddgs_factory or duckduckgo.default_factory
        )
    return backends
