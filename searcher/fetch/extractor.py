"""The extraction step: the right text function for a body, run in the worker pool under
a hard time limit, after a pre-scan that refuses pages too complex to parse.

``extract_document`` is what a worker runs; ``Extractor`` is what the page reader calls.
The text functions themselves live in ``searcher.fetch.extract`` (HTML, plain text) and
``searcher.fetch.pdf``.
"""

from __future__ import annotations

import asyncio
import logging
import os
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace

from searcher.config import FetchSettings, LimitsSettings
from searcher.errors import (
    ExtractionError,
    ExtractionInterrupted,
    ExtractionTimeout,
    ExtractionTooLarge,
    PageTooComplex,
)
from searcher.fetch.memory_bound import MB, machine_memory_bytes, worker_memory_mb
from searcher.fetch.pdf import PDF_MEDIA_TYPE, PdfUnreadable, pdf_text
from searcher.fetch.prescan import ComplexityLimits, complexity_problem
from searcher.fetch.worker_pool import (
    TaskFailed,
    TaskKilled,
    WorkerDied,
    WorkerOutOfMemory,
    WorkerPool,
    WorkerWontStart,
)

log = logging.getLogger(__name__)

_MARKUP_TYPES = frozenset({"text/html", "application/xhtml+xml"})
# Imported once by the fork server, so that a worker replacing a killed one starts at once.
# ``searcher.fetch.extract`` (trafilatura, lxml) is imported by name, here and in the
# functions below, rather than at the top: ``searcher index add`` builds an extractor for
# every run, and a run without HTML files should not pay ~0.5 s of CPU to import them.
_PRELOAD = ("searcher.fetch.extractor", "searcher.fetch.extract", "pypdfium2")
# The server's default ceiling on a page's extracted text (limits.max_extract_chars_per_page).
DEFAULT_MAX_CHARS: int = LimitsSettings.model_fields["max_extract_chars_per_page"].default


@dataclass(frozen=True)
class ExtractionLimits:
    """What one extraction may cost."""

    timeout_s: float = 10.0  # wall time in a worker; past it the worker is killed
    complexity: ComplexityLimits = field(default_factory=ComplexityLimits)
    pdf_max_pages: int = 200
    # Text kept per page: cut in the worker, so that no more crosses the pipe or is cached
    # (a 10 KB PDF can hold 20 million characters; an HTML page's text is at least
    # bounded by its download size).
    max_chars: int = DEFAULT_MAX_CHARS
    # Address space of one worker process, in MB (``None``: unbounded); set once, when a
    # worker starts, so it holds for every task the worker runs.
    max_memory_mb: int | None = None


class _TooComplex(Exception):
    """Raised in the worker; one plain argument, so that it crosses the pipe as it is."""


def extract_document(
    body: bytes, url: str, content_type: str, charset: str | None, limits: ExtractionLimits
) -> str:
    """The main text of a fetched body, at most ``limits.max_chars`` characters of it: PDF
    text, or a pre-scanned page's main text."""
    media = content_type.lower()
    if media == PDF_MEDIA_TYPE:
        return pdf_text(body, limits.pdf_max_pages, limits.max_chars)
    if media in _MARKUP_TYPES:
        problem = complexity_problem(body, limits.complexity)
        if problem is not None:
            raise _TooComplex(problem)
    from searcher.fetch.extract import extract_main_text  # see _PRELOAD

    return extract_main_text(body, url, content_type, charset)[: limits.max_chars]


class Extractor:
    """Extracts text in a ``WorkerPool`` of processes (or a thread, for one-shot runs).

    Processes because extraction is CPU-bound and would hold the GIL, and because only a
    process can be stopped: a task past ``limits.timeout_s``, or whose caller gave up, has
    its worker killed and replaced; one past ``limits.max_memory_mb`` fails in its worker,
    which is replaced too. ``client`` names the caller whose share of the pool a task
    counts against (``None``: anonymous, no share limit).

    ``in_thread=True`` runs extraction in a thread: no process start-up, but a runaway
    extraction cannot be stopped (the caller still stops waiting at the time limit) and
    its memory is not bounded. Use it in tests and single CLI commands; the pre-scan still
    applies.

    With the "forkserver" start method, workers re-import the program's main module, so a
    script that uses the pool must keep its work under ``if __name__ == "__main__":``.
    """

    def __init__(
        self,
        workers: int = 0,
        *,
        in_thread: bool = False,
        limits: ExtractionLimits | None = None,
        client_share: int | None = None,
    ) -> None:
        self._workers = workers or os.cpu_count() or 1
        self._in_thread = in_thread
        self.limits = limits or ExtractionLimits()
        self._client_share = client_share
        self._pool: WorkerPool | None = None
        # One thread, so extractions run one at a time: trafilatura shares lxml parsers
        # between calls, and two threads parsing at once corrupted memory (an abort in
        # lxml, seen when research read pages in the CLI's in-thread mode).
        self._thread: ThreadPoolExecutor | None = None

    @property
    def name(self) -> str:
        """The extractor's tag, for cache keys: name, version and output format."""
        from searcher.fetch.extract import EXTRACTOR_TAG  # see _PRELOAD

        return EXTRACTOR_TAG

    @property
    def pool(self) -> WorkerPool:
        """The worker pool, started on first use."""
        if self._pool is None:
            from searcher.fetch.extract import warm_up  # see _PRELOAD

            # warm_up: each new worker loads trafilatura's lazy data before its first page.
            memory_mb = self.limits.max_memory_mb
            self._pool = WorkerPool(
                self._workers, self._client_share, preload=_PRELOAD, initializer=warm_up,
                memory_limit_bytes=memory_mb * MB if memory_mb else None,
            )  # fmt: skip
        return self._pool

    async def extract(
        self,
        body: bytes,
        url: str,
        content_type: str,
        charset: str | None,
        *,
        client: str | None = None,
        max_chars: int | None = None,
    ) -> str:
        """The body's main text, cut at ``max_chars`` characters (default:
        ``limits.max_chars``); raises ``ExtractionError`` (``PageTooComplex``,
        ``ExtractionTimeout``) when there is none to give."""
        limits = self.limits if max_chars is None else replace(self.limits, max_chars=max_chars)
        args = (body, url, content_type, charset, limits)
        try:
            if self._in_thread:
                if self._thread is None:
                    self._thread = ThreadPoolExecutor(1, thread_name_prefix="searcher-extract")
                loop = asyncio.get_running_loop()
                # A waiting call that times out is cancelled before it starts.
                async with asyncio.timeout(self.limits.timeout_s):
                    return await loop.run_in_executor(self._thread, extract_document, *args)
            text: str = await self.pool.run(
                extract_document, args, timeout_s=self.limits.timeout_s, client=client
            )
            return text
        except TaskFailed as exc:
            raise _translated(url, exc.error) from exc
        except (_TooComplex, PdfUnreadable) as exc:
            raise _translated(url, exc) from exc
        except (TaskKilled, TimeoutError) as exc:
            raise ExtractionTimeout(
                url, f"extraction took longer than {self.limits.timeout_s:g} s and was stopped"
            ) from exc
        except WorkerOutOfMemory as exc:
            log.info("extraction of %s ran out of memory: %s", url, exc)
            raise ExtractionTooLarge(
                url, f"extraction needed more than {self.limits.max_memory_mb} MB of memory "
                "and was stopped",
            ) from exc  # fmt: skip
        except WorkerDied as exc:
            raise ExtractionInterrupted(url, "an extraction worker died; it was replaced") from exc
        except WorkerWontStart as exc:
            raise ExtractionInterrupted(url, str(exc)) from exc
        except Exception as exc:  # anything trafilatura or lxml raised in the thread
            raise _translated(url, exc) from exc

    def close(self) -> None:
        """Stop the worker processes (or the thread)."""
        pool, self._pool = self._pool, None
        if pool is not None:
            pool.close()
        thread, self._thread = self._thread, None
        if thread is not None:
            thread.shutdown(wait=False, cancel_futures=True)


def build_extractor(
    settings: FetchSettings,
    *,
    in_thread: bool = False,
    max_chars: int = DEFAULT_MAX_CHARS,
    memory_mb: int = 0,
) -> Extractor:
    """The extractor the configuration describes; ``max_chars`` is the server's ceiling on
    a page's text (``limits.max_extract_chars_per_page``), ``memory_mb`` each worker's
    memory bound (``limits.max_extract_memory_mb``; 0: sized to the machine)."""
    workers = settings.extract_workers or os.cpu_count() or 1
    limits = ExtractionLimits(
        timeout_s=settings.extract_timeout_s,
        complexity=ComplexityLimits(
            max_elements=settings.max_page_elements,
            max_depth=settings.max_page_depth,
            max_depth_sum=settings.max_page_depth_sum,
            max_attributes=settings.max_element_attributes,
            max_row_cells=settings.max_table_row_cells,
        ),
        pdf_max_pages=settings.pdf_max_pages,
        max_chars=max_chars,
        max_memory_mb=worker_memory_mb(memory_mb, workers, machine_memory_bytes()),
    )
    share = max(1, int(workers * settings.extract_client_share))
    return Extractor(workers, in_thread=in_thread, limits=limits, client_share=share)


def _translated(url: str, error: BaseException) -> ExtractionError:
    if isinstance(error, _TooComplex):
        log.info("extraction refused %s: page too complex (%s)", url, error)
        return PageTooComplex(url, "page too complex")
    if isinstance(error, PdfUnreadable):
        return ExtractionError(url, str(error))
    return ExtractionError(url, f"extraction failed: {type(error).__name__}: {error}")
