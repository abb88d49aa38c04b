"""The SSRF guard's decisions, taken before any connection is made.

No test here sends a packet: addresses other than 127.0.0.1 are only ever judged, and the
network backend's connections go to a recording fake of httpcore's backend interface.
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence

import httpcore
import httpx
import pytest

from searcher.errors import FetchBlocked
from searcher.fetch.guard import (
    INVALID_HOST_NAME,
    GuardedNetworkBackend,
    check_destination,
    guarded_transport,
    is_public_ip,
)

PUBLIC = [
    "8.8.8.8",
    "1.1.1.1",
    "93.184.216.34",
    "2606:4700::1111",
    "2001:4860:4860::8888",
    "::ffff:8.8.8.8",  # IPv4-mapped public address: judged as the IPv4 host
    "2002:808:808::1",  # 6to4 wrapping a public address
    "64:ff9b::808:808",  # NAT64 of a public address
]

NOT_PUBLIC = [
    "10.0.0.1",
    "172.16.5.4",
    "192.168.1.1",
    "127.0.0.1",
    "127.0.0.2",
    "0.0.0.0",
    "169.254.1.1",  # link-local
    "169.254.169.254",  # cloud metadata
    "169.254.170.2",  # ECS task metadata
    "100.100.100.200",  # Alibaba metadata
    "168.63.129.16",  # Azure wire server
    "100.64.0.1",  # shared address space (carrier-grade NAT)
    "224.0.0.1",  # multicast
    "239.255.255.250",
    "240.0.0.1",  # reserved
    "255.255.255.255",
    "192.0.2.1",  # documentation
    "198.18.0.1",  # benchmarking
    "::1",
    "::",
    "fe80::1",
    "fe80::1%eth0",
    "fc00::1",
    "fd00:ec2::254",  # AWS metadata over IPv6
    "ff02::1",
    "fec0::1",  # site-local (deprecated)
    "2001:db8::1",
    "::ffff:10.0.0.1",  # IPv4-mapped private
    "::ffff:127.0.0.1",
    "::ffff:169.254.169.254",
    "2002:a00:1::1",  # 6to4 wrapping 10.0.0.1
    "2002:7f00:1::1",  # 6to4 wrapping 127.0.0.1
    "2001:0:4136:e378:8000:63bf:f5ff:fffe",  # Teredo
    "64:ff9b::a00:1",  # NAT64 of 10.0.0.1
    "::a00:1",  # IPv4-compatible (deprecated)
    "not an address",
    "",
]


@pytest.mark.parametrize("ip", PUBLIC)
def test_public_addresses_are_allowed(ip: str) -> None:
    assert is_public_ip(ip)


@pytest.mark.parametrize("ip", NOT_PUBLIC)
def test_non_public_addresses_are_refused(ip: str) -> None:
    assert not is_public_ip(ip)


def test_bracketed_ipv6_literal_is_understood() -> None:
    assert is_public_ip("[2606:4700::1111]")
    assert not is_public_ip("[::1]")


def test_check_destination_passes_public_addresses() -> None:
    check_destination("example.com", 443, ["93.184.216.34", "2606:2800:220:1::1"], frozenset())


@pytest.mark.parametrize(
    "addresses",
    [["10.0.0.1"], ["93.184.216.34", "10.0.0.1"], ["169.254.169.254"], ["::1"], []],
)
def test_check_destination_refuses_unless_every_address_is_public(addresses: list[str]) -> None:
    with pytest.raises(FetchBlocked) as info:
        check_destination("evil.example", 80, addresses, frozenset())
    assert info.value.skip_reason == "blocked"
    assert info.value.url == "evil.example"


def test_check_destination_does_not_reveal_the_resolved_address() -> None:
    with pytest.raises(FetchBlocked) as info:
        check_destination("metadata.example", 80, ["169.254.169.254"], frozenset())
    assert info.value.reason == "refused: not a public address"
    assert "169.254" not in str(info.value)


def test_allow_listed_host_passes_whatever_it_resolves_to() -> None:
    allowed = frozenset({"intranet.local", "127.0.0.1:8080"})
    check_destination("intranet.local", 80, ["10.0.0.1"], allowed)
    check_destination("INTRANET.LOCAL.", 443, ["10.0.0.1"], allowed)  # case, trailing dot
    check_destination("127.0.0.1", 8080, ["127.0.0.1"], allowed)


def test_host_port_entry_allows_only_that_port() -> None:
    allowed = frozenset({"127.0.0.1:8080"})
    with pytest.raises(FetchBlocked):
        check_destination("127.0.0.1", 8081, ["127.0.0.1"], allowed)
    with pytest.raises(FetchBlocked):
        check_destination("localhost", 8080, ["127.0.0.1"], allowed)


def test_allow_listed_ipv6_host_port() -> None:
    check_destination("::1", 8080, ["::1"], frozenset({"[::1]:8080"}))


# --- the network backend ---------------------------------------------------------------


class RecordingBackend(httpcore.AsyncNetworkBackend):
    """A fake of httpcore's network backend that records connections and makes none."""

    def __init__(self) -> None:
        self.connects: list[tuple[str, int]] = []
        self.slept: list[float] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.connects.append((host, port))
        return httpcore.AsyncMockStream([])

    async def sleep(self, seconds: float) -> None:
        self.slept.append(seconds)


class FixedResolver:
    """A resolver with fixed answers that records the names it was asked for."""

    def __init__(self, answers: dict[str, Sequence[str]]) -> None:
        self.answers = answers
        self.calls: list[str] = []

    async def __call__(self, host: str, port: int) -> Sequence[str]:
        self.calls.append(host)
        if host not in self.answers:
            raise OSError(f"no such host {host}")
        return self.answers[host]


@pytest.mark.parametrize("address", ["10.0.0.1", "169.254.169.254", "fd00:ec2::254", "::1"])
async def test_backend_refuses_before_connecting(address: str) -> None:
    inner = RecordingBackend()
    resolver = FixedResolver({"internal.example": [address]})
    backend = GuardedNetworkBackend(frozenset(), resolver=resolver, inner=inner)
    with pytest.raises(FetchBlocked):
        await backend.connect_tcp("internal.example", 80)
    assert inner.connects == []


async def test_backend_refuses_ip_literal_without_lookup() -> None:
    inner = RecordingBackend()
    resolver = FixedResolver({})
    backend = GuardedNetworkBackend(frozenset(), resolver=resolver, inner=inner)
    with pytest.raises(FetchBlocked):
        await backend.connect_tcp("169.254.169.254", 80)
    assert resolver.calls == []
    assert inner.connects == []


async def test_backend_refuses_when_any_address_is_private() -> None:
    inner = RecordingBackend()
    resolver = FixedResolver({"mixed.example": ["93.184.216.34", "10.0.0.1"]})
    backend = GuardedNetworkBackend(frozenset(), resolver=resolver, inner=inner)
    with pytest.raises(FetchBlocked):
        await backend.connect_tcp("mixed.example", 443)
    assert inner.connects == []


async def test_backend_connects_to_the_vetted_address_not_the_name() -> None:
    inner = RecordingBackend()
    resolver = FixedResolver({"public.example": ["93.184.216.34"]})
    backend = GuardedNetworkBackend(frozenset(), resolver=resolver, inner=inner)
    await backend.connect_tcp("public.example", 443)
    # Pinned: the name is resolved once, by the guard; the connection goes to the address.
    assert inner.connects == [("93.184.216.34", 443)]
    assert resolver.calls == ["public.example"]


async def test_backend_lets_allow_listed_hosts_connect_normally() -> None:
    inner = RecordingBackend()
    resolver = FixedResolver({})
    backend = GuardedNetworkBackend(["Intranet.Local"], resolver=resolver, inner=inner)
    await backend.connect_tcp("intranet.local", 8080)
    assert inner.connects == [("intranet.local", 8080)]
    assert resolver.calls == []


async def test_unresolvable_host_is_a_connect_error() -> None:
    backend = GuardedNetworkBackend(
        frozenset(), resolver=FixedResolver({}), inner=RecordingBackend()
    )
    with pytest.raises(httpcore.ConnectError):
        await backend.connect_tcp("nowhere.example", 80)


@pytest.mark.parametrize("host", ["a..b", "a" * 64 + ".example"])
async def test_a_name_the_resolver_cannot_encode_is_a_connect_error(host: str) -> None:
    # The system resolver: it refuses these names before asking any DNS server.
    inner = RecordingBackend()
    backend = GuardedNetworkBackend(frozenset(), inner=inner)
    with pytest.raises(httpcore.ConnectError, match=INVALID_HOST_NAME):
        await backend.connect_tcp(host, 80)
    assert inner.connects == []


async def test_an_allow_listed_ip_with_a_trailing_dot_connects_to_the_ip() -> None:
    inner = RecordingBackend()
    backend = GuardedNetworkBackend(["127.0.0.1:8080"], inner=inner)
    await backend.connect_tcp("127.0.0.1.", 8080)
    assert inner.connects == [("127.0.0.1", 8080)]


async def test_unix_sockets_are_refused() -> None:
    backend = GuardedNetworkBackend(frozenset(), inner=RecordingBackend())
    with pytest.raises(FetchBlocked):
        await backend.connect_unix_socket("/var/run/docker.sock")


async def test_sleep_is_delegated() -> None:
    inner = RecordingBackend()
    await GuardedNetworkBackend(frozenset(), inner=inner).sleep(0.5)
    assert inner.slept == [0.5]


async def test_transport_surfaces_the_refusal_as_fetch_blocked() -> None:
    inner = RecordingBackend()
    resolver = FixedResolver({"internal.example": ["10.0.0.1"]})
    transport = guarded_transport(frozenset(), resolver=resolver, inner=inner)
    async with httpx.AsyncClient(transport=transport) as client:
        with pytest.raises(FetchBlocked):
            await client.get("http://internal.example/")
        with pytest.raises(FetchBlocked):
            await client.get("https://[::1]:8443/")
    assert inner.connects == []


async def test_transport_ignores_proxy_environment(monkeypatch: pytest.MonkeyPatch) -> None:
    # A proxy would connect on our behalf, past the guard.
    monkeypatch.setenv("HTTP_PROXY", "http://93.184.216.34:3128")
    monkeypatch.setenv("ALL_PROXY", "http://93.184.216.34:3128")
    inner = RecordingBackend()
    resolver = FixedResolver({"internal.example": ["10.0.0.1"]})
    transport = guarded_transport(frozenset(), resolver=resolver, inner=inner)
    async with httpx.AsyncClient(transport=transport, trust_env=True) as client:
        with pytest.raises(FetchBlocked):
            await client.get("http://internal.example/")
    assert inner.connects == []
