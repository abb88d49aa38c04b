"""``make demo`` (demo/): the local web answers as a SearXNG instance, searcher configured
by demo/searcher.yaml searches and reads it in simple and full mode, and the whole demo
stops cleanly on Ctrl-C. Nothing here needs ../shared or the internet."""

from __future__ import annotations

import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from demo.__main__ import config_for
from demo.web import DemoServer, load
from searcher.config import load_settings
from tests.ports import free_port

REPO = Path(__file__).resolve().parents[1]


def test_the_pages_are_a_few_dozen_and_searchable():
    web = load()
    assert 24 <= len(web.pages) <= 48
    assert [p.slug for p, _ in web.index.search("okapi bm25")][:1] == ["okapi-bm25"]
    assert web.index.search("zzqxv") == []


def test_searcher_on_the_demo_web_in_simple_and_full_mode(serve_searcher, tmp_path):
    with DemoServer() as web, config_for(web.port) as config:
        settings = load_settings(config, environ={})
        cache = {
            "service": {"cache": {"dir": str(tmp_path / "c")}},
            "state": {"dir": str(tmp_path)},
        }
        settings = settings.model_validate({**settings.model_dump(), **cache})
        base = serve_searcher(settings)
        simple = httpx.post(f"{base}/v1/search", json={"query": "why did stadia close"}, timeout=30)
        assert simple.status_code == 200, simple.text
        items = simple.json()["items"]
        assert items[0]["url"] == f"{web.base_url}/pages/why-stadia-closed"
        full = httpx.post(
            f"{base}/v1/search",
            json={"query": "okapi bm25", "constraints": {"search_mode": "full"},
                  "budget": {"max_results": 2}},
            timeout=30,
        )  # fmt: skip
        first = full.json()["items"][0]
        assert first["fetch"]["status"] == "fetched"
        assert "Stephen Robertson" in first["content"]


def _answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=2).status_code == 200
    except httpx.TransportError:
        return False


def test_the_demo_stops_cleanly_on_ctrl_c(tmp_path):
    port, web_port = free_port(), free_port()
    # Another web port: the demo runs on a copy of its config, in a folder of TMPDIR.
    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen(
        [sys.executable, "-m", "demo", "--port", str(port), "--web-port", str(web_port)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True, env=env,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        health = f"http://127.0.0.1:{port}/v1/health"
        while not _answers(health) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)  # polling readiness, bounded by the deadline above
        assert _answers(health), "the demo did not start"
        assert _answers(f"http://127.0.0.1:{web_port}/pages/okapi-bm25")
        assert list(tmp_path.glob("searcher-demo-*/searcher.yaml"))  # what the banner names
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=20)
    assert proc.returncode == 0, stderr[-2000:]
    assert "Traceback" not in stderr and "Aborted" not in stderr
    assert not list(tmp_path.glob("searcher-demo-*"))  # the copy went with the demo
    for freed in (port, web_port):  # both servers gone: nothing listens on their ports
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT
            probe.bind(("127.0.0.1", freed))


@pytest.fixture
def running_demo(tmp_path):
    """``python -m demo`` on free loopback ports, run in ``tmp_path`` (its cache and state
    go there); yields (searcher's base URL, the demo web's base URL)."""
    port, web_port = free_port(), free_port()
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    env.pop("SEARCHER_CONFIG", None)
    proc = subprocess.Popen(
        [sys.executable, "-m", "demo", "--port", str(port), "--web-port", str(web_port)],
        cwd=tmp_path, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    api, web = f"http://127.0.0.1:{port}", f"http://127.0.0.1:{web_port}"
    try:
        deadline = time.monotonic() + 60
        while not _answers(f"{api}/v1/health") and time.monotonic() < deadline:
            if proc.poll() is not None:
                break
            time.sleep(0.1)  # polling readiness, bounded by the deadline above
        assert _answers(f"{api}/v1/health"), "the demo did not start"
        yield api, web
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.communicate(timeout=30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.communicate(timeout=20)


def test_the_demo_shows_simple_full_research_and_mcp_over_http(running_demo, tmp_path):
    api, web = running_demo
    simple = httpx.post(f"{api}/v1/search", json={"query": "why did stadia close"}, timeout=30)
    assert simple.status_code == 200, simple.text
    assert simple.json()["items"][0]["url"] == f"{web}/pages/why-stadia-closed"

    body = {"query": "okapi bm25", "constraints": {"search_mode": "full"},
            "budget": {"max_results": 2}}  # fmt: skip
    full = httpx.post(f"{api}/v1/search", json=body, timeout=30).json()
    assert full["meta"]["mode_used"] == "full"
    assert full["items"][0]["fetch"]["status"] == "fetched"
    assert "Stephen Robertson" in full["items"][0]["content"]

    question = {"query": "how does bm25 rank documents", "preset": "minimal", "stream": True}
    with httpx.stream("POST", f"{api}/v1/research", json=question, timeout=120) as response:
        assert response.status_code == 200
        job_id = response.headers["x-job-id"]
        kinds = [line[len("event: ") :] for line in response.iter_lines()
                 if line.startswith("event: ")]  # fmt: skip
    assert kinds[0] == "plan" and kinds[-1] == "done"
    job = httpx.get(f"{api}/v1/research/{job_id}", timeout=30).json()
    assert job["status"] == "done"
    evidence = job["result"]["evidence"]
    assert evidence and all(p["url"].startswith(f"{web}/pages/") for p in evidence)

    # The demo's MCP client (the command its banner prints), against /mcp over HTTP.
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    mcp = subprocess.run(
        [sys.executable, "-m", "demo.mcp_call", "what is bm25", "--url", f"{api}/mcp"],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=120,
    )  # fmt: skip
    assert mcp.returncode == 0, mcp.stderr[-2000:]
    lines = mcp.stdout.splitlines()
    assert lines[0] == f"MCP tools at {api}/mcp: web_search, fetch_page, deep_research, crawl_site"
    assert lines[1] == "web_search('what is bm25') -> 3 results"
    assert f"{web}/pages/what-is-bm25" in mcp.stdout


def test_the_mcp_call_names_an_endpoint_it_cannot_reach(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    url = f"http://127.0.0.1:{free_port()}/mcp"
    result = subprocess.run(
        [sys.executable, "-m", "demo.mcp_call", "bm25", "--url", url],
        cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 1
    assert result.stderr.startswith(f"mcp_call: cannot call {url}: ")
    assert "Traceback" not in result.stderr and "TaskGroup" not in result.stderr


@pytest.mark.parametrize("taken", ["--port", "--web-port"])
def test_a_port_in_use_is_named_with_the_demo_s_own_option(tmp_path, taken):
    # Something already listens where the demo wants one of its servers (llama.cpp's
    # server defaults to 8080 too): one line naming this command's option, no banner.
    ports = {"--port": free_port(), "--web-port": free_port()}
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    with socket.socket() as squatter:
        squatter.bind(("127.0.0.1", ports[taken]))
        squatter.listen()
        result = subprocess.run(
            [sys.executable, "-m", "demo", *(str(a) for kv in ports.items() for a in kv)],
            cwd=tmp_path, env=env, capture_output=True, text=True, timeout=60,
        )  # fmt: skip
    assert result.returncode == 2, result.stderr
    (line,) = result.stderr.splitlines()
    assert line.startswith(f"demo: cannot listen on 127.0.0.1:{ports[taken]}: address already")
    assert line.endswith(f"another port: .venv/bin/python -m demo {taken} {ports[taken] + 1}")
