"""``searcher serve`` bounds every connection: header size (431, pipelined requests too),
header and body read time (408), connection count (503), body size (413, and the connection
closes), MCP streams (none left open). What it refuses itself is JSON with an access line;
requests cut off by a shutdown get a JSON 503; every worker writes access lines.

A real ``python -m searcher serve`` subprocess on a free loopback port, spoken to over raw
sockets. The only time bounds are generous ones that prove "closed", never "fast".
"""

from __future__ import annotations

import contextlib
import json
import select
import signal
import socket
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from tests.ports import free_port

CLOSED_WITHIN_S = 30.0  # far above the configured timeouts: proves closing, not speed


def _until(condition: Callable[[], Any], what: str, within: float = CLOSED_WITHIN_S) -> Any:
    """Poll ``condition`` until it is truthy (returned), failing after ``within`` s."""
    give_up = time.monotonic() + within
    while not (found := condition()):
        assert time.monotonic() < give_up, f"waited {within} s for {what}"
        time.sleep(0.05)  # polling a condition, bounded above
    return found


class Served:
    def __init__(self, proc: subprocess.Popen[bytes], port: int, log: Path) -> None:
        self.proc = proc
        self.port = port
        self.base = f"http://127.0.0.1:{port}"
        self.log = log

    def access_lines(self) -> list[dict[str, Any]]:
        """The JSON access lines written to stderr so far."""
        lines = self.log.read_text(errors="replace").splitlines()
        return [json.loads(line) for line in lines if line.startswith('{"ts"')]

    def access_line(self, **fields: Any) -> dict[str, Any]:
        """The one access line with these fields, once it is written."""

        def found() -> list[dict[str, Any]]:
            return [e for e in self.access_lines() if fields.items() <= e.items()]

        (line,) = _until(found, f"an access line with {fields}")
        return line

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=CLOSED_WITHIN_S)
        return sock

    def peak_rss_kb(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise AssertionError("no VmHWM")


@contextlib.contextmanager
def _serve(
    tmp_path: Path, server: dict[str, object], workers: int = 1, **more: Any
) -> Iterator[Served]:
    config = {
        "backends": {"duckduckgo": {"enabled": False}},
        "embeddings": {"provider": "none"},
        "fetch": {"extract_workers": 1},
        "service": {"cache": {"dir": str(tmp_path / "cache")}},
        "state": {"dir": str(tmp_path / "state")},
        "server": server,
        **more,
    }
    path = tmp_path / "searcher.yaml"
    path.write_text(yaml.safe_dump(config))
    port = free_port()
    log = tmp_path / "stderr.log"
    with log.open("wb") as stderr:
        proc = subprocess.Popen(
            [sys.executable, "-m", "searcher", "serve", "--port", str(port),
             "--workers", str(workers), "--config", str(path)],
            stdout=subprocess.DEVNULL, stderr=stderr,
        )  # fmt: skip
    served = Served(proc, port, log)
    try:
        deadline = time.monotonic() + 60
        ready = False
        while not ready and time.monotonic() < deadline and proc.poll() is None:
            try:
                ready = httpx.get(f"{served.base}/v1/health", timeout=2).status_code == 200
            except httpx.TransportError:
                time.sleep(0.1)  # polling readiness, bounded by the deadline above
        assert ready, "searcher serve did not start"
        yield served
    finally:
        proc.terminate()
        proc.wait(timeout=20)


@pytest.fixture(scope="module")
def tight(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Served]:
    """A server with a 1 s header timeout and the default 16 KB header cap."""
    with _serve(tmp_path_factory.mktemp("tight"), {"header_timeout_s": 1}) as served:
        yield served


def _head(extra: bytes = b"") -> bytes:
    return b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n" + extra


def _read_until_closed(sock: socket.socket) -> bytes:
    """Everything the server sends until it closes; a reset counts as closed."""
    data = b""
    sock.settimeout(CLOSED_WITHIN_S)
    while True:
        try:
            chunk = sock.recv(65536)
        except ConnectionResetError:
            return data
        if not chunk:
            return data
        data += chunk


def test_headers_over_16_kb_get_431_and_the_connection_closes(tight: Served) -> None:
    with tight.connect() as sock:
        sock.sendall(_head(b"X-Big: " + b"a" * 20_000 + b"\r\n\r\n"))
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 431 ")
    assert b'"headers_too_large"' in answer and b"server.max_header_bytes" in answer


def test_headers_under_the_cap_are_served(tight: Served) -> None:
    big = httpx.get(f"{tight.base}/v1/health", headers={"X-Big": "a" * 12_000}, timeout=30)
    assert big.status_code == 200


def test_a_50_mb_header_is_not_buffered_and_the_server_stays_up(tight: Served) -> None:
    before = tight.peak_rss_kb()
    sent = 0
    with tight.connect() as sock:
        sock.sendall(_head(b"X-Huge: "))
        chunk = b"a" * (1 << 20)
        try:
            while sent < 50 << 20:
                sock.sendall(chunk)
                sent += len(chunk)
        except (BrokenPipeError, ConnectionResetError):
            pass  # the server closed the connection: what this test wants
        answer = _read_until_closed(sock)
    assert answer == b"" or answer.startswith(b"HTTP/1.1 431 ")
    # The refused header was discarded as it came, not held: the peak barely moved
    # (it rose by the whole header before, 1.4 GB for four of 256 MB).
    assert tight.peak_rss_kb() - before < 20 * 1024
    assert httpx.get(f"{tight.base}/v1/health", timeout=30).status_code == 200


def test_a_connection_that_never_finishes_its_headers_is_closed(tight: Served) -> None:
    with tight.connect() as sock:
        sock.sendall(_head())  # no blank line: the headers never end
        answer = _read_until_closed(sock)
    assert answer == b"" or answer.startswith(b"HTTP/1.1 408 ")


def test_a_connection_that_sends_nothing_is_closed(tight: Served) -> None:
    with tight.connect() as sock:
        assert _read_until_closed(sock) == b""


def test_trickling_header_bytes_does_not_keep_a_connection_open(tight: Served) -> None:
    # Slowloris: a byte every 0.2 s keeps any per-read timeout from firing; the header
    # timeout counts from the first byte, so the server closes anyway.
    closed = False
    give_up = time.monotonic() + CLOSED_WITHIN_S
    with tight.connect() as sock:
        sock.sendall(_head())
        while not closed and time.monotonic() < give_up:
            try:
                sock.sendall(b"x")
            except (BrokenPipeError, ConnectionResetError):
                closed = True
                break
            readable, _, _ = select.select([sock], [], [], 0.2)
            closed = bool(readable)  # a 408, the close itself, or a reset
    assert closed, "a trickling client kept its connection open"


def test_get_mcp_opens_no_stream(tight: Served) -> None:
    # Used to open an event stream that never ended (2,000 of them: +170 MB).
    response = httpx.get(f"{tight.base}/mcp", headers={"Accept": "text/event-stream"}, timeout=30)
    assert response.status_code == 405


def test_exactly_max_connections_are_served_and_the_next_gets_503(tmp_path: Path) -> None:
    with _serve(tmp_path, {"max_connections": 4, "header_timeout_s": 60}) as served:
        idle = [served.connect() for _ in range(3)]
        try:
            # The fourth connection is the last one allowed: it is served.
            with served.connect() as last:
                last.sendall(_head(b"\r\n"))
                assert _read_head(last).startswith(b"HTTP/1.1 200 ")
                # A fifth is answered at once, before it sends anything.
                with served.connect() as extra:
                    answer = _read_until_closed(extra)
            assert answer.startswith(b"HTTP/1.1 503 ") and b"server.max_connections" in answer
            assert served.access_line(route="protocol", status=503)["path"] is None
        finally:
            for sock in idle:
                sock.close()
        # Once the idle connections are gone, requests are served again.
        give_up = time.monotonic() + CLOSED_WITHIN_S
        status = 503
        while status == 503 and time.monotonic() < give_up:
            status = httpx.get(f"{served.base}/v1/health", timeout=30).status_code
            if status == 503:
                time.sleep(0.1)  # the server has not yet seen the closes; bounded above
        assert status == 200


def _read_head(sock: socket.socket) -> bytes:
    """One response's status line and headers (the body is left unread)."""
    data = b""
    while b"\r\n\r\n" not in data:
        chunk = sock.recv(65536)
        assert chunk, f"closed before a whole response head: {data!r}"
        data += chunk
    return data


def _json_body(answer: bytes) -> Any:
    head, _, body = answer.partition(b"\r\n\r\n")
    assert b"content-type: application/json" in head.lower(), head
    return json.loads(body)


def test_a_pipelined_request_with_oversized_headers_gets_431(tight: Served) -> None:
    big = _head(b"X-Big: " + b"a" * 40_000 + b"\r\n\r\n")
    with tight.connect() as sock:  # after a request without a body, in the same write
        sock.sendall(_head(b"\r\n") + big)
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 200 ") and answer.count(b"HTTP/1.1 ") == 2
    assert b"HTTP/1.1 431 " in answer and b"HTTP/1.1 200 " not in answer.split(b"431")[1]
    with tight.connect() as sock:  # after a request with a body
        post = b"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n\r\n{}"
        sock.sendall(post + big)
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 422 ") and b"HTTP/1.1 431 " in answer


@pytest.mark.parametrize(
    "request_",
    [
        b"FOOBAR /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n",
        b"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: 2\r\n"
        b"Content-Length: 5\r\n\r\n{}",
        b"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Length: +2\r\n\r\n{}",
        b"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\nTransfer-Encoding: chunked\r\n"
        b"Content-Length: 2\r\n\r\n2\r\n{}\r\n0\r\n\r\n",
        b"GET /v1/health HTTP/1.1\r\nHost: 127.0.\x001\r\n\r\n",
    ],
    ids=["method", "two-content-lengths", "signed-content-length", "cl-and-te", "nul"],
)
def test_requests_the_parser_refuses_get_a_json_400_and_an_access_line(
    tight: Served, request_: bytes
) -> None:
    with tight.connect() as sock:
        sock.sendall(request_)
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 400 ")
    error = _json_body(answer)["error"]
    assert error["type"] == "bad_request" and error["message"].startswith("invalid HTTP request")
    assert _until(lambda: [e for e in tight.access_lines() if e["status"] == 400], "a 400 line")
    assert b"WARNING" not in tight.log.read_bytes()


def test_a_bad_chunk_after_the_headers_gets_a_json_400_logged_once(tight: Served) -> None:
    with tight.connect() as sock:
        sock.sendall(
            b"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-ID: bad-chunk\r\n"
            b"Transfer-Encoding: chunked\r\n\r\nzz\r\n{}\r\n0\r\n\r\n"
        )
        answer = _read_until_closed(sock)
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert _json_body(answer)["error"]["type"] == "bad_request"
    line = tight.access_line(request_id="bad-chunk")
    assert line["status"] == 400 and line["route"] == "/v1/search"


def test_refused_headers_are_logged(tight: Served) -> None:
    def refused() -> list[dict[str, Any]]:
        return [e for e in tight.access_lines() if e["route"] == "protocol" and e["status"] == 431]

    before = len(refused())
    with tight.connect() as sock:
        sock.sendall(b"GET /v1/too-big?x=1 HTTP/1.1\r\nX-Big: " + b"a" * 20_000)
        assert _read_until_closed(sock).startswith(b"HTTP/1.1 431 ")
    _until(lambda: len(refused()) == before + 1, "one more 431 line")
    assert refused()[-1]["method"] is None  # the head was never parsed


def test_a_stalled_body_gets_408_and_is_logged_as_408(tmp_path: Path) -> None:
    with _serve(tmp_path, {"body_timeout_s": 1}) as served:
        with served.connect() as sock:
            sock.sendall(
                b"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\nX-Request-ID: stalled\r\n"
                b'Content-Type: application/json\r\nContent-Length: 13\r\n\r\n{"qu'
            )
            answer = _read_until_closed(sock)
        assert answer.startswith(b"HTTP/1.1 408 ")
        assert _json_body(answer)["error"]["type"] == "timeout"
        assert served.access_line(request_id="stalled")["status"] == 408
        metrics = httpx.get(f"{served.base}/metrics", timeout=30).text
        assert 'route="/v1/search",status="408"' in metrics
        assert 'route="/v1/search",status="422"' not in metrics


@pytest.mark.parametrize("framing", ["content-length", "chunked"])
def test_a_413_closes_the_connection(tmp_path: Path, framing: str) -> None:
    # The body timeout is far above the wait: only the 413 can have closed it.
    server = {"max_body_bytes": 1024, "body_timeout_s": 600}
    with _serve(tmp_path, server) as served, served.connect() as sock:
        sock.settimeout(10)
        head = b"POST /v1/search HTTP/1.1\r\nHost: 127.0.0.1\r\n"
        if framing == "chunked":
            head += b"Transfer-Encoding: chunked\r\n\r\n" + b"400\r\n" + b" " * 1024 + b"\r\n"
            body = b"400\r\n" + b" " * 1024 + b"\r\n"
        else:
            head += b"Content-Length: 1000000000\r\n\r\n"
            body = b" " * 1024
        sock.sendall(head + body * 4)
        answer = _read_until_closed(sock)  # before, it read on for body_timeout_s
    assert answer.startswith(b"HTTP/1.1 413 ") and b"connection: close" in answer.lower()


def test_a_request_cut_off_by_shutdown_gets_a_json_503(tmp_path: Path, testbed: Any) -> None:
    searxng = {"base_url": testbed.searxng_url("slow/15000"), "timeout_s": 30}
    backends = {"order": ["searxng"], "searxng": searxng, "duckduckgo": {"enabled": False}}
    # A short grace: the request is cut off when it ends, not 10 s (the default) later.
    with _serve(tmp_path, {"shutdown_grace_s": 1}, backends=backends) as served:
        answers: list[httpx.Response] = []
        body = {"query": "cloud gaming", "budget": {"max_total_time_ms": 20_000}}

        def search() -> None:
            answers.append(httpx.post(f"{served.base}/v1/search", json=body,
                                      headers={"X-Request-ID": "cut-off"}, timeout=60))  # fmt: skip

        client = threading.Thread(target=search)
        client.start()
        _until(lambda: any("/searxng/slow/" in r.path for r in testbed.log), "the backend call")
        served.proc.send_signal(signal.SIGTERM)
        client.join(timeout=60)
        assert answers, "no answer"
        assert answers[0].status_code == 503
        assert answers[0].json()["error"]["type"] == "shutting_down"
        assert answers[0].headers["connection"] == "close"
        served.proc.wait(timeout=30)
        assert served.access_line(request_id="cut-off")["status"] == 503
        assert b"CancelledError" not in served.log.read_bytes()


@pytest.mark.parametrize("workers", [1, 2])
def test_every_worker_writes_one_access_line_per_request(tmp_path: Path, workers: int) -> None:
    with _serve(tmp_path, {}, workers=workers) as served:
        ids = [f"worker-test-{n}" for n in range(6)]
        for rid in ids:  # a connection each: both workers get some
            headers = {"X-Request-ID": rid, "Connection": "close"}
            assert httpx.get(f"{served.base}/v1/health", headers=headers, timeout=30).is_success
        for rid in ids:
            served.access_line(request_id=rid)  # exactly one each


# An ASGI app that prints the process's collector thresholds once it has started, then
# asks its server to stop: what a search served by that process runs under.
_THRESHOLDS_APP = """
import gc, os, signal

async def app(scope, receive, send):
    assert scope["type"] == "lifespan"
    await receive()
    print("thresholds", gc.get_threshold(), flush=True)
    await send({"type": "lifespan.startup.complete"})
    os.kill(os.getpid(), signal.SIGINT)
    await receive()
    await send({"type": "lifespan.shutdown.complete"})
"""


@pytest.mark.parametrize("path", ["one process", "worker"])
def test_a_serving_process_collects_garbage_in_batches(tmp_path: Path, path: str) -> None:
    (tmp_path / "thresholds_app.py").write_text(_THRESHOLDS_APP)
    if path == "one process":  # run_server, as `serve` with one worker calls it
        script = (
            "import thresholds_app, searcher.api.http_server as h\n"
            "from searcher.config import ServerSettings\n"
            f"h.run_server(thresholds_app.app, ServerSettings(port={free_port()}))\n"
        )
    else:  # the factory each worker of `serve --workers N` builds its app with
        script = "import gc, searcher.api.app as a\na.create_worker_app()\n"
        script += "print('thresholds', gc.get_threshold(), flush=True)\n"
    (tmp_path / "searcher.yaml").write_text("backends: {order: [searxng]}\n")
    env = {"PATH": "/usr/bin:/bin", "SEARCHER_CONFIG": str(tmp_path / "searcher.yaml"),
           "PYTHONPATH": f"{tmp_path}:{Path(__file__).parents[1]}"}  # fmt: skip
    ran = subprocess.run([sys.executable, "-c", script], env=env, cwd=tmp_path,
                         capture_output=True, text=True, timeout=120, check=False)  # fmt: skip
    assert "thresholds (10000, 10, 10)" in ran.stdout, ran.stdout + ran.stderr
