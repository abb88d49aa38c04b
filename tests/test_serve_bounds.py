"""``searcher serve`` bounds every connection: header size (431), header read time (slow
and trickling clients are closed), connection count (503), MCP streams (none left open).

A real ``python -m searcher serve`` subprocess on a free loopback port, spoken to over raw
sockets. The only time bounds are generous ones that prove "closed", never "fast".
"""

from __future__ import annotations

import contextlib
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
import yaml

CLOSED_WITHIN_S = 30.0  # far above the configured timeouts: proves closing, not speed


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


class Served:
    def __init__(self, proc: subprocess.Popen[bytes], port: int) -> None:
        self.proc = proc
        self.port = port
        self.base = f"http://127.0.0.1:{port}"

    def connect(self) -> socket.socket:
        sock = socket.create_connection(("127.0.0.1", self.port), timeout=CLOSED_WITHIN_S)
        return sock

    def peak_rss_kb(self) -> int:
        for line in Path(f"/proc/{self.proc.pid}/status").read_text().splitlines():
            if line.startswith("VmHWM:"):
                return int(line.split()[1])
        raise AssertionError("no VmHWM")


@contextlib.contextmanager
def _serve(tmp_path: Path, server: dict[str, object]) -> Iterator[Served]:
    config = {
        "backends": {"duckduckgo": {"enabled": False}},
        "embeddings": {"provider": "none"},
        "fetch": {"extract_workers": 1},
        "service": {"cache": {"dir": str(tmp_path / "cache")}},
        "server": server,
    }
    path = tmp_path / "searcher.yaml"
    path.write_text(yaml.safe_dump(config))
    port = _free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "searcher", "serve", "--port", str(port), "--config", str(path)],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    served = Served(proc, port)
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


def test_connections_beyond_the_limit_get_503(tmp_path: Path) -> None:
    with _serve(tmp_path, {"max_connections": 4, "header_timeout_s": 60}) as served:
        idle = [served.connect() for _ in range(3)]
        try:
            # The fourth connection is answered at once, before it sends anything.
            with served.connect() as extra:
                answer = _read_until_closed(extra)
            assert answer.startswith(b"HTTP/1.1 503 ") and b"server.max_connections" in answer
            refused = httpx.get(f"{served.base}/v1/health", timeout=30)
            assert refused.status_code == 503
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
