"""`lockgate run --provider P` repairs the fixture against `lockgate serve`-style loopback
servers speaking P, for every registered provider, and the requests are P's own."""

from __future__ import annotations

import pytest

from lockgate.lab.scenarios import FIXED_SOURCE, repair_turns
from lockgate.providers import PROVIDERS

from .helpers import ServerThread, ends_with_file_and_usage, run_lockgate

PATHS = {"responses": "/v1/responses", "chat": "/v1/chat/completions", "anthropic": "/v1/messages"}


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
def test_run_repairs_the_fixture_with_every_provider(provider: str) -> None:
    with ServerThread(repair_turns(), provider=provider) as running:
        result = run_lockgate(
            "run",
            "--provider",
            provider,
            "--base-url",
            running.base_url,
            "--allow-execution",
            "--api-key-env",
            "LOCKGATE_TEST_KEY",
            env={"LOCKGATE_TEST_KEY": f"sk-{provider}-run-test"},
        )
        assert running.server is not None
        requests = running.server.requests
    assert result.returncode == 0, result.stderr
    assert "stopped: model_finished" in result.stdout
    assert "executed tools: 6" in result.stdout
    assert ends_with_file_and_usage(result.stdout, FIXED_SOURCE)
    assert [r.path for r in requests] == [PATHS[provider]] * 7
    assert all(r.body["stream"] is True for r in requests)
    assert f"sk-{provider}-run-test" not in result.stdout + result.stderr
