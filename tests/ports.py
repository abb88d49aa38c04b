"""Ports for the servers the tests start themselves (searcher serve, Redis, SearXNG)."""

from __future__ import annotations

import random
import socket
from pathlib import Path

# Linux's default; the kernel gives every outgoing connection a local port from this range.
DEFAULT_EPHEMERAL = (32768, 60999)
LOWEST = 10_000


def ephemeral_range() -> tuple[int, int]:
    """The kernel's range of ports for outgoing connections."""
    try:
        low, high = Path("/proc/sys/net/ipv4/ip_local_port_range").read_text().split()
        return int(low), int(high)
    except (OSError, ValueError):
        return DEFAULT_EPHEMERAL


def free_port() -> int:
    """A port on 127.0.0.1 that nothing holds now, for a server to bind a moment later.

    Chosen below the ephemeral range: a port the kernel hands out (port 0) can be taken as
    the local port of any client connection in that moment, and the server then fails to
    bind it; one below the range can only be taken by another server.
    """
    low, _ = ephemeral_range()
    if low - LOWEST < 1000:  # an unusual range: let the kernel choose
        return _bound_port(0)
    for _ in range(200):
        try:
            return _bound_port(random.randrange(LOWEST, low))
        except OSError:
            continue  # held by something: another one
    return _bound_port(0)


def _bound_port(port: int) -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", port))
        return int(sock.getsockname()[1])
