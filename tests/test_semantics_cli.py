"""Issue-level guarantees of the retry owner, reasoning replay, usage and recovery, checked
against `lockgate serve`-style loopback servers with the real SDK and the real CLI."""

from __future__ import annotations

import json
import re
import subprocess

import pytest

from lockgate.client import StreamingModelClient
from lockgate.conversation import Message
from lockgate.errors import FailureKind, ResponseFailure
from lockgate.fixture import ALL_TOOLS, CALCULATOR
from lockgate.lab.scenarios import (
    FIXED_SOURCE,
    USAGE_PER_TURN,
    recover_malformed_turns,
    usage_turns,
)
from lockgate.lab.server import serve_script
from lockgate.providers.responses.codec import ResponsesCodec
from lockgate.providers.responses.render import ResponseBuilder
from lockgate.providers.responses.scenarios import reasoning_replay_turns
from lockgate.scripted.script import Turn

from .helpers import ServerThread, ends_with_file_and_usage, responses_transport, run_lockgate

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
    assert second.received_at - first.received_at >= 0.4
    assert "retry opening: attempt 2/3 in 0.40 s" in result.stderr


def test_insufficient_quota_gets_exactly_one_request() -> None:
    with ServerThread([Turn(status=429, body=QUOTA), ANSWER]) as server:
        result = lockgate("run", "--base-url", server.base_url)
        assert server.server is not None
        requests = len(server.server.requests)
    assert requests == 1
    assert result.returncode == 1
    assert "stopped: provider_failure (quota_exhausted: quota exhausted" in result.stdout


async def test_retry_after_an_hour_fails_at_once_naming_the_wait() -> None:
    waits: list[float] = []

    async def sleep(seconds: float) -> None:
        waits.append(seconds)

    async with serve_script(
        [Turn(status=429, body=RATE_LIMITED, headers={"retry-after": "3600"}), ANSWER]
    ) as server:
        transport = responses_transport(api_key=KEY, base_url=server.base_url)
        client = StreamingModelClient(ResponsesCodec("gpt-4.1-mini"), transport, sleep=sleep)
        try:
            with pytest.raises(ResponseFailure) as caught:
                await client.complete([Message("user", "go")], ALL_TOOLS)
        finally:
            await transport.aclose()
        assert len(server.requests) == 1
    assert waits == []  # no wait at all, not a shorter one
    assert caught.value.kind is FailureKind.RETRY_WAIT_TOO_LONG
    assert "3600 s" in caught.value.message


def test_retry_after_an_hour_on_the_command_line() -> None:
    with ServerThread(
        [Turn(status=429, body=RATE_LIMITED, headers={"retry-after": "3600"}), ANSWER]
    ) as server:
        result = lockgate("run", "--base-url", server.base_url)
    assert result.returncode == 1
    assert (
        "stopped: provider_failure (retry_wait_too_long: the server asked to wait 3600 s"
        in result.stdout
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


def test_reasoning_item_is_replayed_immediately_before_its_call() -> None:
    with ServerThread(reasoning_replay_turns()) as server:
        result = lockgate("run", "--base-url", server.base_url, "--model", "o4-mini")
        assert server.server is not None
        bodies = [r.body for r in server.server.requests]
    assert result.returncode == 0, result.stderr
    assert "thinking (summary): Look at the files first." in result.stderr
    assert bodies[0]["include"] == ["reasoning.encrypted_content"]
    items = bodies[1]["input"]
    index = next(i for i, item in enumerate(items) if item.get("type") == "reasoning")
    assert items[index]["encrypted_content"] == "gAAAAB-opaque-rs_1-do-not-touch=="
    assert items[index + 1]["type"] == "function_call"
    assert items[index + 1]["call_id"] == "call_1"
    assert items[index + 2]["type"] == "function_call_output"


def test_usage_line_and_json_figures() -> None:
    with ServerThread(usage_turns()) as server:
        human = lockgate("run", "--base-url", server.base_url)
    assert human.returncode == 0
    assert (
        human.stdout.splitlines()[-1]
        == "usage: input=2600 (cached=2176) output=110 (reasoning=64) total=2710"
    )
    with ServerThread(usage_turns()) as server:
        machine = lockgate("run", "--base-url", server.base_url, "--json")
    records = [json.loads(line) for line in machine.stdout.splitlines()]
    reported = [r["usage"] for r in records if r["event"] == "usage_reported"]
    assert [u["total_tokens"] for u in reported] == [u.total_tokens for u in USAGE_PER_TURN]
    assert records[-1]["event"] == "final"
    assert records[-1]["usage"] == {
        "input_tokens": 2600,
        "cached_input_tokens": 2176,
        "output_tokens": 110,
        "reasoning_tokens": 64,
        "total_tokens": 2710,
        "cache_write_tokens": 0,
    }


def test_recover_lets_the_model_reissue_a_malformed_edit() -> None:
    with ServerThread(recover_malformed_turns()) as server:
        stopped = lockgate("run", "--base-url", server.base_url, "--allow-execution")
    assert stopped.returncode == 1
    assert "stopped: provider_failure (invalid_batch:" in stopped.stdout
    assert ends_with_file_and_usage(stopped.stdout, CALCULATOR)
    with ServerThread(recover_malformed_turns()) as server:
        recovered = lockgate("run", "--base-url", server.base_url, "--allow-execution", "--recover")
    assert recovered.returncode == 0, recovered.stderr
    assert re.search(
        r"recovering from invalid_batch: 1 call\(s\) answered with errors, none executed \(1/2",
        recovered.stderr,
    )
    assert ends_with_file_and_usage(recovered.stdout, FIXED_SOURCE)
