"""The headless-browser tier (issue 29): what it reads, what it costs, what it refuses.

On the testbed's JavaScript pages (``tests/testbed/browser_pages.py``), through the page
reader as full mode uses it (fetch, extract, render when a shell is found), no cache:

- text recall: the share of each page's sentences found in its extracted text, with the
  tier off (``render: never``) and on (``auto``);
- throughput: ``--renders`` reads of a JavaScript page, ``--concurrency`` at a time,
  pages/s and p50/p99 of one rendered read;
- memory: the browser's processes (PSS summed) sampled every 50 renders over the run,
  and how often the memory cap restarted it;
- hostile pages: the requests the guard refused (WebSocket and redirect to a loopback
  listener, ``fetch()`` of the metadata endpoint), and the connections that listener saw.

Kept out of CI. ``python -m bench.browser_tier --renders 500`` (the issue's figure; a few
minutes on a loaded 2-core machine); the report says how many ran.
"""

from __future__ import annotations

import argparse
import asyncio
import socket
import statistics
import tempfile
import time
from pathlib import Path

from bench.processes import percentile
from searcher.cache.extraction import ExtractionCache
from searcher.config import BrowserSettings, FetchSettings
from searcher.fetch.extractor import build_extractor
from searcher.fetch.fetcher import FetchLimits, PageFetcher
from searcher.fetch.page_reader import PageReader
from searcher.fetch.renderer import BrowserTier
from tests.testbed import browser_pages as pages
from tests.testbed.server import TestbedServer

RECALL_PAGES = {
    "/js/written": pages.WRITTEN_TEXT,
    "/js/spa/home": (pages.SPA_VIEWS["home"][1],),
    "/js/spa/pricing": (pages.SPA_VIEWS["pricing"][1],),
    "/js/spa/docs": (pages.SPA_VIEWS["docs"][1],),
    "/js/websocket": (pages.WEBSOCKET_TEXT,),
    "/js/metadata": (pages.METADATA_TEXT,),
}


def limits(render: str) -> FetchLimits:
    return FetchLimits(30.0, 10_000_000, ("text/html",), 5, render)  # type: ignore[arg-type]


async def recall(reader: PageReader, testbed: TestbedServer, render: str) -> float:
    found = total = 0
    for path, sentences in RECALL_PAGES.items():
        page = await reader.read(testbed.url(path), limits(render), 100_000, "bench")
        text = page.content or ""
        found += sum(s in text for s in sentences)
        total += len(sentences)
    return found / total


async def throughput(
    reader: PageReader, tier: BrowserTier, url: str, count: int, concurrency: int
) -> None:
    times: list[float] = []
    memory: list[int] = []
    gate = asyncio.Semaphore(concurrency)
    failed = 0

    async def one(i: int) -> None:
        nonlocal failed
        async with gate:
            started = time.monotonic()
            page = await reader.read(url, limits("auto"), 100_000, f"bench-{i % concurrency}")
            times.append(time.monotonic() - started)
            failed += not page.rendered
            if len(times) % 50 == 0:
                memory.append(tier.memory_bytes())

    started = time.monotonic()
    await asyncio.gather(*(one(i) for i in range(count)))
    wall = time.monotonic() - started
    ms = sorted(t * 1000 for t in times)
    print(f"renders: {count} ran, {failed} not rendered, concurrency {concurrency}")
    print(f"  pages/s {count / wall:.2f}; per page p50 {statistics.median(ms):.0f} ms, "
          f"p99 {percentile(ms, 0.99):.0f} ms")  # fmt: skip
    if memory:
        mb = [m / 1e6 for m in memory]
        print(f"  browser memory (PSS, every 50 renders): first {mb[0]:.0f} MB, "
              f"max {max(mb):.0f} MB, last {mb[-1]:.0f} MB; restarts {tier.restarts}")  # fmt: skip


async def hostile(reader: PageReader, tier: BrowserTier, testbed: TestbedServer) -> None:
    listener = socket.create_server(("127.0.0.1", 0))
    listener.setblocking(False)
    port = listener.getsockname()[1]
    before = tier.proxy.refused
    for path in (
        f"/js/websocket?to=ws://127.0.0.1:{port}/socket",
        "/js/metadata",
        f"/js/redirect-browser?to=http://127.0.0.1:{port}/admin",
    ):
        await reader.read(testbed.url(path), limits("auto"), 100_000, "bench")
    accepted = 0
    try:
        while True:
            conn, _ = listener.accept()
            accepted += 1
            conn.close()
    except BlockingIOError:
        pass
    listener.close()
    # Names that do not resolve (Chromium's own calls home, offline) are not the guard's.
    refused = [d for d in tier.proxy.decisions if not d.allowed and d.reason != ""]
    guarded = [d for d in refused if not d.reason.startswith("unresolved")]
    print(f"hostile pages: {tier.proxy.refused - before} requests refused before connecting, "
          f"{accepted} connections reached the loopback listener; "
          f"{len(refused) - len(guarded)} to names that do not resolve")  # fmt: skip
    for d in guarded[-10:]:
        print(f"  refused {d.method} {d.host}:{d.port} ({d.reason})")


async def main(renders: int, concurrency: int, max_pages: int) -> None:
    with TestbedServer() as testbed, tempfile.TemporaryDirectory() as cache_dir:
        allowed = [f"127.0.0.1:{testbed.port}"]
        settings = BrowserSettings(max_pages=max_pages, client_share=1.0)
        tier = BrowserTier(settings, allowed)
        fetcher = PageFetcher(allowed, "searcher-bench")
        extractor = build_extractor(FetchSettings(extract_workers=1), in_thread=True)
        cache = ExtractionCache(Path(cache_dir), 3600, enabled=False)
        reader = PageReader(fetcher, extractor, cache, 8, tier)
        try:
            print(f"browser: {tier.executable}")
            off = await recall(reader, testbed, "never")
            on = await recall(reader, testbed, "auto")
            print(f"text recall on the JavaScript pages: without the tier {off:.0%}, with {on:.0%}")
            await throughput(reader, tier, testbed.url("/js/written"), renders, concurrency)
            await hostile(reader, tier, testbed)
        finally:
            await tier.aclose()
            await fetcher.aclose()
            extractor.close()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--renders", type=int, default=500, help="rendered reads (default 500)")
    parser.add_argument("--concurrency", type=int, default=4, help="reads at once (default 4)")
    parser.add_argument("--max-pages", type=int, default=4, help="browser.max_pages (default 4)")
    args = parser.parse_args()
    asyncio.run(main(args.renders, args.concurrency, args.max_pages))
