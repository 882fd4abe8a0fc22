"""Secrets a config may not name (issue 27): a key or token from one of the system's own
variables (`key: {env: PATH}` read PATH's value as the key; the flag already refused it),
and a client token equal to a key the proxy holds (every client would hold the provider's
key). Each is one line naming the setting, never the secret."""

from __future__ import annotations

from pathlib import Path

import pytest

from lockgate.proxy.config import ConfigError, ProxyConfig, resolve_secrets, settings_from_text

from ..helpers import CLI, usage_error_line

SAME = "sk-SAME-secret-for-both-4711"
OTHER = "sk-other-HELD-key-0815"

SYSTEM = {
    "routes:\n  - {name: a, upstream: 'http://x', key: {env: PATH}}\n": (
        "c.yaml:2: routes[0].key.env: PATH is a system variable"
    ),
    "routes:\n  - {name: a, upstream: 'http://x', key: {env: home}}\n": (
        "c.yaml:2: routes[0].key.env: home is a system variable"
    ),
    "client_token: {env: LC_ALL}\nroutes:\n  - {name: a, upstream: 'http://x'}\n": (
        "c.yaml:1: client_token.env: LC_ALL is a system variable"
    ),
    (
        "routes:\n  - name: a\n    upstream: 'http://x'\n    retries: {attempts: 1}\n"
        "    fallbacks:\n      - {upstream: 'http://y', key: {env: PYTHONPATH}}\n"
    ): "c.yaml:6: routes[0].fallbacks[0].key.env: PYTHONPATH is a system variable",
}


@pytest.mark.parametrize("text", list(SYSTEM), ids=["PATH", "home", "token LC_ALL", "fall-back"])
def test_a_system_variable_is_no_key_in_the_file(text: str) -> None:
    with pytest.raises(ConfigError) as raised:
        settings_from_text(text, "c.yaml")
    assert str(raised.value).startswith(SYSTEM[text])
    assert "would be sent as the credential" in str(raised.value)


TOKEN_IS_KEY = [
    "client_token: {env: T}\nroutes:\n  - {name: a, upstream: 'http://x', key: {env: K}}\n",
    (
        "client_token: {env: T}\nroutes:\n  - {name: a, upstream: 'http://x', key: {env: O}}\n"
        "  - name: b\n    prefix: /b\n    upstream: 'http://y'\n    key: {env: O}\n"
        "    retries: {attempts: 1}\n    fallbacks: [{upstream: 'http://z', key: {env: K}}]\n"
    ),
]


@pytest.mark.parametrize("text", TOKEN_IS_KEY, ids=["route", "fall-back"])
def test_a_client_token_equal_to_a_held_key_is_refused(text: str) -> None:
    settings = settings_from_text(text.replace("  - {name: a,", "  - {name: a, prefix: /a,"), "c")
    with pytest.raises(ConfigError) as raised:
        resolve_secrets(settings, {"T": SAME, "K": SAME, "O": OTHER})
    message = str(raised.value)
    assert message.startswith("client_token: clients would hold the provider's key")
    assert message.endswith(" holds")
    assert SAME not in message
    assert OTHER not in message
    resolve_secrets(settings, {"T": "lockgate-team-token-1", "K": SAME, "O": OTHER})


def test_the_command_refuses_it_without_showing_it(cli: CLI, tmp_path: Path) -> None:
    path = tmp_path / "proxy.yaml"
    path.write_text(TOKEN_IS_KEY[0].replace("T}", "LG_T}").replace("K}", "LG_K}"))
    result = cli("proxy", "--config", str(path), "--check", env={"LG_T": SAME, "LG_K": SAME})
    line = usage_error_line(result)
    assert line.startswith(f"lockgate: {path}: client_token: clients would hold the provider")
    assert SAME not in result.err + result.out
    flags = cli(
        "proxy", "--upstream", "http://127.0.0.1:9", "--api-key-env", "LG_K",
        "--client-token-env", "LG_T", "--check", env={"LG_T": SAME, "LG_K": SAME},
    )  # fmt: skip
    assert usage_error_line(flags) == (
        "lockgate: --client-token-env LG_T: the same value as --api-key-env LG_K: clients "
        "would hold the provider's key; give them a token of their own; the proxy did not start"
    )
    assert SAME not in flags.err + flags.out


def test_a_library_caller_is_refused_too() -> None:
    with pytest.raises(ValueError, match="client_token: clients would hold") as raised:
        ProxyConfig("http://127.0.0.1:9", api_key=SAME, client_token=SAME)
    assert SAME not in str(raised.value)
