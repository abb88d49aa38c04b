"""A real ``redis-server`` (Debian package ``redis-server``) on a free loopback port.

No mock and no fakeredis stands in for Redis: the tests that need it start this one.
"""

from __future__ import annotations

import shutil
import subprocess
import tempfile
import time

import redis

from tests.ports import free_port

START_TIMEOUT_S = 10.0


class RedisServer:
    """``with RedisServer() as server: server.url``; stopped (killed) on exit."""

    def __init__(self) -> None:
        self.port = free_port()
        self.url = f"redis://127.0.0.1:{self.port}/0"
        self._dir = tempfile.mkdtemp(prefix="searcher-redis-")
        self._process: subprocess.Popen[bytes] | None = None

    def start(self) -> RedisServer:
        binary = shutil.which("redis-server")
        if binary is None:
            raise RuntimeError(
                "redis-server is not installed (apt-get install -y redis-server; .ci/run does)"
            )
        self._process = subprocess.Popen(
            [binary, "--port", str(self.port), "--bind", "127.0.0.1", "--save", "",
             "--appendonly", "no", "--dir", self._dir],
            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
        )  # fmt: skip
        client = redis.Redis(port=self.port, socket_connect_timeout=0.2, socket_timeout=0.5)
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            while True:  # readiness poll with a deadline, not a sleep and a hope
                try:
                    client.ping()
                    return self
                except redis.ConnectionError:
                    if self._process.poll() is not None or time.monotonic() > deadline:
                        raise RuntimeError(f"redis-server did not start on {self.port}") from None
                    time.sleep(0.02)
        finally:
            client.close()

    def stop(self) -> None:
        """Shut down as a Redis that persists its data does (``SHUTDOWN SAVE``): a later
        ``start`` on the same port loads what it held, expiry times included."""
        client = redis.Redis(port=self.port, socket_timeout=5)
        try:
            client.shutdown(save=True)
        except redis.ConnectionError:
            pass  # the server closes the connection as it goes
        finally:
            client.close()
        if self._process is not None:
            self._process.wait(timeout=30)

    def kill(self) -> None:
        if self._process is not None and self._process.poll() is None:
            self._process.kill()
            self._process.wait(timeout=10)

    def __enter__(self) -> RedisServer:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.kill()
        shutil.rmtree(self._dir, ignore_errors=True)


def flush(url: str) -> None:
    client = redis.Redis.from_url(url)
    try:
        client.flushdb()
    finally:
        client.close()


def closed_port_url() -> str:
    """A Redis URL where nothing listens."""
    return f"redis://127.0.0.1:{free_port()}/0"


__all__ = ["RedisServer", "closed_port_url", "flush", "free_port"]
