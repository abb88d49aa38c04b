"""What ``searcher serve``'s connection bounds cost and what they stop (issue 11, part 5).

The same app (searcher's, DuckDuckGo off, no embedder) under plain uvicorn (httptools, its
defaults) and under ``searcher serve`` (the bounded protocol, Host check, limits), each in
its own process on 127.0.0.1:

1. Cost: wrk, 32 connections, 5 s on ``GET /v1/health``, three interleaved rounds:
   requests/s and p50/p99 of each.
2. Slow headers: 300 connections send half a request and stop; after the header timeout
   (2 s here) and 3 s more, how many has each server closed?
3. A 50 MB header: the growth of each server's peak resident memory (VmHWM).

    python -m bench.server_bounds
"""

from __future__ import annotations

import argparse
import contextlib
import select
import shutil
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import yaml

from bench import wrk
from bench.processes import REPO, free_port, peak_memory_kb, wait_ready

CONFIG = {
    "backends": {"duckduckgo": {"enabled": False}},
    "embeddings": {"provider": "none"},
    "service": {"cache": {"enabled": False}},
    "server": {"header_timeout_s": 2},
}
SLOW_CLIENTS = 300
HEAD = b"GET /v1/health HTTP/1.1\r\nHost: 127.0.0.1\r\n"


def serve_plain(config_path: str, port: int) -> None:
    """The app under plain uvicorn, as ``searcher serve`` ran it before these bounds."""
    import uvicorn

    from searcher.api.app import create_app
    from searcher.config import load_settings

    uvicorn.run(create_app(load_settings(config_path)), host="127.0.0.1", port=port,
                log_level="warning", http="httptools")  # fmt: skip


@contextlib.contextmanager
def server(kind: str, config_path: str) -> Iterator[tuple[str, int]]:
    """(base URL, pid) of a running server of ``kind``: plain or bounded."""
    port = free_port()
    if kind == "plain":
        args = [sys.executable, "-m", "bench.server_bounds", "--serve-plain", config_path,
                "--port", str(port)]  # fmt: skip
    else:
        args = [sys.executable, "-m", "searcher", "serve", "--config", config_path,
                "--port", str(port)]  # fmt: skip
    proc = subprocess.Popen(args, cwd=REPO, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        wait_ready(f"{base}/v1/health", timeout=90)
        yield base, proc.pid
    finally:
        proc.terminate()
        proc.wait(timeout=20)


def load(base: str, seconds: int) -> tuple[float, float, float]:
    """requests/s, p50 ms, p99 ms."""
    report = wrk.run(f"{base}/v1/health", seconds=seconds, connections=32)
    return (
        wrk.requests_per_s(report),
        wrk.latency_ms(report, "50%"),
        wrk.latency_ms(report, "99%"),
    )


def slow_headers(base: str) -> int:
    """How many of SLOW_CLIENTS half-sent requests the server has closed 5 s later."""
    port = int(base.rsplit(":", 1)[1])
    socks = []
    for _ in range(SLOW_CLIENTS):
        sock = socket.create_connection(("127.0.0.1", port), timeout=10)
        sock.sendall(HEAD)
        socks.append(sock)
    time.sleep(5)  # header timeout 2 s, plus margin
    closed = 0
    for sock in socks:
        readable, _, _ = select.select([sock], [], [], 0)
        if readable:
            try:
                data = sock.recv(65536)
                closed += data == b"" or data.startswith(b"HTTP/1.1 408")
            except ConnectionResetError:
                closed += 1
        sock.close()
    return closed


def huge_header(base: str, pid: int) -> float:
    """Growth of the server's peak memory, MB, from one 50 MB header."""
    port = int(base.rsplit(":", 1)[1])
    before = peak_memory_kb(pid)
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(HEAD + b"X-Huge: ")
        with contextlib.suppress(OSError):
            for _ in range(50):
                sock.sendall(b"a" * (1 << 20))
            sock.sendall(b"\r\n\r\n")
            sock.recv(100)
    time.sleep(1)
    return (peak_memory_kb(pid) - before) / 1024


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--serve-plain", metavar="CONFIG")
    parser.add_argument("--port", type=int)
    parser.add_argument("--seconds", type=int, default=5)
    args = parser.parse_args()
    if args.serve_plain:
        serve_plain(args.serve_plain, args.port)
        return
    if shutil.which("wrk") is None:
        sys.exit("wrk is needed (Debian package wrk)")
    with tempfile.TemporaryDirectory() as tmp:
        path = Path(tmp) / "searcher.yaml"
        path.write_text(yaml.safe_dump(CONFIG))
        with server("plain", str(path)) as plain, server("bounded", str(path)) as bounded:
            runs: dict[str, list[tuple[float, float, float]]] = {"plain": [], "bounded": []}
            for _ in range(3):
                for name, (base, _pid) in (("plain", plain), ("bounded", bounded)):
                    runs[name].append(load(base, args.seconds))
            print("1. GET /v1/health, wrk -c32, 3 interleaved rounds (medians)")
            for name, rows in runs.items():
                rps = statistics.median(r[0] for r in rows)
                p50 = statistics.median(r[1] for r in rows)
                p99 = statistics.median(r[2] for r in rows)
                print(f"   {name:8s} {rps:8.0f} req/s   p50 {p50:6.2f} ms   p99 {p99:6.2f} ms")
            ratio = statistics.median(r[0] for r in runs["bounded"]) / statistics.median(
                r[0] for r in runs["plain"]
            )
            print(f"   bounded / plain throughput: {ratio:.2f}")
            print(f"2. {SLOW_CLIENTS} half-sent requests, closed by the server after 5 s")
            for name, (base, _pid) in (("plain", plain), ("bounded", bounded)):
                print(f"   {name:8s} {slow_headers(base)} closed")
            print("3. one 50 MB header: growth of the server's peak memory")
            for name, (base, pid) in (("plain", plain), ("bounded", bounded)):
                print(f"   {name:8s} +{huge_header(base, pid):.0f} MB")


if __name__ == "__main__":
    main()
