"""PageFetcher over real HTTP against the testbed (127.0.0.1 only).

Addresses other than the testbed's are refused by the guard before any connection; the
guarded transport's inner backend is a recording wrapper of httpcore's real backend, so the
tests can see that nothing but 127.0.0.1 was ever dialled.
"""

from __future__ import annotations

import gzip
import socket
import time
import tracemalloc
import zlib
from collections.abc import AsyncIterator, Iterable
from urllib.parse import quote

import httpcore
import httpx
import pytest

from searcher.errors import (
    FetchBlocked,
    FetchError,
    FetchHTTPError,
    FetchTimeout,
    TooManyRedirects,
    UnsupportedContentType,
)
from searcher.fetch import fetcher as fetcher_module
from searcher.fetch.extract import extract_main_text
from searcher.fetch.fetcher import FetchedBody, FetchLimits, PageFetcher
from searcher.fetch.guard import INVALID_HOST_NAME, guarded_transport
from searcher.fetch.small_reads import SmallReadBackend
from tests.testbed import TestbedServer

HTML_TYPES = ("text/html", "application/xhtml+xml", "text/plain")
LIMITS = FetchLimits(
    timeout_s=10.0, max_bytes=2_000_000, allowed_content_types=HTML_TYPES, max_redirects=5
)
UA = "searcher-tests/1.0"


class RecordingBackend(httpcore.AsyncNetworkBackend):
    """The fetcher's real backend, recording every (host, port) it is asked to connect to."""

    def __init__(self) -> None:
        self.inner = SmallReadBackend()
        self.connects: list[tuple[str, int]] = []

    async def connect_tcp(
        self,
        host: str,
        port: int,
        timeout: float | None = None,
        local_address: str | None = None,
        socket_options: Iterable[httpcore.SOCKET_OPTION] | None = None,
    ) -> httpcore.AsyncNetworkStream:
        self.connects.append((host, port))
        return await self.inner.connect_tcp(host, port, timeout, local_address, socket_options)

    async def sleep(self, seconds: float) -> None:
        await self.inner.sleep(seconds)


class CountingTransport(httpx.AsyncBaseTransport):
    """Wraps a transport and counts the response body bytes the client actually pulled."""

    def __init__(self, inner: httpx.AsyncBaseTransport) -> None:
        self.inner = inner
        self.body_bytes_read = 0

    async def handle_async_request(self, request: httpx.Request) -> httpx.Response:
        response = await self.inner.handle_async_request(request)
        raw = response.stream
        assert isinstance(raw, httpx.AsyncByteStream)
        stream: httpx.AsyncByteStream = raw  # declared, so the class below sees the type
        counter = self

        class Counted(httpx.AsyncByteStream):
            async def __aiter__(self) -> AsyncIterator[bytes]:
                async for chunk in stream:
                    counter.body_bytes_read += len(chunk)
                    yield chunk

            async def aclose(self) -> None:
                await stream.aclose()

        return httpx.Response(
            response.status_code,
            headers=response.headers,
            stream=Counted(),
            extensions=response.extensions,
        )

    async def aclose(self) -> None:
        await self.inner.aclose()


@pytest.fixture
def recorder() -> RecordingBackend:
    return RecordingBackend()


@pytest.fixture
async def fetcher(testbed: TestbedServer, recorder: RecordingBackend) -> AsyncIterator[PageFetcher]:
    allowed = {f"127.0.0.1:{testbed.port}"}
    transport = guarded_transport(allowed, inner=recorder)
    page_fetcher = PageFetcher(allowed, UA, transport=transport)
    yield page_fetcher
    await page_fetcher.aclose()


def limits(**changes: object) -> FetchLimits:
    values = {
        "timeout_s": LIMITS.timeout_s,
        "max_bytes": LIMITS.max_bytes,
        "allowed_content_types": LIMITS.allowed_content_types,
        "max_redirects": LIMITS.max_redirects,
    }
    values.update(changes)
    return FetchLimits(**values)  # type: ignore[arg-type]


# --- ordinary pages --------------------------------------------------------------------


async def test_fetches_a_real_page(
    fetcher: PageFetcher, testbed_clean: TestbedServer, aeb_ids: list[str]
) -> None:
    url = testbed_clean.page_url(aeb_ids[0])
    page = await fetcher.fetch(url, LIMITS)
    assert page.url == url
    assert page.status_code == 200
    assert page.content_type == "text/html"
    assert page.charset == "utf-8"
    assert not page.truncated
    assert page.body.lstrip().lower().startswith(b"<")
    assert page.downloaded_bytes >= len(page.body) > 1000
    sent = testbed_clean.log[-1].headers
    assert sent["user-agent"] == UA
    assert sent["accept-encoding"] == "gzip, deflate"


async def test_text_plain_page(fetcher: PageFetcher, testbed: TestbedServer) -> None:
    page = await fetcher.fetch(testbed.url("/text"), LIMITS)
    assert page.content_type == "text/plain"
    assert page.charset == "utf-8"
    text = extract_main_text(page.body, page.url, page.content_type, page.charset)
    assert "café, naïve, Zürich, 東京" in text


async def test_slow_page_within_the_timeout(
    fetcher: PageFetcher, testbed: TestbedServer, aeb_ids: list[str]
) -> None:
    page = await fetcher.fetch(testbed.url(f"/slow/200/pages/{aeb_ids[1]}"), LIMITS)
    assert page.status_code == 200


@pytest.mark.parametrize("code", [404, 410, 500, 503])
async def test_error_status(fetcher: PageFetcher, testbed: TestbedServer, code: int) -> None:
    with pytest.raises(FetchHTTPError) as info:
        await fetcher.fetch(testbed.url(f"/status/{code}"), LIMITS)
    assert info.value.status_code == code


# --- byte limits -----------------------------------------------------------------------


async def test_huge_page_is_truncated_at_max_bytes(
    fetcher: PageFetcher, testbed: TestbedServer
) -> None:
    page = await fetcher.fetch(testbed.url("/huge?bytes=50000000"), limits(max_bytes=100_000))
    assert page.truncated
    assert len(page.body) == 100_000
    # Reading stopped near the limit instead of draining 50 MB.
    assert page.downloaded_bytes < 100_000 + 256 * 1024


@pytest.mark.parametrize("max_bytes", [20_000, 100_000, 1_000_000])
async def test_reading_stops_within_16_kb_of_the_byte_budget(
    fetcher: PageFetcher, testbed: TestbedServer, max_bytes: int
) -> None:
    page = await fetcher.fetch(testbed.url("/huge?bytes=50000000"), limits(max_bytes=max_bytes))
    assert page.truncated and len(page.body) == max_bytes
    assert max_bytes <= page.downloaded_bytes <= max_bytes + 16 * 1024


async def test_page_of_exactly_max_bytes_is_not_truncated(
    fetcher: PageFetcher, testbed: TestbedServer
) -> None:
    page = await fetcher.fetch(testbed.url("/huge?bytes=100000"), limits(max_bytes=100_000))
    assert not page.truncated
    assert len(page.body) == 100_000


async def test_gzip_bomb_is_a_truncated_page_in_bounded_memory(
    fetcher: PageFetcher, testbed: TestbedServer
) -> None:
    tracemalloc.start()
    try:
        page = await fetcher.fetch(testbed.url("/gzip-bomb"), limits(max_bytes=1_000_000))
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    assert page.truncated
    assert len(page.body) == 1_000_000
    assert page.body.startswith(b"<!doctype html>")
    assert page.downloaded_bytes < 1_000_000  # it inflates 1000-fold: a few KB sufficed
    # 1 GiB inflated would be 1 GiB; the whole fetch stays within a few MB.
    assert peak < 16 * 1024 * 1024


# --- time limits -----------------------------------------------------------------------


async def test_hanging_server_times_out(fetcher: PageFetcher, testbed: TestbedServer) -> None:
    started = time.monotonic()
    with pytest.raises(FetchTimeout) as info:
        await fetcher.fetch(testbed.url("/hang"), limits(timeout_s=0.5))
    assert time.monotonic() - started < 3
    assert info.value.skip_reason == "timeout"


async def test_a_timeout_without_a_message_is_named_by_its_kind(
    recorder: RecordingBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    # A TLS handshake with a listener that never answers: httpx's connect timeout (per
    # address, shortened here from 5 s) fires first, and it carries no message.
    monkeypatch.setattr(fetcher_module, "_CONNECT_TIMEOUT_S", 0.3)
    with socket.create_server(("127.0.0.1", 0)) as silent:
        allowed = {f"127.0.0.1:{silent.getsockname()[1]}"}
        fetcher = PageFetcher(allowed, UA, transport=guarded_transport(allowed, inner=recorder))
        with pytest.raises(FetchTimeout) as info:
            await fetcher.fetch(f"https://{next(iter(allowed))}/page", limits(timeout_s=5))
        await fetcher.aclose()
    assert str(info.value).endswith("network timeout: ConnectTimeout"), str(info.value)


async def test_slow_drip_is_caught_by_the_whole_fetch_timeout(
    fetcher: PageFetcher, testbed: TestbedServer
) -> None:
    # Ten bytes every 50 ms: every read is quick, the whole body would take 50 s.
    started = time.monotonic()
    with pytest.raises(FetchTimeout):
        await fetcher.fetch(testbed.url("/drip?bytes=10000&interval_ms=50"), limits(timeout_s=0.7))
    assert time.monotonic() - started < 3


async def test_slow_first_byte_times_out(
    fetcher: PageFetcher, testbed: TestbedServer, aeb_ids: list[str]
) -> None:
    with pytest.raises(FetchTimeout):
        await fetcher.fetch(testbed.url(f"/slow/3000/pages/{aeb_ids[0]}"), limits(timeout_s=0.3))


# --- redirects -------------------------------------------------------------------------


async def test_redirect_chain_within_the_limit(
    fetcher: PageFetcher, testbed: TestbedServer, aeb_ids: list[str]
) -> None:
    # /redirect/2 -> /redirect/1 -> /redirect/0 -> /pages/<first>: three redirects.
    page = await fetcher.fetch(testbed.url("/redirect/2"), limits(max_redirects=3))
    assert page.url == testbed.page_url(aeb_ids[0])
    assert page.status_code == 200


async def test_redirect_chain_beyond_the_limit(
    fetcher: PageFetcher, testbed: TestbedServer
) -> None:
    with pytest.raises(TooManyRedirects):
        await fetcher.fetch(testbed.url("/redirect/2"), limits(max_redirects=2))


async def test_no_redirects_allowed(fetcher: PageFetcher, testbed: TestbedServer) -> None:
    with pytest.raises(TooManyRedirects):
        await fetcher.fetch(testbed.url("/redirect/0"), limits(max_redirects=0))


async def test_redirect_loop(fetcher: PageFetcher, testbed_clean: TestbedServer) -> None:
    with pytest.raises(TooManyRedirects):
        await fetcher.fetch(testbed_clean.url("/redirect-loop/a"), limits(max_redirects=5))
    assert len(testbed_clean.log) == 6  # the first request and five redirects, no more


def redirect_to(testbed: TestbedServer, target: str) -> str:
    return testbed.url("/redirect-to?url=" + quote(target, safe=""))


@pytest.mark.parametrize("host", ["127.0.0.2", "localhost", "[::1]", "0.0.0.0"])
async def test_redirect_to_a_loopback_host_that_is_not_allow_listed(
    fetcher: PageFetcher, testbed: TestbedServer, recorder: RecordingBackend, host: str
) -> None:
    target = f"http://{host}:{testbed.port}/pages/x"
    with pytest.raises(FetchBlocked) as info:
        await fetcher.fetch(redirect_to(testbed, target), LIMITS)
    assert info.value.url == target
    assert info.value.skip_reason == "blocked"
    assert {h for h, _ in recorder.connects} == {"127.0.0.1"}  # only the first hop


@pytest.mark.parametrize(
    "target",
    [
        "http://169.254.169.254/latest/meta-data/iam/security-credentials/",
        "http://[fd00:ec2::254]/latest/meta-data/",
        "http://100.100.100.200/latest/meta-data/",
        "http://10.0.0.1/",
        "http://192.168.1.1:8080/admin",
    ],
)
async def test_redirect_to_private_or_metadata_address_is_refused_before_connecting(
    fetcher: PageFetcher, testbed: TestbedServer, recorder: RecordingBackend, target: str
) -> None:
    with pytest.raises(FetchBlocked):
        await fetcher.fetch(redirect_to(testbed, target), LIMITS)
    assert recorder.connects == [("127.0.0.1", testbed.port)]


BAD_HOSTS = ["http://xn--zz/", "http://a..b/", "http://.example/", f"http://{'a' * 64}.example/"]


@pytest.mark.parametrize("url", BAD_HOSTS)
async def test_a_host_name_that_cannot_be_resolved_is_refused_as_invalid(
    fetcher: PageFetcher, recorder: RecordingBackend, url: str
) -> None:
    with pytest.raises(FetchError) as info:
        await fetcher.fetch(url, LIMITS)
    assert type(info.value) is FetchError and info.value.reason == INVALID_HOST_NAME
    assert recorder.connects == []


@pytest.mark.parametrize("target", BAD_HOSTS)
async def test_a_redirect_to_an_invalid_host_name_is_refused_as_invalid(
    fetcher: PageFetcher, testbed: TestbedServer, recorder: RecordingBackend, target: str
) -> None:
    with pytest.raises(FetchError) as info:
        await fetcher.fetch(redirect_to(testbed, target), LIMITS)
    assert type(info.value) is FetchError and info.value.reason == INVALID_HOST_NAME
    assert recorder.connects == [("127.0.0.1", testbed.port)]  # only the first hop


async def test_an_allow_listed_address_with_a_trailing_dot_is_the_same_address(
    fetcher: PageFetcher, testbed: TestbedServer, recorder: RecordingBackend
) -> None:
    page = await fetcher.fetch(f"http://127.0.0.1.:{testbed.port}/text", LIMITS)
    assert page.status_code == 200 and page.content_type == "text/plain"
    assert recorder.connects == [("127.0.0.1", testbed.port)]


async def test_a_refused_content_type_says_what_arrived(
    fetcher: PageFetcher, testbed: TestbedServer
) -> None:
    with pytest.raises(UnsupportedContentType) as info:
        await fetcher.fetch(testbed.url("/wrong-type"), LIMITS)
    assert (info.value.status_code, info.value.media_type) == (200, "application/zip")
    assert info.value.skip_reason == "content_type"


@pytest.mark.parametrize(
    "target",
    ["file:///etc/passwd", "data:text/html,<p>hi</p>", "javascript:alert(1)", "mailto:a@b.c"],
)
async def test_redirect_to_another_scheme_is_refused_by_the_guard(
    fetcher: PageFetcher, testbed: TestbedServer, recorder: RecordingBackend, target: str
) -> None:
    # Refused as the guard refuses (skipped, blocked), naming the scheme; data: and
    # javascript: failed with httpx's "InvalidURL: For absolute URLs, path must be empty
    # or begin with '/'", file: as a failed page.
    with pytest.raises(FetchBlocked) as info:
        await fetcher.fetch(redirect_to(testbed, target), LIMITS)
    scheme = target.partition(":")[0]
    assert info.value.reason == f"unsupported scheme {scheme!r}; only http and https"
    assert recorder.connects == [("127.0.0.1", testbed.port)]  # only the first hop


async def test_a_redirect_to_a_location_that_is_no_url_says_so(
    fetcher: PageFetcher, testbed: TestbedServer
) -> None:
    with pytest.raises(FetchError) as info:
        await fetcher.fetch(redirect_to(testbed, "http://[::1"), LIMITS)
    assert info.value.reason == "invalid redirect Location 'http://[::1'"


async def test_testbed_itself_is_blocked_without_the_allow_list(
    testbed_clean: TestbedServer, aeb_ids: list[str]
) -> None:
    recorder = RecordingBackend()
    page_fetcher = PageFetcher([], UA, transport=guarded_transport([], inner=recorder))
    try:
        with pytest.raises(FetchBlocked):
            await page_fetcher.fetch(testbed_clean.page_url(aeb_ids[0]), LIMITS)
    finally:
        await page_fetcher.aclose()
    assert recorder.connects == []
    assert testbed_clean.log == []


async def test_default_transport_guards_too(testbed_clean: TestbedServer) -> None:
    page_fetcher = PageFetcher([], UA)
    try:
        with pytest.raises(FetchBlocked):
            await page_fetcher.fetch(testbed_clean.url("/text"), LIMITS)
    finally:
        await page_fetcher.aclose()
    assert testbed_clean.log == []


# --- content types ---------------------------------------------------------------------


@pytest.mark.parametrize(
    ("path", "media_type"), [("/wrong-type", "application/zip"), ("/image", "image/png")]
)
async def test_wrong_content_type_is_refused_before_the_body_is_read(
    testbed: TestbedServer, path: str, media_type: str
) -> None:
    allowed = {f"127.0.0.1:{testbed.port}"}
    counting = CountingTransport(guarded_transport(allowed))
    page_fetcher = PageFetcher(allowed, UA, transport=counting)
    try:
        with pytest.raises(UnsupportedContentType, match=media_type) as info:
            await page_fetcher.fetch(testbed.url(path), LIMITS)
    finally:
        await page_fetcher.aclose()
    assert info.value.skip_reason == "content_type"
    assert counting.body_bytes_read == 0


async def test_allowed_content_types_are_compared_case_insensitively(
    fetcher: PageFetcher, testbed: TestbedServer
) -> None:
    page = await fetcher.fetch(testbed.url("/text"), limits(allowed_content_types=("TEXT/Plain",)))
    assert page.content_type == "text/plain"


async def test_html_is_refused_when_only_text_is_allowed(
    fetcher: PageFetcher, testbed: TestbedServer, aeb_ids: list[str]
) -> None:
    with pytest.raises(UnsupportedContentType, match="text/html"):
        await fetcher.fetch(
            testbed.page_url(aeb_ids[0]), limits(allowed_content_types=("text/plain",))
        )


async def test_mislabelled_body_is_fetched_as_labelled(
    fetcher: PageFetcher, testbed: TestbedServer
) -> None:
    # JSON served as text/html: the label is trusted; extraction finds no article in it.
    page = await fetcher.fetch(testbed.url("/mislabelled"), LIMITS)
    assert page.content_type == "text/html"
    assert page.body.startswith(b"{")


# --- URLs ------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "url",
    ["ftp://example.com/file", "file:///etc/passwd", "gopher://x/", "http:///nohost", "nonsense"],
)
async def test_only_http_and_https_urls(fetcher: PageFetcher, url: str) -> None:
    with pytest.raises(FetchError):
        await fetcher.fetch(url, LIMITS)


# --- responses the testbed does not serve, through httpx's MockTransport ---------------


async def fetch_mock(handler: httpx.MockTransport, max_bytes: int = 10_000) -> FetchedBody:
    page_fetcher = PageFetcher([], UA, transport=handler)
    try:
        return await page_fetcher.fetch("http://example.com/page", limits(max_bytes=max_bytes))
    finally:
        await page_fetcher.aclose()


class Chunks(httpx.AsyncByteStream):
    """A streamed body in small chunks (``content=`` would hand httpx a pre-read body)."""

    def __init__(self, body: bytes, size: int = 100) -> None:
        self.body = body
        self.size = size

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for i in range(0, len(self.body), self.size):
            yield self.body[i : i + self.size]


def respond(body: bytes, headers: dict[str, str]) -> httpx.MockTransport:
    return httpx.MockTransport(
        lambda request: httpx.Response(200, headers=headers, stream=Chunks(body))
    )


HTML_DOC = (
    b"<!DOCTYPE html><html><head><title>t</title></head><body><p>"
    + b"word " * 400
    + b"</p></body></html>"
)


async def test_unlabelled_html_is_sniffed() -> None:
    page = await fetch_mock(respond(HTML_DOC, {}))
    assert page.content_type == "text/html"
    assert page.body == HTML_DOC


async def test_unlabelled_binary_is_refused() -> None:
    with pytest.raises(UnsupportedContentType, match="does not look like HTML"):
        await fetch_mock(respond(b"%PDF-1.4\n\x00\x01\x02" * 100, {}))


async def test_short_unlabelled_html_is_sniffed_at_the_end_of_the_stream() -> None:
    page = await fetch_mock(respond(b"<html><body>hi</body></html>", {}))
    assert page.body == b"<html><body>hi</body></html>"


@pytest.mark.parametrize(
    "encode",
    [
        pytest.param(lambda b: zlib.compress(b), id="deflate-zlib"),
        pytest.param(lambda b: zlib.compress(b, wbits=-15), id="deflate-raw"),
    ],
)
async def test_deflate_both_spellings(encode: object) -> None:
    body = encode(HTML_DOC)  # type: ignore[operator]
    page = await fetch_mock(
        respond(body, {"content-type": "text/html", "content-encoding": "deflate"})
    )
    assert page.body == HTML_DOC
    assert page.downloaded_bytes == len(body)


async def test_concatenated_gzip_members() -> None:
    body = gzip.compress(HTML_DOC[:100]) + gzip.compress(HTML_DOC[100:])
    page = await fetch_mock(
        respond(body, {"content-type": "text/html", "content-encoding": "gzip"})
    )
    assert page.body == HTML_DOC


async def test_gzip_truncated_at_max_bytes() -> None:
    body = gzip.compress(HTML_DOC)
    page = await fetch_mock(
        respond(body, {"content-type": "text/html", "content-encoding": "x-gzip"}), max_bytes=500
    )
    assert page.truncated
    assert page.body == HTML_DOC[:500]


@pytest.mark.parametrize("coding", ["br", "zstd", "gzip, br", "compress"])
async def test_unknown_content_encoding_is_an_error(coding: str) -> None:
    with pytest.raises(FetchError, match="unsupported content encoding"):
        await fetch_mock(respond(b"xx", {"content-type": "text/html", "content-encoding": coding}))


async def test_corrupt_gzip_is_an_error() -> None:
    with pytest.raises(FetchError, match="corrupt gzip"):
        await fetch_mock(
            respond(
                b"\x1f\x8b\x08\x00garbage" * 10,
                {"content-type": "text/html", "content-encoding": "gzip"},
            )
        )


async def test_blocked_wrapped_by_httpx_is_still_fetch_blocked() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        try:
            raise FetchBlocked("10.0.0.1", "private address")
        except FetchBlocked as exc:
            raise httpx.ConnectError("connect failed", request=request) from exc

    with pytest.raises(FetchBlocked, match="private address") as info:
        await fetch_mock(httpx.MockTransport(handler))
    assert info.value.url == "http://example.com/page"


async def test_transport_errors_become_fetch_errors() -> None:
    def handler(request: httpx.Request) -> httpx.Response:
        raise httpx.RemoteProtocolError("server hung up", request=request)

    with pytest.raises(FetchError, match="server hung up") as info:
        await fetch_mock(httpx.MockTransport(handler))
    assert type(info.value) is FetchError


async def test_redirect_without_location_is_an_error() -> None:
    transport = httpx.MockTransport(lambda request: httpx.Response(302))
    with pytest.raises(FetchError, match="without a Location"):
        await fetch_mock(transport)
