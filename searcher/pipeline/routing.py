"""Engine-group routing: which SearXNG engines and categories a query goes to.

Each configured group has regexes; the first group, in config order, with a pattern that
matches the query (case-insensitively) wins, otherwise the default group. The patterns are
compiled once at start-up (``compile_routes``) so that routing a request is a handful of
precompiled ``search`` calls — microseconds, no LLM.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from searcher.config import RoutingSettings, pattern_problem
from searcher.errors import ConfigError


@dataclass(frozen=True)
class Route:
    """Where a query goes, and why."""

    group: str
    pattern: str | None  # the regex that chose it; None for the default group
    engines: tuple[str, ...]
    categories: tuple[str, ...]


@dataclass(frozen=True)
class _Rule:
    regex: re.Pattern[str]
    route: Route  # built once, so routing a request allocates nothing


@dataclass(frozen=True)
class CompiledRoutes:
    """The routing table, ready to use: rules in config order, then the default."""

    rules: tuple[_Rule, ...]
    default: Route
    groups: dict[str, Route]  # every group by name, as chosen by something other than a pattern


def _compile(group: str, index: int, pattern: str) -> re.Pattern[str]:
    problem = pattern_problem(pattern)
    if problem is not None:
        raise ConfigError(f"routing.groups.{group}.patterns[{index}]: {problem}")
    return re.compile(pattern, re.IGNORECASE)


def compile_routes(settings: RoutingSettings) -> CompiledRoutes:
    """Compile the routing table; an invalid regex is a ``ConfigError`` naming it.

    A ``default_group`` that is not among the groups routes with no engine or category
    restriction (the backend's own defaults)."""
    rules: list[_Rule] = []
    for name, group in settings.groups.items():
        engines, categories = tuple(group.engines), tuple(group.categories)
        for index, pattern in enumerate(group.patterns):
            route = Route(name, pattern, engines, categories)
            rules.append(_Rule(_compile(name, index, pattern), route))
    default = settings.groups.get(settings.default_group)
    default_route = Route(
        settings.default_group,
        None,
        tuple(default.engines) if default else (),
        tuple(default.categories) if default else (),
    )
    groups = {
        name: Route(name, None, tuple(group.engines), tuple(group.categories))
        for name, group in settings.groups.items()
    }
    return CompiledRoutes(tuple(rules), default_route, groups)


def validate(settings: RoutingSettings) -> None:
    """Raise ``ConfigError`` if the routing table would not compile (for start-up checks)."""
    compile_routes(settings)


def route_to_group(routes: CompiledRoutes, group: str) -> Route:
    """The route of a named group, chosen by no pattern (``pattern`` None); unknown names
    get the default group's route."""
    route = routes.groups.get(group)
    return routes.default if route is None else route


def route_query(query: str, routes: CompiledRoutes) -> Route:
    """The first group (in config order) with a pattern matching ``query``, else the default."""
    for rule in routes.rules:
        if rule.regex.search(query) is not None:
            return rule.route
    return routes.default
