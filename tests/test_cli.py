"""The command line as users run it: subprocesses, loopback servers, exit codes."""

from __future__ import annotations

import json
import subprocess
from typing import Any

import pytest

from lockgate.fixture import CALCULATOR
from lockgate.lab.runner import lab_runs
from lockgate.lab.scenarios import FIXED_SOURCE, SCENARIOS, repair_turns
from lockgate.providers import PROVIDERS
from lockgate.providers.responses.render import ResponseBuilder

from .helpers import EDIT, ServerThread, ends_with_file_and_usage, run_lockgate

FAKE_KEY = "sk-lockgate-FAKE-KEY-7f3a9c"


def lockgate(*args: str, key: str | None = FAKE_KEY) -> subprocess.CompletedProcess[str]:
    return run_lockgate(*args, key=key)


def assert_no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr
    assert "Traceback" not in result.stdout


def test_lab_runs_every_scenario_and_exits_zero() -> None:
    # Every run over both transports is played in-process by tests/test_lab.py; here the
    # CLI plays every in-process run and prints one table.
    result = lockgate("lab", "--transport", "inprocess")
    assert result.returncode == 0, result.stdout + result.stderr
    runs = len(lab_runs(None, list(PROVIDERS), "inprocess"))
    for scenario in SCENARIOS:
        if "inprocess" in scenario.transports:
            assert scenario.name in result.stdout
    assert f"{runs} of {runs} runs behaved as expected" in result.stdout
    assert "NOT AS EXPECTED" not in result.stdout


@pytest.mark.parametrize(
    "name", ["disconnect", "malformed", "output-limit", "second-call-invalid", "cleanup-failure"]
)
def test_lab_failure_scenario_trace(name: str) -> None:
    result = lockgate("lab", "--scenario", name)
    assert result.returncode == 0, result.stderr
    assert "stopped: provider_failure (" in result.stdout
    assert "executed tools: 0" in result.stdout
    assert ends_with_file_and_usage(result.stdout, CALCULATOR)


def test_lab_repair_trace_shows_fixed_file() -> None:
    result = lockgate("lab", "--scenario", "repair")
    assert result.returncode == 0
    assert "stopped: model_finished" in result.stdout
    assert "executed tools: 6" in result.stdout
    assert ends_with_file_and_usage(result.stdout, FIXED_SOURCE)


def test_lab_retry_trace_reports_retries() -> None:
    result = lockgate("lab", "--scenario", "retry")
    assert result.returncode == 0
    assert "retry opening: attempt 2/3" in result.stderr
    assert "retry opening: attempt 3/3" in result.stderr


def test_lab_json_trace_is_json_lines() -> None:
    result = lockgate("lab", "--scenario", "repair", "--provider", "responses", "--json")
    assert result.returncode == 0
    records = [json.loads(line) for line in result.stdout.splitlines()]
    kinds = {record["event"] for record in records}
    assert {
        "response_started",
        "text_delta",
        "tool_started",
        "tool_finished",
        "decision_ready",
        "final",
    } <= kinds
    finals = [record for record in records if record["event"] == "final"]
    assert [final["source"] for final in finals] == [FIXED_SOURCE, FIXED_SOURCE]
    runs = [record for record in records if record["event"] == "lab_run"]
    assert [(r["transport"], r["as_expected"]) for r in runs] == [
        ("inprocess", True),
        ("http", True),
    ]
    assert records[-1] == runs[-1]  # each run's record follows its final record


@pytest.mark.parametrize(
    "args",
    [
        ("lab", "--scenario", "nope"),
        ("run", "--max-turns", "0"),
        ("run", "--max-turns", "x"),
        ("run", "--base-url", "ftp://x"),
        ("bogus",),
        (),
    ],
)
def test_bad_arguments_exit_two_with_one_line_error(args: tuple[str, ...]) -> None:
    result = lockgate(*args)
    assert result.returncode == 2
    lines = result.stderr.strip().splitlines()
    assert len(lines) == 1, result.stderr  # one line, never the whole usage
    assert lines[0].startswith("lockgate"), lines[0]
    assert "error" in lines[0] or "unknown" in lines[0]
    assert result.stdout == ""
    assert_no_traceback(result)


def test_run_without_key_makes_no_request() -> None:
    with ServerThread(repair_turns()) as server:
        result = lockgate("run", "--base-url", server.base_url, key=None)
        assert server.server is not None
        assert server.server.requests == []
    assert result.returncode == 2
    assert "OPENAI_API_KEY is not set" in result.stderr
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
    assert ends_with_file_and_usage(result.stdout, FIXED_SOURCE)
    assert "stopped: model_finished" in result.stdout
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
    assert "stopped: provider_failure (stream_ended:" in result.stdout
    assert "executed tools: 0" in result.stdout
    assert ends_with_file_and_usage(result.stdout, CALCULATOR)
    assert_no_traceback(result)


def test_run_turn_limit_exits_one() -> None:
    with ServerThread(repair_turns()) as server:
        result = lockgate(
            "run", "--base-url", server.base_url, "--allow-execution", "--max-turns", "2"
        )
    assert result.returncode == 1
    assert "stopped: turn_limit" in result.stdout


def test_run_http_error_is_one_line_without_retry() -> None:
    from lockgate.scripted.script import Turn

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
    assert "stopped: provider_failure (opening: HTTP 401 invalid_api_key" in result.stdout
    assert FAKE_KEY not in result.stdout + result.stderr
    assert_no_traceback(result)


def test_lab_json_summary_has_one_line_per_run() -> None:
    result = lockgate("lab", "--transport", "inprocess", "--json")
    assert result.returncode == 0
    records = [json.loads(line) for line in result.stdout.splitlines()]
    runs = lab_runs(None, list(PROVIDERS), "inprocess")
    assert [(r["scenario"], r["provider"]) for r in records] == [(s.name, p) for s, p, _ in runs]
    assert all(r["as_expected"] and r["problems"] == [] for r in records)
    assert {r["transport"] for r in records} == {"inprocess"}


def test_lab_list_names_every_scenario_once_with_its_protocols() -> None:
    from lockgate.lab.scenarios import SCENARIOS

    result = run_lockgate("lab", "--list", "--json")
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert [r["name"] for r in records] == [s.name for s in SCENARIOS]
    assert all(r["event"] == "scenario" and r["summary"] and r["expected"] for r in records)
    human = run_lockgate("lab", "--list", "--provider", "chat")
    lines = human.stdout.splitlines()
    assert lines[-1] == f"{len(lines) - 1} scenarios"
    assert all(not line.split()[0].startswith(("anthropic-", "responses-")) for line in lines[:-1])


def test_serve_list_shows_what_one_protocol_can_serve() -> None:
    result = run_lockgate("serve", "--provider", "anthropic", "--list", "--json")
    assert result.returncode == 0, result.stderr
    records = [json.loads(line) for line in result.stdout.splitlines()]
    assert records
    assert all("anthropic" in r["protocols"] for r in records)
    assert {"repair", "anthropic-pause-turn"} <= {r["name"] for r in records}
    assert run_lockgate("serve", "--scenario", "repair", "--json").returncode == 2


@pytest.mark.parametrize("name", ["PATH", "HOME", "LC_ALL", "LOCKGATE_RETRY_ATTEMPTS", "A B", ""])
def test_api_key_env_refuses_system_variables_and_non_names(name: str) -> None:
    # Audit 3, L9: `--api-key-env PATH` sent the value of PATH as the bearer token.
    result = run_lockgate("run", "--api-key-env", name, key="sk-test-not-used")
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert "--api-key-env" in result.stderr
