"""The API key never appears in stdout, stderr or `--json` traces, on any path."""

from __future__ import annotations

import subprocess

import pytest

from lockgate.lab.scenarios import SCENARIOS
from lockgate.lab.script import Turn

from .helpers import ServerThread, run_lockgate

FAKE_KEY = "sk-proj-LOCKGATE-SECRET-4d6f2a9b7c1e"


def run(base_url: str, *extra: str) -> subprocess.CompletedProcess[str]:
    arguments = ("--base-url", base_url, "--allow-execution", "--idle-timeout", "1", *extra)
    return run_lockgate("run", *arguments, key=FAKE_KEY, timeout=90)


# Every scenario's turns (success, each HTTP error, each stream fault); `cancellation` hangs
# and ends at the idle timeout here. Alternate human and --json output.
CASES = [(scenario.name, index % 2 == 1) for index, scenario in enumerate(SCENARIOS)]


@pytest.mark.parametrize(("name", "json_lines"), CASES, ids=[name for name, _ in CASES])
def test_key_never_printed(name: str, json_lines: bool) -> None:
    scenario = next(s for s in SCENARIOS if s.name == name)
    with ServerThread(scenario.turns()) as server:
        result = run(server.base_url, *(["--json"] if json_lines else []))
        assert server.server is not None
        assert all(
            r.headers.get("authorization") == "Bearer [redacted]" for r in server.server.requests
        )
    # (The fixture's own failing unit test prints a traceback inside a one-line tool result.)
    assert not any(line.startswith("Traceback") for line in result.stderr.splitlines())
    assert FAKE_KEY not in result.stdout
    assert FAKE_KEY not in result.stderr
    assert FAKE_KEY[8:] not in result.stdout + result.stderr


def test_key_echoed_by_a_hostile_server_is_redacted() -> None:
    echo = Turn(
        status=401,
        body={
            "error": {
                "message": f"Incorrect API key provided: {FAKE_KEY}.",
                "code": "invalid_api_key",
            }
        },
    )
    for extra in ((), ("--json",)):
        with ServerThread([echo]) as server:
            result = run(server.base_url, *extra)
        assert result.returncode == 1
        assert FAKE_KEY not in result.stdout + result.stderr
        assert "[redacted]" in result.stdout
