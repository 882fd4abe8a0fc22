"""`lockgate run` in a subprocess against loopback servers: requests, exits, closing lines."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from lockgate.errors import FailureKind
from lockgate.fixture import CALCULATOR
from lockgate.lab.scenarios import (
    FIXED_SOURCE,
    USAGE_PER_TURN,
    recover_malformed_turns,
    repair_turns,
    usage_turns,
)
from lockgate.providers import PROVIDERS
from lockgate.providers.responses.render import ResponseBuilder
from lockgate.providers.responses.scenarios import reasoning_replay_turns
from lockgate.scripted.script import Turn

from ..helpers import (
    EDIT,
    ServerThread,
    assert_no_traceback,
    closing,
    final_record,
    json_records,
    run_lockgate,
    stderr_lines,
)

FAKE_KEY = "sk-lockgate-FAKE-KEY-7f3a9c"


def lockgate(*args: str, key: str | None = FAKE_KEY) -> subprocess.CompletedProcess[str]:
    return run_lockgate(*args, key=key)


def test_run_without_key_makes_no_request() -> None:
    with ServerThread(repair_turns()) as server:
        result = lockgate("run", "--base-url", server.base_url, key=None)
        assert server.server is not None
        assert server.server.requests == []
    assert result.returncode == 2
    assert result.stderr == "lockgate: OPENAI_API_KEY is not set; no request was made\n"
    assert_no_traceback(result)


def input_items(request: Any) -> list[dict[str, Any]]:
    return list(request.body["input"])


def test_run_repairs_against_a_loopback_provider() -> None:
    with ServerThread(repair_turns()) as server:
        result = lockgate(
            "run", "--base-url", server.base_url, "--model", "any", "--allow-execution"
        )
        assert server.server is not None
        requests = server.server.requests
    assert result.returncode == 0, result.stderr
    ending = closing(result.stdout)
    assert (ending.stopped, ending.executed_tools, ending.source) == (
        "model_finished",
        6,
        FIXED_SOURCE,
    )
    assert len(requests) == 7
    for number, request in enumerate(requests):
        assert request.method == "POST"
        assert request.path == "/v1/responses"
        assert request.headers["authorization"] == "Bearer [redacted]"
        body = request.body
        assert body["model"] == "any"
        assert body["store"] is False
        assert body["stream"] is True
        assert body["parallel_tool_calls"] is False
        assert body["max_output_tokens"] == 2048
        assert "previous_response_id" not in body
        assert [tool["name"] for tool in body["tools"]] == ["discover", "read", "edit", "test"]
        items = input_items(request)
        assert items[0]["role"] == "system"
        assert items[1]["role"] == "user"
        calls = [item for item in items if item.get("type") == "function_call"]
        outputs = [item for item in items if item.get("type") == "function_call_output"]
        assert len(calls) == len(outputs) == number  # every earlier call and its result
        for call in calls:  # each output directly follows its call
            index = items.index(call)
            assert items[index + 1] == {
                **items[index + 1],
                "type": "function_call_output",
                "call_id": call["call_id"],
            }
        if number:  # the full history grows; earlier requests are a prefix
            assert (
                input_items(requests[number - 1]) == items[: len(input_items(requests[number - 1]))]
            )
    last_items = input_items(requests[-1])
    edit_call = next(i for i in last_items if i.get("name") == "edit")
    assert json.loads(edit_call["arguments"]) == EDIT
    results = [str(i["output"]) for i in last_items if i.get("type") == "function_call_output"]
    assert results[2].startswith("exit status 1")
    assert results[5].startswith("exit status 0")
    assert FAKE_KEY not in result.stdout + result.stderr


def test_run_without_permission_exposes_only_read_tools() -> None:
    answer = (
        ResponseBuilder("resp_a").created().text("msg", "add subtracts; use +.").completed().turn()
    )
    with ServerThread([answer]) as server:
        result = lockgate("run", "--base-url", server.base_url)
        assert server.server is not None
        body = server.server.requests[0].body
    assert result.returncode == 0
    assert [tool["name"] for tool in body["tools"]] == ["discover", "read"]
    assert body["model"] == "gpt-4.1-mini"


def test_run_provider_failure_exits_one_and_prints_the_file() -> None:
    cut = ResponseBuilder("resp_cut").created().call("fc_1", "call_1", "edit", EDIT).turn()
    with ServerThread([cut]) as server:
        result = lockgate("run", "--base-url", server.base_url, "--allow-execution")
    assert result.returncode == 1
    ending = closing(result.stdout)
    assert ending.stopped == (
        "provider_failure (stream_ended: stream ended without a terminal event; nothing executed)"
    )
    assert (ending.executed_tools, ending.source) == (0, CALCULATOR)
    assert_no_traceback(result)


def test_run_turn_limit_exits_one() -> None:
    with ServerThread(repair_turns()) as server:
        result = lockgate(
            "run", "--base-url", server.base_url, "--allow-execution", "--max-turns", "2"
        )
    assert result.returncode == 1
    ending = closing(result.stdout)
    assert (ending.stopped, ending.executed_tools) == ("turn_limit", 2)


def test_run_http_error_is_one_line_without_retry() -> None:
    unauthorized = Turn(
        status=401,
        body={
            "error": {
                "message": "Incorrect API key provided: sk-lockg***",
                "code": "invalid_api_key",
            }
        },
    )
    with ServerThread([unauthorized]) as server:
        result = lockgate("run", "--base-url", server.base_url)
        assert server.server is not None
        assert len(server.server.requests) == 1
    assert result.returncode == 1
    said = "opening: HTTP 401 invalid_api_key: Incorrect API key provided: sk-lockg***"
    assert closing(result.stdout).stopped == f"provider_failure ({said})"
    assert result.stderr.splitlines() == [f"response failed: {said}"]  # one line, no retry
    assert FAKE_KEY not in result.stdout + result.stderr
    assert_no_traceback(result)


PATHS = {
    "responses": "/v1/responses",
    "chat": "/v1/chat/completions",
    "anthropic": "/v1/messages",
    # the model is in Gemini's path, and the path (not the body) asks for the stream
    "gemini": "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
    # the model id is one path segment, its ':' encoded; the path asks for the stream
    "bedrock": "/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream",
}


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
    ending = closing(result.stdout)
    assert (ending.stopped, ending.executed_tools, ending.source) == (
        "model_finished",
        6,
        FIXED_SOURCE,
    )
    assert [r.path for r in requests] == [PATHS[provider]] * 7
    renderer = PROVIDERS[provider].render()
    assert all(renderer.is_streaming(r.path, r.body) for r in requests)
    assert f"sk-{provider}-run-test" not in result.stdout + result.stderr


@pytest.mark.parametrize("http_client", ["aiohttp", "httpx"])
def test_run_with_the_chat_provider_repairs_the_fixture(http_client: str) -> None:
    with ServerThread(repair_turns(), provider="chat") as running:
        result = run_lockgate(
            "run",
            "--provider",
            "chat",
            "--base-url",
            running.base_url,
            "--allow-execution",
            "--http-client",
            http_client,
            key="sk-chat-run-test",
        )
        assert running.server is not None
        requests = [r.body for r in running.server.requests]
    assert result.returncode == 0, result.stderr
    ending = closing(result.stdout)
    assert (ending.stopped, ending.executed_tools, ending.source) == (
        "model_finished",
        6,
        FIXED_SOURCE,
    )
    assert len(requests) == 7
    first, last = requests[0], requests[-1]
    assert first["stream"] is True
    assert first["stream_options"] == {"include_usage": True}
    assert first["parallel_tool_calls"] is False
    assert first["max_tokens"] == 2048
    assert [tool["function"]["name"] for tool in first["tools"]] == [
        "discover",
        "read",
        "edit",
        "test",
    ]
    roles = [message["role"] for message in last["messages"]]
    assert roles[:2] == ["system", "user"]
    assert roles.count("tool") == 6
    edits = [
        call
        for message in last["messages"]
        for call in message.get("tool_calls") or []
        if call["function"]["name"] == "edit"
    ]
    assert json.loads(edits[0]["function"]["arguments"])["new"] == "return a + b"


# --- reasoning replay, usage, recovery -----------------------------------------------------


def test_reasoning_item_is_replayed_immediately_before_its_call() -> None:
    with ServerThread(reasoning_replay_turns()) as server:
        result = lockgate("run", "--base-url", server.base_url, "--model", "o4-mini")
        assert server.server is not None
        bodies = [r.body for r in server.server.requests]
    assert result.returncode == 0, result.stderr
    assert stderr_lines(result.stderr, "thinking") == [
        "thinking (summary): Look at the files first."
    ]
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
    assert closing(human.stdout).usage == (
        "usage: input=2600 (cached=2176) output=110 (reasoning=64) total=2710"
    )
    with ServerThread(usage_turns()) as server:
        machine = lockgate("run", "--base-url", server.base_url, "--json")
    records = json_records(machine.stdout)
    reported = [r["usage"] for r in records if r["event"] == "usage_reported"]
    assert [u["total_tokens"] for u in reported] == [u.total_tokens for u in USAGE_PER_TURN]
    assert final_record(machine.stdout)["usage"] == {
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
    ending = closing(stopped.stdout)
    assert (ending.kind, ending.executed_tools, ending.source) == (
        FailureKind.INVALID_BATCH,
        0,
        CALCULATOR,
    )
    with ServerThread(recover_malformed_turns()) as server:
        recovered = lockgate("run", "--base-url", server.base_url, "--allow-execution", "--recover")
    assert recovered.returncode == 0, recovered.stderr
    assert stderr_lines(recovered.stderr, "recovering") == [
        "recovering from invalid_batch: 1 call(s) answered with errors, none executed "
        "(1/2 in a row)"
    ]
    ending = closing(recovered.stdout)
    assert (ending.stopped, ending.source) == ("model_finished", FIXED_SOURCE)


def test_run_leaves_no_fixture_behind(tmp_path: Path) -> None:
    turn = ResponseBuilder("resp_ok").created().text("msg", "Done.").completed().turn()
    env = {**os.environ, "OPENAI_API_KEY": FAKE_KEY, "TMPDIR": str(tmp_path)}
    with ServerThread([turn, Turn(status=500)]) as server:
        result = subprocess.run(
            [sys.executable, "-m", "lockgate", "run", "--base-url", server.base_url],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
    assert result.returncode == 0
    assert list(tmp_path.iterdir()) == []
