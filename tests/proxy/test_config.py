"""`lockgate proxy --config FILE` (issue 24): one YAML file naming the routes; every key
known and every value checked, one line per error naming the file, the line and the key;
secrets read once from a variable or a file; what a config means said without a secret."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lockgate.gate import GateLimits
from lockgate.proxy.config import (
    ConfigError,
    ProxyConfig,
    ProxySettings,
    SecretSource,
    describe,
    listen_problem,
    load_settings,
    resolve_secrets,
    settings_from_text,
)

TEAM = """\
listen: {host: 127.0.0.1, port: 8787}
client_token: {env: LOCKGATE_TEST_TOKEN}
routes:
  - name: anthropic            # Claude Code
    prefix: /anthropic
    upstream: https://api.anthropic.com
    key: {env: LOCKGATE_TEST_ANTHROPIC}
    retries: {attempts: 2, max_wait: 20}
  - name: openai               # Codex
    prefix: /openai/
    upstream: https://api.openai.com
    key: {file: KEYFILE, header: authorization}
    hold: terminal
    limits: {max_calls: 16}
    retries: {attempts: 1}
    fallbacks:
      - {upstream: https://backup.example, model: gpt-backup}
  - name: gemini               # Gemini CLI
    prefix: /gemini
    upstream: https://generativelanguage.googleapis.com
    key: {env: LOCKGATE_TEST_GEMINI, header: x-goog-api-key}
    validate_schemas: false
"""


def test_a_team_config_reads_as_its_routes(tmp_path: Path) -> None:
    keyfile = tmp_path / "openai.key"
    keyfile.write_text("sk-openai-FROM-A-FILE-77\n")
    path = tmp_path / "proxy.yaml"
    path.write_text(TEAM.replace("KEYFILE", str(keyfile)))
    settings = load_settings(path)
    assert (settings.host, settings.port) == ("127.0.0.1", 8787)
    anthropic, openai_route, gemini = settings.routes
    assert (anthropic.name, anthropic.prefix, openai_route.prefix) == (
        "anthropic",
        "/anthropic",
        "/openai",
    )
    assert anthropic.retries.attempts == 2
    assert anthropic.gating.validate_schemas is True  # the default
    assert gemini.gating.validate_schemas is False
    assert openai_route.gating.hold == "terminal"
    assert openai_route.gating.limits == GateLimits(max_calls=16)
    assert openai_route.fallbacks[0].model == "gpt-backup"
    assert gemini.upstream.key_header == "x-goog-api-key"
    route, forwarded = settings.route("/openai/v1/responses") or (None, "")
    assert route is openai_route
    assert forwarded == "/v1/responses"
    assert settings.route("/openaix/v1") is None
    environ = {
        "LOCKGATE_TEST_TOKEN": "team-token-0123456",
        "LOCKGATE_TEST_ANTHROPIC": "sk-ant-0123456789",
        "LOCKGATE_TEST_GEMINI": "AIza-0123456789",
    }
    resolved, values, variables = resolve_secrets(settings, environ)
    assert sorted(values) == sorted([*environ.values(), "sk-openai-FROM-A-FILE-77"])
    assert sorted(variables) == sorted(environ)
    assert resolved.routes[1].upstream.key == SecretSource(value="sk-openai-FROM-A-FILE-77")
    said = "\n".join(describe(settings))
    assert "route openai: /openai -> https://api.openai.com, key from file" in said
    assert "fall-back 1 -> https://backup.example" in said
    assert all(value not in said for value in values)


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("routes: []", "c.yaml:1: routes: at least one route is needed"),
        ("colour: blue\nroutes: []", "c.yaml:1: colour: unknown key (known: listen,"),
        (
            "routes:\n  - name: a\n    upstream: http://x\n    retries: {tries: 2}",
            "c.yaml:4: routes[0].retries.tries: unknown key (known: attempts, max_wait)",
        ),
        (
            "routes:\n  - name: a\n    upstream: http://x\n    key: {env: K, header: bearer}",
            "c.yaml:4: routes[0].key.header: must be one of auto, authorization, x-api-key",
        ),
        ("routes:\n  - name: a\n    upstream: ftp://x", "c.yaml:3: routes[0].upstream:"),
        ("routes:\n  - upstream: http://x", "c.yaml:2: routes[0]: name is required"),
        ("a: &anchor 1\nroutes: *anchor", "c.yaml:2: anchors and aliases are not allowed"),
        (
            "routes:\n  - {name: a, prefix: /a, upstream: 'http://x'}\n"
            "  - {name: a, prefix: /b, upstream: 'http://y'}",
            "c.yaml:3: routes[1]: the route name 'a' is used twice",
        ),
        (
            "routes:\n  - {name: a, upstream: 'http://x'}\n  - {name: b, upstream: 'http://y'}",
            "c.yaml:2: routes[0]: with several routes every route needs its own prefix",
        ),
        (
            "routes:\n  - {name: a, upstream: 'http://x', deadline: -1}",
            "c.yaml:2: routes[0].deadline: must be a positive",
        ),
        ("listen: {port: 70000}\nroutes: []", "c.yaml:1: listen.port: must be between 0 and 65535"),
        (":\n  - [", "c.yaml:"),
    ],
)
def test_every_error_is_one_line_naming_the_line_and_the_key(text: str, line: str) -> None:
    with pytest.raises(ConfigError) as raised:
        settings_from_text(text, "c.yaml")
    message = str(raised.value)
    assert message.startswith(line), message
    assert "\n" not in message


_ROUTE = "routes:\n  - name: a\n    upstream: http://x\n"


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("listen: {host: 7}\n" + _ROUTE, "c.yaml:1: listen.host: must be a string"),
        ("allow_remote: maybe\n" + _ROUTE, "c.yaml:1: allow_remote: must be true or false"),
        ("client_token: {path: x}\n" + _ROUTE, "c.yaml:1: client_token.path: unknown key"),
        ('allow_hosts: ["bad host!"]\n' + _ROUTE, "c.yaml:1: allow_hosts[0]: not a host name"),
        ("key_on_any_path: 3\n" + _ROUTE, "c.yaml:1: key_on_any_path: must be true or false"),
        ("max_streams: 0\n" + _ROUTE, "c.yaml:1: max_streams: must be at least 1"),
        ("max_request_bytes: -5\n" + _ROUTE, "c.yaml:1: max_request_bytes: must be at least 1"),
        ("max_held_bytes: 0\n" + _ROUTE, "c.yaml:1: max_held_bytes: must be at least 1"),
        ("grace_seconds: -1\n" + _ROUTE, "c.yaml:1: grace_seconds: must be a positive number"),
        ("head_timeout: 0\n" + _ROUTE, "c.yaml:1: head_timeout: must be a positive number"),
        ("metrics: yes please\n" + _ROUTE, "c.yaml:1: metrics: must be true or false"),
        ("routes:\n  - name: 'A B'\n    upstream: http://x\n", "c.yaml:2: routes[0].name:"),
        (_ROUTE + "    prefix: nope\n", "c.yaml:4: routes[0].prefix: must be a path like"),
        (_ROUTE + "    key: {env: K, file: /x}\n", "c.yaml:4: routes[0].key: give exactly one"),
        (_ROUTE + "    model: 5\n", "c.yaml:4: routes[0].model: must be a string"),
        (_ROUTE + "    hold: always\n", "c.yaml:4: routes[0].hold: must be one of tools, terminal"),
        (_ROUTE + "    validate_schemas: 2\n", "c.yaml:4: routes[0].validate_schemas: must be"),
        (_ROUTE + "    idle_timeout: 0\n", "c.yaml:4: routes[0].idle_timeout: must be a positive"),
        (_ROUTE + "    keepalive: -1\n", "c.yaml:4: routes[0].keepalive: must be a positive"),
        (_ROUTE + "    max_held_bytes: 0\n", "c.yaml:4: routes[0].max_held_bytes: must be at"),
        (_ROUTE + "    limits: {max_calls: 0}\n", "c.yaml:4: routes[0].limits.max_calls: must"),
        (_ROUTE + "    limits: {max_tools: 3}\n", "c.yaml:4: routes[0].limits.max_tools: unknown"),
        (_ROUTE + "    retries: {attempts: -1}\n", "c.yaml:4: routes[0].retries.attempts: must"),
        (
            _ROUTE + "    retries: {attempts: 1, max_wait: -1}\n",
            "c.yaml:4: routes[0].retries.max_wait: must be a positive",
        ),
        (
            _ROUTE + "    retries: {attempts: 1}\n    fallbacks: [{upstream: 'ftp://y'}]\n",
            "c.yaml:5: routes[0].fallbacks[0].upstream: 'ftp://y' is not an http(s) URL",
        ),
        (
            _ROUTE
            + "    retries: {attempts: 1}\n    fallbacks: [{upstream: 'http://y', model: 3}]\n",
            "c.yaml:5: routes[0].fallbacks[0].model: must be a string",
        ),
        (
            _ROUTE + "    fallbacks: [{upstream: 'http://y', model: m, models: {a: b}}]\n",
            "c.yaml:4: routes[0].fallbacks[0].models: give model or models, not both",
        ),
    ],
    ids=lambda value: value.split(":")[2].strip() if value.startswith("c.yaml") else None,
)
def test_every_key_says_what_is_wrong_with_its_value(text: str, line: str) -> None:
    with pytest.raises(ConfigError) as raised:
        settings_from_text(text, "c.yaml")
    message = str(raised.value)
    assert message.startswith(line), message
    assert "\n" not in message


def test_a_file_that_is_not_one_is_one_line(tmp_path: Path) -> None:
    fifo = tmp_path / "proxy.yaml"
    os.mkfifo(fifo)
    with pytest.raises(ConfigError, match="not a regular file"):
        load_settings(fifo)
    with pytest.raises(ConfigError, match="No such file"):
        load_settings(tmp_path / "missing.yaml")
    binary = tmp_path / "binary.yaml"
    binary.write_bytes(b"routes:\n  - name: \xff\n")
    with pytest.raises(ConfigError, match=r"binary\.yaml:2: not UTF-8"):
        load_settings(binary)


def test_a_secret_that_cannot_be_read_is_named_never_quoted(tmp_path: Path) -> None:
    settings = settings_from_text(
        "routes:\n  - {name: a, upstream: 'http://x', key: {env: LOCKGATE_TEST_MISSING}}",
        "c.yaml",
    )
    with pytest.raises(ConfigError, match="route a: key: LOCKGATE_TEST_MISSING is not set"):
        resolve_secrets(settings, {})
    short = settings_from_text(
        "routes:\n  - {name: a, upstream: 'http://x', key: {env: K}}", "c.yaml"
    )
    with pytest.raises(ConfigError) as raised:
        resolve_secrets(short, {"K": "abc"})
    assert "abc" not in str(raised.value)


def test_listening_beyond_loopback_needs_a_word_and_a_token_with_a_key() -> None:
    def settings(extra: str) -> ProxySettings:
        return settings_from_text(
            "listen: {host: 0.0.0.0, port: 1}\n" + extra + "routes:\n"
            "  - {name: a, upstream: 'http://x', key: {env: K}}",
            "c.yaml",
        )

    assert "allow_remote" in (listen_problem(settings("")) or "")
    assert "client_token" in (listen_problem(settings("allow_remote: true\n")) or "")
    both = settings("allow_remote: true\nclient_token: {env: T}\n")
    assert listen_problem(both) is None


def test_the_flags_are_the_one_route_shorthand() -> None:
    config = ProxyConfig("http://127.0.0.1:9", api_key="sk-flag-key-0001", port=8787)
    settings = config.settings()
    [route] = settings.routes
    assert (route.name, route.prefix, route.upstream.url) == ("default", "", "http://127.0.0.1:9")
    assert route.upstream.key == SecretSource(value="sk-flag-key-0001")
    assert "sk-flag-key-0001" not in repr(settings)
