"""Which adapters exist (built-ins plus the ``searcher.backends`` entry-point group), and
the named instances configured over them, each checked by its adapter's config model
(``searcher.config`` validates through ``resolve_instances``; building the usable
instances is ``backends.instances``).

A third-party package adds an adapter without touching searcher: it declares a
``BackendSpec`` and names it in its packaging metadata, e.g. in ``pyproject.toml``::

    [project.entry-points."searcher.backends"]
    mysearch = "mysearch_plugin:SPEC"

and configures instances of it as ``backends.instances: {mine: {adapter: mysearch, ...}}``.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib.metadata import EntryPoint, entry_points
from typing import Any

from pydantic import BaseModel, ValidationError

from searcher.backends import brave, duckduckgo, local, searxng
from searcher.backends.base import BackendSpec
from searcher.config_hints import unknown_key_text
from searcher.config_sections import InstanceSettings

ENTRY_POINT_GROUP = "searcher.backends"
BUILTIN_SPECS: tuple[BackendSpec, ...] = (searxng.SPEC, duckduckgo.SPEC, brave.SPEC, local.SPEC)
BUILT_IN = "built-in"


@dataclass(frozen=True)
class Registry:
    """Adapters by name; ``problems`` names plugins that could not be loaded, and why;
    ``origins`` says where each name of either came from: ``built-in``, or the entry point
    and the distribution that installed it."""

    specs: Mapping[str, BackendSpec]
    problems: Mapping[str, str] = field(default_factory=dict)
    origins: Mapping[str, str] = field(default_factory=dict)

    def spec(self, adapter: str) -> BackendSpec:
        """The adapter's spec; ``KeyError`` with what is known when there is none."""
        found = self.specs.get(adapter)
        if found is None:
            why = (
                f"; plugin failed to load: {self.problems[adapter]}"
                if adapter in self.problems
                else ""
            )
            known = ", ".join(self.specs)
            raise KeyError(f"unknown adapter {adapter!r} (known: {known}){why}")
        return found


def load_registry() -> Registry:
    """The built-in adapters plus every plugin of the entry-point group. A plugin that
    fails to import or is not a ``BackendSpec`` is left out and named in ``problems``;
    a plugin cannot replace a built-in."""
    specs = {spec.adapter: spec for spec in BUILTIN_SPECS}
    problems: dict[str, str] = {}
    origins = dict.fromkeys(specs, BUILT_IN)
    for point in entry_points(group=ENTRY_POINT_GROUP):
        origin = _origin(point)
        try:
            loaded = point.load()
            # A factory is third-party code too: whatever it raises names the plugin.
            spec = loaded() if callable(loaded) and not isinstance(loaded, BackendSpec) else loaded
        except Exception as exc:  # any import error of a third-party module
            problems[point.name], origins[point.name] = f"{type(exc).__name__}: {exc}", origin
            continue
        if not isinstance(spec, BackendSpec):
            problems[point.name] = f"{point.value} is not a searcher BackendSpec"
            origins[point.name] = origin
        elif spec.adapter in specs and specs[spec.adapter] is not spec:
            problems[point.name] = f"adapter {spec.adapter!r} already exists"
            origins[point.name] = origin
        elif spec.adapter not in specs:  # (the very spec already here, re-exported: no news)
            specs[spec.adapter], origins[spec.adapter] = spec, origin
    return Registry(specs, problems, origins)


def _origin(point: EntryPoint) -> str:
    """``module:SPEC from distribution version``: what to uninstall or fix."""
    dist = point.dist
    installed = f" from {dist.name} {dist.version}" if dist is not None else ""
    return f"{point.value}{installed}"


@functools.cache
def default_registry() -> Registry:
    """The registry of this process, loaded once (entry points do not change while it
    runs); read-only."""
    return load_registry()


def _validated(where: str, raw: Mapping[str, Any], registry: Registry) -> InstanceSettings:
    adapter = raw.get("adapter")
    if not isinstance(adapter, str):
        raise ValueError(f"{where}.adapter: required (one of {', '.join(registry.specs)})")
    try:
        spec = registry.spec(adapter)
    except KeyError as exc:
        raise ValueError(f"{where}.adapter: {exc.args[0]}") from None
    try:
        return spec.config_model.model_validate(dict(raw))
    except ValidationError as exc:
        problems = "; ".join(
            f"{where}{''.join(f'.{p}' for p in err['loc'])}: " + _problem(spec.config_model, err)
            for err in exc.errors()
        )
        raise ValueError(problems) from None


def _problem(model: type[BaseModel], err: Mapping[str, Any]) -> str:
    if err["type"] == "extra_forbidden":
        return unknown_key_text(model, [str(p) for p in err["loc"]])
    return str(err["msg"]).removeprefix("Value error, ")


# As a request's ``constraints.backend`` allows.
MAX_INSTANCE_NAME = 64


def resolve_instances(
    legacy: Mapping[str, Mapping[str, Any]],
    declared: Mapping[str, Mapping[str, Any]],
    registry: Registry | None = None,
) -> dict[str, InstanceSettings]:
    """Every instance by name, each checked by its adapter's config model: the built-in
    instances configured the old way (``backends.searxng`` ...), then ``backends.instances``
    (which may redefine one of those names). Raises ``ValueError`` naming the field."""
    registry = registry or default_registry()
    resolved = {name: _validated(f"backends.{name}", raw, registry) for name, raw in legacy.items()}
    for name, raw in declared.items():
        if not 1 <= len(name) <= MAX_INSTANCE_NAME or "," in name or name != name.strip():
            raise ValueError(
                f"backends.instances.{name[:80]!r}: an instance name is 1-{MAX_INSTANCE_NAME} "
                "characters, without a comma or spaces at its ends (a request names it, "
                "and --backend takes a comma-separated list)"
            )
        if not isinstance(raw, Mapping):
            raise ValueError(f"backends.instances.{name}: expected a mapping")
        resolved[name] = _validated(f"backends.instances.{name}", raw, registry)
    return resolved
