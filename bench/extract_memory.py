"""Peak memory of the extraction workers under hostile PDFs, beside their bound (issue 24,
defect 1).

Each attack is read through searcher's HTTP API, ``/v1/fetch`` for one PDF and full-mode
``/v1/search`` for all four at once, against a server with two extraction workers whose
download budget is 10 MB a page (the most a request may ask for), so the 9 MB bomb is
read whole. The PDFs
are written by the testbed (``tests/testbed/pdf_bombs.py``): a form-XObject chain 8 deep
(2.3 KB), and Flate bombs of 1, 2 and 9 MB (one content stream expanding to about 1, 2
and 9 GB). A thread samples every worker's peak resident memory (VmHWM) while the request
runs (``tests/process_memory.py``); a worker that dies at the bound is sampled up to its
last few milliseconds, so a peak shown is at most the true one.

Printed per attack: the outcome of each page, the time the request took, the highest
peak of one worker, the most all the workers were seen holding at one time, and the
bound (``limits.max_extract_memory_mb``; by default sized to this machine). Before
the bound, the issue measured 1.8-1.9 GB (chain), 2.1 GB (1 MB bomb), 3.0 GB (2 MB), and
the 9 MB bomb growing ~500 MB/s to 5 GB at the 10 s time limit.

    PYTHONPATH=$PWD python -m bench.extract_memory [--bound-mb N] [--workers 2]
"""

from __future__ import annotations

import argparse
import tempfile
import time
from typing import Any

import httpx

from searcher.api.app import create_app
from searcher.config import Settings
from searcher.fetch.memory_bound import machine_memory_bytes, worker_memory_mb
from tests.process_memory import WorkerPeaks
from tests.testbed import TestbedServer
from tests.testbed.hostile import HOSTILE_RESULTS
from tests.testbed.server import ThreadedServer

ONE_AT_A_TIME = {
    "xobject chain, depth 8 x 10": "/pdf/xobject-chain?depth=8&fan=10",
    "flate bomb 1 MB (-> 1 GB)": "/pdf/flate-bomb?mb=1",
    "flate bomb 2 MB (-> 2 GB)": "/pdf/flate-bomb?mb=2",
    "flate bomb 9 MB (-> 9 GB)": "/pdf/flate-bomb?mb=9",
}
ALL_AT_ONCE = "all four at once (full mode)"
TIME = {"max_total_time_ms": 300_000, "fetch_timeout_ms": 300_000}
BIG_BUDGET = {
    "max_download_bytes_per_page": 10_000_000,
    "max_total_time_ms": 300_000,
    "per_request_timeout_ms": {"fetch": 300_000},
}


def settings(testbed: TestbedServer, state: str, workers: int, bound_mb: int) -> Settings:
    return Settings.model_validate(
        {
            "backends": {
                "order": ["searxng"],
                "searxng": {"base_url": testbed.searxng_url("hostile/pdf-bombs")},
                "duckduckgo": {"enabled": False},
            },
            # Time must not be what stops an attack: the bound must.
            "fetch": {
                "allowed_hosts": [f"127.0.0.1:{testbed.port}"],
                "extract_workers": workers,
                "extract_timeout_s": 300,
            },
            "limits": {"max_extract_memory_mb": bound_mb, "max_total_time_ms": 300_000},
            "budget": {"max_download_bytes_per_page": 10_000_000, **TIME},
            "service": {"cache": {"dir": f"{state}/cache", "enabled": False}},
            "cache": {"enabled": False},
            "state": {"dir": f"{state}/state"},
            "embeddings": {"provider": "none"},
        }
    )


def read_one(base: str, url: str) -> list[dict[str, Any]]:
    """The fetch block of one hostile PDF read through ``/v1/fetch``."""
    answer = httpx.post(f"{base}/v1/fetch", json={"url": url}, timeout=600)
    answer.raise_for_status()
    return [answer.json()["fetch"]]


def search_all(base: str, pages: int) -> list[dict[str, Any]]:
    """The fetch blocks of a full-mode search whose results are the hostile PDFs."""
    body = {
        "query": "hostile pdfs",
        "constraints": {"search_mode": "full"},
        "budget": {"max_results": pages, "max_fetch_pages": pages, **BIG_BUDGET},
    }
    answer = httpx.post(f"{base}/v1/search", json=body, timeout=600)
    answer.raise_for_status()
    return [item["fetch"] for item in answer.json()["items"]]


def outcome(fetches: list[dict[str, Any]]) -> str:
    said = [f"{f['status']}/{f['skip_reason']}" for f in fetches]
    return ", ".join(f"{n}x {s}" for s, n in sorted({s: said.count(s) for s in said}.items()))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--bound-mb", type=int, default=0, help="0: sized to the machine")
    parser.add_argument("--workers", type=int, default=2)
    args = parser.parse_args()
    bound = worker_memory_mb(args.bound_mb, args.workers, machine_memory_bytes())
    machine_mb = machine_memory_bytes() >> 20
    print(f"{args.workers} extraction workers, bound {bound} MB each "
          f"(limits.max_extract_memory_mb={args.bound_mb}; machine {machine_mb} MB)")  # fmt: skip
    header = (
        f"{'attack':32} {'outcome':30} {'time':>7} {'worker peak':>12} {'together':>9} {'bound':>7}"
    )
    print(header)
    with TestbedServer() as testbed, tempfile.TemporaryDirectory() as state:
        app = create_app(settings(testbed, state, args.workers, args.bound_mb))
        server = ThreadedServer(app, lifespan="on").start()
        try:
            runs = [(name, path) for name, path in ONE_AT_A_TIME.items()] + [(ALL_AT_ONCE, "")]
            for name, path in runs:
                started = time.perf_counter()
                with WorkerPeaks() as peaks:
                    if path:
                        fetches = read_one(server.base_url, testbed.url(path))
                    else:
                        fetches = search_all(server.base_url, len(HOSTILE_RESULTS["pdf-bombs"]))
                took = time.perf_counter() - started
                print(f"{name:32} {outcome(fetches):30} {took:6.1f}s "
                      f"{peaks.highest():9.0f} MB {peaks.together:6.0f} MB "
                      f"{bound:4d} MB")  # fmt: skip
        finally:
            server.stop()
    print("worker peak: the highest VmHWM of one worker; together: the most the workers held "
          "at one sample (VmRSS summed)")  # fmt: skip


if __name__ == "__main__":
    main()
