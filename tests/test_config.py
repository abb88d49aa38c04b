"""Settings: defaults, YAML, environment precedence, strict validation, masking."""

import re

import pytest
import yaml

from searcher.config import ENV_VARS, deprecations, load_settings, masked
from searcher.config_hints import ConfigFile, find_config_file, lookalike_env_vars
from searcher.errors import ConfigError


def test_defaults_work_with_nothing_configured(tmp_path):
    settings = load_settings(environ={})
    assert settings.backends.order == ["searxng", "duckduckgo", "brave"]
    assert settings.backends.searxng.base_url is None
    assert settings.service.cache.enabled
    assert "searcher" in str(settings.cache_dir())


def test_yaml_then_environment_wins(tmp_path):
    path = tmp_path / "searcher.yaml"
    path.write_text(
        "backends:\n"
        "  order: [brave, searxng]\n"
        "  searxng: {base_url: 'http://from-yaml', timeout_s: 3, breaker: {failure_threshold: 2}}\n"
        "  brave: {api_key: yaml-key}\n"
        "fetch: {allowed_hosts: ['127.0.0.1:9999']}\n"
        "service: {cache: {dir: /tmp/yaml-cache, ttl_s: 60}}\n"
        "budget: {max_results: 7}\n"
    )
    env = {
        "SEARXNG_BASE_URL": "http://from-env",
        "ENABLE_BRAVE": "false",
        "SEARCHER_CONFIG": str(path),
    }
    settings = load_settings(environ=env)
    assert settings.backends.order == ["brave", "searxng"]
    assert settings.backends.searxng.base_url == "http://from-env"
    assert settings.backends.searxng.timeout_s == 3
    assert settings.backends.searxng.breaker.failure_threshold == 2
    assert settings.backends.brave.enabled is False
    assert settings.fetch.allowed_hosts == ["127.0.0.1:9999"]
    assert str(settings.cache_dir()) == "/tmp/yaml-cache"
    assert settings.budget.max_results == 7
    # An explicit path beats $SEARCHER_CONFIG.
    other = tmp_path / "other.yaml"
    other.write_text("budget: {max_results: 9}\n")
    assert load_settings(other, environ=env).budget.max_results == 9


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("backends: {serxng: {}}\n", "backends.serxng"),
        ("budget: {max_results: -1}\n", "budget.max_results"),
        ("backends: {order: [google]}\n", "backends.order"),
        ("- just\n- a list\n", "mapping"),
        ("key: [unclosed\n", "not valid YAML"),
        # A backend or model address that is not http(s) fails at load, not on every call.
        ("backends: {brave: {base_url: 'ftp://x'}}\n", "backends.brave.base_url: must be an http"),
        ("backends: {searxng: {base_url: 'localhost:8888'}}\n", "searxng.base_url: must be"),
        (
            "backends: {instances: {sx: {adapter: searxng, base_url: 'not a url'}}}\n",
            "backends.instances.sx.base_url: must be an http",
        ),
        ("llm: {base_url: 'http://h:99999/v1'}\n", "llm.base_url: not a URL"),
        ("rerank: {base_url: 'file:///etc'}\n", "rerank.base_url: must be"),
        ("embeddings: {base_url: 'http://'}\n", "embeddings.base_url: must be"),
        ("browser: {max_pages: 0}\n", "browser.max_pages"),
        ("browser: {page_timeout_s: -1}\n", "browser.page_timeout_s"),
        ("browser: {client_share: 2}\n", "browser.client_share"),
    ],
)
def test_bad_config_is_a_clear_error(tmp_path, text, message):
    path = tmp_path / "bad.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=message.replace(".", r"\.")):
        load_settings(path, environ={})


def test_yaml_aliases_that_refer_to_themselves_or_explode_are_refused(tmp_path):
    laughs = ['l0: &l0 ["ha", "ha", "ha", "ha", "ha", "ha", "ha", "ha", "ha"]']
    laughs += [f"l{i}: &l{i} [{', '.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 10)]
    for text, message in (
        ("a: &a [*a]\n", "contains itself"),
        ("fetch: {allowed_hosts: &h [*h]}\n", "contains itself"),
        ("\n".join(laughs) + "\n", "values once its aliases are expanded"),  # ~400 bytes
    ):
        path = tmp_path / "aliases.yaml"
        path.write_text(text)
        with pytest.raises(ConfigError, match=message):
            load_settings(path, environ={})
    # An alias used as configs use them, to say a value once, is fine.
    path.write_text(
        "backends: {brave: {api_key: &k secret}, instances: {b2: {adapter: brave, api_key: *k}}}\n"
    )
    assert load_settings(path, environ={}).backends.get("b2").api_key is not None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        # A second section block, as when a snippet is pasted below a file that has one:
        # YAML kept the last, and DuckDuckGo was on again without a word.
        ("backends:\n  order: [searxng]\n  duckduckgo: {enabled: false}\nbudget: {max_results: 3}\n"
         "backends:\n  searxng: {base_url: 'http://127.0.0.1:8888'}\n",
         "'backends' is given twice (lines 1 and 5)"),
        ("backends:\n  searxng: {timeout_s: 3}\n  searxng: {base_url: 'http://h'}\n",
         "'searxng' is given twice (lines 2 and 3)"),
        ("budget: {max_results: 3, max_results: 5}\n",
         "'max_results' is given twice (lines 1 and 1)"),
    ],
)  # fmt: skip
def test_a_key_given_twice_is_refused_naming_it_and_its_lines(tmp_path, text, message):
    path = tmp_path / "twice.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError, match=re.escape(f"config file {path}: {message}")):
        load_settings(path, environ={})
    # Merge keys say a value once for several sections; an explicit key overrides them.
    path.write_text(
        "backends:\n  searxng: &s {timeout_s: 3, base_url: 'http://h'}\n"
        "  instances:\n    s2:\n      <<: *s\n      adapter: searxng\n      timeout_s: 4\n"
    )
    assert load_settings(path, environ={}).backends.get("s2").timeout_s == 4


@pytest.mark.parametrize(
    ("instances", "message"),
    [
        ({"n2": {"adapter": "local", "collection": "bad name!"}}, "is not a collection name"),
        ({"n2": {"adapter": "local", "collections": ["ok", "no/slash"]}}, "not a collection"),
        ({"a,b": {"adapter": "local", "collection": "c"}}, "without a comma"),
        ({"x" * 65: {"adapter": "local", "collection": "c"}}, "1-64 characters"),
    ],
)
def test_names_a_request_or_the_cli_could_not_use_are_refused(tmp_path, instances, message):
    path = tmp_path / "names.yaml"
    path.write_text(yaml.safe_dump({"backends": {"instances": instances}}))
    with pytest.raises(ConfigError, match=message):
        load_settings(path, environ={})


def test_a_rule_over_two_keys_is_said_without_a_field_label(tmp_path):
    path = tmp_path / "limits.yaml"
    path.write_text("limits: {max_results: 1}\n")
    with pytest.raises(ConfigError) as refused:
        load_settings(path, environ={})
    said = str(refused.value)
    assert said.endswith(": budget.max_results=5 is above limits.max_results=1")
    assert "body" not in said  # no field of its own: not labelled as the request body


def test_missing_file_and_bad_env_value_are_errors(tmp_path):
    with pytest.raises(ConfigError, match="cannot read"):
        load_settings(tmp_path / "nope.yaml", environ={})
    with pytest.raises(ConfigError, match="enabled"):
        load_settings(environ={"ENABLE_SEARXNG": "perhaps"})


def test_every_documented_variable_maps_to_a_real_setting():
    for var in ENV_VARS:
        value = "1" if var.startswith(("ENABLE_", "SEARCHER_PORT")) else "x"
        value = "http://127.0.0.1:1" if var.endswith("_BASE_URL") else value
        value = "redis://127.0.0.1:1/0" if var.endswith("_REDIS_URL") else value
        load_settings(environ={var: value})


def test_secrets_are_masked():
    shown = masked(load_settings(environ={"BRAVE_API_KEY": "secret-key"}))
    assert shown["backends"]["brave"]["api_key"] == "***"
    assert "secret-key" not in repr(shown)
    assert shown["backends"]["searxng"]["api_key"] is None


def test_the_printout_shows_every_key_an_instance_has_and_loads_as_itself(tmp_path):
    shown = masked(load_settings(environ={}))["backends"]
    assert shown["searxng"]["rate"] is None and shown["brave"]["rate"] is None
    assert shown["searxng"]["engine_health"]["failure_threshold"] == 2
    path = tmp_path / "printed.yaml"
    path.write_text(yaml.safe_dump(masked(load_settings(environ={}))))
    assert masked(load_settings(path, environ={})) == masked(load_settings(environ={}))


def test_a_section_given_in_part_prints_its_adapters_defaults(tmp_path):
    # `searcher config` must print what runs: a config saved from it changes nothing.
    path = tmp_path / "searcher.yaml"
    path.write_text("backends:\n  duckduckgo: {enabled: true}\n  brave: {api_key: k}\n")
    for settings in (
        load_settings(path, environ={}),
        load_settings(environ={"ENABLE_DUCKDUCKGO": "1", "BRAVE_API_KEY": "k"}),
    ):
        shown = masked(settings)["backends"]
        assert shown["duckduckgo"]["timeout_s"] == settings.backends.get("duckduckgo").timeout_s
        assert shown["duckduckgo"]["timeout_s"] == 10.0
        assert shown["brave"]["base_url"] == "https://api.search.brave.com"
        assert settings.backends.get("brave").base_url == "https://api.search.brave.com"
    saved = tmp_path / "saved.yaml"
    saved.write_text(yaml.safe_dump({"backends": {"duckduckgo": shown["duckduckgo"]}}))
    assert load_settings(saved, environ={}).backends.get("duckduckgo").timeout_s == 10.0


def test_passwords_in_urls_are_masked():
    environ = {"SEARXNG_BASE_URL": "http://sx-user:sx-secret@127.0.0.1:8888"}
    shown = masked(load_settings(environ=environ))
    assert "sx-secret" not in repr(shown)
    assert shown["backends"]["searxng"]["base_url"] == "http://sx-user:***@127.0.0.1:8888"
    in_query = {"SEARXNG_BASE_URL": "http://127.0.0.1:8888/?token=sx-secret&lang=en"}
    shown = masked(load_settings(environ=in_query))
    assert shown["backends"]["searxng"]["base_url"] == "http://127.0.0.1:8888/?token=***&lang=en"


def test_a_malformed_allowed_host_is_a_config_error_naming_it():
    with pytest.raises(ConfigError, match=r"server\.allowed_hosts.*\[::1\]evil\.com"):
        load_settings(environ={"SEARCHER_ALLOWED_HOSTS": "ok.example,[::1]evil.com"})
    hosts = "a.example:*,*.b.example,*"
    assert load_settings(environ={"SEARCHER_ALLOWED_HOSTS": hosts}).server.allowed_hosts == [
        "a.example:*", "*.b.example", "*"
    ]  # fmt: skip
    # Blanks and commas only: no host at all, every request refused (421); an error.
    with pytest.raises(ConfigError, match=r"server\.allowed_hosts.*refuse every request"):
        load_settings(environ={"SEARCHER_ALLOWED_HOSTS": " , "})
    assert load_settings(environ={"SEARCHER_ALLOWED_HOSTS": ""}).server.allowed_hosts is None


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("backends: {engine_weights: {google: .nan}}", "backends.engine_weights.google"),
        ("backends: {engine_weights: {google: -5}}", "backends.engine_weights.google"),
        ("backends: {intents: {fresh_data: {backends: [searxng], weights: {searxng: .inf}}}}",
         "backends.intents.fresh_data.weights.searxng"),
        ("backends: {brave: {weight: .inf}}", "backends.brave.weight"),
    ],
)  # fmt: skip
def test_a_fusion_weight_is_a_finite_number_of_at_least_0(tmp_path, text, field):
    # NaN sank every result it touched to the bottom; an infinity did the same.
    path = tmp_path / "weights.yaml"
    path.write_text(text + "\n")
    with pytest.raises(ConfigError, match=re.escape(field)):
        load_settings(path, environ={})


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("budget: {max_results: yes}", "budget.max_results"),
        ("backends: {searxng: {timeout_s: true}}", "backends.searxng.timeout_s"),
        ("backends: {instances: {sx: {adapter: searxng, timeout_s: on}}}",
         "backends.instances.sx.timeout_s"),
        ("backends: {searxng: {engine_health: {failure_threshold: on}}}",
         "backends.searxng.engine_health.failure_threshold"),
        ("backends: {engine_weights: {google: true}}", "backends.engine_weights.google"),
        ("server: {port: yes}", "server.port"),
        ("embeddings: {load_timeout_s: false}", "embeddings.load_timeout_s"),
    ],
)  # fmt: skip
def test_a_boolean_is_no_number(tmp_path, text, field):
    # YAML reads yes/no/on/off as booleans, which pydantic took as 1 and 0: `timeout_s: yes`
    # was a one-second timeout, said nowhere.
    path = tmp_path / "booleans.yaml"
    path.write_text(text + "\n")
    with pytest.raises(
        ConfigError, match=re.escape(field) + r".*must be a number, not (true|false)"
    ):
        load_settings(path, environ={})


def test_booleans_and_numbers_still_load_where_they_belong(tmp_path):
    path = tmp_path / "fine.yaml"
    path.write_text("backends: {searxng: {enabled: no, timeout_s: 2}}\nbudget: {max_results: 3}\n")
    settings = load_settings(path, environ={"ENABLE_BRAVE": "0", "SEARCHER_PORT": "8081"})
    assert settings.backends.searxng.enabled is False and settings.backends.searxng.timeout_s == 2
    assert settings.backends.brave.enabled is False and settings.budget.max_results == 3


# --- configuration that is never silently ignored (issue 25) ----------------------------


def test_searcher_yaml_in_the_current_directory_is_read_when_nothing_is_named(
    tmp_path, monkeypatch
):
    (tmp_path / "searcher.yaml").write_text("server: {port: 9123}\n")
    monkeypatch.chdir(tmp_path)
    assert load_settings(environ={}).server.port == 9123
    named = tmp_path / "other.yaml"
    named.write_text("server: {port: 9124}\n")
    assert load_settings(environ={"SEARCHER_CONFIG": str(named)}).server.port == 9124
    assert load_settings(named, environ={}).server.port == 9124
    found = find_config_file(None, {}, tmp_path)
    assert found == ConfigFile(tmp_path / "searcher.yaml", "./searcher.yaml")
    assert find_config_file(None, {}, tmp_path / "elsewhere") is None


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("backends: {searxng: {timeout: 3}}",
         "backends.searxng.timeout: unknown field (did you mean 'timeout_s'?)"),
        ("server: {prot: 80}", "server.prot: unknown field (did you mean 'port'?)"),
        ("backends: {instances: {sx: {adapter: searxng, base_ulr: 'http://x'}}}",
         "backends.instances.sx.base_ulr: unknown field (did you mean 'base_url'?)"),
        ("srever: {port: 80}", "srever: unknown field (did you mean 'server'?)"),
        ("server: {zzzz: 1}", "server.zzzz: unknown field"),
    ],
)  # fmt: skip
def test_an_unknown_key_gets_the_closest_known_one(tmp_path, text, message):
    path = tmp_path / "c.yaml"
    path.write_text(text)
    with pytest.raises(ConfigError) as info:
        load_settings(path, environ={})
    assert message in str(info.value)
    if "did you mean" not in message:
        assert "did you mean" not in str(info.value)


def test_variables_that_look_like_ours_but_are_not_read_are_named():
    environ = {
        "SEARXNG_URL": "http://x",  # SearXNG's own docs' name, not ours
        "SEARCHER_PROT": "80",
        "SEARCHER_NOTHING_LIKE_IT": "1",
        "SEARXNG_BASE_URL": "http://x",  # read: no warning
        "SEARCHER_SHARED_DIR": "/x",  # the test suite's: no warning
        "HOME": "/root",
    }
    assert lookalike_env_vars(environ, ENV_VARS) == [
        "$SEARCHER_NOTHING_LIKE_IT is not a setting searcher reads; it is ignored "
        "(see the configuration reference)",
        "$SEARCHER_PROT is not a setting searcher reads; it is ignored (did you mean "
        "SEARCHER_PORT?)",
        "$SEARXNG_URL is not a setting searcher reads; it is ignored (did you mean "
        "SEARXNG_BASE_URL?)",
    ]


def test_the_output_schema_steps_old_name_is_read_with_a_warning(tmp_path):
    # llm.steps.structured_output (the step's first name) sat beside llm.structured_output,
    # which is about something else; it is read as llm.steps.output_schema, key by key
    # under the new name's own keys.
    path = tmp_path / "c.yaml"
    path.write_text(
        "llm:\n  steps:\n"
        "    structured_output: {repairs: 4, model: old-model}\n"
        "    output_schema: {repairs: 1}\n"
    )
    settings = load_settings(path, environ={})
    step = settings.llm.steps.output_schema
    assert (step.repairs, step.model) == (1, "old-model")
    assert deprecations(settings) == [
        "llm.steps.structured_output is deprecated: it is now llm.steps.output_schema "
        "(read as that for now)"
    ]
    path.write_text("llm:\n  steps:\n    output_schema: {repairs: 3}\n")
    assert deprecations(load_settings(path, environ={})) == []
    assert load_settings(path, environ={}).llm.steps.output_schema.repairs == 3


def test_a_step_given_in_the_config_keeps_the_defaults_it_does_not_set(tmp_path):
    # `rank: {top_k: 5}` alone once dropped the step's own 96 tokens at temperature 0 for
    # llm.max_tokens and llm.temperature; an explicit null still means "llm's own".
    path = tmp_path / "c.yaml"
    path.write_text(
        "llm:\n  temperature: 0.7\n  steps:\n"
        "    rank: {top_k: 5}\n    answer: {max_tokens: null}\n    crag: {temperature: 0.5}\n"
    )
    steps = load_settings(path, environ={}).llm.steps
    assert (steps.rank.top_k, steps.rank.max_tokens, steps.rank.temperature) == (5, 96, 0.0)
    assert (steps.answer.max_tokens, steps.answer.temperature) == (None, 0.2)
    assert (steps.crag.max_tokens, steps.crag.temperature) == (128, 0.5)
    assert steps.output_schema.repairs == 2 and steps.output_schema.max_tokens == 1200
