"""The tape at the headless-browser tier: a recording keeps what ``BrowserTier.render``
gave the reader for a URL — the DOM it read (HTML, UTF-8), where the page ended up, how
long it took and whether it is partial — or why it could not (its error's class and
words); a replay gives the reader that, with no browser.

Why this edge, and not the browser's own traffic (the requests its proxy passed): a
page's scripts make requests whose number, order and timing vary run to run (timers,
``Date.now``, races between fetches), and replaying them would still need a browser to
run the scripts again. The rendered DOM is what the reader consumes: from it on,
extraction, the pack and the answer run again for real, so a change to any of them is
judged on the recorded page.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable

from searcher.errors import (
    BrowserGone,
    FetchBlocked,
    FetchError,
    FetchTimeout,
    PageTooComplex,
    RenderError,
)
from searcher.fetch.renderer import RenderedPage
from searcher.recording.tape import NOT_RECORDED, Exchange, Failure, current_tape

# What a render's headers hold (the body is the DOM's HTML).
FINAL_URL = "x-rendered-url"
RENDER_MS = "x-render-ms"
TRUNCATED = "x-truncated"
# A render's failure, by its error's class (most specific first).
_FAILURES: tuple[tuple[type[FetchError], Failure], ...] = (
    (BrowserGone, "browser_gone"),
    (PageTooComplex, "too_complex"),
    (FetchBlocked, "blocked"),
    (FetchTimeout, "timeout"),
)
_ERRORS: dict[Failure, type[FetchError]] = {
    **{failure: error for error, failure in _FAILURES},
    "render": RenderError,
}


def _failure_of(exc: FetchError) -> Failure:
    return next((failure for error, failure in _FAILURES if isinstance(exc, error)), "render")


def recorded_render(url: str) -> bool | None:
    """While a search is replayed: whether its recording holds a render of ``url`` still
    to be given (the recording stands in for the browser); None when not replaying."""
    tape = current_tape()
    if tape is None or not tape.replaying:
        return None
    return tape.holds("render", "RENDER", url)


async def taped_render(url: str, render: Callable[[], Awaitable[RenderedPage]]) -> RenderedPage:
    """``render`` (the browser drawing ``url``), kept on the running request's tape or
    answered from it; a ``FetchError`` is kept and raised again as the same class with
    the same words. A replay's render not in the recording fails as ``RenderError``."""
    tape = current_tape()
    if tape is None:
        return await render()
    if tape.replaying:
        found = tape.answer("render", "RENDER", url)
        if found is None:
            raise RenderError(url, NOT_RECORDED)
        if found.failure is not None:
            raise _ERRORS.get(found.failure, RenderError)(url, found.words)
        said = dict(found.headers)
        return RenderedPage(
            said.get(FINAL_URL, url), found.body, int(said.get(RENDER_MS, "0")),
            said.get(TRUNCATED) == "1",
        )  # fmt: skip
    try:
        page = await render()
    except FetchError as exc:
        words = exc.reason.encode()
        tape.record(Exchange("render", "RENDER", url, "", 0, (), words, _failure_of(exc)))
        raise
    headers = (
        (FINAL_URL, page.url), (RENDER_MS, str(page.render_ms)),
        (TRUNCATED, "1" if page.truncated else "0"),
    )  # fmt: skip
    tape.record(Exchange("render", "RENDER", url, "", 200, headers, page.html))
    return page
