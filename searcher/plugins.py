"""The plugin API: everything a backend adapter outside searcher needs, from one module.

A package adds an adapter without touching searcher. Its module declares a spec::

    from searcher.plugins import BackendSpec, Capabilities, HttpBackend, InstanceSettings

    class MySettings(InstanceSettings):          # the instance's own keys, checked at load
        base_url: str = Field(description="where my search answers")

    SPEC = BackendSpec("mysearch", Capabilities(result_count=True), MySettings, build)

where ``build(name, settings, context)`` returns a ``Backend`` (usually an ``HttpBackend``
over two pure functions: ``BuildRequest`` and ``ParseResponse``), and names it in its
packaging metadata::

    [project.entry-points."searcher.backends"]
    mysearch = "mysearch_plugin:SPEC"

``searcher plugins`` lists the adapters that loaded and those that failed, with why.
These names are pinned by ``tests/test_plugins.py``: adding or removing one is a
decision, not an accident. Everything else under ``searcher.backends`` may change.
"""

from __future__ import annotations

from searcher.backends.base import (
    Backend,
    BackendAnswer,
    BackendQuery,
    BackendSpec,
    BuildContext,
    BuildRequest,
    Capabilities,
    Hit,
    HttpBackend,
    ParseResponse,
    RequestParts,
    json_object,
)
from searcher.backends.registry import ENTRY_POINT_GROUP
from searcher.config_sections import ANSWER_SETTINGS, InstanceSettings
from searcher.errors import (
    BackendAuthRejected,
    BackendBadResponse,
    BackendBlocked,
    BackendConnectError,
    BackendError,
    BackendHTTPError,
    BackendRateLimited,
    BackendTimeout,
)

__all__ = [
    "ANSWER_SETTINGS",
    "ENTRY_POINT_GROUP",
    "Backend",
    "BackendAnswer",
    "BackendAuthRejected",
    "BackendBadResponse",
    "BackendBlocked",
    "BackendConnectError",
    "BackendError",
    "BackendHTTPError",
    "BackendQuery",
    "BackendRateLimited",
    "BackendSpec",
    "BackendTimeout",
    "BuildContext",
    "BuildRequest",
    "Capabilities",
    "Hit",
    "HttpBackend",
    "InstanceSettings",
    "ParseResponse",
    "RequestParts",
    "json_object",
]
