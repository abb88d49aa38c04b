"""GET /metrics (Prometheus text format), request ids and the JSON access log, over real
HTTP against the testbed."""

from __future__ import annotations

import json
import logging
import os
import re
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest

from searcher.api.access_log import WRITER_THREAD, AccessEntry, AccessLogWriter
from searcher.api.app import create_app
from tests.ports import free_port
from tests.redis_server import RedisServer
from tests.testbed.server import ThreadedServer


def sample(text: str, name: str, **labels: str) -> float | None:
    """The value of one sample of the exposition, or None if it is absent."""
    for line in text.splitlines():
        if line.startswith("#") or not line.startswith(name):
            continue
        head, _, value = line.rpartition(" ")
        metric, _, label_text = head.partition("{")
        if metric != name:
            continue
        found = dict(re.findall(r'(\w+)="([^"]*)"', label_text))
        if all(found.get(k) == v for k, v in labels.items()):
            return float(value)
    return None


def test_metrics_count_searches_stages_routes_and_breakers(make_settings, serve_searcher):
    base = serve_searcher(make_settings())
    fresh = {"query": "cloud gaming", "constraints": {"cache": "off"}}
    for _ in range(2):
        assert httpx.post(f"{base}/v1/search", json=fresh).status_code == 200
    assert httpx.post(f"{base}/v1/search", json={"query": ""}).status_code == 422
    for _ in range(2):  # computed once, then served from the result cache
        assert httpx.post(f"{base}/v1/search", json={"query": "stadia"}).status_code == 200
    text = httpx.get(f"{base}/metrics").text

    assert sample(text, "searcher_searches_total", mode="simple") == 3  # computed ones
    assert sample(text, "searcher_stage_duration_seconds_count", stage="search") == 3
    assert sample(text, "searcher_stage_duration_seconds_count", stage="rank") == 3
    route = {"route": "/v1/search", "method": "POST", "status": "200"}
    assert sample(text, "searcher_http_request_duration_seconds_count", **route) == 4
    lookups = {"cache": "results", "kind": "exact"}
    assert sample(text, "searcher_cache_lookups_total", **lookups, result="miss") == 1
    assert sample(text, "searcher_cache_lookups_total", **lookups, result="hit") == 1
    assert sample(text, "searcher_http_request_duration_seconds_count", status="422") == 1
    assert sample(text, "searcher_breaker_state", backend="searxng", state="closed") == 1
    assert sample(text, "searcher_breaker_state", backend="searxng", state="open") == 0
    assert sample(text, "searcher_info", version="0.1.0") == 1


def test_methods_no_route_answers_share_one_label(make_settings, serve_searcher):
    base = serve_searcher(make_settings())
    odd = ["PROPFIND", "MKCOL", "LOCK", "UNLOCK", "COPY", "MOVE", "PURGE", "REPORT", "SEARCH"]
    for method in odd:
        assert httpx.request(method, f"{base}/v1/health").status_code == 405
    text = httpx.get(f"{base}/metrics").text
    labels = set(
        re.findall(r'searcher_http_request_duration_seconds_count\{[^}]*method="([^"]*)"', text)
    )
    assert labels == {"other"}  # this scrape is counted once it is answered
    route = {"route": "/v1/health", "method": "other", "status": "405"}
    assert sample(text, "searcher_http_request_duration_seconds_count", **route) == len(odd)


def test_requests_refused_before_routing_are_labelled_with_their_route(
    make_settings, serve_searcher
):
    base = serve_searcher(make_settings(auth={"enabled": True}))
    assert httpx.post(f"{base}/v1/search", json={"query": "q"}).status_code == 401
    assert httpx.get(f"{base}/v1/research/abc").status_code == 401
    assert httpx.get(f"{base}/no/such/route").status_code == 401
    text = httpx.get(f"{base}/metrics").text
    count = "searcher_http_request_duration_seconds_count"
    assert sample(text, count, route="/v1/search", method="POST", status="401") == 1
    assert sample(text, count, route="/v1/research/{job_id}", method="GET", status="401") == 1
    assert sample(text, count, route="unmatched", method="GET", status="401") == 1


def test_metrics_count_state_operations_served_without_the_store(make_settings, serve_searcher):
    with RedisServer() as server:
        state = {"redis_url": server.url, "redis_timeout_s": 2.0}
        base = serve_searcher(make_settings(state=state))
        assert httpx.post(f"{base}/v1/search", json={"query": "stadia"}).status_code == 200
        before = sample(httpx.get(f"{base}/metrics").text, "searcher_state_errors_total")
        assert before is None  # nothing failed yet
        server.kill()
        assert httpx.post(f"{base}/v1/search", json={"query": "xcloud"}).status_code == 200
        text = httpx.get(f"{base}/metrics").text
        assert (sample(text, "searcher_state_errors_total", engine="redis") or 0) >= 1


def test_metrics_count_llm_fallbacks_and_page_reads(make_settings, serve_searcher):
    base = serve_searcher(make_settings())
    body = {
        "query": "cloud gaming",
        "constraints": {"rewrite": True, "search_mode": "full"},
        "budget": {"max_results": 2, "max_fetch_pages": 2},
    }
    data = httpx.post(f"{base}/v1/search", json=body, timeout=30).json()
    text = httpx.get(f"{base}/metrics").text
    # No LLM configured: the rewrite step took its fallback, and the metrics say so.
    assert sample(text, "searcher_llm_calls_total", step="rewrite", fallback="yes") == 1
    fetched = sum(1 for item in data["items"] if item["fetch"]["status"] == "fetched")
    assert fetched >= 1
    assert sample(text, "searcher_page_reads_total", status="fetched", reason="") == fetched
    assert sample(text, "searcher_extraction_duration_seconds_count") == 1


def test_metrics_can_be_switched_off(make_settings, serve_searcher):
    base = serve_searcher(make_settings(metrics={"enabled": False}))
    assert httpx.get(f"{base}/metrics").status_code == 404


def test_request_id_is_echoed_when_sane_and_made_when_not(make_settings, serve_searcher):
    base = serve_searcher(make_settings())
    given = httpx.get(f"{base}/v1/health", headers={"X-Request-ID": "abc-123.x"})
    assert given.headers["x-request-id"] == "abc-123.x"
    for bad in ("a b", "x" * 200, "é"):
        made = httpx.get(f"{base}/v1/health", headers={"X-Request-ID": bad.encode()})
        assert re.fullmatch(r"[0-9a-f]{32}", made.headers["x-request-id"])


def access_lines(caplog: pytest.LogCaptureFixture) -> list[dict]:
    return [json.loads(r.getMessage()) for r in caplog.records if r.name == "searcher.access"]


@pytest.mark.parametrize("queries", [False, True])
def test_one_json_access_line_per_request(make_settings, caplog, queries):
    caplog.set_level(logging.INFO, logger="searcher.access")
    app = create_app(make_settings(logging={"queries": queries}))
    with ThreadedServer(app, lifespan="on") as server:  # stopped: every line is written
        httpx.post(
            f"{server.base_url}/v1/search", json={"query": "cloud gaming"},
            headers={"X-Request-ID": "req-1"},
        )  # fmt: skip
    (line,) = [entry for entry in access_lines(caplog) if entry["request_id"] == "req-1"]
    assert line["route"] == "/v1/search" and line["method"] == "POST"
    assert line["status"] == 200 and line["latency_ms"] > 0
    assert line["backends"] == ["searxng"] and line["mode"] == "simple"
    assert ("query" in line) is queries
    if queries:
        assert line["query"] == "cloud gaming"


def test_access_lines_are_written_off_the_request_complete_and_in_order(make_settings, caplog):
    """The lines are written by the access log's own thread, not the one serving requests;
    a clean stop writes every one of them, whole, in the order the requests ended."""
    caplog.set_level(logging.INFO, logger="searcher.access")
    ids = [f"order-{n:03d}" for n in range(60)]
    app = create_app(make_settings())
    with ThreadedServer(app, lifespan="on") as server, httpx.Client() as client:
        for rid in ids:
            headers = {"X-Request-ID": rid}
            assert client.get(f"{server.base_url}/v1/health", headers=headers).is_success
    records = [r for r in caplog.records if r.name == "searcher.access"]
    assert {r.threadName for r in records} == {WRITER_THREAD}
    lines = [entry for entry in access_lines(caplog) if entry["request_id"] in ids]
    assert [entry["request_id"] for entry in lines] == ids
    assert all(entry["route"] == "/v1/health" and entry["status"] == 200 for entry in lines)


def test_a_full_queue_holds_the_request_back_and_loses_no_line(caplog):
    """With room for two lines, a burst of 500 waits for the writer: all 500 arrive, in
    order, by the time ``close`` returns."""
    caplog.set_level(logging.INFO, logger="searcher.access")
    writer = AccessLogWriter(max_pending=2)
    for n in range(500):
        writer.write(AccessEntry(time.time(), f"burst-{n}", None, None, "GET", "/x", "/x",
                                 200, 0.001, {"n": n}))  # fmt: skip
    writer.close()
    assert [entry["n"] for entry in access_lines(caplog)] == list(range(500))
    writer.write(AccessEntry(time.time(), "late", None, None, "GET", "/x", "/x", 200, 0.0, {}))
    assert access_lines(caplog)[-1]["request_id"] == "late"  # after close: written at once


def test_two_workers_report_their_sum(config_file, tmp_path: Path):
    """`serve --workers 2`: whichever worker answers the scrape, it reports both workers'
    searches (prometheus_client's multiprocess mode)."""
    port = free_port()
    # Its own temporary folder, to see the metrics folder the run makes go with it.
    scratch = tmp_path / "tmp"
    scratch.mkdir()
    env = {**os.environ, "PYTHONPATH": str(Path(__file__).resolve().parents[1]),
           "TMPDIR": str(scratch)}  # fmt: skip
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    # A config in a folder whose name holds the path separator: the workers read it whole.
    config = tmp_path / "x:y" / "searcher.yaml"
    config.parent.mkdir()
    config.write_text(Path(config_file()).read_text())
    server = subprocess.Popen(
        [sys.executable, "-m", "searcher", "serve", "--workers", "2", "--port", str(port),
         "--config", str(config)],
        env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    base = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 60
        while True:
            try:
                if httpx.get(f"{base}/v1/health", timeout=2).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            assert time.monotonic() < deadline, "serve --workers 2 did not become ready"
            time.sleep(0.2)
        n = 8
        with httpx.Client(timeout=20) as client:
            for _ in range(n):  # a new connection each: both workers get some
                client.headers["connection"] = "close"
                body = {"query": "cloud gaming", "constraints": {"cache": "off"}}
                assert client.post(f"{base}/v1/search", json=body).is_success
            counts = {
                sample(client.get(f"{base}/metrics").text, "searcher_searches_total", mode="simple")
                for _ in range(6)
            }
        assert counts == {n}
    finally:
        server.terminate()
        server.wait(timeout=30)
    assert not list(scratch.glob("searcher-metrics-*"))


def test_a_metrics_folder_workers_cannot_use_is_refused_at_start(config_file, tmp_path: Path):
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path / "nowhere")}
    started = subprocess.run(
        [sys.executable, "-m", "searcher", "serve", "--workers", "2", "--port",
         str(free_port()), "--config", config_file()],
        env=env, capture_output=True, text=True, timeout=60, check=False,
    )  # fmt: skip
    assert started.returncode == 2, started.stderr
    assert "PROMETHEUS_MULTIPROC_DIR" in started.stderr and "Traceback" not in started.stderr


def test_a_worker_that_cannot_build_its_app_stops_the_server(tmp_path: Path):
    # The workers read a config the parent never did (gone, here): each exits with
    # uvicorn's start-up failure, which stops the parent, instead of being restarted
    # without end while nothing answers. (The supervisor's health check, 60 s, is
    # shortened here: it bounds how soon the parent notices.)
    script = (
        "import searcher.api.http_server as h\n"
        "from searcher.config import ServerSettings\n"
        "h.WORKER_HEALTHCHECK_S = 5\n"
        f"print('served', h.run_server('searcher.api.app:create_worker_app', "
        f"ServerSettings(port={free_port()}), 2))\n"
    )
    env = {**os.environ, "SEARCHER_CONFIG": str(tmp_path / "gone.yaml")}
    env.pop("PROMETHEUS_MULTIPROC_DIR", None)
    ran = subprocess.run([sys.executable, "-c", script], env=env, capture_output=True,
                         text=True, timeout=120, check=False)  # fmt: skip
    assert "served False" in ran.stdout, ran.stdout + ran.stderr
    assert "the worker cannot start" in ran.stderr and "gone.yaml" in ran.stderr
