"""A Redis outage under a research job (issue 24, defect 4): two ``searcher serve``
processes share one real Redis; it is stopped (saving its data) right after the job's
first event, the job finishes on the worker running it, Redis is started again after
``--outage-s``. Printed per run: how long after Redis came back the other worker showed
the job ``done``, and how long until its event stream ended; and what that worker said
meanwhile (it must never say ``failed``).

    python -m bench.research_outage --runs 3 --outage-s 5
"""

from __future__ import annotations

import argparse
import statistics
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx

from bench.processes import searcher, testbed
from tests.redis_server import RedisServer
from tests.test_research import QUESTION, follow

OWNER_TTL_S = 2.0


def config(tb: str, redis_url: str, home: Path) -> dict[str, Any]:
    return {
        "backends": {"order": ["searxng"], "duckduckgo": {"enabled": False},
                     "searxng": {"base_url": f"{tb}/searxng/slow/3000"}},
        "fetch": {"allowed_hosts": [tb.removeprefix("http://")]},
        "state": {"dir": str(home / "state"), "redis_url": redis_url},
        "service": {"cache": {"dir": str(home / "cache")}},
        "embeddings": {"provider": "none"},
        "research": {"owner_ttl_s": OWNER_TTL_S, "heartbeat_s": 0.5},
    }  # fmt: skip


def status(base: str, job_id: str) -> str:
    response = httpx.get(f"{base}/v1/research/{job_id}", timeout=30)
    return response.json()["status"] if response.status_code == 200 else str(response.status_code)


def one_run(tb: str, outage_s: float) -> tuple[float, float, set[str]]:
    with RedisServer() as redis, tempfile.TemporaryDirectory() as tmp:
        homes = [Path(tmp) / "a", Path(tmp) / "b"]
        with (
            searcher(config(tb, redis.url, homes[0]), ready_s=120) as runner,
            searcher(config(tb, redis.url, homes[1]), ready_s=120) as other,
        ):
            body = {"query": QUESTION, "preset": "minimal"}
            job_id = httpx.post(f"{runner}/v1/research", json=body, timeout=30).json()["id"]
            events: list[Any] = []
            reader = threading.Thread(target=follow, args=(other, job_id),
                                      kwargs={"into": events, "timeout": 600})  # fmt: skip
            reader.start()
            while not events:
                time.sleep(0.02)
            redis.stop()
            stopped = time.monotonic()
            said = set()
            while status(runner, job_id) != "done":
                said.add(status(other, job_id))
                time.sleep(0.1)
            time.sleep(max(0.0, outage_s - (time.monotonic() - stopped)))
            redis.start()
            back = time.monotonic()
            while (now := status(other, job_id)) != "done":
                said.add(now)
                time.sleep(0.05)
            shown = time.monotonic() - back
            reader.join()
            ended = time.monotonic() - back
    return shown, ended, said


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--outage-s", type=float, default=5.0)
    args = parser.parse_args()
    shown_all, ended_all = [], []
    with testbed() as tb:
        for n in range(1, args.runs + 1):
            shown, ended, said = one_run(tb, args.outage_s)
            shown_all.append(shown)
            ended_all.append(ended)
            print(f"run {n}: outage {args.outage_s:.0f} s (owner_ttl_s {OWNER_TTL_S:.0f}); after "
                  f"Redis is back: done on the other worker in {shown:.2f} s, its stream "
                  f"ended in {ended:.2f} s; it said meanwhile {sorted(said)}")  # fmt: skip
    print(
        f"median: done shown in {statistics.median(shown_all):.2f} s, "
        f"stream ended in {statistics.median(ended_all):.2f} s"
    )


if __name__ == "__main__":
    main()
