"""The CLI: search (pack, JSON, full mode), cache, config, serve — against the testbed."""

import json
import signal
import socket
import subprocess
import sys
import time

import httpx
import pytest
import yaml
from click.testing import CliRunner

from searcher.cli import main
from tests.conftest import STATIC_MODEL
from tests.ports import free_port


def run(*args, env=None):
    return CliRunner().invoke(main, list(args), env=env, catch_exceptions=False)


def test_search_prints_the_context_pack(config_file, matching_query):
    result = run("search", matching_query, "--config", config_file(), "--max-results", "3")
    assert result.exit_code == 0, result.output
    pack = result.stdout
    assert pack.startswith("[CONTEXT_PACK ucp-1]") and pack.rstrip().endswith("[/CONTEXT_PACK]")
    assert pack.count("Title:") == 3 and "backend=searxng" in pack


def test_search_json_full_mode(config_file, matching_query):
    result = run(
        "search", matching_query, "--config", config_file(), "--mode", "full", "--json",
        "--backend", "brave", "--max-results", "2",
    )  # fmt: skip
    assert result.exit_code == 0, result.output
    data = json.loads(result.stdout)
    assert data["schema"] == "ucp-1" and data["meta"]["backend_used"] == "brave"
    assert [i["fetch"]["status"] for i in data["items"]] == ["fetched", "fetched"]
    assert all(len(i["content"]) > 100 for i in data["items"])


def test_search_reports_every_backend_failure(config_file, testbed):
    config = config_file(
        searxng={"base_url": testbed.searxng_url("status/500")},
        brave={"base_url": testbed.brave_url("status/503"), "api_key": "test-key"},
    )
    result = run("search", "q", "--config", config)
    assert result.exit_code == 1
    assert "all search backends failed" in result.stderr
    assert "searxng: HTTP 500" in result.stderr and "brave: HTTP 503" in result.stderr
    assert "Traceback" not in result.output


def test_bad_input_and_bad_config_exit_2(config_file, tmp_path):
    assert run("search", "", "--config", config_file()).exit_code == 2
    unknown = run("search", "q", "--config", config_file(), "--backend", "google")
    assert unknown.exit_code == 2 and "unknown backend 'google'" in unknown.stderr
    bad = tmp_path / "bad.yaml"
    bad.write_text("backends: {searxng: {timeout_s: -1}}\n")
    result = run("search", "q", "--config", str(bad))
    assert result.exit_code == 2 and "backends.searxng.timeout_s" in result.stderr


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--limit", "0"], "--limit"),
        (["--max-depth", "-1"], "--max-depth"),
        (["--max-breadth", "0"], "--max-breadth"),
        (["--delay", "-1"], "--delay"),
        (["--select-path", "docs/", "--select-path", "(unclosed"], "--select-path"),
        (["--exclude-path", "(unclosed"], "--exclude-path"),
    ],
)
def test_crawl_names_the_option_typed_for_a_bad_value(config_file, args, flag):
    result = run("crawl", "http://127.0.0.1:9/", *args, "--config", config_file())
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"searcher: invalid {flag}: "), line


@pytest.mark.parametrize(
    ("args", "flag"),
    [
        (["--backend", "nope"], "--backend"),
        (["--backend", "searxng,nope"], "--backend"),
        (["--max-results", "50"], "--max-results"),  # over the strict limit, as the server says
    ],
)
def test_search_names_the_option_typed_for_a_value_the_search_refuses(
    config_file, tmp_path, args, flag
):
    path = tmp_path / "strict.yaml"
    with open(config_file()) as written:
        config = yaml.safe_load(written)
    config["limits"] = {"strict": True, "max_results": 10}
    path.write_text(yaml.safe_dump(config))
    result = run("search", "q", *args, "--config", str(path))
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"searcher: invalid {flag}: "), line


CONFIG_COMMANDS = [["config"], ["search", "q"], ["serve", "--port", "0"], ["mcp"],
                   ["research", "q"], ["cache", "stats"]]  # fmt: skip
UNCLOSED_ROUTE = "routing:\n  groups:\n    g:\n      patterns: ['(unclosed']\n"


@pytest.mark.parametrize("command", CONFIG_COMMANDS, ids=lambda c: c[0])
@pytest.mark.parametrize(
    ("content", "message"),
    [
        (b"\xff\xfe", "is not UTF-8 text"),
        (UNCLOSED_ROUTE.encode(), "routing.groups.g.patterns: invalid regex '(unclosed'"),
    ],
    ids=["not-utf8", "bad-route-regex"],
)
def test_every_command_refuses_a_bad_config_file_with_exit_2(tmp_path, command, content, message):
    bad = tmp_path / "bad.yaml"
    bad.write_bytes(content)
    result = CliRunner().invoke(main, [*command, "--config", str(bad)])
    assert result.exit_code == 2, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit)
    (line,) = result.stderr.splitlines()  # one line, no traceback
    assert str(bad) in line and message in line


@pytest.mark.parametrize("command", [["search", "q"], ["research", "q"], ["mcp"]], ids=str)
def test_a_state_store_that_cannot_be_used_is_exit_2_in_one_line(config_file, tmp_path, command):
    not_a_dir = tmp_path / "a-file"
    not_a_dir.write_text("")
    env = {"SEARCHER_STATE_DIR": str(not_a_dir)}
    result = CliRunner().invoke(main, [*command, "--config", config_file()], env=env)
    assert result.exit_code == 2, result.output
    (line,) = result.stderr.splitlines()  # one line, no traceback
    assert line.startswith("searcher: cannot use the state store")


@pytest.mark.parametrize(
    ("config", "env", "message"),
    [
        ("backends: {brave: {api_key: '***'}}", {}, "backends.brave.api_key: '***' is how"),
        ("state: {redis_url: 'redis://:***@127.0.0.1:1/0'}", {}, "state.redis_url: '***'"),
        ("state: {redis_url: 'localhost:6379'}", {}, "state.redis_url: must be redis://"),
        ("{}", {"SEARCHER_REDIS_URL": "redis://h:port/0"}, "state.redis_url (from $SEARCHER_"),
        ("{}", {"SEARCHER_PORT": "abc"}, "server.port (from $SEARCHER_PORT): "),
        ("budget: 5", {}, "budget: must be an object (a mapping of keys to values)"),
    ],
)
def test_config_problems_name_their_key_and_where_it_came_from(tmp_path, config, env, message):
    path = tmp_path / "c.yaml"
    path.write_text(config + "\n")
    for command in (["config"], ["keys", "list"], ["search", "q"]):
        result = CliRunner().invoke(main, [*command, "--config", str(path)], env=env)
        assert result.exit_code == 2, result.output
        (line,) = result.stderr.splitlines()
        assert message in line and "Traceback" not in result.output


def test_an_old_key_in_the_file_gives_way_to_its_environment_variable(tmp_path):
    path = tmp_path / "old.yaml"
    path.write_text("service: {host: 127.0.0.2, port: 9999}\n")
    result = run("config", "--config", str(path), env={"SEARCHER_PORT": "5555"})
    assert result.exit_code == 0, result.output
    server = yaml.safe_load(result.stdout)["server"]
    assert (server["host"], server["port"]) == ("127.0.0.2", 5555)


def test_no_backend_enabled_says_so(tmp_path):
    path = tmp_path / "none.yaml"
    state = tmp_path / "state"
    path.write_text(f"backends: {{duckduckgo: {{enabled: false}}}}\nstate: {{dir: {state}}}\n")
    result = CliRunner().invoke(main, ["search", "q", "--config", str(path)])
    assert result.exit_code == 1
    assert result.stderr == "searcher: all search backends failed (no backend is enabled)\n"


def test_config_masks_secrets(config_file):
    result = run("config", "--config", config_file(), env={"BRAVE_API_KEY": "s3cret"})
    assert result.exit_code == 0
    shown = yaml.safe_load(result.stdout)
    assert shown["backends"]["brave"]["api_key"] == "***" and "s3cret" not in result.stdout


def test_cache_stats_and_clear(config_file, matching_query):
    config = config_file()
    run("search", matching_query, "--config", config, "--mode", "full", "--max-results", "2")
    stats = json.loads(run("cache", "stats", "--config", config).stdout)
    assert stats["entries"] == 2 and stats["bytes"] > 0
    assert "hits" not in stats  # a running server's count (GET /v1/cache/stats), not ours
    cleared = run("cache", "clear", "--config", config)
    assert cleared.exit_code == 0 and "removed 2 entries" in cleared.stdout
    assert json.loads(run("cache", "stats", "--config", config).stdout)["entries"] == 0


def test_cache_commands_cover_the_result_cache(config_file, matching_query):
    config = config_file()
    first = json.loads(run("search", matching_query, "--config", config, "--json").stdout)
    assert first["meta"]["cache"]["hit"] is False
    again = json.loads(run("search", matching_query, "--config", config, "--json").stdout)
    assert again["meta"]["cache"] == {**again["meta"]["cache"], "hit": True, "kind": "exact"}
    stats = json.loads(run("cache", "stats", "--config", config).stdout)
    assert stats["results"]["engine"] == "sqlite" and stats["results"]["entries"] == 1
    pruned = run("cache", "prune", "--config", config)
    assert pruned.exit_code == 0 and "removed 0 expired state entries" in pruned.stdout
    cleared = run("cache", "clear", "--config", config)
    assert cleared.exit_code == 0 and "removed 1 search results" in cleared.stdout
    assert json.loads(run("cache", "stats", "--config", config).stdout)["results"]["entries"] == 0
    third = json.loads(run("search", matching_query, "--config", config, "--json").stdout)
    assert third["meta"]["cache"]["hit"] is False


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_runs_the_http_api(config_file, matching_query, workers):
    port = free_port()
    base = f"http://127.0.0.1:{port}"
    proc = subprocess.Popen(
        [sys.executable, "-m", "searcher.cli", "serve", "--workers", workers,
         "--port", str(port), "--config", config_file()],
        stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        # Generous: two workers each import the app and start extraction processes, which
        # took 25-55 s on this machine under load (readiness, not speed, is the point).
        deadline = time.monotonic() + 90
        health = None
        while health is None and time.monotonic() < deadline and proc.poll() is None:
            try:
                health = httpx.get(f"{base}/v1/health", timeout=2).json()
            except httpx.TransportError:
                time.sleep(0.1)  # polling readiness, bounded by the deadline above
        assert health is not None, "server did not start"
        assert health["backends"]["searxng"]["breaker"] == "closed"
        found = httpx.post(f"{base}/v1/search", json={"query": matching_query}, timeout=20)
        assert found.status_code == 200 and found.json()["items"]
        # Ctrl-C is how a server is stopped: a clean exit, not click's "Aborted!" and 1.
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
        assert proc.returncode == 0, stderr[-2000:]
        assert "Aborted!" not in stderr and "Traceback" not in stderr
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=20)


@pytest.mark.parametrize("port", ["70000", "-1"])
def test_serve_on_a_port_out_of_range_exits_2(config_file, port):
    result = CliRunner().invoke(main, ["serve", "--config", config_file(), "--port", port])
    assert result.exit_code == 2 and "0<=x<=65535" in result.output
    assert "Traceback" not in result.output


@pytest.mark.parametrize("workers", ["1", "2"])
def test_serve_on_a_port_in_use_exits_2_in_one_line(config_file, workers):
    with socket.socket() as taken:
        taken.bind(("127.0.0.1", 0))
        taken.listen()
        port = taken.getsockname()[1]
        done = subprocess.run(
            [sys.executable, "-m", "searcher", "serve", "--workers", workers,
             "--port", str(port), "--config", config_file()],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert done.returncode == 2, done.stderr
    assert done.stderr == (
        f"searcher: cannot listen on 127.0.0.1:{port}: address already in use "
        "(server.host/port, --host/--port)\n"
    )


def test_search_with_llm_steps_prints_the_answer(testbed, tmp_path, matching_query):
    from tests.testbed.chat import script

    config = {
        "backends": {
            "order": ["searxng"],
            "searxng": {"base_url": testbed.searxng_url()},
            "duckduckgo": {"enabled": False},
        },
        "service": {"cache": {"enabled": False}},
        "embeddings": {"model": str(STATIC_MODEL)},
        "llm": {
            "base_url": testbed.llm_url(),
            "model": script(status=500),
            "steps": {
                "rank": {"model": script(reply='{"pick": [1, 0]}')},
                "answer": {"model": script(reply="They stream games [1].")},
            },
        },
    }
    path = tmp_path / "searcher.yaml"
    path.write_text(yaml.safe_dump(config))
    result = run("search", matching_query, "--config", str(path), "--llm-rank", "2",
                 "--answer-check", "--multi-query", "2")  # fmt: skip
    assert result.exit_code == 0, result.output
    assert result.stdout.count("Title:") == 2
    assert "\nAnswer: They stream games [1].\n  [1] http://127.0.0.1:" in result.stdout
    assert "Check (heuristic):" in result.stdout  # the answer_check model answers 500
    assert "note: multi_query llm: fallback: HTTP 500" in result.stderr
    bad = run("search", matching_query, "--config", str(path), "--multi-query", "9")
    assert bad.exit_code == 2 and "invalid --multi-query: " in bad.stderr  # the option typed
    bad = run("search", matching_query, "--config", str(path), "--llm-rank", "0")
    assert bad.exit_code == 2 and "invalid --llm-rank: " in bad.stderr


def test_ctrl_c_in_full_mode_reports_pages_as_cancelled(config_file, testbed_clean):
    # Pages that answer after a minute; Ctrl-C once they are all being read. The progress
    # lines are printed only to a terminal, so stderr is a pseudo-terminal here.
    import os
    import pty

    config = config_file(searxng={"base_url": testbed_clean.searxng_url("delayed/60000/60000")})
    reader, writer = pty.openpty()
    proc = subprocess.Popen(
        [sys.executable, "-m", "searcher", "search", "q", "--mode", "full",
         "--max-results", "3", "--config", config],
        stdout=subprocess.DEVNULL, stderr=writer,
    )  # fmt: skip
    os.close(writer)
    try:
        deadline = time.monotonic() + 60
        while time.monotonic() < deadline and proc.poll() is None:
            if sum("/slow/" in e.path for e in testbed_clean.log) >= 3:
                break
            time.sleep(0.05)  # polling the testbed's log, bounded by the deadline above
        assert proc.poll() is None, "the search ended before its pages were read"
        proc.send_signal(signal.SIGINT)
        assert proc.wait(timeout=30) == 130
        stderr = b""
        while chunk := _read_pty(reader):
            stderr += chunk
    finally:
        os.close(reader)
        if proc.poll() is None:
            proc.kill()
            proc.wait(timeout=20)
    lines = stderr.decode().splitlines()
    assert [line.split()[1] for line in lines if line.startswith("[")] == ["cancelled"] * 3
    assert "failed" not in stderr.decode() and lines[-1] == "searcher: interrupted"


def _read_pty(fd: int) -> bytes:
    """What the terminal holds; b"" once it is empty and its writer has gone."""
    import os

    try:
        return os.read(fd, 4096)
    except OSError:  # EIO: the writing side is closed and everything has been read
        return b""


def _commands(group, path=()):
    yield path
    for name, command in getattr(group, "commands", {}).items():
        yield from _commands(command, (*path, name))


def test_help_shows_no_rest_markup_and_names_instances_for_backend():
    # Docstrings become --help text: reST's ``literal`` would be printed as it is.
    for path in _commands(main):
        result = run(*path, "--help")
        assert result.exit_code == 0 and "``" not in result.stdout, (path, result.stdout)
    assert "named instance" in run("search", "--help").stdout
