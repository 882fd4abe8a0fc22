"""Retries on the command line: the server's word, retry flags and variables, bad values."""

from __future__ import annotations

import subprocess

import pytest

from lockgate.providers.responses.render import ResponseBuilder
from lockgate.scripted.script import Turn

from ..helpers import (
    CLI,
    RetryLine,
    ServerThread,
    closing,
    requests_of,
    retry_lines,
    run_lockgate,
    serve,
    text_turn,
    usage_error_line,
)

KEY = "sk-semantics-test-key"
ANSWER = ResponseBuilder("resp_ok").created().text("msg", "The bug is in add.").completed().turn()
RATE_LIMITED = {
    "error": {"message": "Rate limit reached.", "type": "requests", "code": "rate_limit_exceeded"}
}
QUOTA = {
    "error": {
        "message": "You exceeded your current quota.",
        "type": "insufficient_quota",
        "code": "insufficient_quota",
    }
}


def lockgate(*args: str, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    return run_lockgate(*args, key=KEY, env=env)


def test_retry_after_ms_is_honoured_then_succeeds() -> None:
    with ServerThread(
        [Turn(status=429, body=RATE_LIMITED, headers={"retry-after-ms": "400"}), ANSWER]
    ) as server:
        result = lockgate("run", "--base-url", server.base_url)
        assert server.server is not None
        first, second = server.server.requests
    assert result.returncode == 0, result.stderr
    assert second.received_at - first.received_at >= 0.4  # it did wait (a lower bound only)
    assert retry_lines(result.stderr) == [
        RetryLine(2, 3, 0.4, "HTTP 429 rate_limit_exceeded: Rate limit reached.")
    ]


def test_insufficient_quota_gets_exactly_one_request() -> None:
    with ServerThread([Turn(status=429, body=QUOTA), ANSWER]) as server:
        result = lockgate("run", "--base-url", server.base_url)
        assert server.server is not None
        requests = len(server.server.requests)
    assert requests == 1
    assert result.returncode == 1
    assert closing(result.stdout).stopped == (
        "provider_failure (quota_exhausted: quota exhausted, retrying cannot help "
        "(HTTP 429 insufficient_quota: You exceeded your current quota.))"
    )


def test_retry_after_an_hour_on_the_command_line() -> None:
    with ServerThread(
        [Turn(status=429, body=RATE_LIMITED, headers={"retry-after": "3600"}), ANSWER]
    ) as server:
        result = lockgate("run", "--base-url", server.base_url)
    assert result.returncode == 1
    assert closing(result.stdout).stopped == (
        "provider_failure (retry_wait_too_long: the server asked to wait 3600 s before "
        "retrying, longer than the 60 s maximum; not retried "
        "(HTTP 429 rate_limit_exceeded: Rate limit reached.))"
    )


def test_retry_flags_and_environment() -> None:
    turns = [Turn(status=503), Turn(status=503), Turn(status=503), Turn(status=503), ANSWER]
    with ServerThread(turns) as server:
        result = lockgate(
            "run",
            "--base-url",
            server.base_url,
            "--retry-base-delay",
            "0",
            env={"LOCKGATE_RETRY_ATTEMPTS": "5"},
        )
        assert server.server is not None
        assert len(server.server.requests) == 5
    assert result.returncode == 0, result.stderr
    bad = lockgate(
        "run", "--base-url", "http://127.0.0.1:9/v1", env={"LOCKGATE_RETRY_MAX_DELAY": "forever"}
    )
    assert bad.returncode == 2
    assert (
        bad.stderr.strip()
        == "lockgate: invalid retry policy: LOCKGATE_RETRY_MAX_DELAY='forever' is not a number"
    )


# --- retry settings that are not settings ------------------------------------------------


# (name, value, what is said after `lockgate: invalid retry policy: `). The rule broken is
# always named; the variable only where the value is not a number at all (audit: see report).
BAD_RETRY_ENVIRONMENT = [
    ("LOCKGATE_RETRY_ATTEMPTS", "inf", "LOCKGATE_RETRY_ATTEMPTS='inf' is not a finite number"),
    ("LOCKGATE_RETRY_ATTEMPTS", "1e999", "LOCKGATE_RETRY_ATTEMPTS='1e999' is not a finite number"),
    ("LOCKGATE_RETRY_ATTEMPTS", "nan", "LOCKGATE_RETRY_ATTEMPTS='nan' is not a finite number"),
    ("LOCKGATE_RETRY_ATTEMPTS", "2.5", "retry attempts must be a whole number"),
    ("LOCKGATE_RETRY_ATTEMPTS", "0", "attempts must be between 1 and 100"),
    ("LOCKGATE_RETRY_ATTEMPTS", "", "LOCKGATE_RETRY_ATTEMPTS='' is not a number"),
    (
        "LOCKGATE_RETRY_ATTEMPTS",
        "three\nlines\x1b[2J",
        "LOCKGATE_RETRY_ATTEMPTS='three\\nlines\\x1b[2J' is not a number",
    ),
    ("LOCKGATE_RETRY_BASE_DELAY", "nan", "LOCKGATE_RETRY_BASE_DELAY='nan' is not a finite number"),
    ("LOCKGATE_RETRY_BASE_DELAY", "-1", "base_delay must be a non-negative number of seconds"),
    ("LOCKGATE_RETRY_MAX_DELAY", "inf", "LOCKGATE_RETRY_MAX_DELAY='inf' is not a finite number"),
    ("LOCKGATE_RETRY_JITTER", "1", "jitter must be in [0, 1)"),
]


@pytest.mark.parametrize(
    ("name", "value", "said"),
    BAD_RETRY_ENVIRONMENT,
    ids=[f"{n}-{v}" for n, v, _ in BAD_RETRY_ENVIRONMENT],
)
def test_bad_retry_environment_is_a_one_line_usage_error(
    cli: CLI, name: str, value: str, said: str
) -> None:
    with serve([text_turn()]) as server:
        result = cli("run", "--base-url", server.base_url, key=KEY, env={name: value})
        assert requests_of(server) == []
    assert usage_error_line(result) == f"lockgate: invalid retry policy: {said}"
    assert "\x1b" not in result.err


@pytest.mark.parametrize(
    ("name", "flag", "value"),
    [
        ("LOCKGATE_RETRY_ATTEMPTS", "--retry-attempts", "2"),
        ("LOCKGATE_RETRY_BASE_DELAY", "--retry-base-delay", "0.1"),
        ("LOCKGATE_RETRY_MAX_DELAY", "--retry-max-delay", "5"),
        ("LOCKGATE_RETRY_JITTER", "--retry-jitter", "0.2"),
    ],
)
def test_a_flag_wins_over_an_invalid_environment_value(
    cli: CLI, name: str, flag: str, value: str
) -> None:
    with serve([text_turn()]) as server:
        result = cli("run", "--base-url", server.base_url, flag, value, key=KEY, env={name: "nan"})
    assert result.code == 0, result.output
    assert closing(result.out).stopped == "model_finished"
