"""The headless-browser tier (issue 29) with the real Chromium over real HTTP: pages only
JavaScript fills are read from the rendered DOM, and every request a page makes goes
through the SSRF guard, refused before connecting. One browser for the module.

Without a chromium on PATH the module is skipped; CI sets SEARCHER_REQUIRE_BROWSER=1
(``.ci/run`` installs chromium), which turns that skip into a failure."""

from __future__ import annotations

import asyncio
import contextlib
import os
import shutil
import signal
import socket
import threading
from collections.abc import Coroutine, Iterator
from pathlib import Path
from typing import Any, TypeVar

import httpx
import pytest

from searcher.cache.extraction import ExtractionCache
from searcher.client import SearcherClient
from searcher.config import BrowserSettings, FetchSettings
from searcher.errors import FetchTimeout
from searcher.fetch.browser_process import find_browser
from searcher.fetch.browser_proxy import GUARD_HEADER, GuardedProxy
from searcher.fetch.extractor import build_extractor
from searcher.fetch.fetcher import FetchLimits, PageFetcher
from searcher.fetch.guard import GuardedNetworkBackend
from searcher.fetch.page_gate import PageGate
from searcher.fetch.page_reader import PageOutcome, PageReader
from searcher.fetch.renderer import BrowserTier
from tests.testbed import browser_pages as pages
from tests.testbed.server import TestbedServer

T = TypeVar("T")
REQUIRE_VARIABLE = "SEARCHER_REQUIRE_BROWSER"

if find_browser(None) is None:
    if os.environ.get(REQUIRE_VARIABLE, "") not in ("", "0"):
        pytest.fail(f"no chromium on PATH and {REQUIRE_VARIABLE} is set", pytrace=False)
    pytest.skip("no chromium on PATH (apt-get install chromium)", allow_module_level=True)

HTML = ("text/html",)


def limits(render: str = "auto", timeout_s: float = 30.0) -> FetchLimits:
    return FetchLimits(timeout_s, 10_000_000, HTML, 5, render)  # type: ignore[arg-type]


class Listener:
    """A TCP listener on 127.0.0.1 that counts the connections it accepts: a request the
    guard refused before connecting must leave it at zero."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.accepted = 0
        self.sock.settimeout(0.2)
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        while not self._stop.is_set():
            try:
                conn, _ = self.sock.accept()
            except TimeoutError:
                continue
            except OSError:
                return
            self.accepted += 1
            conn.close()

    def close(self) -> None:
        self._stop.set()
        self._thread.join()
        self.sock.close()


class Harness:
    """One browser tier and reader on their own event loop, shared by the module."""

    def __init__(self, testbed: TestbedServer, cache_dir: Path) -> None:
        self.testbed = testbed
        self.loop = asyncio.new_event_loop()
        self.thread = threading.Thread(target=self.loop.run_forever, daemon=True)
        self.thread.start()
        allowed = [f"127.0.0.1:{testbed.port}"]
        settings = BrowserSettings(
            max_pages=2, client_share=0.5, page_timeout_s=20, max_dom_elements=10_000
        )
        self.tier = BrowserTier(settings, allowed)

        async def build() -> PageReader:
            fetcher = PageFetcher(allowed, "searcher-test")
            extractor = build_extractor(FetchSettings(extract_workers=1), in_thread=True)
            cache = ExtractionCache(cache_dir, 3600, enabled=False)
            return PageReader(fetcher, extractor, cache, 4, self.tier)

        self.reader = self.run(build())

    def run(self, work: Coroutine[Any, Any, T]) -> T:
        return asyncio.run_coroutine_threadsafe(work, self.loop).result(timeout=120)

    def read(self, path: str, render: str = "auto", timeout_s: float = 30.0) -> PageOutcome:
        url = self.testbed.url(path)
        return self.run(self.reader.read(url, limits(render, timeout_s), 100_000, "tests"))

    def testbed_body(self, path: str) -> bytes:
        return httpx.get(self.testbed.url(path), timeout=10).content

    def refused(self, host: str, port: int) -> bool:
        return any(
            not d.allowed and d.host == host and d.port == port for d in self.tier.proxy.decisions
        )

    def close(self) -> None:
        self.run(self.tier.aclose())
        self.run(self.reader.fetcher.aclose())
        self.reader.extractor.close()
        self.loop.call_soon_threadsafe(self.loop.stop)
        self.thread.join()
        self.loop.close()


@pytest.fixture(scope="module")
def browser(testbed: TestbedServer, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Harness]:
    harness = Harness(testbed, tmp_path_factory.mktemp("cache"))
    yield harness
    harness.close()


@pytest.fixture
def listener() -> Iterator[Listener]:
    server = Listener()
    yield server
    server.close()


# --- pages only JavaScript fills ------------------------------------------------------


def test_text_written_by_javascript_is_read_from_the_rendered_page(browser: Harness) -> None:
    static = browser.read("/js/written", render="never")
    assert static.status == "failed" and not static.rendered
    page = browser.read("/js/written")
    assert page.status == "fetched" and page.rendered and page.render_ms is not None
    assert pages.WRITTEN_TEXT[2] in (page.content or "")
    assert page.fetch_info().rendered is True


def test_a_page_cannot_register_a_service_worker(browser: Harness) -> None:
    page = browser.read("/js/service-worker", render="always")
    assert page.rendered and pages.WRITTEN_TEXT[0] in (page.content or "")
    assert "service workers: absent" in (page.content or "")


def test_a_single_page_app_shows_the_view_of_its_route(browser: Harness) -> None:
    page = browser.read("/js/spa/pricing")
    assert page.rendered and pages.SPA_VIEWS["pricing"][1] in (page.content or "")
    assert pages.SPA_VIEWS["docs"][1] not in (page.content or "")


def test_render_always_renders_a_static_page_and_auto_leaves_it(browser: Harness) -> None:
    path = "/js/spa/docs"  # any page: "always" renders whatever the static read found
    assert browser.read(path, render="always").rendered
    static_page = browser.testbed.url("/blocked/false-positive")
    auto = browser.run(browser.reader.read(static_page, limits(), 100_000, "tests"))
    assert auto.status == "fetched" and not auto.rendered


@pytest.mark.parametrize("kind", ["alert", "confirm", "prompt"])
def test_a_dialog_nobody_answers_does_not_stop_the_page_being_read(
    browser: Harness, kind: str
) -> None:
    page = browser.read(f"/js/dialog?kind={kind}", timeout_s=10)
    assert page.status == "fetched" and page.rendered, page.error
    assert pages.WRITTEN_TEXT[1] in (page.content or "")
    assert not page.truncated  # read when the page was done, not at the time limit


def test_a_page_that_breaks_the_dom_functions_for_its_scripts_is_still_read(
    browser: Harness,
) -> None:
    page = browser.read("/js/hostile-prototypes", timeout_s=10)
    assert page.status == "fetched" and page.rendered, page.error
    assert pages.WRITTEN_TEXT[3] in (page.content or "")


def test_text_inside_an_open_shadow_root_is_read(browser: Harness) -> None:
    page = browser.read("/js/shadow", timeout_s=10)
    assert page.status == "fetched" and page.rendered, page.error
    assert pages.WRITTEN_TEXT[2] in (page.content or "")


def test_text_written_after_the_network_went_quiet_is_waited_for(browser: Harness) -> None:
    page = browser.read("/js/late?ms=1500", timeout_s=10)
    assert page.status == "fetched" and page.rendered, page.error
    assert pages.WRITTEN_TEXT[0] in (page.content or "")


def test_a_shell_behind_a_head_of_inline_css_is_rendered(browser: Harness) -> None:
    assert len(browser.testbed_body("/js/big-head")) > 130_000
    page = browser.read("/js/big-head", timeout_s=10)
    assert page.status == "fetched" and page.rendered, page.error  # before: not sent
    assert pages.WRITTEN_TEXT[1] in (page.content or "")


# --- every request of a page goes through the guard -------------------------------------


def test_a_websocket_to_a_private_address_is_refused_before_connecting(
    browser: Harness, listener: Listener
) -> None:
    page = browser.read(f"/js/websocket?to=ws://127.0.0.1:{listener.port}/socket")
    assert page.rendered and pages.WEBSOCKET_TEXT in (page.content or "")
    assert browser.refused("127.0.0.1", listener.port)
    assert listener.accepted == 0


def test_a_fetch_of_the_metadata_endpoint_is_refused(browser: Harness) -> None:
    page = browser.read("/js/metadata")
    assert page.rendered and pages.METADATA_TEXT in (page.content or "")
    assert pages.LEAK_MARK not in (page.content or "")
    assert browser.refused("169.254.169.254", 80)


def test_a_redirect_of_the_browser_to_a_private_address_is_blocked(
    browser: Harness, listener: Listener
) -> None:
    target = f"http://127.0.0.1:{listener.port}/admin"
    page = browser.read(f"/js/redirect-browser?to={target}")
    assert page.status == "skipped" and page.skip_reason == "blocked"
    assert browser.refused("127.0.0.1", listener.port)
    assert listener.accepted == 0


async def test_the_proxy_resolves_a_name_once_and_refuses_a_private_answer(
    listener: Listener,
) -> None:
    asked: list[str] = []

    async def rebinding(host: str, port: int) -> list[str]:
        asked.append(host)
        return ["127.0.0.1"]  # the answer of a rebinding name's second lookup

    proxy = GuardedProxy(GuardedNetworkBackend([], resolver=rebinding))
    await proxy.start()
    try:
        async with httpx.AsyncClient(proxy=f"http://127.0.0.1:{proxy.port}") as client:
            answer = await client.get(f"http://rebind.example:{listener.port}/")
        assert answer.status_code == 403 and answer.headers[GUARD_HEADER] == "refused"
        assert asked == ["rebind.example"] and proxy.refused == 1
        assert listener.accepted == 0
    finally:
        await proxy.aclose()


async def test_the_proxy_never_lets_a_connection_carry_a_second_request_to_its_upstream(
    testbed: TestbedServer,
) -> None:
    """An upstream that keeps its connections (ignoring ``Connection: close``): were the
    browser's connection to the proxy kept too, its next request, for another host, would
    reach this upstream unvetted. The proxy closes each after one answer."""

    held: list[asyncio.StreamWriter] = []

    async def keep_alive(reader: asyncio.StreamReader, writer: asyncio.StreamWriter) -> None:
        held.append(writer)
        with contextlib.suppress(ConnectionError, asyncio.IncompleteReadError):
            while await reader.readuntil(b"\r\n\r\n"):
                writer.write(b"HTTP/1.1 200 OK\r\nContent-Length: 8\r\n"
                             b"Connection: keep-alive\r\n\r\nupstream")  # fmt: skip
                await writer.drain()

    upstream = await asyncio.start_server(keep_alive, "127.0.0.1", 0)
    port = upstream.sockets[0].getsockname()[1]
    proxy = GuardedProxy(GuardedNetworkBackend([f"127.0.0.1:{port}", f"127.0.0.1:{testbed.port}"]))
    await proxy.start()
    try:
        async with httpx.AsyncClient(proxy=f"http://127.0.0.1:{proxy.port}") as client:
            first = await client.get(f"http://127.0.0.1:{port}/")
            assert first.text == "upstream" and first.headers["connection"] == "close"
            second = await client.get(testbed.url("/js/written"))
        assert b"Lighthouse" in second.content  # the testbed answered, not the upstream
        assert [d.port for d in proxy.decisions] == [port, testbed.port]  # both vetted
    finally:
        await proxy.aclose()
        upstream.close()
        for writer in held:
            writer.close()
            with contextlib.suppress(ConnectionError):
                await writer.wait_closed()


# --- bounds ---------------------------------------------------------------------------


def test_a_page_that_never_finishes_loading_is_read_at_the_time_limit(browser: Harness) -> None:
    page = browser.read("/js/never-loads", timeout_s=12.0)
    assert page.status == "fetched" and page.rendered and page.truncated
    assert pages.EARLY_TEXT in (page.content or "")
    assert browser.tier.gate.in_use == 0  # its page went back to the pool
    assert browser.read("/js/written").rendered


def test_a_dom_over_the_cap_is_refused_and_a_fifty_megabyte_one_is_bounded(
    browser: Harness,
) -> None:
    over_cap = browser.read("/js/huge-dom?mb=2")  # about 18,000 elements, the cap 10,000
    assert over_cap.status == "failed" and "page too complex" in (over_cap.error or "")
    # 50 MB: refused at the cap, or (on a slow machine, still building) at the time limit.
    huge = browser.read("/js/huge-dom?mb=50")
    assert huge.status != "fetched" and "rendering" in (huge.error or "")
    assert browser.tier.gate.in_use == 0
    assert browser.read("/js/written").rendered  # the browser carries on


def test_a_browser_that_died_is_restarted_for_the_next_page(browser: Harness) -> None:
    assert browser.read("/js/written").rendered
    pid, restarts = browser.tier.browser_pid, browser.tier.restarts
    assert pid is not None
    os.killpg(pid, signal.SIGKILL)  # the browser and its renderers, as an OOM kill would
    page = browser.read("/js/written")
    assert page.rendered and browser.tier.restarts == restarts + 1
    assert browser.tier.browser_pid != pid


def test_a_browser_past_its_memory_cap_is_restarted_between_pages(browser: Harness) -> None:
    settings = browser.tier.settings
    # Chromium with one tab is far above the smallest cap allowed: recycled after each page.
    browser.tier.settings = settings.model_copy(update={"max_memory_mb": 64})
    try:
        restarts = browser.tier.restarts
        assert browser.read("/js/written").rendered
        assert browser.tier.restarts == restarts + 1
        assert browser.read("/js/written").rendered  # the next page starts a new browser
    finally:
        browser.tier.settings = settings


@pytest.fixture
def scratch(monkeypatch: pytest.MonkeyPatch) -> Iterator[Path]:
    """This test's own temporary folder, for the browser's profile (``tempfile``) and for
    Chromium's own folders (``$TMPDIR``): what is left in it is what a run left behind,
    whatever the browsers of other test processes do meanwhile in /tmp."""
    import tempfile

    # Short: Chromium's socket goes under it, and a unix socket's path has 107 bytes.
    folder = Path(tempfile.mkdtemp(prefix="st-", dir="/tmp"))
    monkeypatch.setattr(tempfile, "tempdir", str(folder))
    monkeypatch.setenv("TMPDIR", str(folder))
    yield folder
    shutil.rmtree(folder, ignore_errors=True)


def _processes_running(executable: str) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                command = (entry / "cmdline").read_bytes().replace(b"\0", b" ")
            except OSError:
                continue
            if executable.encode() in command:
                found.append(int(entry.name))
    return found


async def test_a_browser_still_starting_when_the_time_runs_out_is_killed_and_its_folders_go(
    tmp_path: Path, testbed: TestbedServer, scratch: Path
) -> None:
    chromium = find_browser(None)
    slow = tmp_path / "slow-chromium"  # a start on a loaded machine: seconds
    slow.write_text(f'#!/bin/sh\nsleep 3\nexec {chromium} "$@"\n')
    slow.chmod(0o755)
    tier = BrowserTier(BrowserSettings(executable=str(slow)), [f"127.0.0.1:{testbed.port}"])
    try:
        with pytest.raises(FetchTimeout):
            await tier.render(testbed.url("/js/written"), 1.0, 1_000_000, "tests")
        assert _processes_running(str(slow)) == []  # before: the shell, then a whole browser
        assert list(scratch.iterdir()) == []  # its profile too
    finally:
        await tier.aclose()


async def test_a_browser_run_leaves_no_folder_behind(testbed: TestbedServer, scratch: Path) -> None:
    tier = BrowserTier(BrowserSettings(), [f"127.0.0.1:{testbed.port}"])
    try:
        page = await tier.render(testbed.url("/js/written"), 20.0, 1_000_000, "tests")
        assert b"Lighthouse" in page.html
    finally:
        await tier.aclose()
    assert list(scratch.iterdir()) == []  # before: one org.chromium.Chromium.* a browser


async def test_one_client_cannot_hold_every_page() -> None:
    gate = PageGate(size=2, client_share=0.5)
    held = asyncio.Event()
    release = asyncio.Event()

    async def hold(client: str) -> None:
        async with gate.page(client):
            held.set()
            await release.wait()

    first = asyncio.create_task(hold("hostile"))
    await held.wait()
    second = asyncio.create_task(hold("hostile"))  # over its share: waits
    async with gate.page("someone else"):  # admitted at once, though "hostile" asks more
        assert gate.in_use == 2 and not second.done()
    release.set()
    await asyncio.gather(first, second)
    assert gate.in_use == 0


# --- through the API: the item's fetch block, health, bad input -------------------------


def test_the_api_says_rendered_and_health_says_browser_and_reads_as_the_user_agent(
    make_settings, serve_searcher
) -> None:
    # The first page also starts the browser: time enough for that on a loaded machine.
    slow_machine = {"fetch_timeout_ms": 25_000, "max_total_time_ms": 30_000}
    agent = "ExampleBot/2.0 (+mailto:ops@example.org)"
    settings = make_settings(
        browser={"page_timeout_s": 25}, budget=slow_machine, fetch={"user_agent": agent}
    )
    base = serve_searcher(settings)
    testbed_url = settings.fetch.allowed_hosts[0]
    data = httpx.post(
        f"{base}/v1/fetch", json={"url": f"http://{testbed_url}/js/written"}, timeout=60
    ).json()
    assert data["status"] == "fetched" and data["fetch"]["rendered"] is True
    assert data["fetch"]["render_ms"] >= 0
    # The browser reads as the deployment's fetch.user_agent, not as HeadlessChrome.
    url = f"http://{testbed_url}/js/user-agent"
    told = httpx.post(f"{base}/v1/fetch", json={"url": url, "render": "always"}, timeout=60)
    assert told.json()["fetch"]["rendered"] is True
    content = told.json()["content"]
    assert f"Asked with user agent: {agent}" in content
    assert f"Script sees user agent: {agent}" in content
    health = httpx.get(f"{base}/v1/health", timeout=30).json()["browser"]
    assert health["available"] is True and health["renders"] == 2
    bad = httpx.post(f"{base}/v1/fetch", json={"url": "http://x.example/", "render": "maybe"})
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "render"
    body = {"query": "x", "constraints": {"render": "sometimes"}}
    bad = httpx.post(f"{base}/v1/search", json=body, timeout=30)
    assert bad.status_code == 422 and bad.json()["error"]["field"] == "constraints.render"


def test_without_a_browser_the_tier_is_off_and_health_says_why(
    make_settings, serve_searcher
) -> None:
    base = serve_searcher(make_settings(browser={"executable": "/nonexistent/chromium"}))
    testbed_url = make_settings().fetch.allowed_hosts[0]
    data = httpx.post(
        f"{base}/v1/fetch", json={"url": f"http://{testbed_url}/js/written"}, timeout=60
    ).json()
    assert data["status"] == "failed" and data["fetch"]["rendered"] is False
    health = httpx.get(f"{base}/v1/health", timeout=30).json()["browser"]
    assert health["available"] is False and "not found" in health["problem"]


def test_a_crawl_renders_the_pages_only_javascript_writes(make_settings, serve_searcher) -> None:
    # Crawls read pages through the same reader as full mode: the tier applies to them too.
    slow_machine = {"fetch_timeout_ms": 25_000, "max_total_time_ms": 30_000}
    settings = make_settings(browser={"page_timeout_s": 25}, budget=slow_machine)
    base = serve_searcher(settings)
    testbed_url = settings.fetch.allowed_hosts[0]
    with SearcherClient(base, timeout=60) as client:
        job = client.crawl(f"http://{testbed_url}/js/written", limit=1, politeness_delay_s=0)
    assert job.status == "done" and len(job.pages) == 1, job
    (page,) = job.pages
    assert page.fetch.rendered is True
    assert pages.WRITTEN_TEXT[0] in page.content


def test_a_cached_rendered_text_is_kept_apart_from_static_reads(make_settings, serve_searcher):
    slow_machine = {"fetch_timeout_ms": 25_000, "max_total_time_ms": 30_000}
    settings = make_settings(browser={"page_timeout_s": 25}, budget=slow_machine)
    base = serve_searcher(settings)
    url = f"http://{settings.fetch.allowed_hosts[0]}/js/written"

    def fetch(**body: Any) -> dict[str, Any]:
        reply = httpx.post(f"{base}/v1/fetch", json={"url": url, **body}, timeout=60)
        data: dict[str, Any] = reply.json()
        return data

    assert fetch()["fetch"]["rendered"] is True
    again = fetch()  # from the cache: still said to be rendered, and not drawn again
    assert again["fetch"]["rendered"] is True and pages.WRITTEN_TEXT[0] in again["content"]
    assert httpx.get(f"{base}/v1/health", timeout=30).json()["browser"]["renders"] == 1
    # render: never is the static read, never the browser's DOM kept in the cache.
    never = fetch(render="never")
    assert never["fetch"]["rendered"] is False and never["status"] != "fetched"


def test_a_cached_rendered_page_is_checked_again_where_the_browser_ended_up(
    make_settings, serve_searcher, testbed
):
    """A script sent the browser to another host; once that host is no longer allowed, a
    cache hit is refused as a new read would be (the browser's landing is a hop)."""
    slow_machine = {"fetch_timeout_ms": 25_000, "max_total_time_ms": 30_000}
    here, there = f"127.0.0.1:{testbed.port}", f"localhost:{testbed.port}"
    url = f"http://{here}/js/navigate?to=http://{there}/js/written"

    def fetch(allowed: list[str]) -> dict[str, Any]:
        settings = make_settings(
            browser={"page_timeout_s": 25}, budget=slow_machine, fetch={"allowed_hosts": allowed}
        )
        reply = httpx.post(f"{serve_searcher(settings)}/v1/fetch", json={"url": url}, timeout=60)
        data: dict[str, Any] = reply.json()
        return data

    first = fetch([here, there])
    assert first["status"] == "fetched" and first["fetch"]["rendered"] is True
    assert pages.WRITTEN_TEXT[0] in first["content"]
    later = fetch([here])  # the same cache folder, the other host no longer allowed
    assert later["status"] != "fetched" and later["fetch"]["skip_reason"] == "blocked"
    assert pages.WRITTEN_TEXT[0] not in (later.get("content") or "")


class SilentServer:
    """Accepts connections on 127.0.0.1 and never reads, answers or closes them (nor
    notices the other side going): an upstream that never answers."""

    def __init__(self) -> None:
        self.sock = socket.create_server(("127.0.0.1", 0))
        self.port = self.sock.getsockname()[1]
        self.held: list[socket.socket] = []
        self._thread = threading.Thread(target=self._accept, daemon=True)
        self._thread.start()

    def _accept(self) -> None:
        with contextlib.suppress(OSError):
            while True:
                self.held.append(self.sock.accept()[0])

    def close(self) -> None:
        self.sock.close()
        for conn in self.held:
            conn.close()


async def test_a_subresource_that_never_answers_holds_no_connection_after_the_page(
    testbed: TestbedServer,
) -> None:
    silent = SilentServer()
    allowed = [f"127.0.0.1:{testbed.port}", f"127.0.0.1:{silent.port}"]
    tier = BrowserTier(BrowserSettings(), allowed)
    try:
        url = testbed.url(f"/js/hanging-fetch?to=http://127.0.0.1:{silent.port}/never")
        page = await tier.render(url, 6.0, 1_000_000, "tests")
        assert b"Lighthouse" in page.html and silent.held  # the fetch reached it
        async with asyncio.timeout(10):  # the tab is gone: its sockets close at once
            while tier.proxy.open_connections:
                await asyncio.sleep(0.05)
        assert tier.proxy.open_connections == 0  # before: both sides stayed open
    finally:
        await tier.aclose()
        silent.close()
