"""Engine-group routing: first matching group in config order, else the default group."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml
from hypothesis import given
from hypothesis import strategies as st

from searcher.config import RouteGroup, RoutingSettings, load_settings
from searcher.errors import ConfigError
from searcher.pipeline.routing import Route, compile_routes, route_query, validate

DEFAULT_ROUTES = compile_routes(RoutingSettings())
LANGUAGES = r"\b(python|javascript|typescript|rust|golang|java|c\+\+)\b"


@pytest.mark.parametrize(
    ("query", "group", "pattern"),
    [
        ("research on protein folding", "academic", r"\bresearch\s+on\b"),
        ("a literature review of sleep and memory", "academic", r"\bliterature\s+review\b"),
        ("ARXIV diffusion models", "academic", r"\barxiv\b"),
        ("how to implement a trie", "technical", r"\bhow\s+to\s+implement\b"),
        ("Python asyncio timeout", "technical", LANGUAGES),
        ("kubernetes pod eviction", "technical", r"\b(docker|kubernetes|linux)\b"),
        ("latest news on the election", "news", r"\b(latest|breaking|today'?s?)\s+news\b"),
        ("news about the merger", "news", r"\bnews\s+(about|on)\b"),
        ("best hiking boots", "general", None),
        ("", "general", None),
    ],
)  # fmt: skip
def test_default_table(query: str, group: str, pattern: str | None) -> None:
    route = route_query(query, DEFAULT_ROUTES)
    assert (route.group, route.pattern) == (group, pattern)


def test_route_carries_the_groups_engines_and_categories() -> None:
    route = route_query("research on coral bleaching", DEFAULT_ROUTES)
    assert "arxiv" in route.engines
    assert route.categories == ("science",)
    assert route_query("cheap flights", DEFAULT_ROUTES).categories == ("general",)


def test_first_group_in_config_order_wins() -> None:
    # "scientific" is academic, "python" is technical: academic comes first in the config.
    assert route_query("scientific python tooling", DEFAULT_ROUTES).group == "academic"
    swapped = RoutingSettings(
        groups={
            "technical": RouteGroup(patterns=[r"\bpython\b"], engines=["github"]),
            "academic": RouteGroup(patterns=[r"\bscientific\b"], engines=["arxiv"]),
        }
    )
    route = route_query("scientific python tooling", compile_routes(swapped))
    assert route == Route("technical", r"\bpython\b", ("github",), ())


def test_first_pattern_within_a_group_is_reported() -> None:
    settings = RoutingSettings(groups={"code": RouteGroup(patterns=[r"rust", r"cargo"])})
    routes = compile_routes(settings)
    assert route_query("cargo build for rust", routes).pattern == "rust"
    assert route_query("cargo build", routes).pattern == "cargo"


def test_patterns_are_case_insensitive() -> None:
    settings = RoutingSettings(groups={"fanuc": RouteGroup(patterns=[r"srvo-\d+"])})
    assert route_query("SRVO-063 alarm", compile_routes(settings)).group == "fanuc"


def test_default_group_not_configured_routes_unrestricted() -> None:
    settings = RoutingSettings(default_group="web", groups={"a": RouteGroup(patterns=["x"])})
    assert route_query("nothing", compile_routes(settings)) == Route("web", None, (), ())


def _routing_file(tmp_path: Path, patterns: list[str]) -> Path:
    path = tmp_path / "searcher.yaml"
    groups = {"ok": {"patterns": ["fine"]}, "broken": {"patterns": patterns}}
    path.write_text(yaml.safe_dump({"routing": {"groups": groups}}))
    return path


@pytest.mark.parametrize("bad", ["(unclosed", "[a-", "*star"])
def test_invalid_regex_is_a_config_error_naming_group_and_pattern(bad: str, tmp_path: Path) -> None:
    # Refused when the settings are read, so every command fails alike (exit 2).
    with pytest.raises(ConfigError) as info:
        load_settings(_routing_file(tmp_path, ["also fine", bad]), environ={})
    message = str(info.value)
    assert "routing.groups.broken.patterns: invalid regex" in message
    assert repr(bad) in message
    # The router's own check stands behind it, for settings built without validation.
    groups = {"ok": RouteGroup(patterns=["fine"]),
              "broken": RouteGroup.model_construct(patterns=["also fine", bad])}  # fmt: skip
    settings = RoutingSettings(groups=groups)
    with pytest.raises(ConfigError, match=re.escape("routing.groups.broken.patterns[1]")):
        compile_routes(settings)
    with pytest.raises(ConfigError):
        validate(settings)


@pytest.mark.parametrize("catch_all", ["", ".*", "x?", "^"])
def test_pattern_matching_everything_is_a_config_error(catch_all: str, tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"routing\.groups\.broken\.patterns: .*empty string"):
        load_settings(_routing_file(tmp_path, [catch_all]), environ={})
    greedy = RouteGroup.model_construct(patterns=[catch_all])
    with pytest.raises(ConfigError, match="empty string"):
        compile_routes(RoutingSettings(groups={"greedy": greedy}))


def test_validate_accepts_the_defaults() -> None:
    validate(RoutingSettings())


@given(st.text(max_size=200))
def test_any_query_routes_to_a_known_group(query: str) -> None:
    route = route_query(query, DEFAULT_ROUTES)
    assert route.group in RoutingSettings().groups
    assert (route.pattern is None) == (route.group == "general")
