"""A server that accepts connections and never answers: a model hub (or any upstream)
gone silent. Its connections are held open until it is closed."""

from __future__ import annotations

import socket
import threading
from types import TracebackType

from .server import HOST, bind


class SilentServer:
    """Listens on 127.0.0.1, accepts every connection, reads nothing, answers nothing."""

    def __init__(self, host: str = HOST) -> None:
        self._sock = bind(host)
        self._sock.listen(64)
        self._sock.settimeout(0.2)  # so the accept loop notices close()
        self._held: list[socket.socket] = []
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._accept, name="silent-server", daemon=True)
        self.accepted = 0

    @property
    def port(self) -> int:
        port: int = self._sock.getsockname()[1]
        return port

    @property
    def base_url(self) -> str:
        return f"http://{HOST}:{self.port}"

    def start(self) -> SilentServer:
        self._thread.start()
        return self

    def close(self) -> None:
        self._closed.set()
        self._thread.join(5)
        for conn in self._held:
            conn.close()
        self._sock.close()

    def _accept(self) -> None:
        while not self._closed.is_set():
            try:
                conn, _ = self._sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self._held.append(conn)
            self.accepted += 1

    def __enter__(self) -> SilentServer:
        return self.start()

    def __exit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self.close()
