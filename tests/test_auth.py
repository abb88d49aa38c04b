"""API keys and rate limits over real HTTP: keys made with the real CLI, stored hashed in
the state store (SQLite, and a real Redis shared by two app instances)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import httpx
import pytest
from click.testing import CliRunner

from searcher.cli import main

QUERY = {"query": "cloud gaming"}


def cli(*args: str) -> Any:
    return CliRunner().invoke(main, list(args))


def create_key(config: str, name: str, *limits: str) -> str:
    result = cli("keys", "create", name, *limits, "--config", config)
    assert result.exit_code == 0, result.output
    secret = result.stdout.strip().splitlines()[0]
    assert secret.startswith("sk-searcher-")
    return secret


def bearer(secret: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {secret}"}


@pytest.fixture
def keyed(make_settings, serve_searcher, config_file, tmp_path):
    """A searcher with auth on and the config file that shares its state directory."""
    config = config_file()
    base = serve_searcher(make_settings(auth={"enabled": True}))
    return base, config


def test_every_route_wants_a_key_but_health(keyed):
    base, config = keyed
    missing = httpx.post(f"{base}/v1/search", json=QUERY)
    assert missing.status_code == 401
    assert missing.headers["www-authenticate"].startswith("Bearer")
    assert missing.json()["error"]["type"] == "unauthorized"
    for path in ("/search?q=x&format=json", "/v1/cache/stats", "/v1/tools/openai"):
        assert httpx.get(f"{base}{path}").status_code == 401, path
    mcp = httpx.post(f"{base}/mcp", json={"jsonrpc": "2.0", "id": 1, "method": "tools/list"})
    assert mcp.status_code == 401
    assert httpx.get(f"{base}/v1/health").status_code == 200  # open: load balancers probe it
    wrong = httpx.post(f"{base}/v1/search", json=QUERY, headers=bearer("sk-searcher-nope"))
    assert wrong.status_code == 401

    secret = create_key(config, "agent-1")
    ok = httpx.post(f"{base}/v1/search", json=QUERY, headers=bearer(secret), timeout=20)
    assert ok.status_code == 200 and ok.json()["items"]
    assert int(ok.headers["ratelimit-limit"]) == 60  # auth.default_rate
    compat = httpx.get(f"{base}/search", params={"q": "cloud gaming", "format": "json"},
                       headers=bearer(secret), timeout=20)  # fmt: skip
    assert compat.status_code == 200
    # Two Authorization headers: which one counts would be a guess; neither does.
    twice = [("Authorization", f"Bearer {secret}"), ("Authorization", "Bearer sk-searcher-x")]
    doubled = httpx.post(f"{base}/v1/search", json=QUERY, headers=twice, timeout=20)
    assert doubled.status_code == 401 and "one Authorization" in doubled.text


def test_a_revoked_key_is_refused(keyed):
    base, config = keyed
    secret = create_key(config, "gone")
    assert cli("keys", "revoke", "gone", "--config", config).exit_code == 0
    refused = httpx.post(f"{base}/v1/search", json=QUERY, headers=bearer(secret))
    assert refused.status_code == 401


def test_rate_limit_answers_429_with_retry_after(keyed):
    base, config = keyed
    secret = create_key(config, "slow", "--rate", "3/min")
    remaining = []
    for _ in range(3):
        ok = httpx.get(f"{base}/v1/tools/openai", headers=bearer(secret))
        assert ok.status_code == 200
        remaining.append(int(ok.headers["ratelimit-remaining"]))
    assert remaining == [2, 1, 0]
    refused = httpx.get(f"{base}/v1/tools/openai", headers=bearer(secret))
    assert refused.status_code == 429
    assert refused.json()["error"]["type"] == "rate_limited"
    assert 1 <= int(refused.headers["retry-after"]) <= 20  # a token every 20 s
    other = create_key(config, "other", "--rate", "3/min")  # limits are per key
    assert httpx.get(f"{base}/v1/tools/openai", headers=bearer(other)).status_code == 200


def test_quota_answers_429_until_the_window_ends(keyed):
    base, config = keyed
    secret = create_key(config, "capped", "--quota", "2/day")
    for _ in range(2):
        assert httpx.get(f"{base}/v1/tools/openai", headers=bearer(secret)).status_code == 200
    refused = httpx.get(f"{base}/v1/tools/openai", headers=bearer(secret))
    assert refused.status_code == 429 and "quota" in refused.json()["error"]["message"]
    assert 1 <= int(refused.headers["retry-after"]) <= 86_400


def test_a_quota_refusal_describes_the_quota_and_spends_nothing(keyed):
    base, config = keyed
    secret = create_key(config, "capped", "--rate", "3/min", "--quota", "2/day")
    for _ in range(2):
        assert httpx.get(f"{base}/v1/tools/openai", headers=bearer(secret)).status_code == 200
    for _ in range(2):  # refused by the quota: no rate token taken, nothing counted
        refused = httpx.get(f"{base}/v1/tools/openai", headers=bearer(secret))
        assert refused.status_code == 429
        assert refused.headers["ratelimit-limit"] == "2"
        assert refused.headers["ratelimit-remaining"] == "0"
        assert refused.headers["ratelimit-reset"] == refused.headers["retry-after"]
    usage = httpx.get(f"{base}/v1/usage", headers=bearer(secret))  # over quota, still seen
    assert usage.status_code == 200 and usage.json()["quota"]["used"] == 2
    assert usage.headers["ratelimit-remaining"] == "0"  # the third rate token of three
    assert httpx.get(f"{base}/v1/usage").status_code == 401  # still behind the key


def test_a_rate_with_a_doubled_unit_is_refused(keyed):
    _, config = keyed
    for rate in ("1/ss", "1/hs"):
        assert cli("keys", "create", "x", "--rate", rate, "--config", config).exit_code == 2
    assert cli("keys", "create", "x", "--rate", "2/mins", "--config", config).exit_code == 0


def test_usage_reports_the_callers_key(keyed):
    base, config = keyed
    secret = create_key(config, "counted", "--quota", "100/day")
    for _ in range(3):
        httpx.get(f"{base}/v1/tools/openai", headers=bearer(secret))
    report = httpx.get(f"{base}/v1/usage", headers=bearer(secret)).json()
    assert report["key"]["name"] == "counted" and "sk-" not in json.dumps(report)
    assert report["key"]["rate"] == "60/min"  # made without --rate: auth.default_rate applies
    assert report["requests_today"] == 4  # three calls and this one
    assert report["quota"]["limit"] == 100 and report["quota"]["used"] == 3  # not this one
    rows = json.loads(cli("usage", "--json", "--config", config).stdout)
    assert {r["name"]: r["requests_today"] for r in rows}["counted"] == 4


def test_keys_are_listed_without_secrets_and_names_are_checked(keyed):
    _, config = keyed
    secret = create_key(config, "listed")
    listed = cli("keys", "list", "--json", "--config", config)
    assert listed.exit_code == 0 and secret not in listed.stdout
    assert [k["name"] for k in json.loads(listed.stdout)] == ["listed"]
    assert cli("keys", "create", "listed", "--config", config).exit_code == 2  # taken
    assert cli("keys", "create", "x", "--rate", "fast", "--config", config).exit_code == 2
    assert cli("keys", "revoke", "nobody", "--config", config).exit_code == 1
    # Another key's id as a name: "keys revoke ID" would not know which key it means.
    taken_id = json.loads(listed.stdout)[0]["id"]
    as_id = cli("keys", "create", taken_id, "--config", config)
    assert as_id.exit_code == 2 and "is the id of an active key" in as_id.output


def test_a_key_made_while_auth_is_off_says_that_no_key_is_asked_for(config_file, tmp_path):
    off = cli("keys", "create", "early", "--config", config_file())
    assert off.exit_code == 0 and off.stdout.startswith("sk-searcher-")
    assert "note: auth.enabled is off in this configuration" in off.stderr
    on = tmp_path / "on.yaml"
    on.write_text(Path(config_file()).read_text() + "auth: {enabled: true}\n")
    made = cli("keys", "create", "later", "--config", str(on))
    assert made.exit_code == 0 and "auth.enabled" not in made.stderr


def test_only_an_operator_key_may_read_or_clear_the_shared_extraction_cache(keyed):
    base, config = keyed
    tenant, operator = create_key(config, "tenant"), create_key(config, "ops", "--operator")
    for method, path in (("GET", "/v1/cache/stats"), ("POST", "/v1/cache/clear")):
        refused = httpx.request(method, f"{base}{path}", headers=bearer(tenant))
        assert refused.status_code == 403, path
        assert refused.json()["error"]["type"] == "forbidden"
        assert "--operator" in refused.json()["error"]["message"]
        assert "dir" not in refused.text  # nothing of the server's layout shown either
        allowed = httpx.request(method, f"{base}{path}", headers=bearer(operator))
        assert allowed.status_code == 200, path
    assert httpx.get(f"{base}/v1/cache/stats", headers=bearer(operator)).json()["dir"]
    listed = json.loads(cli("keys", "list", "--json", "--config", config).stdout)
    assert {k["name"]: k["operator"] for k in listed} == {"tenant": False, "ops": True}


def test_without_auth_nothing_changes(make_settings, serve_searcher):
    base = serve_searcher(make_settings())
    assert httpx.post(f"{base}/v1/search", json=QUERY, timeout=20).status_code == 200
    assert httpx.get(f"{base}/v1/usage").status_code == 404
    assert httpx.post(f"{base}/v1/cache/clear").status_code == 200  # one user: theirs to clear


def test_a_rate_limit_holds_across_two_workers_sharing_redis(
    make_settings, serve_searcher, redis_url, tmp_path
):
    settings = make_settings(auth={"enabled": True}, state={"redis_url": redis_url})
    first, second = serve_searcher(settings), serve_searcher(settings)
    config = tmp_path / "redis.yaml"
    config.write_text(json.dumps({"state": {"redis_url": redis_url}}))
    secret = create_key(str(config), "shared", "--rate", "4/min")
    answers = [
        httpx.get(f"{base}/v1/tools/openai", headers=bearer(secret)).status_code
        for base in (first, second, first, second, first, second)
    ]
    assert answers == [200, 200, 200, 200, 429, 429]


def test_search_remote_sends_the_key(keyed, matching_query):
    base, config = keyed
    refused = cli("search", matching_query, "--remote", base)
    assert refused.exit_code == 1 and "401" in refused.stderr, refused.output
    assert "--api-key" in refused.stderr
    assert "Traceback" not in refused.output
    secret = create_key(config, "cli")
    by_option = cli("search", matching_query, "--remote", base, "--api-key", secret)
    assert by_option.exit_code == 0 and "Title:" in by_option.stdout, by_option.output
    by_env = CliRunner().invoke(
        main, ["search", matching_query, "--remote", base], env={"SEARCHER_API_KEY": secret}
    )
    assert by_env.exit_code == 0 and "Title:" in by_env.stdout, by_env.output
