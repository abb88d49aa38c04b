"""The SSRF guard: decide, before any connection is made, whether an address may be fetched.

Pages come from URLs that strangers wrote, so a result or a redirect can point at the
service's own network (a router, a database, the cloud metadata endpoint). The guard sits
in httpcore's network backend, the one place every connection passes through: it resolves
the host once, refuses unless every address is public, and connects to the vetted address
itself, so a second DNS answer (DNS rebinding) never gets a say. Each redirect hop is a new
request through the same transport and is checked the same way.
"""

from __future__ import annotations

import asyncio
import ipaddress
import logging
import socket
from collections.abc import Awaitable, Callable, Iterable, Sequence

import httpcore
import httpx

from searcher.errors import FetchBlocked
from searcher.fetch.small_reads import SmallReadBackend

log = logging.getLogger(__name__)

REFUSED_NOT_PUBLIC = "refused: not a public address"
INVALID_HOST_NAME = "invalid host name"

Resolver = Callable[[str, int], Awaitable[Sequence[str]]]
IPAddress = ipaddress.IPv4Address | ipaddress.IPv6Address

# Metadata services that hand out cloud credentials. Most already fall in link-local or
# shared space, but they are named so that a change in ``ipaddress`` cannot reopen them.
_METADATA_ADDRESSES = frozenset(
    ipaddress.ip_address(a)
    for a in (
        "169.254.169.254",  # AWS, GCP, Azure, OpenStack, DigitalOcean, ...
        "169.254.170.2",  # AWS ECS task metadata
        "fd00:ec2::254",  # AWS over IPv6
        "100.100.100.200",  # Alibaba Cloud
        "168.63.129.16",  # Azure wire server: a public-looking address inside every VM
    )
)
# Well-known NAT64 prefix: the address is the IPv4 host in its last 32 bits.
_NAT64 = ipaddress.IPv6Network("64:ff9b::/96")


def _embedded_ipv4(addr: ipaddress.IPv6Address) -> ipaddress.IPv4Address | None:
    if addr.ipv4_mapped is not None:
        return addr.ipv4_mapped
    if addr in _NAT64:
        return ipaddress.IPv4Address(int(addr) & 0xFFFFFFFF)
    if addr.sixtofour is not None:
        return addr.sixtofour
    if addr.teredo is not None:
        return addr.teredo[1]
    return None


def _is_public(addr: IPAddress) -> bool:
    if addr in _METADATA_ADDRESSES:
        return False
    if isinstance(addr, ipaddress.IPv6Address):
        embedded = _embedded_ipv4(addr)
        if embedded is not None and (addr.ipv4_mapped is not None or addr in _NAT64):
            # A mapped or NAT64 address is the IPv4 host itself; judge that host.
            return _is_public(embedded)
        if embedded is not None and not _is_public(embedded):
            return False
        if addr.is_site_local:
            return False
    # ``is_global`` alone lets multicast through (and its tables changed between Python
    # releases), hence the explicit checks.
    return addr.is_global and not (
        addr.is_private
        or addr.is_loopback
        or addr.is_link_local
        or addr.is_multicast
        or addr.is_reserved
        or addr.is_unspecified
    )


def is_public_ip(ip: str) -> bool:
    """Whether ``ip`` is an address on the public internet that a fetch may connect to."""
    try:
        addr = ipaddress.ip_address(ip.strip().removeprefix("[").removesuffix("]"))
    except ValueError:
        return False
    return _is_public(addr)


def _bare_host(host: str) -> str:
    return host.strip().lower().rstrip(".").removeprefix("[").removesuffix("]")


def normalise_allowed_hosts(hosts: Iterable[str]) -> frozenset[str]:
    """Allow-list entries in the form the guard compares: lower-case, no trailing dot."""
    return frozenset(h.strip().lower().rstrip(".") for h in hosts if h.strip())


def is_allowed(host: str, port: int, allowed_hosts: frozenset[str]) -> bool:
    """Whether ``host`` or ``host:port`` is on the allow-list (exempt from the guard)."""
    bare = _bare_host(host)
    return bool({bare, f"{bare}:{port}", f"[{bare}]", f"[{bare}]:{port}"} & allowed_hosts)


def check_destination(
    host: str, port: int, addresses: Sequence[str], allowed_hosts: frozenset[str]
) -> None:
    """Raise ``FetchBlocked`` unless the host is allow-listed or every address is public."""
    if is_allowed(host, port, allowed_hosts):
        return
    if not addresses:
        raise FetchBlocked(host, "the host has no address to check")
    for address in addresses:
        if not is_public_ip(address):
            # The caller learns only that the host was refused: naming the address would
            # hand a stranger the answers of our internal DNS. The log keeps the detail.
            log.info("guard: %s resolves to non-public address %s", host, address)
            raise FetchBlocked(host, REFUSED_NOT_PUBLIC)


def _ip_literal(host: str) -> str | None:
    bare = _bare_host(host)
    try:
        return str(ipaddress.ip_address(bare))
    except ValueError:
        return None


async def system_resolver(host: str, port: int) -> Sequence[str]:
    """The host's addresses from the operating system's resolver, without blocking the loop."""
    loop = asyncio.get_running_loop()
    infos = await loop.getaddrinfo(host, port, type=socket.SOCK_STREAM)
    return [str(info[4][0]) for info in infos]


class GuardedNetworkBackend(httpcore.AsyncNetworkBackend):
    """An httpcore network backend that vets every destination before connecting to it."""

    def __init__(
        self,
        allowed_hosts: Iterable[str],
        resolver: Resolver | None = None,
        inner: httpcore.AsyncNetworkBackend | None = None,
    ) -> None:
        self._allowed = normalise_allowed_hosts(allowed_hosts)
        self._resolve = resolver or system_resolver
        # Small reads: a body read stops within 16 KB of its byte budget (small_reads.py).
        self._inner = inner or SmallReadBackend()

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        if is_allowed(host, port, self._allowed):
            # An IP literal as the allow-list compares it: "127.0.0.1." is 127.0.0.1, which
            # the resolver, given the dotted form, would not find.
            target = _ip_literal(host) or host
            return await self._inner.connect_tcp(
                target, port, timeout, local_address, socket_options
            )
        addresses = await self._addresses(host, port, timeout)
        check_destination(host, port, addresses, self._allowed)
        return await self._connect_vetted(addresses, port, timeout, local_address, socket_options)

    async def vet(self, host: str, port: int, timeout: float | None = None) -> None:
        """Raise ``FetchBlocked`` unless a connection to ``host:port`` would be let through
        now, as ``connect_tcp`` decides, without connecting: a page cached under another
        configuration is held to this one. httpcore's ``ConnectError``/``ConnectTimeout``
        when the name cannot be resolved (nothing can be told)."""
        if is_allowed(host, port, self._allowed):
            return
        check_destination(host, port, await self._addresses(host, port, timeout), self._allowed)

    async def vetted_addresses(
        self, host: str, port: int, timeout: float | None = None
    ) -> list[str]:
        """The addresses to connect to for ``host:port``, resolved once and checked as
        ``connect_tcp`` checks them (an allow-listed host as it is named); the browser
        tier's proxy connects to these and nothing else. ``FetchBlocked`` when refused;
        httpcore's ``ConnectError``/``ConnectTimeout`` when the name does not resolve."""
        if is_allowed(host, port, self._allowed):
            return [_ip_literal(host) or host]
        addresses = await self._addresses(host, port, timeout)
        check_destination(host, port, addresses, self._allowed)
        return addresses

    async def _addresses(self, host: str, port: int, timeout: float | None) -> list[str]:
        literal = _ip_literal(host)
        if literal is not None:
            return [literal]
        try:
            async with asyncio.timeout(timeout):
                found = await self._resolve(host, port)
        except TimeoutError as exc:
            raise httpcore.ConnectTimeout(f"resolving {host} timed out") from exc
        except OSError as exc:
            raise httpcore.ConnectError(f"cannot resolve {host}: {exc}") from exc
        except UnicodeError as exc:
            # The resolver encodes the name with IDNA first; "a..b" or an over-long label
            # fails there, with a ValueError rather than an OSError.
            raise httpcore.ConnectError(f"cannot resolve {host}: {INVALID_HOST_NAME}") from exc
        return list(dict.fromkeys(found))  # de-duplicated, order kept

    async def _connect_vetted(
        self,
        addresses: Sequence[str],
        port: int,
        timeout: float | None,
        local_address: str | None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None,
    ) -> httpcore.AsyncNetworkStream:
        # Connect to the vetted address itself, never the name: a second lookup could
        # answer differently. TLS still verifies the original name (httpcore passes it as
        # server_hostname in start_tls).
        options = list(socket_options) if socket_options is not None else None
        last_error: Exception | None = None
        for address in addresses:
            try:
                return await self._inner.connect_tcp(address, port, timeout, local_address, options)
            except (httpcore.ConnectError, httpcore.ConnectTimeout) as exc:
                last_error = exc
        assert last_error is not None  # addresses is never empty once vetted
        raise last_error

    async def connect_unix_socket(
        self,
        path: str,
        timeout: float | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        raise FetchBlocked(path, "unix sockets are never fetched")

    async def sleep(self, seconds: float) -> None:
        await self._inner.sleep(seconds)


class _GuardedTransport(httpx.AsyncHTTPTransport):
    def __init__(self, backend: httpcore.AsyncNetworkBackend, limits: httpx.Limits) -> None:
        ssl_context = httpx.create_ssl_context(trust_env=False)
        super().__init__(verify=ssl_context, trust_env=False, limits=limits)
        # httpx 0.28 has no network_backend parameter, so the pool built above is replaced
        # (before it ever connects) by one that dials through the guard, with the same
        # settings httpx would have used.
        self._pool = httpcore.AsyncConnectionPool(
            ssl_context=ssl_context,
            max_connections=limits.max_connections,
            max_keepalive_connections=limits.max_keepalive_connections,
            keepalive_expiry=limits.keepalive_expiry,
            network_backend=backend,
        )


def guarded_transport(
    allowed_hosts: Iterable[str],
    *,
    resolver: Resolver | None = None,
    inner: httpcore.AsyncNetworkBackend | None = None,
    max_connections: int = 32,
) -> httpx.AsyncBaseTransport:
    """An httpx transport whose every connection passes the guard; no proxies (a proxy
    would connect on our behalf, past the guard)."""
    backend = GuardedNetworkBackend(allowed_hosts, resolver=resolver, inner=inner)
    limits = httpx.Limits(
        max_connections=max_connections, max_keepalive_connections=max_connections
    )
    return _GuardedTransport(backend, limits)
