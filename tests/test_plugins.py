"""The backend plugin API is one pinned module (searcher.plugins), and `searcher plugins`
lists the adapters: built-in, installed through a real entry point, and those that failed
to load, with the reason."""

import json
import os
import subprocess
import sys
from pathlib import Path

import yaml

import searcher.plugins
from tests.conftest import STATIC_MODEL

ROOT = Path(__file__).resolve().parents[1]

PINNED = {
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
    "BackendRateLimited",
    "BackendQuery",
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
}


def test_the_plugin_api_is_pinned():
    assert set(searcher.plugins.__all__) == PINNED
    assert len(searcher.plugins.__all__) == len(PINNED)  # no name twice
    assert searcher.plugins.ENTRY_POINT_GROUP == "searcher.backends"
    for name in PINNED - {"ENTRY_POINT_GROUP", "ANSWER_SETTINGS", "BuildRequest", "ParseResponse"}:
        value = getattr(searcher.plugins, name)
        assert value.__name__ == name and value.__module__.startswith("searcher."), name
    assert issubclass(searcher.plugins.BackendBadResponse, searcher.plugins.BackendError)


# A plugin written against searcher.plugins alone: it must be all an author needs.
PLUGIN = '''
"""A third-party backend: reads SearXNG-shaped JSON its own way."""
from pydantic import Field

from searcher.plugins import (
    BackendAnswer, BackendSpec, Capabilities, Hit, HttpBackend, InstanceSettings,
    RequestParts, json_object,
)


class CorpusSettings(InstanceSettings):
    base_url: str = Field(description="where the corpus answers")


def parse(status, headers, body, instance):
    rows = json_object(instance, headers, body)["results"]
    hits = [Hit(r["url"], r["title"], r["content"], instance) for r in rows]
    return BackendAnswer(instance, hits)


def build(name, settings, context):
    def request(query):
        params = {"q": query.text, "format": "json"}
        return RequestParts("GET", settings.base_url + "/search", params, {"X-Plugin": "api"})

    return HttpBackend(name, Capabilities(result_count=True), request, parse, context.client)


SPEC = BackendSpec("corpus", Capabilities(result_count=True), CorpusSettings, build)
NOT_A_SPEC = "a string"


def factory_that_raises():
    raise RuntimeError("no licence file")
'''
# A plugin that hands out the built-in SearXNG spec as its own: the built-in stays.
SHADOW = "from searcher.backends.searxng import SPEC\n"


def install(site: Path, dist: str, module: str | None, points: str) -> None:
    """A real installed distribution, laid out as pip lays it out: the module, and its
    ``*.dist-info`` with an ``entry_points.txt``."""
    if module is not None:
        (site / f"{dist.replace('-', '_')}.py").write_text(module)
    info = site / f"{dist.replace('-', '_')}-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(f"Metadata-Version: 2.1\nName: {dist}\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(f"[searcher.backends]\n{points}\n")


def run(site: Path, *args: str) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), str(site)])}
    for var in ("SEARXNG_BASE_URL", "BRAVE_API_KEY", "SEARCHER_CONFIG"):
        env.pop(var, None)
    return subprocess.run(
        [sys.executable, "-m", "searcher", *args],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip


def plugin_site(tmp_path: Path) -> Path:
    site = tmp_path / "site"
    site.mkdir()
    install(site, "corpus-plugin", PLUGIN, "corpus = corpus_plugin:SPEC")
    install(site, "broken-plugin", None, "broken = broken_plugin_gone:SPEC")
    install(site, "odd-plugin", None, "odd = corpus_plugin:NOT_A_SPEC")
    install(site, "raising-plugin", None, "raising = corpus_plugin:factory_that_raises")
    install(site, "shadow-plugin", SHADOW, "searxng = shadow_plugin:SPEC")
    return site


def test_searcher_plugins_lists_built_in_installed_and_failed_adapters(tmp_path):
    site = plugin_site(tmp_path)
    listed = run(site, "plugins", "--json")
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    origins = {a["adapter"]: a["origin"] for a in data["adapters"]}
    assert origins == {
        "searxng": "built-in",
        "duckduckgo": "built-in",
        "brave": "built-in",
        "local": "built-in",
        "corpus": "corpus_plugin:SPEC from corpus-plugin 0.1",
    }
    corpus = next(a for a in data["adapters"] if a["adapter"] == "corpus")
    assert corpus["capabilities"] == ["result_count"]
    failed = {f["name"]: f for f in data["failed"]}
    assert set(failed) == {"broken", "odd", "raising"}
    assert failed["raising"]["reason"] == "RuntimeError: no licence file"
    assert failed["broken"]["origin"] == "broken_plugin_gone:SPEC from broken-plugin 0.1"
    assert "ModuleNotFoundError" in failed["broken"]["reason"]
    assert "broken_plugin_gone" in failed["broken"]["reason"]
    assert failed["odd"]["reason"] == "corpus_plugin:NOT_A_SPEC is not a searcher BackendSpec"
    text = run(site, "plugins")
    assert text.returncode == 0, text.stderr
    lines = text.stdout.splitlines()
    assert lines[0].split()[:2] == ["searxng", "built-in"]
    assert any(line.startswith("corpus ") and "corpus-plugin 0.1" in line for line in lines)
    failed_at = lines.index("failed to load:")
    assert any("broken" in line and "ModuleNotFoundError" in line for line in lines[failed_at:])


def test_without_plugins_only_the_built_ins_are_listed(tmp_path):
    listed = run(tmp_path, "plugins", "--json")
    assert listed.returncode == 0, listed.stderr
    data = json.loads(listed.stdout)
    assert [a["adapter"] for a in data["adapters"]] == ["searxng", "duckduckgo", "brave", "local"]
    assert data["failed"] == []


def test_a_plugin_built_on_the_plugin_api_alone_searches(tmp_path, testbed_clean):
    site = plugin_site(tmp_path)
    config = tmp_path / "searcher.yaml"
    config.write_text(
        yaml.safe_dump(
            {
                "backends": {
                    "instances": {
                        "mine": {"adapter": "corpus", "base_url": testbed_clean.searxng_url()}
                    },
                    "order": ["mine"],
                    "duckduckgo": {"enabled": False},
                },
                "service": {"cache": {"dir": str(tmp_path / "cache")}},
                "state": {"dir": str(tmp_path / "state")},
                "embeddings": {"model": str(STATIC_MODEL)},
            }
        )
    )
    result = run(site, "search", "Google Stadia games", "--json", "--config", str(config))
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["meta"]["backend_used"] == "mine" and data["items"]
    calls = [e for e in testbed_clean.log if e.path.startswith("/searxng")]
    assert calls and all(e.headers.get("x-plugin") == "api" for e in calls)
