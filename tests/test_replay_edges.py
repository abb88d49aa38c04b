"""What a replay needs beyond backend answers, pages and LLM replies, over real HTTP and
the CLI against the testbed: backends that timed out or refused the connection (replayed
as the same failures, the same fallback taken), the state store a replay finds the
recording in when its configuration changes only ranking, and ``searcher judge --set``
grading a frozen set with no backend asked. Every replay runs with the private testbed
stopped, so that nothing could answer but the recording."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from click.testing import CliRunner, Result

from searcher.cli import main
from searcher.config import Settings
from searcher.fetch.browser_process import find_browser
from tests.conftest import _merge
from tests.ports import free_port
from tests.testbed import TestbedServer
from tests.testbed.chat import script
from tests.testbed.silent import SilentServer


def _config(tb: TestbedServer, tmp_path: Path, **extra: Any) -> dict[str, Any]:
    base: dict[str, Any] = {
        "backends": {
            "order": ["searxng", "brave"],
            "searxng": {"base_url": tb.searxng_url()},
            "duckduckgo": {"enabled": False},
            "brave": {"base_url": tb.brave_url(), "api_key": "test-key"},
        },
        "fetch": {"allowed_hosts": [f"127.0.0.1:{tb.port}"], "extract_workers": 1},
        "service": {"cache": {"dir": str(tmp_path / "cache")}},
        "state": {"dir": str(tmp_path / "state")},
        "embeddings": {"provider": "none"},
        "scoring": {"hybrid_share": 0.0},
    }
    return _merge(base, extra)


def _write(tmp_path: Path, name: str, config: dict[str, Any]) -> str:
    path = tmp_path / name
    path.write_text(yaml.safe_dump(config))
    return str(path)


def _cli(*args: str, env: dict[str, str] | None = None) -> Result:
    return CliRunner(env=env).invoke(main, list(args), catch_exceptions=False)


@pytest.fixture
def private_testbed():
    tb = TestbedServer().start()
    yield tb
    tb.stop()


@pytest.fixture
def silent_server():
    server = SilentServer().start()
    yield server
    server.close()


def _search_errors(response: dict[str, Any]) -> list[dict[str, Any]]:
    return [e for e in response["meta"]["errors"] if e["stage"] == "search"]


def test_a_backend_that_timed_out_or_refused_replays_as_the_same_failure(
    private_testbed, silent_server, tmp_path, serve_searcher, matching_query
):
    refused = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    backends = {
        "order": ["sx-refused", "brave", "searxng"],
        "instances": {"sx-refused": {"adapter": "searxng", "base_url": refused}},
        "brave": {"base_url": f"http://127.0.0.1:{silent_server.port}", "timeout_s": 0.5},
    }
    config = _config(private_testbed, tmp_path, backends=backends)
    base = serve_searcher(Settings.model_validate(config))
    body = {
        "query": matching_query,
        "constraints": {"record": True},
        "budget": {"max_results": 5, "max_search_retries": 1},
    }
    answered = httpx.post(f"{base}/v1/search", json=body, headers={"X-Request-ID": "rec-f"},
                          timeout=60)  # fmt: skip
    assert answered.status_code == 200, answered.text
    recorded = answered.json()
    meta = recorded["meta"]
    assert meta["backend_used"] == "searxng" and meta["fallback_used"] is True
    kinds = {(e["source"], e["kind"]) for e in _search_errors(recorded)}
    assert kinds == {("sx-refused", "connect"), ("brave", "timeout")}
    private_testbed.stop()
    silent_server.close()
    path = _write(tmp_path, "searcher.yaml", config)

    first = _cli("replay", "rec-f", "--config", path, "--json")
    assert first.exit_code == 0, first.output
    assert _cli("replay", "rec-f", "--config", path, "--json").stdout == first.stdout
    replayed = json.loads(first.stdout)
    # The same failures in the same words (not "not in the recording"), the same fallback.
    assert _search_errors(replayed) == _search_errors(recorded)
    for key in ("backend_used", "fallback_used", "backends_tried"):
        assert replayed["meta"][key] == meta[key], key
    assert [i["url"] for i in replayed["items"]] == [i["url"] for i in recorded["items"]]


def test_replay_with_a_ranking_config_finds_the_recording_where_it_was_kept(
    private_testbed, tmp_path, matching_query
):
    config = _config(private_testbed, tmp_path)
    home = _write(tmp_path, "searcher.yaml", config)
    # The environment a user searched in: the configuration found without --config.
    env = {"SEARCHER_CONFIG": home, "XDG_CACHE_HOME": str(tmp_path / "xdg")}
    searched = _cli("search", matching_query, "--record", env=env)
    assert searched.exit_code == 0, searched.output
    request_id = searched.stderr.split("recorded as ")[1].split()[0]
    private_testbed.stop()

    # A configuration that changes ranking and names no state store of its own.
    ranking = {k: v for k, v in config.items() if k != "state"}
    ranking["budget"] = {"max_results": 2}
    ranking["limits"] = {"max_results": 2}
    tweak = _write(tmp_path, "tweak.yaml", ranking)
    said = _cli("replay", request_id, "--config", tweak, env=env)
    assert said.exit_code == 0, said.output
    assert said.stdout.startswith(f"replayed {request_id} (recorded ")
    assert "items: " in said.stdout and " -> 2" in said.stdout

    # A fragment of ranking settings alone is laid over the home configuration.
    fragment = _write(tmp_path, "fragment.yaml", {"fusion": {"rrf_k": 5}})
    tweaked = _cli("replay", request_id, "--config", fragment, "--json", env=env)
    assert tweaked.exit_code == 0, tweaked.output
    assert json.loads(tweaked.stdout)["items"]

    # One that names another state store explicitly is read from that one.
    elsewhere = _write(tmp_path, "elsewhere.yaml",
                       {**ranking, "state": {"dir": str(tmp_path / "other-state")}})  # fmt: skip
    missing = CliRunner(env=env).invoke(main, ["replay", request_id, "--config", elsewhere])
    assert missing.exit_code == 2 and f"no recorded search '{request_id}'" in missing.stderr


def test_judge_grades_a_frozen_set_without_searching(
    private_testbed, testbed, tmp_path, matching_query
):
    config = _config(private_testbed, tmp_path)
    path = _write(tmp_path, "searcher.yaml", config)
    ids = []
    for query in (matching_query, "cloud gaming service"):
        searched = _cli("search", query, "--record", "--config", path)
        assert searched.exit_code == 0, searched.output
        ids.append(searched.stderr.split("recorded as ")[1].split()[0])
    out = tmp_path / "set"
    assert _cli("freeze", *ids, "--out", str(out), "--config", path).exit_code == 0
    private_testbed.stop()  # no backend from here on; the LLM is the session testbed's
    pooled = {tuple(line.split("\t")[:2]) for line in (out / "pooled.tsv").read_text().splitlines()}

    llm = {"llm": {"base_url": testbed.llm_url(), "model": script(reply='{"grade": 2}')}}
    judging = _write(tmp_path, "judging.yaml", _merge(config, llm))
    qrels = tmp_path / "judged.qrels"
    judged = _cli("judge", "--set", str(out), "--out", str(qrels), "--config", judging)
    assert judged.exit_code == 0, judged.output
    lines = [line.split() for line in qrels.read_text().splitlines()]
    assert {(qid, url) for qid, _, url, _ in lines} == pooled  # the set's pool, judged
    assert {grade for *_, grade in lines} == {"2"}
    assert "0 queries without results" not in judged.stderr
    assert (tmp_path / "judged.tsv").read_text().count("\n") == 2

    tuned = _cli("tune", "--set", str(out), "--qrels", str(qrels), "--out",
                 str(tmp_path / "tuned.yaml"), "--folds", "2", "--config", path)  # fmt: skip
    assert "2 judged queries (0 without an answer" in tuned.stdout, tuned.output

    no_llm = CliRunner().invoke(main, ["judge", "--set", str(out), "--out", str(qrels),
                                       "--config", path])  # fmt: skip
    assert no_llm.exit_code == 2 and "no LLM configured" in no_llm.stderr
    both = CliRunner().invoke(main, ["judge", "--set", str(out), "--queries", "q.tsv",
                                     "--out", str(qrels), "--config", judging])  # fmt: skip
    assert both.exit_code == 2 and "exactly one of" in both.stderr


NOTES = {
    "espresso.md": "# Espresso\n\nEspresso is brewed by forcing hot water through finely "
    "ground coffee under nine bars of pressure, which gives the crema its body.\n",
    "kayak.md": "# Kayak\n\nRead the eddy line before crossing the current with the kayak.\n",
    "grinder.md": "# Grinders\n\nA burr grinder gives espresso an even grind; blade "
    "grinders chop the coffee unevenly.\n",
}


def test_a_local_collections_answer_is_recorded_and_replayed_without_it(
    private_testbed, tmp_path, serve_searcher
):
    folder = tmp_path / "notes"
    folder.mkdir()
    for name, text in NOTES.items():
        (folder / name).write_text(text)
    local = {"instances": {"mine": {"adapter": "local", "collection": "notes"}}}
    config = _config(private_testbed, tmp_path, backends=local)
    path = _write(tmp_path, "searcher.yaml", config)
    added = _cli("index", "add", str(folder), "--collection", "notes", "--config", path)
    assert added.exit_code == 0, added.output
    base = serve_searcher(Settings.model_validate(config))
    body = {
        "query": "espresso coffee grind",
        "constraints": {"backend": "mine", "search_mode": "full", "record": True},
    }
    answered = httpx.post(f"{base}/v1/search", json=body, headers={"X-Request-ID": "rec-l"},
                          timeout=60)  # fmt: skip
    assert answered.status_code == 200, answered.text
    recorded = answered.json()
    urls = [i["url"] for i in recorded["items"]]
    assert urls and all(u.startswith("file://") for u in urls)
    assert all(i["fetch"]["status"] == "fetched" for i in recorded["items"])
    # A collection's answers count against recording.max_bytes as pages do.
    bounded = _merge(config, {"recording": {"max_bytes": 1024}})
    small = serve_searcher(Settings.model_validate(bounded))
    unkept = httpx.post(f"{small}/v1/search", json=body, timeout=60).json()
    assert unkept["meta"]["request_id"] is None
    assert any(e["stage"] == "record" for e in unkept["meta"]["errors"])
    private_testbed.stop()

    # The collection changes, then goes: the replay is answered as the search was.
    (folder / "espresso.md").write_text("# Tea\n\nGreen tea steeps at eighty degrees.\n")
    assert (
        _cli("index", "add", str(folder), "--collection", "notes", "--config", path).exit_code == 0
    )
    removed = _cli("index", "remove", "--collection", "notes", "--config", path)
    assert removed.exit_code == 0, removed.output
    live = httpx.post(f"{base}/v1/search", json={**body, "constraints": {"backend": "mine"}},
                      timeout=60)  # fmt: skip
    assert live.status_code == 502  # the collection is gone for a live search
    first = _cli("replay", "rec-l", "--config", path, "--json")
    assert first.exit_code == 0, first.output
    assert _cli("replay", "rec-l", "--config", path, "--json").stdout == first.stdout
    replayed = json.loads(first.stdout)
    assert [i["url"] for i in replayed["items"]] == urls
    assert replayed["rendered_text"] == recorded["rendered_text"]
    assert [i["snippet"] for i in replayed["items"]] == [i["snippet"] for i in recorded["items"]]
    assert "nine bars of pressure" in replayed["rendered_text"]
    said = _cli("replay", "rec-l", "--config", path)
    assert said.stdout.splitlines()[1] == f"items: the same {len(urls)}, in the same order"


@pytest.mark.skipif(
    find_browser(None) is None, reason="no chromium on PATH (apt-get install chromium)"
)
def test_rendered_pages_are_recorded_and_replayed_without_a_browser(
    private_testbed, tmp_path, serve_searcher, matching_query
):
    # The first page also starts the browser: time enough for that on a loaded machine.
    slow_machine = {"fetch_timeout_ms": 25_000, "max_total_time_ms": 30_000}
    config = _config(private_testbed, tmp_path, browser={"page_timeout_s": 25},
                     budget=slow_machine)  # fmt: skip
    base = serve_searcher(Settings.model_validate(config))
    body = {
        "query": matching_query,
        "constraints": {"search_mode": "full", "render": "always", "record": True},
        "budget": {"max_results": 4, "max_fetch_pages": 2},
    }
    answered = httpx.post(f"{base}/v1/search", json=body, headers={"X-Request-ID": "rec-r"},
                          timeout=90)  # fmt: skip
    assert answered.status_code == 200, answered.text
    recorded = answered.json()
    drawn = [i for i in recorded["items"] if i["fetch"]["rendered"]]
    assert drawn and all(i["fetch"]["render_ms"] is not None for i in drawn)
    private_testbed.stop()

    # No browser where the replay runs, and nothing to load the pages from.
    no_browser = _merge(config, {"browser": {"executable": "/nonexistent/chromium"}})
    path = _write(tmp_path, "searcher.yaml", no_browser)
    first = _cli("replay", "rec-r", "--config", path, "--json")
    assert first.exit_code == 0, first.output
    assert _cli("replay", "rec-r", "--config", path, "--json").stdout == first.stdout
    replayed = json.loads(first.stdout)
    assert [i["fetch"] for i in replayed["items"]] == [i["fetch"] for i in recorded["items"]]
    assert replayed["rendered_text"] == recorded["rendered_text"]
    assert not [e for e in replayed["meta"]["errors"] if e["stage"] in ("fetch", "render")]


def test_a_search_recorded_behind_an_open_breaker_replays_as_the_same_refusal(
    private_testbed, tmp_path, serve_searcher, matching_query
):
    refused = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    breaker = {"failure_threshold": 1, "recovery_timeout": 600}
    backends = {
        "order": ["sx-refused", "searxng"],
        "instances": {
            "sx-refused": {"adapter": "searxng", "base_url": refused, "breaker": breaker}
        },
    }
    config = _config(private_testbed, tmp_path, backends=backends)
    base = serve_searcher(Settings.model_validate(config))
    body: dict[str, Any] = {"query": matching_query, "budget": {"max_results": 5}}
    opened = httpx.post(f"{base}/v1/search", json=body, timeout=60)  # opens sx-refused's
    assert ("sx-refused", "connect") in {(e["source"], e["kind"]) for e in _search_errors(
        opened.json())}  # fmt: skip
    body["constraints"] = {"record": True}
    answered = httpx.post(f"{base}/v1/search", json=body, headers={"X-Request-ID": "rec-c"},
                          timeout=60)  # fmt: skip
    assert answered.status_code == 200, answered.text
    recorded = answered.json()
    kinds = {(e["source"], e["kind"]) for e in _search_errors(recorded)}
    assert kinds == {("sx-refused", "circuit_open")}
    assert recorded["meta"]["backend_used"] == "searxng"
    private_testbed.stop()
    path = _write(tmp_path, "searcher.yaml", config)

    first = _cli("replay", "rec-c", "--config", path, "--json")
    assert first.exit_code == 0, first.output
    assert _cli("replay", "rec-c", "--config", path, "--json").stdout == first.stdout
    replayed = json.loads(first.stdout)
    # The breaker's refusal in its recorded words, not "not in the recording".
    assert _search_errors(replayed) == _search_errors(recorded)
    for key in ("backend_used", "fallback_used", "backends_tried"):
        assert replayed["meta"][key] == recorded["meta"][key], key
    assert [i["url"] for i in replayed["items"]] == [i["url"] for i in recorded["items"]]


def test_a_session_search_replays_with_what_the_session_had_been_shown(
    private_testbed, tmp_path, serve_searcher, matching_query
):
    config = _config(private_testbed, tmp_path)
    base = serve_searcher(Settings.model_validate(config))
    plain: dict[str, Any] = {"query": matching_query, "budget": {"max_results": 5}}
    first = httpx.post(f"{base}/v1/search", json=plain, timeout=60).json()
    order = [i["url"] for i in first["items"]]
    assert len(order) >= 3
    # The session was shown the first two results; recorded, the second moves below
    # the ones it was not shown (the best stays first).
    session = {"session_id": "s-1", "cache": "off"}
    shown_body = {"query": matching_query, "budget": {"max_results": 2}, "constraints": session}
    httpx.post(f"{base}/v1/search", json=shown_body, timeout=60).raise_for_status()
    body = {**plain, "constraints": {**session, "record": True}}
    answered = httpx.post(
        f"{base}/v1/search", json=body, headers={"X-Request-ID": "rec-s"}, timeout=60
    )
    assert answered.status_code == 200, answered.text
    recorded = answered.json()
    demoted = [i["url"] for i in recorded["items"]]
    assert demoted[0] == order[0] and order[1] not in demoted[:2], (order, demoted)
    other = {**plain, "query": f"{matching_query} history", "constraints": session}
    httpx.post(f"{base}/v1/search", json=other, timeout=60).raise_for_status()
    private_testbed.stop()
    path = _write(tmp_path, "searcher.yaml", config)

    # The CLI is another caller (its session record is not the HTTP peer's): without the
    # recorded shown pages the replay would see a new session.
    first_replay = _cli("replay", "rec-s", "--config", path, "--json")
    assert first_replay.exit_code == 0, first_replay.output
    assert _cli("replay", "rec-s", "--config", path, "--json").stdout == first_replay.stdout
    replayed = json.loads(first_replay.stdout)
    assert [i["url"] for i in replayed["items"]] == [i["url"] for i in recorded["items"]]


def test_a_request_id_recorded_again_keeps_its_newest_recording(make_settings, serve_searcher):
    import asyncio

    from searcher.errors import UnknownRecording
    from searcher.recording.book import RecordingBook
    from searcher.state import open_store

    settings = make_settings(recording={"max_recordings": 3})
    base = serve_searcher(settings)
    for request_id, query in (("A", "alpha one"), ("A", "alpha two"), ("B", "bravo"),
                              ("C", "charlie")):  # fmt: skip
        body = {"query": query, "constraints": {"record": True}}
        answer = httpx.post(f"{base}/v1/search", json=body, headers={"X-Request-ID": request_id},
                            timeout=30)  # fmt: skip
        assert answer.status_code == 200, answer.text

    async def recorded(request_id: str) -> str | None:
        store = await open_store(settings.state)
        try:
            found = await RecordingBook(store, settings.recording).get(request_id)
        except UnknownRecording:
            return None
        finally:
            await store.aclose()
        query = found.request["query"]
        return str(query["text"] if isinstance(query, dict) else query)

    # A's second recording is among the three newest: C's slot was A's first, not its own.
    assert asyncio.run(recorded("A")) == "alpha two"
    assert asyncio.run(recorded("B")) == "bravo" and asyncio.run(recorded("C")) == "charlie"


def test_a_request_id_another_key_recorded_is_not_recorded_over(
    make_settings, serve_searcher, config_file
):
    import asyncio

    from searcher.recording.book import RecordingBook
    from searcher.state import open_store
    from tests.test_auth import bearer, create_key

    config = config_file()
    settings = make_settings(auth={"enabled": True})
    base = serve_searcher(settings)
    alice, bob = bearer(create_key(config, "alice")), bearer(create_key(config, "bob"))

    def record(query: str, key: dict[str, str]) -> dict:
        body = {"query": query, "constraints": {"record": True}}
        answer = httpx.post(f"{base}/v1/search", json=body, timeout=30,
                            headers={"X-Request-ID": "shared-id", **key})  # fmt: skip
        assert answer.status_code == 200, answer.text
        return answer.json()

    async def recorded_query() -> str:
        store = await open_store(settings.state)
        try:
            found = await RecordingBook(store, settings.recording).get("shared-id")
        finally:
            await store.aclose()
        query = found.request["query"]
        return str(query["text"] if isinstance(query, dict) else query)

    assert record("alpha one", alice)["meta"]["request_id"] == "shared-id"
    refused = record("bravo", bob)  # answered, not recorded over Alice's search
    [error] = [e for e in refused["meta"]["errors"] if e["stage"] == "record"]
    assert "another key" in error["reason"] and refused["meta"]["request_id"] is None
    assert asyncio.run(recorded_query()) == "alpha one"
    record("alpha two", alice)  # her own id: recorded again
    assert asyncio.run(recorded_query()) == "alpha two"
