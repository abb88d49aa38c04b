"""One truth across workers (issue 24, defect 4): two ``searcher serve`` processes sharing
one real Redis, which is stopped mid-job and started again (with its data, as a Redis
that persists does). The job finishes during the outage on the worker running it; the
other worker neither calls it ``running`` for an hour nor marks it ``failed:
interrupted``, and its stream ends with the job's own ``done`` once the store is back."""

from __future__ import annotations

import threading
import time
from pathlib import Path
from typing import Any

import httpx

from tests.redis_server import RedisServer
from tests.test_research import QUESTION, follow, serving_process, start, wait_for

OWNER_TTL_S = 4.0  # heartbeats a second and more apart: room for a loaded machine


def worker_config(testbed: Any, redis_url: str, home: Path) -> dict[str, Any]:
    # Each search takes 4 s: the job is still running when the store goes away.
    return {
        "backends": {"order": ["searxng"], "duckduckgo": {"enabled": False},
                     "searxng": {"base_url": testbed.searxng_url("slow/4000")}},
        "fetch": {"allowed_hosts": [f"127.0.0.1:{testbed.port}"]},
        "state": {"dir": str(home / "state"), "redis_url": redis_url},
        "service": {"cache": {"dir": str(home / "cache")}},
        "embeddings": {"provider": "none"},
        "research": {"owner_ttl_s": OWNER_TTL_S, "heartbeat_s": 0.5},
    }  # fmt: skip


def status_on(base: str, job_id: str) -> str:
    """The job's status as ``base`` tells it, or the HTTP status when it cannot."""
    response = httpx.get(f"{base}/v1/research/{job_id}", timeout=30)
    return (
        str(response.json()["status"]) if response.status_code == 200 else str(response.status_code)
    )


def test_a_job_ending_while_redis_is_down_ends_the_same_on_every_worker(testbed, tmp_path):
    with RedisServer() as redis_server:
        homes = [tmp_path / "a", tmp_path / "b"]
        for home in homes:
            home.mkdir()
        config_a, config_b = (worker_config(testbed, redis_server.url, h) for h in homes)
        with (
            serving_process(config_a, homes[0]) as (runner, _),
            serving_process(config_b, homes[1]) as (other, _),
        ):
            job_id = start(runner, {"query": QUESTION, "preset": "minimal"})
            streamed: list[Any] = []
            reader = threading.Thread(
                target=follow, args=(other, job_id), kwargs={"into": streamed, "timeout": 120}
            )
            reader.start()
            wait_for(lambda: len(streamed) >= 1, 30, "the other worker's stream to start")

            redis_server.stop()
            stopped = time.monotonic()
            # Meanwhile the job finishes where it runs; the other worker cannot know.
            wait_for(lambda: status_on(runner, job_id) == "done", 60, "the job to finish")
            assert status_on(other, job_id) == "503"  # not "not found", not a guess
            # An outage longer than owner_ttl_s: the runner's heartbeat expires in Redis.
            time.sleep(max(0.0, 2 * OWNER_TTL_S - (time.monotonic() - stopped)))
            assert reader.is_alive()  # the stream waits for the store, it does not give up
            redis_server.start()

            seen: list[str] = []

            def settled() -> bool:
                seen.append(status_on(other, job_id))
                return seen[-1] not in {"running", "queued", "503"}

            wait_for(settled, 30, "the other worker to see the job end")
            assert seen[-1] == "done", seen
            assert "failed" not in seen, seen
            reader.join(timeout=30)
            assert not reader.is_alive(), "the other worker's stream did not end"
            # Long after: both tell the same, again and again (no done / failed in turn).
            time.sleep(OWNER_TTL_S)
            assert {status_on(base, job_id) for base in (runner, other) * 3} == {"done"}
    assert streamed[-1]["event"] == "done"
    assert streamed[-1]["data"]["data"]["status"] == "done"
    assert [int(e["id"]) for e in streamed] == list(range(1, len(streamed) + 1))
