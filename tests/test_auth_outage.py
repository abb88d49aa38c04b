"""API keys while the state store is down or restarting, over real HTTP with a real
``redis-server`` (tests/redis_server.py) stopped and started under a running searcher."""

from __future__ import annotations

import json
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest

from tests.redis_server import RedisServer
from tests.test_auth import bearer, cli, create_key

DEADLINE_S = 20.0


@pytest.fixture
def redis() -> Iterator[RedisServer]:
    """A Redis of this test's own, to stop and start again."""
    with RedisServer() as server:
        yield server


def redis_config(tmp_path: Path, url: str) -> str:
    """A config file for the CLI that shares the server's Redis."""
    path = tmp_path / "redis.yaml"
    path.write_text(json.dumps({"state": {"redis_url": url}}))
    return str(path)


def keyed_on_redis(make_settings, serve_searcher, redis: RedisServer, key_check_s: float) -> str:
    settings = make_settings(
        auth={"enabled": True, "key_check_s": key_check_s},
        state={"redis_url": redis.url, "redis_timeout_s": 1.0},
    )
    return serve_searcher(settings)


def tools(base: str, secret: str) -> httpx.Response:
    return httpx.get(f"{base}/v1/tools/openai", headers=bearer(secret), timeout=10)


def test_a_key_revoked_before_an_outage_is_refused_within_the_window(
    make_settings, serve_searcher, redis, tmp_path
):
    base = keyed_on_redis(make_settings, serve_searcher, redis, key_check_s=0.5)
    config = redis_config(tmp_path, redis.url)
    secret = create_key(config, "leaving")
    assert tools(base, secret).status_code == 200  # checked and trusted for 0.5 s
    assert cli("keys", "revoke", "leaving", "--config", config).exit_code == 0
    redis.kill()  # the revocation is in the store, which nobody can read now
    # Within the window the worker may still trust its last check; after it, it must not.
    # (Before: the key stayed accepted for the whole outage.)
    deadline = time.monotonic() + DEADLINE_S
    answer = tools(base, secret)
    while answer.status_code == 200 and time.monotonic() < deadline:
        answer = tools(base, secret)
    assert answer.status_code == 503, answer.text
    assert answer.json()["error"]["type"] == "unavailable"
    assert answer.headers["retry-after"]
    assert tools(base, secret).status_code == 503  # and stays refused
    health = httpx.get(f"{base}/v1/health")
    assert health.status_code == 503 and health.json()["status"] == "unavailable"


def test_a_key_checked_within_the_window_works_and_usage_says_store_unavailable(
    make_settings, serve_searcher, redis, tmp_path
):
    base = keyed_on_redis(make_settings, serve_searcher, redis, key_check_s=3600)
    secret = create_key(redis_config(tmp_path, redis.url), "steady", "--quota", "100/day")
    usage = httpx.get(f"{base}/v1/usage", headers=bearer(secret))
    assert usage.status_code == 200 and usage.json()["key"]["name"] == "steady"
    redis.kill()
    # The operator chose a long window: the key, checked a moment ago, goes on working ...
    assert tools(base, secret).status_code == 200
    # ... but its usage cannot be read: 503 "unavailable", never 404 "the key is gone".
    usage = httpx.get(f"{base}/v1/usage", headers=bearer(secret))
    assert usage.status_code == 503, usage.text
    assert usage.json()["error"]["type"] == "unavailable"
    assert "state store" in usage.json()["error"]["message"]
    assert "redis://" not in usage.text  # the internal address stays in the log


def test_a_redis_restart_costs_no_request(make_settings, serve_searcher, redis, tmp_path):
    # key_check_s 0: every request asks the store, so the first one after the restart
    # meets the connection the restart closed.
    base = keyed_on_redis(make_settings, serve_searcher, redis, key_check_s=0)
    config = redis_config(tmp_path, redis.url)
    assert tools(base, create_key(config, "before")).status_code == 200
    redis.kill()
    redis.start()  # the same port, an empty Redis (no persistence): keys are re-created
    secret = create_key(config, "after")
    answer = tools(base, secret)
    assert answer.status_code == 200, answer.text  # before: 503 until the cooldown ended
    health = httpx.get(f"{base}/v1/health").json()
    assert health["state"]["ok"] is True and health["state"]["failures"] == 0
