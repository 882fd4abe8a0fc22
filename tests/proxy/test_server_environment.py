"""The proxy configured from the environment, for gunicorn (`config_from_environment`,
`app_factory`): secrets read from files (M4; `test_server_gunicorn.py` checks no process's
environment block holds them) or from variables; every setting of the command line; a
misconfiguration as one line and a defined exit (L9)."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from lockgate.gate import GateLimits
from lockgate.proxy.server import app_factory, config_from_environment

from .test_server import HELD_KEY, TOKEN

BASE = {"LOCKGATE_UPSTREAM": "https://api.example"}


def secret_file(folder: Path, name: str, text: str) -> str:
    path = folder / name
    path.write_text(text)
    path.chmod(0o600)
    return str(path)


def test_secrets_are_read_from_files(tmp_path: Path) -> None:
    config = config_from_environment(
        {
            **BASE,
            "LOCKGATE_API_KEY_FILE": secret_file(tmp_path, "key", HELD_KEY + "\n"),
            "LOCKGATE_CLIENT_TOKEN_FILE": secret_file(tmp_path, "token", TOKEN + "\r\n"),
        }
    )
    assert (config.api_key, config.client_token) == (HELD_KEY, TOKEN)


def problem(environ: dict[str, str]) -> str:
    with pytest.raises(ValueError, match=r".+") as raised:
        config_from_environment(environ)
    text = str(raised.value)
    assert "\n" not in text
    assert HELD_KEY not in text
    return text


def test_an_unusable_secret_file_is_one_line(tmp_path: Path) -> None:
    token = {"LOCKGATE_CLIENT_TOKEN_FILE": secret_file(tmp_path, "token", TOKEN)}
    missing = str(tmp_path / "absent")
    assert problem({**BASE, **token, "LOCKGATE_API_KEY_FILE": missing}) == (
        f"LOCKGATE_API_KEY_FILE names {missing}, which cannot be read (No such file or directory)"
    )
    assert "not a regular file" in problem(
        {**BASE, **token, "LOCKGATE_API_KEY_FILE": str(tmp_path)}
    )
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)  # opening it for reading would wait for a writer: never opened
    assert "not a regular file" in problem({**BASE, **token, "LOCKGATE_API_KEY_FILE": str(fifo)})
    empty = secret_file(tmp_path, "empty", "\n")
    assert problem({**BASE, **token, "LOCKGATE_API_KEY_FILE": empty}) == (
        f"LOCKGATE_API_KEY_FILE: {empty} holds no key"
    )
    spaced = secret_file(tmp_path, "spaced", f"{HELD_KEY} {HELD_KEY}\n")
    assert problem({**BASE, **token, "LOCKGATE_API_KEY_FILE": spaced}) == (
        "LOCKGATE_API_KEY_FILE: the API key contains whitespace or control characters"
    )
    large = secret_file(tmp_path, "large", "k" * 100_000)
    assert "larger than" in problem({**BASE, **token, "LOCKGATE_API_KEY_FILE": large})
    both = {**BASE, **token, "LOCKGATE_API_KEY_FILE": missing, "LOCKGATE_API_KEY_ENV": "K"}
    assert problem(both) == "give LOCKGATE_API_KEY_ENV or LOCKGATE_API_KEY_FILE, not both"


def test_every_setting_of_the_command_line_has_a_variable() -> None:
    config = config_from_environment(
        {
            **BASE,
            "LOCKGATE_ALLOW_HOSTS": "proxy.internal, gate.example",
            "LOCKGATE_KEY_ON_ANY_PATH": "1",
            "LOCKGATE_HEAD_TIMEOUT": "7.5",
            "LOCKGATE_GRACE": "3",
            "LOCKGATE_MAX_CALLS": "20",
            "LOCKGATE_MAX_ARGUMENT_CHARS": "100000",
            "LOCKGATE_MAX_TEXT_CHARS": "500000",
            "LOCKGATE_MAX_REASONING_CHARS": "600000",
            "LOCKGATE_MAX_NATIVE_ITEMS": "100",
            "LOCKGATE_MAX_NATIVE_BYTES": "9000000",
            "LOCKGATE_FIRST_BYTE_TIMEOUT": "12.5",
            "LOCKGATE_HOLD": "all",
        }
    )
    assert (config.gating.first_byte_timeout, config.gating.hold) == (12.5, "all")
    assert config.allow_hosts == ("proxy.internal", "gate.example")
    assert config.key_on_any_path is True
    assert (config.head_timeout, config.grace_seconds) == (7.5, 3.0)
    assert config.gating.limits == GateLimits(
        max_text_chars=500_000,
        max_reasoning_chars=600_000,
        max_calls=20,
        max_argument_chars=100_000,
        max_native_items=100,
        max_native_bytes=9_000_000,
    )


@pytest.mark.parametrize(
    ("name", "value", "expected"),
    [
        ("LOCKGATE_MAX_CALLS", "0", "LOCKGATE_MAX_CALLS must be a whole number from 1"),
        ("LOCKGATE_MAX_CALLS", "many", "LOCKGATE_MAX_CALLS must be a whole number from 1"),
        ("LOCKGATE_HEAD_TIMEOUT", "-1", "LOCKGATE_HEAD_TIMEOUT must be a positive number"),
        ("LOCKGATE_FIRST_BYTE_TIMEOUT", "0", "LOCKGATE_FIRST_BYTE_TIMEOUT must be a positive"),
        ("LOCKGATE_ALLOW_HOSTS", "a b/c", "LOCKGATE_ALLOW_HOSTS: "),
        ("LOCKGATE_KEY_ON_ANY_PATH", "maybe", "LOCKGATE_KEY_ON_ANY_PATH must be 1 or 0"),
    ],
)
def test_a_bad_setting_is_one_line(name: str, value: str, expected: str) -> None:
    assert problem({**BASE, name: value}).startswith(expected)


def test_a_misconfigured_factory_says_one_line_and_exits_4(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    import asyncio

    monkeypatch.delenv("LOCKGATE_UPSTREAM", raising=False)
    with pytest.raises(SystemExit) as raised:
        asyncio.run(app_factory())
    assert raised.value.code == 4  # gunicorn's APP_LOAD_ERROR: its master stops
    assert capsys.readouterr().err.splitlines() == ["lockgate proxy: LOCKGATE_UPSTREAM is not set"]


def test_a_config_file_names_every_route(tmp_path: Path) -> None:
    from lockgate.proxy.environment import settings_from_environment

    config = tmp_path / "proxy.yaml"
    config.write_text(
        "client_token: {env: LG_TOKEN}\n"
        "routes:\n"
        "  - {name: openai, prefix: /openai, upstream: 'https://api.openai.example',"
        " key: {env: LG_OPENAI}}\n"
        "  - {name: anthropic, prefix: /anthropic, upstream: 'https://api.anthropic.example',"
        " key: {file: " + secret_file(tmp_path, "key", HELD_KEY + "\n") + "}}\n"
    )
    environ = {"LOCKGATE_CONFIG": str(config), "LG_TOKEN": TOKEN, "LG_OPENAI": HELD_KEY + "o"}
    settings, variables = settings_from_environment(environ)
    assert [(route.name, route.prefix) for route in settings.routes] == [
        ("openai", "/openai"),
        ("anthropic", "/anthropic"),
    ]
    assert [route.upstream.key.value for route in settings.routes if route.upstream.key] == [
        HELD_KEY + "o",
        HELD_KEY,
    ]
    assert settings.client_token is not None
    assert settings.client_token.value == TOKEN
    assert sorted(variables) == ["LG_OPENAI", "LG_TOKEN"]  # to forget; the file's stays


@pytest.mark.parametrize(
    ("text", "extra", "expected"),
    [
        ("routes: []\n", {}, "proxy.yaml:1: routes: at least one route is needed"),
        (
            "routes:\n  - {name: a, upstream: 'https://a.example', key: {env: LG_K}}\n",
            {"LG_K": HELD_KEY},
            "proxy.yaml: a route holds a key: the file needs a client_token",
        ),
        (
            "routes:\n  - {name: a, upstream: 'https://a.example'}\n",
            {"LOCKGATE_UPSTREAM": "https://b.example"},
            "LOCKGATE_CONFIG and LOCKGATE_UPSTREAM: give one",
        ),
    ],
)
def test_a_config_file_it_cannot_use_is_one_line(
    tmp_path: Path, text: str, extra: dict[str, str], expected: str
) -> None:
    from lockgate.proxy.environment import settings_from_environment

    config = tmp_path / "proxy.yaml"
    config.write_text(text)
    with pytest.raises(ValueError, match=r".+") as raised:
        settings_from_environment({"LOCKGATE_CONFIG": str(config), **extra})
    message = str(raised.value)
    assert "\n" not in message
    assert HELD_KEY not in message
    assert message.removeprefix(str(tmp_path) + "/").startswith(expected), message
