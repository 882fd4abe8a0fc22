"""Usage errors are one line on stderr, exit 2, with no request made."""

from __future__ import annotations

import tempfile
from pathlib import Path

import pytest

from ..helpers import (
    CLI,
    KEY,
    assert_no_traceback,
    requests_of,
    run_lockgate,
    serve,
    text_turn,
    usage_error_line,
)

BAD_RUN_ARGUMENTS = {
    "port-99999": ["--base-url", "http://127.0.0.1:99999/v1"],
    "port-0": ["--base-url", "http://127.0.0.1:0/v1"],
    "space-in-host": ["--base-url", "http://exa mple.com/v1"],
    "userinfo": ["--base-url", "http://u:p@127.0.0.1:8080/v1"],
    "user-only": ["--base-url", "http://u@127.0.0.1:8080/v1"],
    "ftp": ["--base-url", "ftp://127.0.0.1/v1"],
    "no-host": ["--base-url", "http:///v1"],
    "bad-ipv6": ["--base-url", "http://[::1/v1"],
    "control-in-url": ["--base-url", "http://127.0.0.1:1/v1\x1b[2J"],
    "empty-model": ["--model", ""],
    "blank-model": ["--model", " "],
    "spaced-model": ["--model", "gpt 4"],
    "budget-without-recover": ["--recovery-budget", "2"],
    "nan-idle": ["--idle-timeout", "nan"],
    "inf-deadline": ["--deadline", "inf"],
    "zero-idle": ["--idle-timeout", "0"],
    "negative-jitter": ["--retry-jitter", "-0.5"],
    "attempts-float": ["--retry-attempts", "2.5"],
    "attempts-huge": ["--retry-attempts", "1e999"],
    "max-turns-zero": ["--max-turns", "0"],
    "unknown-flag": ["--bogus"],
    "stray-argument": ["line\nbreak"],
}


@pytest.mark.parametrize("extra", list(BAD_RUN_ARGUMENTS.values()), ids=list(BAD_RUN_ARGUMENTS))
def test_bad_run_arguments_are_one_line_usage_errors(cli: CLI, extra: list[str]) -> None:
    with serve([text_turn()]) as server:
        result = cli("run", "--base-url", server.base_url, *extra, key=KEY)
        assert requests_of(server) == []
    usage_error_line(result)
    assert "\x1b" not in result.err


BAD_BASE_URLS = {
    "::::": "'::::' is not an http(s) URL with a host",
    "": "the URL is empty",
    "ftp://127.0.0.1/v1": "'ftp://127.0.0.1/v1' is not an http(s) URL with a host",
    "http://u:p@127.0.0.1:1/v1": (
        "the URL must not carry user:password (the key comes from the environment)"
    ),
    "http://h:99999/v1": "'http://h:99999/v1' is not a valid URL (Port out of range 0-65535)",
}


@pytest.mark.parametrize("url", list(BAD_BASE_URLS))
def test_a_bad_base_url_variable_is_a_usage_error(cli: CLI, url: str) -> None:
    """Without --base-url the SDK reads OPENAI_BASE_URL itself: the same rules apply, and
    the error names the variable."""
    result = cli("run", key=KEY, env={"OPENAI_BASE_URL": url})
    assert usage_error_line(result) == (
        f"lockgate: OPENAI_BASE_URL: {BAD_BASE_URLS[url]} (or give --base-url); no request was made"
    )


def test_the_base_url_flag_wins_over_the_variable(cli: CLI) -> None:
    with serve([text_turn()]) as server:
        result = cli("run", "--base-url", server.base_url, key=KEY, env={"OPENAI_BASE_URL": "::"})
    assert result.code == 0, result.output


def test_a_thinking_budget_below_the_apis_minimum_is_a_usage_error(cli: CLI) -> None:
    result = cli("run", "--provider", "anthropic", "--thinking-budget", "10", key=KEY)
    assert usage_error_line(result) == (
        "lockgate: argument --thinking-budget: must be between 1024 (the API's minimum) "
        "and 10000000 (see lockgate run --help)"
    )


@pytest.mark.parametrize("command", ["run", "lab"])
def test_no_temporary_directory_is_a_one_line_usage_error(
    cli: CLI, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, command: str
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "nonexistent"))
    with serve([text_turn()]) as server:
        arguments = {
            "run": ["run", "--base-url", server.base_url],
            "lab": ["lab", "--transport", "inprocess", "--scenario", "repair"],
        }[command]
        result = cli(*arguments, key=KEY)
        assert requests_of(server) == []
    assert usage_error_line(result) == (
        "lockgate: no writable temporary directory (No such file or directory); set TMPDIR"
    )


BAD_ARGUMENTS = {
    ("lab", "--scenario", "nope"): "lockgate: unknown scenario 'nope' (see lockgate lab --help)",
    ("run", "--max-turns", "0"): (
        "lockgate run: error: argument --max-turns: must be between 1 and 1000000 "
        "(see lockgate run --help)"
    ),
    ("run", "--max-turns", "x"): (
        "lockgate run: error: argument --max-turns: 'x' is not a whole number "
        "(see lockgate run --help)"
    ),
    ("run", "--base-url", "ftp://x"): (
        "lockgate run: error: argument --base-url: 'ftp://x' is not an http(s) URL with a host "
        "(see lockgate run --help)"
    ),
    ("bogus",): (
        "lockgate: error: argument command: invalid choice: 'bogus' "
        "(choose from 'run', 'lab', 'serve', 'proxy', 'cassette') (see lockgate --help)"
    ),
    (): "lockgate: error: the following arguments are required: command (see lockgate --help)",
}


@pytest.mark.parametrize("args", list(BAD_ARGUMENTS))
def test_bad_arguments_exit_two_with_one_line_error(args: tuple[str, ...]) -> None:
    result = run_lockgate(*args, key="sk-test-not-used")
    assert result.returncode == 2
    assert result.stderr == BAD_ARGUMENTS[args] + "\n"  # one line, never the whole usage
    assert result.stdout == ""
    assert_no_traceback(result)


@pytest.mark.parametrize("name", ["PATH", "HOME", "LC_ALL", "LOCKGATE_RETRY_ATTEMPTS", "A B", ""])
def test_api_key_env_refuses_system_variables_and_non_names(name: str) -> None:
    # Audit 3, L9: `--api-key-env PATH` sent the value of PATH as the bearer token.
    result = run_lockgate("run", "--api-key-env", name, key="sk-test-not-used")
    assert result.returncode == 2
    why = (
        "must be an environment variable name (letters, digits and '_')"
        if name in ("A B", "")
        else f"{name} is a system variable, not an API key: its value would be sent as the "
        "credential"
    )
    assert result.stderr == (
        f"lockgate run: error: argument --api-key-env: {why} (see lockgate run --help)\n"
    )


def test_responses_only_flags_are_refused_with_chat() -> None:
    for flag in (["--continuation", "native"], ["--encrypted-reasoning", "on"]):
        result = run_lockgate("run", "--provider", "chat", *flag, key="sk-test-flags")
        assert result.returncode == 2
        assert result.stderr == f"lockgate: {flag[0]} is not available with --provider chat\n"
        assert result.stdout == ""  # no run started, nothing printed
