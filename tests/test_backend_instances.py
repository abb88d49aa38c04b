"""Backends as plugins with named instances: several SearXNG instances as a chain or a
fan-out, the old configuration as instances, capabilities deciding what each instance
receives, and a third-party adapter installed through a real entry point."""

import json
import os
import subprocess
import sys
from pathlib import Path

import aiohttp
import httpx
import pytest
import yaml

from searcher.backends.base import BackendQuery
from searcher.backends.fit import fit_query
from searcher.backends.instances import backend_status, build_backends
from searcher.backends.policy import plan_backends
from searcher.backends.pool import BackendPool
from searcher.backends.registry import load_registry
from searcher.config import Settings, load_settings
from searcher.errors import ConfigError
from searcher.pipeline.resilience import Deadline
from tests.conftest import STATIC_MODEL

ROOT = Path(__file__).resolve().parents[1]


def post(base, body):
    return httpx.post(base + "/v1/search", json=body, timeout=30)


def two_searxngs(testbed, home="status/500", lab=""):
    return {
        "instances": {
            "sx-home": {"adapter": "searxng", "base_url": testbed.searxng_url(home)},
            "sx-lab": {"adapter": "searxng", "base_url": testbed.searxng_url(lab), "weight": 2},
        },
        "searxng": {"enabled": False},
    }


def test_two_searxng_instances_as_a_fallback_chain(
    make_settings, serve_searcher, testbed, matching_query
):
    backends = {**two_searxngs(testbed), "order": ["sx-home", "sx-lab", "brave"]}
    base = serve_searcher(make_settings(backends=backends))
    data = post(base, {"query": matching_query, "budget": {"max_search_retries": 0}}).json()
    meta = data["meta"]
    assert meta["backend_used"] == "sx-lab" and meta["fallback_used"] is True
    assert meta["backends_tried"] == ["sx-home", "sx-lab"]
    failed = {"stage": "search", "source": "sx-home", "reason": "HTTP 500", "kind": "http_status"}
    assert failed in meta["errors"]
    # Per-engine lists for any SearXNG instance, not only one named "searxng".
    provenance = [p for item in data["items"] for p in item["provenance"]]
    assert {p["backend"] for p in provenance} == {"sx-lab"}
    assert all(p["engine"] for p in provenance)
    health = httpx.get(base + "/v1/health").json()["backends"]
    assert {n: h["adapter"] for n, h in health.items()} == {
        "searxng": "searxng", "duckduckgo": "duckduckgo", "brave": "brave",
        "sx-home": "searxng", "sx-lab": "searxng",
    }  # fmt: skip
    assert health["sx-home"]["failures_by_kind"] == {"http_status": 1}


def test_two_searxng_instances_as_a_fan_out(make_settings, serve_searcher, testbed, matching_query):
    base = serve_searcher(make_settings(backends=two_searxngs(testbed, home="")))
    body = {"query": matching_query, "constraints": {"backend": ["sx-home", "sx-lab"]}}
    data = post(base, body).json()
    assert data["meta"]["backend_used"] == "sx-home+sx-lab"
    sources = {(p["backend"], p["engine"]) for i in data["items"] for p in i["provenance"]}
    assert {b for b, _ in sources} == {"sx-home", "sx-lab"} and all(e for _, e in sources)
    unknown = post(base, {"query": "q", "constraints": {"backend": ["sx-home", "sx-attic"]}})
    assert unknown.status_code == 422
    error = unknown.json()["error"]
    assert error["field"] == "constraints.backend" and "sx-attic" in error["message"]
    message = error["message"].removeprefix("constraints.backend: ")
    assert error["errors"] == [{"field": "constraints.backend", "message": message}]
    # "auto" is a name of its own, not an instance to list with others.
    auto = post(base, {"query": "q", "constraints": {"backend": ["auto", "sx-lab"]}}).json()
    assert auto["error"]["message"].startswith('constraints.backend: "auto" stands alone')
    assert "sx-home, sx-lab" in auto["error"]["message"]


def test_old_configuration_becomes_instances_of_those_names(testbed):
    settings = load_settings(
        environ={"SEARXNG_BASE_URL": "http://127.0.0.1:9/sx", "BRAVE_API_KEY": "k"}
    )
    status = backend_status(settings)
    assert [(s.name, s.adapter, s.usable) for s in status.values()] == [
        ("searxng", "searxng", True),
        ("duckduckgo", "duckduckgo", True),
        ("brave", "brave", True),
    ]
    assert settings.backends.get("brave").base_url == "https://api.search.brave.com"
    assert settings.backends.order == ["searxng", "duckduckgo", "brave"]
    unconfigured = backend_status(load_settings(environ={}))
    assert unconfigured["searxng"].note == "no base_url (set SEARXNG_BASE_URL)"
    # Declared instances come first in the default order.
    declared = Settings.model_validate({"backends": two_searxngs(testbed)})
    assert declared.backends.order == ["sx-home", "sx-lab", "searxng", "duckduckgo", "brave"]


@pytest.mark.parametrize(
    ("backends", "says"),
    [
        (
            {"instances": {"x": {"adapter": "bing"}}},
            "backends.instances.x.adapter: unknown adapter 'bing'",
        ),
        ({"instances": {"x": {"base_url": "http://h"}}}, "backends.instances.x.adapter: required"),
        (
            {"instances": {"x": {"adapter": "searxng", "api_key": "k"}}},
            "backends.instances.x.api_key",
        ),
        (
            {"instances": {"x": {"adapter": "brave", "timeout_s": 0}}},
            "backends.instances.x.timeout_s",
        ),
        ({"order": ["searxng", "sx-typo"]}, "backends.order: unknown backend instance 'sx-typo'"),
        ({"intents": {"news": {"backends": ["nope"]}}}, "backends.intents.news.backends"),
        (
            {"searxng": {"engine_health": {"backoff_s": -1}}},
            "backends.searxng.engine_health.backoff_s",
        ),
    ],
)
def test_bad_instances_are_config_errors_naming_the_field(tmp_path, backends, says):
    path = tmp_path / "searcher.yaml"
    path.write_text(yaml.safe_dump({"backends": backends}))
    with pytest.raises(ConfigError) as info:
        load_settings(path, environ={})
    assert says in str(info.value)


def test_capabilities_decide_what_an_instance_receives():
    from searcher.backends import brave, duckduckgo, searxng

    query = BackendQuery(
        "q", lang="de", time_range="week", engines=("arxiv",), categories=("science",), pageno=2
    )
    assert fit_query(query, searxng.CAPABILITIES) == (query, [])
    fitted, notes = fit_query(query, brave.CAPABILITIES)
    assert (fitted.engines, fitted.categories, fitted.lang, fitted.pageno) == ((), (), "de", 2)
    assert notes == [
        "cannot honour constraints.engines (arxiv); searched without it",
        "cannot honour constraints.categories (science); searched without it",
    ]
    fitted, notes = fit_query(query, duckduckgo.CAPABILITIES)
    assert fitted.pageno == 1 and "cannot honour constraints.pageno (2); searched page 1" in notes
    # Brave gives 20 results a call: 50 asked for is said, not silently 20.
    _, notes = fit_query(BackendQuery("q", max_results=50), brave.CAPABILITIES)
    assert notes == ["cannot honour budget.max_results (50): it gives at most 20 results a search"]
    assert fit_query(BackendQuery("q", max_results=20), brave.CAPABILITIES)[1] == []


async def test_plan_notes_name_what_an_instance_could_not_honour(
    make_settings, testbed_clean, matching_query
):
    settings = make_settings()
    async with aiohttp.ClientSession() as session:
        pool = BackendPool(build_backends(settings, session), settings)
        plan = plan_backends(["searxng", "brave"], None, settings, pool.backends)
        query = BackendQuery(matching_query, engines=("bing",))
        outcome = await pool.search(plan, query, Deadline(10), 8.0, 0)
    assert [(n.backend, n.reason) for n in outcome.plan_notes] == [
        ("brave", "cannot honour constraints.engines (bing); searched without it")
    ]
    brave_calls = [e for e in testbed_clean.log if e.path.startswith("/brave")]
    searxng_calls = [e for e in testbed_clean.log if e.path.startswith("/searxng")]
    assert searxng_calls[0].query["engines"] == "bing" and brave_calls


# --- a third-party adapter through a real entry point ------------------------------------

PLUGIN = '''
"""A third-party backend: reads SearXNG-shaped JSON its own way."""
import json

from pydantic import Field

from searcher.backends.base import (
    BackendAnswer, BackendSpec, Capabilities, Hit, HttpBackend, RequestParts,
)
from searcher.config import InstanceSettings


class CorpusSettings(InstanceSettings):
    base_url: str = Field(description="where the corpus answers")


def parse(status, headers, body, instance):
    rows = json.loads(body)["results"]
    hits = [Hit(r["url"], r["title"], r["content"], instance) for r in rows]
    return BackendAnswer(instance, hits)


def build(name, settings, context):
    def request(query):
        params = {"q": query.text, "format": "json"}
        return RequestParts("GET", settings.base_url + "/search", params, {"X-Plugin": "corpus"})

    return HttpBackend(name, Capabilities(result_count=True), request, parse, context.client)


SPEC = BackendSpec("corpus", Capabilities(result_count=True), CorpusSettings, build)
'''


def install_plugin(site: Path) -> None:
    """A real installed distribution: the module and its ``*.dist-info`` with an
    ``entry_points.txt``, as pip would lay them out, in a directory of our own."""
    (site / "searcher_corpus_plugin.py").write_text(PLUGIN)
    info = site / "searcher_corpus_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text(
        "Metadata-Version: 2.1\nName: searcher-corpus-plugin\nVersion: 0.1\n"
    )
    (info / "entry_points.txt").write_text(
        "[searcher.backends]\ncorpus = searcher_corpus_plugin:SPEC\n"
    )


def run_cli(config: Path, *path: Path) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(ROOT), *map(str, path)])}
    for var in ("SEARXNG_BASE_URL", "BRAVE_API_KEY", "SEARCHER_CONFIG"):
        env.pop(var, None)
    command = [sys.executable, "-m", "searcher", "search", "Google Stadia games", "--json"]
    return subprocess.run(
        [*command, "--config", str(config)],
        capture_output=True, text=True, env=env, timeout=120, check=False,
    )  # fmt: skip


def test_a_plugin_adds_a_backend_through_its_entry_point(tmp_path, testbed_clean):
    site = tmp_path / "site"
    site.mkdir()
    install_plugin(site)
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
                # Its own result cache: the user's (shared by every run) may answer first.
                "state": {"dir": str(tmp_path / "state")},
                "embeddings": {"model": str(STATIC_MODEL)},
            }
        )
    )
    result = run_cli(config, site)
    assert result.returncode == 0, result.stderr
    data = json.loads(result.stdout)
    assert data["meta"]["backend_used"] == "mine" and data["items"]
    assert {p["backend"] for i in data["items"] for p in i["provenance"]} == {"mine"}
    calls = [e for e in testbed_clean.log if e.path.startswith("/searxng")]
    assert calls and all(e.headers.get("x-plugin") == "corpus" for e in calls)
    # Without the plugin installed, the same configuration is refused, naming the field.
    missing = run_cli(config)
    assert missing.returncode == 2
    assert "backends.instances.mine.adapter: unknown adapter 'corpus'" in missing.stderr


def test_a_broken_plugin_is_named_not_fatal(tmp_path, monkeypatch):
    site = tmp_path / "site"
    site.mkdir()
    info = site / "broken_plugin-0.1.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: broken-plugin\nVersion: 0.1\n")
    (info / "entry_points.txt").write_text(
        "[searcher.backends]\nbroken = broken_plugin_missing:SPEC\n"
    )
    monkeypatch.syspath_prepend(str(site))
    registry = load_registry()
    assert "broken" in registry.problems and "ModuleNotFoundError" in registry.problems["broken"]
    assert {"searxng", "brave", "duckduckgo"} <= set(registry.specs)
    with pytest.raises(KeyError, match="plugin failed to load"):
        registry.spec("broken")
