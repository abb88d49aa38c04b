"""Host and Origin checks (DNS rebinding, cross-site requests), CORS, and /mcp's transport
rules: the pure decisions, then over HTTP against searcher's app on 127.0.0.1."""

import json
import socket

import httpx
import pytest

from searcher.api.host_check import host_allowed, origin_allowed, split_host
from searcher.config import Settings
from searcher.tools.mcp_server import transport_security

DEFAULT = Settings().server.served_hosts()


# --- the decisions ------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("value", "expected"),
    [
        ("Example.COM:8080", ("example.com", "8080")),
        ("localhost", ("localhost", None)),
        ("localhost.:80", ("localhost", "80")),
        ("[::1]:8080", ("[::1]", "8080")),
        ("[::1]", ("[::1]", None)),
        ("::1", ("[::1]", None)),
    ],
)
def test_split_host(value, expected):
    assert split_host(value) == expected


@pytest.mark.parametrize("value", ["[::1]evil.com", "[::1", "[::1]:80x", "localhost:abc"])
def test_malformed_hosts_are_refused(value):
    with pytest.raises(ValueError):
        split_host(value)
    assert not host_allowed(value, DEFAULT)


@pytest.mark.parametrize(
    "host", ["127.0.0.1:8080", "localhost", "LOCALHOST:1", "[::1]:9", "127.0.0.1"]
)
def test_default_hosts_are_the_bound_address_and_loopback_names_on_any_port(host):
    assert DEFAULT == ["127.0.0.1", "localhost", "[::1]"]
    assert host_allowed(host, DEFAULT)


@pytest.mark.parametrize(
    "host",
    [
        "attacker.example",
        "attacker.example:8080",
        "127.0.0.1.nip.io",
        "localhost.evil",
        "localhost..",
        "[::1]evil.com",
        "",
        None,
    ],
)
def test_other_hosts_are_refused(host):
    assert not host_allowed(host, DEFAULT)


def test_allowed_host_entries_with_a_port_or_a_wildcard():
    allowed = ["searcher:8080", "*.corp.example"]
    assert host_allowed("searcher:8080", allowed)
    assert not host_allowed("searcher:9090", allowed)
    assert not host_allowed("searcher", allowed)
    assert host_allowed("a.corp.example:443", allowed)
    assert not host_allowed("corp.example", allowed)
    assert not host_allowed("evilcorp.example", allowed)
    assert host_allowed("anything:1", ["*"])


def test_origin_is_the_servers_own_or_allowed_by_cors():
    assert origin_allowed(None, "127.0.0.1:8080", [])  # no Origin: not a browser's cross-site call
    assert origin_allowed("http://127.0.0.1:8080", "127.0.0.1:8080", [])
    assert origin_allowed("https://search.example", "search.example:443", [])
    assert not origin_allowed("http://localhost:3000", "localhost:8080", [])  # another origin
    assert not origin_allowed("http://attacker.example", "127.0.0.1:8080", [])
    assert not origin_allowed("null", "127.0.0.1:8080", [])
    assert origin_allowed("https://chat.example", "127.0.0.1:8080", ["https://chat.example/"])
    assert origin_allowed("http://anything", "127.0.0.1:8080", ["*"])


def test_the_mcp_sdk_gets_the_same_hosts_in_its_notation():
    security = transport_security(Settings())
    assert security.enable_dns_rebinding_protection
    assert {"127.0.0.1", "127.0.0.1:*", "localhost:*", "[::1]:*"} <= set(security.allowed_hosts)
    assert "http://localhost:*" in security.allowed_origins
    pinned = Settings.model_validate({"server": {"allowed_hosts": ["searcher:8080"]}})
    assert transport_security(pinned).allowed_hosts == ["searcher:8080"]
    wildcard = Settings.model_validate({"server": {"allowed_hosts": ["*.corp.example"]}})
    assert not transport_security(wildcard).enable_dns_rebinding_protection


def test_allowed_hosts_from_the_environment_and_the_old_service_keys():
    from searcher.config import load_settings

    env = {"SEARCHER_ALLOWED_HOSTS": "searcher, localhost", "SEARCHER_HOST": "0.0.0.0"}
    settings = load_settings(environ=env)
    assert settings.server.allowed_hosts == ["searcher", "localhost"]
    assert settings.server.host == "0.0.0.0"
    old = Settings.model_validate(
        {"service": {"host": "::1", "port": 9000, "max_body_bytes": 4096}}
    )
    assert (old.server.host, old.server.port, old.server.max_body_bytes) == ("::1", 9000, 4096)
    assert old.server.served_hosts() == ["[::1]", "localhost", "127.0.0.1"]


# --- over HTTP ----------------------------------------------------------------------------

FOREIGN = {"Host": "attacker.example:8080"}
MCP_HEADERS = {"Accept": "application/json, text/event-stream", "Content-Type": "application/json"}
MCP_LIST = {"jsonrpc": "2.0", "id": 1, "method": "tools/list", "params": {}}


def mcp_result(response: httpx.Response) -> dict:
    """The JSON-RPC result of an MCP answer (an SSE stream of one message)."""
    data = [line[5:] for line in response.text.splitlines() if line.startswith("data:")]
    return json.loads(data[-1])["result"]


def test_a_foreign_host_gets_421_everywhere(make_settings, serve_searcher, testbed_clean, aeb_ids):
    base = serve_searcher(make_settings())
    page = testbed_clean.page_url(aeb_ids[0])
    refused = [
        httpx.post(f"{base}/v1/search", json={"query": "q"}, headers=FOREIGN, timeout=30),
        httpx.post(f"{base}/v1/fetch", json={"url": page}, headers=FOREIGN, timeout=30),
        httpx.post(f"{base}/mcp", json=MCP_LIST, headers={**FOREIGN, **MCP_HEADERS}, timeout=30),
        httpx.get(f"{base}/v1/health", headers=FOREIGN, timeout=30),
    ]
    for response in refused:
        assert response.status_code == 421, response.text
        error = response.json()["error"]
        if response.url.path == "/mcp":  # a JSON-RPC error, which MCP clients read
            assert error["code"] == -32600 and response.json()["id"] is None
            error = {**error, "type": error["data"]["type"]}
        assert error["type"] == "misdirected_request" and "server.allowed_hosts" in error["message"]
    assert not [e for e in testbed_clean.log if e.path.startswith("/pages/")]  # nothing fetched
    # The same requests under a name the server answers to go through.
    port = base.rsplit(":", 1)[1]
    local = {"Host": f"localhost:{port}"}
    assert (
        httpx.post(f"{base}/v1/fetch", json={"url": page}, headers=local, timeout=30).status_code
        == 200
    )
    listed = httpx.post(f"{base}/mcp", json=MCP_LIST, headers={**local, **MCP_HEADERS}, timeout=30)
    assert listed.status_code == 200 and mcp_result(listed)["tools"]


def test_a_cross_site_post_is_refused_and_a_same_origin_one_is_not(make_settings, serve_searcher):
    base = serve_searcher(make_settings())
    clear = f"{base}/v1/cache/clear"
    cross = httpx.post(clear, headers={"Origin": "http://attacker.example"}, timeout=30)
    assert cross.status_code == 403
    assert cross.json()["error"]["type"] == "forbidden_origin"
    # A GET is not state-changing: the Origin does not matter (the Host still does).
    stats = httpx.get(f"{base}/v1/cache/stats", headers={"Origin": "http://attacker.example"})
    assert stats.status_code == 200
    assert httpx.post(clear, headers={"Origin": base}, timeout=30).status_code == 200
    assert httpx.post(clear, timeout=30).status_code == 200  # no Origin: not from a browser
    mcp = httpx.post(
        f"{base}/mcp",
        json=MCP_LIST,
        headers={**MCP_HEADERS, "Origin": "http://attacker.example"},
        timeout=30,
    )
    assert mcp.status_code == 403


def test_cors_lets_a_configured_browser_origin_in(make_settings, serve_searcher):
    chat = "https://chat.example"
    base = serve_searcher(make_settings(server={"cors": {"allow_origins": [chat]}}))
    preflight = httpx.options(
        f"{base}/v1/cache/clear",
        headers={"Origin": chat, "Access-Control-Request-Method": "POST"},
        timeout=30,
    )
    assert preflight.status_code == 200
    assert preflight.headers["access-control-allow-origin"] == chat
    done = httpx.post(f"{base}/v1/cache/clear", headers={"Origin": chat}, timeout=30)
    assert done.status_code == 200 and done.headers["access-control-allow-origin"] == chat
    other = httpx.post(f"{base}/v1/cache/clear", headers={"Origin": "https://evil.example"})
    assert other.status_code == 403 and "access-control-allow-origin" not in other.headers


def test_configured_allowed_hosts_replace_the_defaults(make_settings, serve_searcher):
    base = serve_searcher(make_settings(server={"allowed_hosts": ["searcher"]}))
    assert httpx.get(f"{base}/v1/health", timeout=30).status_code == 421  # 127.0.0.1 not listed
    named = httpx.get(f"{base}/v1/health", headers={"Host": "searcher:8080"}, timeout=30)
    assert named.status_code == 200


def test_mcp_offers_no_event_stream(make_settings, serve_searcher):
    base = serve_searcher(make_settings())
    # A GET used to open an event stream that never ended; it is refused at once.
    stream = httpx.get(f"{base}/mcp", headers={"Accept": "text/event-stream"}, timeout=30)
    assert stream.status_code == 405 and stream.headers["allow"] == "POST"
    assert httpx.delete(f"{base}/mcp", timeout=30).status_code == 405


@pytest.mark.parametrize(
    ("host", "origin", "status"),
    [
        ("127.0.0.1:8080", None, None),
        ("localhost:8080", "http://localhost:8080", None),
        ("[::1]:9000", None, None),
        ("attacker.example:8080", None, 421),
        ("127.0.0.1:8080", "http://attacker.example", 403),
    ],
)
async def test_the_mcp_sdk_check_agrees_with_ours(host, origin, status):
    # The SDK's own middleware, fed our settings: a second line behind HostOriginMiddleware.
    from mcp.server.transport_security import TransportSecurityMiddleware
    from starlette.requests import Request

    headers = [(b"host", host.encode()), (b"content-type", b"application/json")]
    if origin:
        headers.append((b"origin", origin.encode()))
    request = Request({"type": "http", "method": "POST", "headers": headers, "path": "/mcp"})
    refused = await TransportSecurityMiddleware(transport_security(Settings())).validate_request(
        request, is_post=True
    )
    assert (refused.status_code if refused else None) == status


def test_two_host_headers_get_400(make_settings, serve_searcher):
    base = serve_searcher(make_settings())
    port = int(base.rsplit(":", 1)[1])
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:
        sock.sendall(
            b"GET /v1/tools/openai HTTP/1.1\r\nHost: 127.0.0.1\r\nHost: attacker.example\r\n"
            b"Connection: close\r\n\r\n"
        )
        answer = b""
        while chunk := sock.recv(65536):
            answer += chunk
    assert answer.startswith(b"HTTP/1.1 400 ")
    assert json.loads(answer.partition(b"\r\n\r\n")[2])["error"]["type"] == "bad_request"
