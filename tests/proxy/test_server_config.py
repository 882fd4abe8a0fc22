"""`ProxyConfig` and the gunicorn factory: a bad upstream refused, the config's secrets never
shown, the factory's config read from the environment and the application it builds (the
secrets read once and taken out of the environment)."""

from __future__ import annotations

import os

import pytest
from aiohttp import web

from lockgate.proxy.server import DEFAULT_MAX_REQUEST_BYTES, ProxyConfig, config_from_environment

from .test_server import HELD_KEY, TOKEN


@pytest.mark.parametrize(
    ("upstream", "problem"),
    [
        ("ftp://x", "not an http(s) URL"),
        ("https://user:pw@api.example", "user:password"),
        ("https://api.example/v1?x=1", "query or a fragment"),
        ("https://api.example/#frag", "query or a fragment"),
        ("", "empty"),
    ],
)
def test_a_bad_upstream_is_refused(upstream: str, problem: str) -> None:
    with pytest.raises(ValueError, match="upstream: ") as raised:
        ProxyConfig(upstream)
    assert problem in str(raised.value)


def test_the_config_never_shows_its_secrets() -> None:
    config = ProxyConfig("https://api.example", api_key=HELD_KEY, client_token=TOKEN)
    assert HELD_KEY not in repr(config)
    assert TOKEN not in repr(config)
    with pytest.raises(ValueError, match="api_key: "):
        ProxyConfig("https://api.example", api_key="bad key")


def test_the_gunicorn_factory_reads_its_config_from_the_environment() -> None:
    config = config_from_environment(
        {
            "LOCKGATE_UPSTREAM": "https://api.example",
            "LOCKGATE_API_KEY_ENV": "MY_KEY",
            "MY_KEY": HELD_KEY,
            "LOCKGATE_CLIENT_TOKEN_ENV": "MY_TOKEN",
            "MY_TOKEN": "client-token-5678",
            "LOCKGATE_HOLD": "terminal",
            "LOCKGATE_IDLE_TIMEOUT": "5",
            "LOCKGATE_MAX_STREAMS": "8",
        }
    )
    assert (config.upstream, config.api_key, config.max_streams) == (
        "https://api.example",
        HELD_KEY,
        8,
    )
    assert (config.gating.hold, config.gating.idle_timeout) == ("terminal", 5.0)
    with pytest.raises(ValueError, match="LOCKGATE_UPSTREAM"):
        config_from_environment({})
    with pytest.raises(ValueError, match="MY_KEY"):
        config_from_environment(
            {"LOCKGATE_UPSTREAM": "https://a.b", "LOCKGATE_API_KEY_ENV": "MY_KEY"}
        )
    # A held key without a client token: an open relay wherever gunicorn binds.
    with pytest.raises(ValueError, match="needs LOCKGATE_CLIENT_TOKEN_FILE or LOCKGATE_CLIENT"):
        config_from_environment(
            {"LOCKGATE_UPSTREAM": "https://a.b", "LOCKGATE_API_KEY_ENV": "K", "K": HELD_KEY}
        )


async def test_the_gunicorn_factory_builds_the_application(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lockgate.proxy.server import app_factory

    monkeypatch.setenv("LOCKGATE_UPSTREAM", "https://api.example")
    monkeypatch.setenv("LOCKGATE_API_KEY_ENV", "FACTORY_KEY")
    monkeypatch.setenv("FACTORY_KEY", HELD_KEY)
    monkeypatch.setenv("LOCKGATE_CLIENT_TOKEN_ENV", "FACTORY_TOKEN")
    monkeypatch.setenv("FACTORY_TOKEN", "client-token-5678")
    runner = await app_factory()  # the proxy's own runner: gunicorn's worker runs it as it is
    assert isinstance(runner, web.AppRunner)
    assert runner.app._client_max_size == DEFAULT_MAX_REQUEST_BYTES
    # The secrets are read once and leave the environment.
    assert "FACTORY_KEY" not in os.environ
    assert "FACTORY_TOKEN" not in os.environ
