"""Research jobs belong to the API key that started them (issue 24, defect 3), over real
HTTP with keys made by the real CLI: another key gets 404 on every route (never 403, so
ids cannot be probed), through any instance sharing the state; and one key cannot hold
every job slot (``research.max_jobs_per_key``)."""

from __future__ import annotations

import json
from typing import Any

import httpx
import pytest

from tests.test_auth import bearer, create_key
from tests.test_research import QUESTION

BODY = {"query": QUESTION, "preset": "minimal"}


@pytest.fixture
def keyed_pair(make_settings, serve_searcher, config_file, testbed):
    """Two instances with auth on sharing one state directory, their searches hanging
    (so that jobs stay running), and the config file the key CLI uses."""
    config = config_file()
    hanging = {"order": ["searxng"], "searxng": {"base_url": testbed.searxng_url("hang")}}
    settings = make_settings(auth={"enabled": True, "default_rate": None}, backends=hanging)
    return serve_searcher(settings), serve_searcher(settings), config


def start_as(base: str, secret: str, path: str = "/v1/research") -> httpx.Response:
    body: dict[str, Any] = BODY if path == "/v1/research" else {"input": QUESTION}
    return httpx.post(f"{base}{path}", json=body, headers=bearer(secret), timeout=30)


def test_only_the_key_that_started_a_job_sees_follows_or_cancels_it(keyed_pair):
    runner, other, config = keyed_pair
    owner, stranger = create_key(config, "owner"), create_key(config, "stranger")
    started = start_as(runner, owner)
    assert started.status_code == 202, started.text
    job_id = started.json()["id"]
    paths = [f"/v1/research/{job_id}", f"/v1/research/{job_id}/events",
             f"/tavily/research/{job_id}"]  # fmt: skip
    for base in (runner, other):  # the process running it, and one reading the store
        for path in paths:
            refused = httpx.get(f"{base}{path}", headers=bearer(stranger), timeout=30)
            assert refused.status_code == 404, (base, path, refused.text)
        cancel = httpx.delete(f"{base}/v1/research/{job_id}", headers=bearer(stranger))
        assert cancel.status_code == 404, cancel.text
        # The same answer as for an id that never existed: nothing to tell them apart.
        unknown = httpx.get(f"{base}/v1/research/nope", headers=bearer(stranger))
        assert cancel.json()["error"]["type"] == unknown.json()["error"]["type"] == "not_found"
    for base in (runner, other):
        seen = httpx.get(f"{base}/v1/research/{job_id}", headers=bearer(owner), timeout=30)
        assert seen.status_code == 200 and seen.json()["status"] in {"queued", "running"}
        tavily = httpx.get(f"{base}/tavily/research/{job_id}", headers=bearer(owner))
        assert tavily.status_code == 202 and tavily.json()["request_id"] == job_id
        with httpx.stream("GET", f"{base}/v1/research/{job_id}/events",
                          headers=bearer(owner), timeout=30) as stream:  # fmt: skip
            assert stream.status_code == 200
    cancelled = httpx.delete(f"{other}/v1/research/{job_id}", headers=bearer(owner), timeout=30)
    assert cancelled.status_code == 200


def test_one_key_cannot_hold_every_job_slot(keyed_pair):
    # Two slots per process (research.max_concurrent_jobs), one per key by default.
    runner, _, config = keyed_pair
    greedy, patient = create_key(config, "greedy"), create_key(config, "patient")
    first = start_as(runner, greedy)
    assert first.status_code == 202, first.text
    again = start_as(runner, greedy)
    assert again.status_code == 429
    assert "research.max_jobs_per_key" in again.json()["error"]["message"]
    assert int(again.headers["retry-after"]) >= 1
    tavily = start_as(runner, greedy, "/tavily/research")
    assert tavily.status_code == 429
    mcp = mcp_deep_research(runner, greedy)
    assert mcp["isError"] and "research.max_jobs_per_key" in mcp["content"][0]["text"]
    other = start_as(runner, patient)  # the other key still starts its job
    assert other.status_code == 202, other.text
    for response, secret in ((first, greedy), (other, patient)):
        job_url = f"{runner}/v1/research/{response.json()['id']}"
        assert httpx.delete(job_url, headers=bearer(secret), timeout=30).status_code == 200
    assert start_as(runner, greedy).status_code == 202  # its slot came back


def mcp_deep_research(base: str, secret: str) -> dict[str, Any]:
    """One ``tools/call`` of ``deep_research`` posted to ``/mcp`` with the key; its result."""
    call = {"jsonrpc": "2.0", "id": 1, "method": "tools/call",
            "params": {"name": "deep_research", "arguments": {"query": QUESTION}}}  # fmt: skip
    headers = {**bearer(secret), "Accept": "application/json, text/event-stream"}
    response = httpx.post(f"{base}/mcp", json=call, headers=headers, timeout=60)
    assert response.status_code == 200, response.text
    data = [line[6:] for line in response.text.splitlines() if line.startswith("data: ")]
    result: dict[str, Any] = json.loads(data[-1])["result"]
    return result
