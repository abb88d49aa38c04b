"""Loading the embedder without letting it hold anything up.

A model2vec model named by its hub name may need the network (huggingface_hub asks the hub
for the newest revision even when the model is cached), and a hub that accepts the
connection and never answers would hang whoever waits for it. So the load runs in a daemon
thread — one that cannot keep the process alive, unlike the default executor's, which
``asyncio.run`` joins on the way out — and is waited for with a time limit. Until it is
ready, or when it failed, near-duplicate removal is off and ``/v1/health`` says why.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Literal

from searcher.config import EmbeddingSettings
from searcher.embedding.embedders import Embedder, build_embedder
from searcher.errors import EmbedderUnavailable

log = logging.getLogger("searcher.embedding.embedders")

EmbedderState = Literal["off", "loading", "ready", "failed"]

OFFLINE_HINT = (
    "to run offline, set embeddings.model to a local model directory, or set "
    "HF_HUB_OFFLINE=1 to use the model from the hub cache, or set embeddings.provider "
    "to none"
)


def needs_network(settings: EmbeddingSettings) -> bool:
    """Whether building this embedder may talk to a model hub: a model2vec model given by
    hub name (a local directory, the ``openai`` provider and ``none`` never do at load)."""
    if settings.provider != "model2vec":
        return False
    model = settings.model
    return not (model.startswith(("/", "./", "../", "~")) or Path(model).expanduser().is_dir())


class EmbedderLoad:
    """The configured embedder, loaded in the background under ``embeddings.load_timeout_s``.

    ``on_ready`` is called on the event loop with the embedder once it is loaded (the
    service then starts using it); nothing is called when loading fails or times out."""

    def __init__(
        self,
        settings: EmbeddingSettings,
        on_ready: Callable[[Embedder], None] | None = None,
        build: Callable[[EmbeddingSettings], Embedder | None] = build_embedder,
    ) -> None:
        self._settings = settings
        self._on_ready = on_ready
        self._build = build
        self._task: asyncio.Task[None] | None = None
        self._started = 0.0
        self.embedder: Embedder | None = None
        self.state: EmbedderState = "off" if settings.provider == "none" else "loading"
        self._failure: str | None = None

    @property
    def problem(self) -> str | None:
        """Why near-duplicate removal is off right now; None when it is on or switched off
        on purpose (``embeddings.provider: none``)."""
        if self.state == "loading":
            waited = time.monotonic() - self._started if self._started else 0.0
            return (
                f"near-duplicate removal is off while the embedding model "
                f"{self._settings.model!r} loads ({waited:.0f} s so far, at most "
                f"{self._settings.load_timeout_s:g} s: embeddings.load_timeout_s)"
            )
        return self._failure

    def start(self) -> None:
        """Begin loading (on the running event loop); returns at once."""
        if self.state != "loading" or self._task is not None:
            return
        self._started = time.monotonic()
        self._task = asyncio.get_running_loop().create_task(self._load())

    async def wait(self) -> None:
        """Until the load has finished, failed or timed out (never longer than
        ``embeddings.load_timeout_s``)."""
        if self._task is not None:
            await asyncio.shield(self._task)

    async def aclose(self) -> None:
        """Stop waiting for a load still under way; close the embedder if it has a client."""
        if self._task is not None and not self._task.done():
            self._task.cancel()
            with contextlib.suppress(asyncio.CancelledError):
                await self._task
        close = getattr(self.embedder, "aclose", None)
        if close is not None:
            await close()

    async def _load(self) -> None:
        loop = asyncio.get_running_loop()
        result: asyncio.Future[Embedder | None] = loop.create_future()
        thread = threading.Thread(
            target=_build_in_thread,
            args=(self._build, self._settings, loop, result),
            name="searcher-embedder-load",
            daemon=True,
        )
        thread.start()
        timeout_s = self._settings.load_timeout_s
        try:
            async with asyncio.timeout(timeout_s):
                embedder = await result
        except TimeoutError:
            self._fail(
                f"near-duplicate removal is off: the embedding model {self._settings.model!r} "
                f"(embeddings.model) did not load within {timeout_s:g} s "
                f"(embeddings.load_timeout_s); is the model hub reachable? {OFFLINE_HINT}"
            )
            return
        except EmbedderUnavailable as exc:
            self._fail(f"near-duplicate removal is off: {exc}")
            return
        except Exception as exc:  # a bug in a model library must not take the service down
            self._fail(f"near-duplicate removal is off: {type(exc).__name__}: {exc}")
            return
        if embedder is None:
            self.state = "off"
            return
        self.embedder, self.state = embedder, "ready"
        log.info("embedder %s ready after %.1f s", embedder.name, time.monotonic() - self._started)
        if self._on_ready is not None:
            self._on_ready(embedder)

    def _fail(self, problem: str) -> None:
        # Said once here and in /v1/health, not in every response.
        self.state, self._failure = "failed", problem
        log.warning("%s", problem)


def _build_in_thread(
    build: Callable[[EmbeddingSettings], Embedder | None],
    settings: EmbeddingSettings,
    loop: asyncio.AbstractEventLoop,
    result: asyncio.Future[Embedder | None],
) -> None:
    """Runs in the loader thread; hands the outcome to the loop, if it is still there."""

    def deliver(outcome: Embedder | None, error: BaseException | None) -> None:
        if result.done():  # timed out or cancelled meanwhile
            return
        if error is not None:
            result.set_exception(error)
        else:
            result.set_result(outcome)

    try:
        outcome, error = build(settings), None
    except BaseException as exc:  # delivered to the loop, which decides
        outcome, error = None, exc
    with contextlib.suppress(RuntimeError):  # the loop closed while we were loading
        loop.call_soon_threadsafe(deliver, outcome, error)
