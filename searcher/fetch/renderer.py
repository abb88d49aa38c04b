"""The headless-browser tier: a page that only JavaScript fills, drawn by Chromium and read
from its DOM.

Driven over the DevTools protocol directly (``searcher.fetch.cdp``) rather than through
Playwright: the few commands needed (a context, a tab, navigate, evaluate) do not justify
a 53 MB wheel and a Node driver in every install, and owning the process gives its pid
(its memory is measured and capped) and its restart.

Each page gets its own browser context (no cookies or storage shared between pages or
users) in one browser process that starts with the first page and is restarted when it
dies or grows past ``browser.max_memory_mb``. Within a tab:

- every request leaves through the guarded proxy (``searcher.fetch.browser_proxy``);
  requests for other schemes, and images, media and fonts (unless ``load_media``), are
  failed before they are made (the Fetch domain);
- downloads are denied, service workers bypassed and unregistrable, permission prompts
  denied (a browser flag);
- the time limit is the smaller of ``browser.page_timeout_s`` and what the read has left:
  a page still loading then is read as it stands (``truncated``);
- a DOM of more than ``max_dom_elements`` elements is refused, its HTML cut at the read's
  byte budget.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Coroutine, Hashable
from dataclasses import dataclass
from typing import Any

from searcher.config import BrowserSettings
from searcher.contract import BrowserHealth
from searcher.errors import (
    BrowserGone,
    FetchBlocked,
    FetchError,
    FetchTimeout,
    PageTooComplex,
    RenderError,
)
from searcher.fetch.browser_process import BrowserProcess, find_browser, start_browser
from searcher.fetch.browser_proxy import GUARD_HEADER, GuardedProxy
from searcher.fetch.cdp import CdpConnection
from searcher.fetch.guard import REFUSED_NOT_PUBLIC, GuardedNetworkBackend
from searcher.fetch.page_gate import PageGate

_MEDIA_TYPES = frozenset({"Image", "Media", "Font"})
_QUIET_S = 0.5  # the network counts as settled after this long with no request in flight
_POLL_S = 0.05
_SNAPSHOT_SHARE = 0.2  # of the time limit kept for reading the DOM (at most 2 s)
_DISPOSE_TIMEOUT_S = 5.0
# Before any script of the page runs: no service worker can be registered.
_NO_SERVICE_WORKERS = "try { delete Navigator.prototype.serviceWorker } catch (e) {}"
# After the network is quiet, a page whose body has less text than this is given up to
# _TEXT_WAIT_S more for its scripts to write it (a timer, a meta refresh, a slow API call).
_TEXT_CHARS = 100
_TEXT_WAIT_S = 3.0
_TEXT_POLL_S = 0.1
_BODY_TEXT = "document.body ? document.body.innerText.trim().length : 0"
# Run in a world of our own (``Page.createIsolatedWorld``): the page's scripts share the
# DOM with it but not their prototypes, so a page cannot break or fool the snapshot.
# Counts the elements first: a DOM over the cap is never serialised. Open shadow roots
# (web components) are copied into their hosts, innermost first: serialising leaves them
# out. Scripts, styles and noscript go before serialising (text is what is read;
# noscript would read as a wall).
_SNAPSHOT = """(() => {
  const elements = document.getElementsByTagName('*').length;
  if (elements > %(max_elements)d) return {elements: elements};
  const inline = (root) => {
    for (const host of root.querySelectorAll('*')) {
      if (!host.shadowRoot) continue;
      inline(host.shadowRoot);
      const copy = document.createElement('div');
      copy.innerHTML = host.shadowRoot.innerHTML;
      host.prepend(copy);
    }
  };
  inline(document);
  document.querySelectorAll('script,style,noscript,template').forEach(e => e.remove());
  const html = '<!DOCTYPE html>' + document.documentElement.outerHTML;
  const cut = html.length > %(max_chars)d;
  return {elements: elements, html: cut ? html.slice(0, %(max_chars)d) : html, cut: cut,
          url: location.href};
})()"""


@dataclass(frozen=True)
class RenderedPage:
    """A page as the browser drew it: its HTML (UTF-8), where it ended up, how long it took
    and whether it is partial (still loading at the time limit, or cut at the budget)."""

    url: str
    html: bytes
    render_ms: int
    truncated: bool


def browser_missing(settings: BrowserSettings) -> str:
    """Why no browser was found for ``settings`` (the tier's ``problem``)."""
    if settings.executable:
        return f"browser.executable {settings.executable!r} was not found"
    return "no chromium on PATH (apt-get install chromium)"


class BrowserTier:
    """Renders pages in one shared headless Chromium; ``available`` says whether it can."""

    def __init__(
        self, settings: BrowserSettings, allowed_hosts: list[str], user_agent: str | None = None
    ) -> None:
        self.settings = settings
        # The deployment's own name for its page reads (fetch.user_agent): a site that
        # tells searcher's reads apart, or lets them in, sees the same one from the browser.
        self.user_agent = user_agent
        self.executable = find_browser(settings.executable) if settings.enabled else None
        self.problem: str | None = None
        if not settings.enabled:
            self.problem = "browser.enabled is false"
        elif self.executable is None:
            self.problem = browser_missing(settings)
        self.proxy = GuardedProxy(GuardedNetworkBackend(allowed_hosts))
        self.gate = PageGate(settings.max_pages, settings.client_share)
        self._browser: BrowserProcess | None = None
        self._starting = asyncio.Lock()
        self.renders = 0
        self.restarts = 0
        self.refused_schemes = 0
        self._proxy_started = False

    @property
    def available(self) -> bool:
        """Whether pages can be rendered (a browser was found and the tier is on)."""
        return self.executable is not None and self.problem is None

    def health(self) -> BrowserHealth:
        """What ``/v1/health`` says under ``browser``."""
        return BrowserHealth(
            available=self.available, executable=self.executable, problem=self.problem,
            running=self._browser is not None and self._browser.alive,
            pages_open=self.gate.in_use, max_pages=self.gate.size, renders=self.renders,
            restarts=self.restarts, refused_requests=self.proxy.refused + self.refused_schemes,
        )  # fmt: skip

    @property
    def browser_pid(self) -> int | None:
        """The running browser's process id (None before the first page, or after a stop)."""
        return self._browser.process.pid if self._browser is not None else None

    def memory_bytes(self) -> int:
        """Memory of the running browser's processes (0 when none runs)."""
        return self._browser.memory_bytes() if self._browser is not None else 0

    async def render(
        self, url: str, timeout_s: float, max_bytes: int, client: Hashable
    ) -> RenderedPage:
        """The page at ``url`` as the browser draws it, within ``timeout_s`` (capped at
        ``browser.page_timeout_s``) and one of the client's pages; a ``FetchError`` when it
        cannot be (blocked by the guard, too complex, the browser gone)."""
        if not self.available or self.executable is None:
            raise RenderError(url, self.problem or "no browser")
        limit = min(timeout_s, self.settings.page_timeout_s)
        if limit <= 0:
            raise FetchTimeout(url, "no time left to render the page")
        started = time.monotonic()
        try:
            async with asyncio.timeout(limit), self.gate.page(client):
                page = await self._render_on_a_live_browser(
                    self.executable, url, started + limit, max_bytes
                )
        except TimeoutError as exc:
            raise FetchTimeout(url, f"not rendered within {limit:g} s") from exc
        finally:
            await self._recycle_if_needed()
        self.renders += 1
        return page

    async def _render_on_a_live_browser(
        self, executable: str, url: str, ends_at: float, max_bytes: int
    ) -> RenderedPage:
        """Render on the running browser; one found dead on the way (killed, crashed, its
        death not yet noticed) is replaced and the page tried once more on the new one."""
        for attempt in range(2):
            browser = await self._running(executable)
            try:
                remaining = ends_at - time.monotonic()
                return await self._render_in_context(browser, url, remaining, max_bytes)
            except BrowserGone:
                if attempt:
                    raise
                await self._discard(browser)
        raise AssertionError("unreachable")  # the loop returns or raises

    async def _discard(self, browser: BrowserProcess) -> None:
        """Stop ``browser`` (dead or dying) so that the next page starts a new one."""
        async with self._starting:
            if self._browser is browser:
                self._browser = None
                self.restarts += 1
                await browser.close()

    async def _running(self, executable: str) -> BrowserProcess:
        """The browser, started (or restarted, when it died) as needed."""
        async with self._starting:
            if self._browser is not None and not self._browser.alive:
                await self._browser.close()
                self._browser = None
                self.restarts += 1
            if self._browser is None:
                if not self._proxy_started:
                    await self.proxy.start()
                    self._proxy_started = True
                self._browser = await start_browser(
                    executable, self.proxy.port, self.settings.load_media, self.user_agent
                )
            return self._browser

    async def _recycle_if_needed(self) -> None:
        """Restart the browser (closed now, started with the next page) once no page is
        open and it has grown past its memory cap."""
        browser = self._browser
        if browser is None or self.gate.in_use:
            return
        if browser.memory_bytes() > self.settings.max_memory_mb * 1024 * 1024:
            async with self._starting:
                if self._browser is browser and not self.gate.in_use:
                    self._browser = None
                    self.restarts += 1
                    await browser.close()

    async def _render_in_context(
        self, browser: BrowserProcess, url: str, timeout_s: float, max_bytes: int
    ) -> RenderedPage:
        cdp = browser.cdp
        context = await cdp.send(
            "Target.createBrowserContext",
            {"disposeOnDetach": True, "proxyServer": f"http://127.0.0.1:{self.proxy.port}",
             "proxyBypassList": "<-loopback>"},
        )  # fmt: skip
        context_id = context["browserContextId"]
        try:
            await cdp.send(
                "Browser.setDownloadBehavior", {"behavior": "deny", "browserContextId": context_id}
            )
            target = await cdp.send(
                "Target.createTarget", {"url": "about:blank", "browserContextId": context_id}
            )
            attached = await cdp.send(
                "Target.attachToTarget", {"targetId": target["targetId"], "flatten": True}
            )
            tab = _Tab(self, cdp, attached["sessionId"])
            cdp.listen(tab.session, tab.on_event)
            try:
                return await tab.render(url, timeout_s, max_bytes)
            finally:
                cdp.unlisten(tab.session)
        finally:
            await self._dispose(browser, context_id)

    async def _dispose(self, browser: BrowserProcess, context_id: str) -> None:
        """Close the context and its tab; a browser that cannot is killed (and restarted
        with the next page): a tab stuck in a script must not outlive its read."""
        try:
            async with asyncio.timeout(_DISPOSE_TIMEOUT_S):
                await browser.cdp.send(
                    "Target.disposeBrowserContext", {"browserContextId": context_id}
                )
        except (FetchError, TimeoutError):
            with contextlib.suppress(ProcessLookupError):
                browser.process.kill()

    async def aclose(self) -> None:
        """Stop the browser and the proxy."""
        if self._browser is not None:
            await self._browser.close()
            self._browser = None
        if self._proxy_started:
            await self.proxy.aclose()
            self._proxy_started = False


class _Tab:
    """One tab's rendering: requests decided, load and network watched, DOM read."""

    def __init__(self, tier: BrowserTier, cdp: CdpConnection, session: str) -> None:
        self.tier = tier
        self.cdp = cdp
        self.session = session
        self.loaded = asyncio.Event()
        self.in_flight: set[str] = set()
        self.last_activity = time.monotonic()
        self.main_frame: str | None = None
        self.document_headers: dict[str, str] | None = None
        self._background: set[asyncio.Task[None]] = set()

    async def send(self, method: str, params: dict[str, Any] | None = None) -> dict[str, Any]:
        return await self.cdp.send(method, params, self.session)

    def on_event(self, method: str, params: dict[str, Any]) -> None:
        """Events of this tab's session (called by the connection's reader)."""
        if method == "Fetch.requestPaused":
            self._in_background(self._decide(params))
        elif method == "Page.javascriptDialogOpening":
            # Nobody is there to answer: an open dialog would hold every script of the
            # page, ours too, until the time limit. Dismissed (no "OK" given to anything).
            self._in_background(self._dismiss_dialog())
        elif method == "Page.loadEventFired":
            self.loaded.set()
        elif method == "Network.requestWillBeSent":
            self.in_flight.add(params.get("requestId", ""))
            self.last_activity = time.monotonic()
        elif method in ("Network.loadingFinished", "Network.loadingFailed"):
            self.in_flight.discard(params.get("requestId", ""))
            self.last_activity = time.monotonic()
        elif method == "Network.responseReceived" and self._is_main_document(params):
            headers = params.get("response", {}).get("headers", {})
            self.document_headers = {k.lower(): str(v) for k, v in headers.items()}

    def _in_background(self, work: Coroutine[Any, Any, None]) -> None:
        task = asyncio.create_task(work)
        self._background.add(task)
        task.add_done_callback(self._background.discard)

    async def _dismiss_dialog(self) -> None:
        with contextlib.suppress(FetchError):
            await self.send("Page.handleJavaScriptDialog", {"accept": False})

    def _is_main_document(self, params: dict[str, Any]) -> bool:
        return params.get("type") == "Document" and params.get("frameId") == self.main_frame

    async def _decide(self, params: dict[str, Any]) -> None:
        """Let a request go on to the proxy, or fail it here: other schemes always, media
        unless configured."""
        request_id = params["requestId"]
        scheme = params.get("request", {}).get("url", "").split(":", 1)[0].lower()
        media = params.get("resourceType") in _MEDIA_TYPES and not self.tier.settings.load_media
        with contextlib.suppress(FetchError):
            if scheme not in ("http", "https") or media:
                if scheme not in ("http", "https"):
                    self.tier.refused_schemes += 1
                await self.send(
                    "Fetch.failRequest", {"requestId": request_id, "errorReason": "BlockedByClient"}
                )
            else:
                await self.send("Fetch.continueRequest", {"requestId": request_id})

    async def _prepare(self) -> None:
        await self.send("Page.enable")
        await self.send("Network.enable")
        await self.send("Network.setBypassServiceWorker", {"bypass": True})
        await self.send("Page.addScriptToEvaluateOnNewDocument", {"source": _NO_SERVICE_WORKERS})
        await self.send(
            "Fetch.enable", {"patterns": [{"urlPattern": "*", "requestStage": "Request"}]}
        )
        tree = await self.send("Page.getFrameTree")
        self.main_frame = tree["frameTree"]["frame"]["id"]

    async def render(self, url: str, timeout_s: float, max_bytes: int) -> RenderedPage:
        """Navigate, wait for the load and a quiet network (or the time limit), read."""
        started = time.monotonic()
        await self._prepare()
        snapshot_s = min(2.0, timeout_s * _SNAPSHOT_SHARE)
        finished = True
        try:
            async with asyncio.timeout(
                max(0.0, timeout_s - snapshot_s - (time.monotonic() - started))
            ):
                await self._load(url)
        except TimeoutError:
            finished = False  # read what the page shows by now
        self._refuse_guarded_document(url)
        html, final_url, cut = await self._snapshot(url, max_bytes)
        elapsed = int((time.monotonic() - started) * 1000)
        return RenderedPage(final_url, html, elapsed, cut or not finished)

    async def _load(self, url: str) -> None:
        navigated = await self.send("Page.navigate", {"url": url})
        if navigated.get("errorText"):
            raise RenderError(url, f"the browser could not load the page: {navigated['errorText']}")
        await self.loaded.wait()
        while self.in_flight or time.monotonic() - self.last_activity < _QUIET_S:
            await asyncio.sleep(_POLL_S)
        waiting_until = time.monotonic() + _TEXT_WAIT_S
        while time.monotonic() < waiting_until:
            with contextlib.suppress(RenderError):  # navigating on (a meta refresh)
                if int(await self._evaluate(url, _BODY_TEXT) or 0) >= _TEXT_CHARS:
                    return
            await asyncio.sleep(_TEXT_POLL_S)

    async def _evaluate(self, url: str, expression: str) -> Any:
        """``expression``'s value, evaluated in a world of our own in the main frame;
        ``RenderError`` when it throws."""
        world = await self.send(
            "Page.createIsolatedWorld", {"frameId": self.main_frame, "worldName": "searcher"}
        )
        answer = await self.send(
            "Runtime.evaluate",
            {"expression": expression, "returnByValue": True,
             "contextId": world["executionContextId"]},
        )  # fmt: skip
        if "exceptionDetails" in answer:
            details = answer["exceptionDetails"]
            reason = details.get("exception", {}).get("description") or details.get("text")
            raise RenderError(url, f"the rendered page could not be read: {reason}"[:300])
        return answer.get("result", {}).get("value")

    def _refuse_guarded_document(self, url: str) -> None:
        """The main document was refused by the proxy (a redirect to a private address)."""
        if self.document_headers is not None and GUARD_HEADER in self.document_headers:
            raise FetchBlocked(url, REFUSED_NOT_PUBLIC)

    async def _snapshot(self, url: str, max_bytes: int) -> tuple[bytes, str, bool]:
        max_elements = self.tier.settings.max_dom_elements
        expression = _SNAPSHOT % {"max_elements": max_elements, "max_chars": max_bytes}
        value = await self._evaluate(url, expression) or {}
        if "html" not in value:
            elements = value.get("elements", "?")
            raise PageTooComplex(
                url, f"page too complex: {elements} elements once rendered "
                f"(browser.max_dom_elements={max_elements})",
            )  # fmt: skip
        html = str(value["html"]).encode("utf-8", errors="replace")
        cut = bool(value.get("cut")) or len(html) > max_bytes
        return html[:max_bytes], str(value.get("url") or url), cut
