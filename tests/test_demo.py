"""``make demo`` (demo/): the local web answers as a SearXNG instance, searcher configured
by demo/searcher.yaml searches and reads it in simple and full mode, and the whole demo
stops cleanly on Ctrl-C. Nothing here needs ../shared or the internet."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import httpx

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
    with DemoServer() as web:
        settings = load_settings(config_for(web.port), environ={})
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


def test_the_demo_stops_cleanly_on_ctrl_c():
    port, web_port = free_port(), free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "demo", "--port", str(port), "--web-port", str(web_port)],
        cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        deadline = time.monotonic() + 60
        health = f"http://127.0.0.1:{port}/v1/health"
        while not _answers(health) and time.monotonic() < deadline and proc.poll() is None:
            time.sleep(0.1)  # polling readiness, bounded by the deadline above
        assert _answers(health), "the demo did not start"
        assert _answers(f"http://127.0.0.1:{web_port}/pages/okapi-bm25")
        proc.send_signal(signal.SIGINT)
        _, stderr = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.communicate(timeout=20)
    assert proc.returncode == 0, stderr[-2000:]
    assert "Traceback" not in stderr and "Aborted" not in stderr
    for freed in (port, web_port):  # both servers gone: nothing listens on their ports
        with socket.socket() as probe:
            probe.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)  # past TIME_WAIT
            probe.bind(("127.0.0.1", freed))
