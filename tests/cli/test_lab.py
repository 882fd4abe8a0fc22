"""`lockgate lab` on the command line: its table, each run's trace, retries, --json, --list."""

from __future__ import annotations

import re

import pytest

from lockgate.fixture import CALCULATOR
from lockgate.lab.runner import lab_runs
from lockgate.lab.scenarios import FIXED_SOURCE, SCENARIOS, SCENARIOS_BY_NAME
from lockgate.providers import PROVIDERS

from ..helpers import (
    closings,
    json_records,
    no_traceback,
    retry_lines,
    run_lockgate,
)

HEADER = re.compile(r"== (\S+) \(([\w-]+), (\w+)\) ==")  # a lab variant: bedrock-invoke


def lab(*args: str) -> tuple[int, str, str]:
    result = run_lockgate("lab", *args)
    # (The fixture's failing unit test prints a traceback inside an indented tool result.)
    assert no_traceback(result.stdout + result.stderr)
    return result.returncode, result.stdout, result.stderr


def headers(stderr: str) -> list[tuple[str, str, str]]:
    """The `== SCENARIO (PROVIDER, TRANSPORT) ==` line of each run, in order."""
    return [match.groups() for match in map(HEADER.fullmatch, stderr.splitlines()) if match]  # type: ignore[misc]


def table_rows(stdout: str) -> list[list[str]]:
    """The cells of each row of the lab's summary table."""
    return [
        [cell.strip() for cell in line.strip("│").split("│")]
        for line in stdout.splitlines()
        if line.startswith("│")
    ]


def test_lab_runs_every_scenario_and_exits_zero() -> None:
    # Every run over both transports is played in-process by tests/lab/test_runner.py; here
    # the CLI plays every in-process run and prints one table.
    code, out, _ = lab("--transport", "inprocess")
    assert code == 0, out
    runs = lab_runs(None, list(PROVIDERS), "inprocess")
    rows = table_rows(out)
    assert [tuple(row[:3]) for row in rows] == [(s.name, p, kind) for s, p, kind in runs]
    assert [row[-1] for row in rows] == ["ok"] * len(runs)
    assert out.splitlines()[-1] == f"{len(runs)} of {len(runs)} runs behaved as expected"


@pytest.mark.parametrize(
    "name", ["disconnect", "malformed", "output-limit", "second-call-invalid", "cleanup-failure"]
)
def test_lab_failure_scenario_trace(name: str) -> None:
    code, out, err = lab("--scenario", name)
    assert code == 0, err
    scenario = SCENARIOS_BY_NAME[name]
    runs = lab_runs(scenario, list(PROVIDERS), "both")
    assert headers(err) == [(name, provider, kind) for _, provider, kind in runs]
    endings = closings(out)
    assert [e.kind for e in endings] == [scenario.expect.outcome] * len(runs)
    assert [(e.executed_tools, e.source) for e in endings] == [(0, CALCULATOR)] * len(runs)


def test_lab_repair_trace_shows_fixed_file() -> None:
    code, out, _ = lab("--scenario", "repair")
    assert code == 0
    endings = closings(out)
    runs = len(lab_runs(SCENARIOS_BY_NAME["repair"], list(PROVIDERS), "both"))
    assert [(e.stopped, e.executed_tools, e.source) for e in endings] == [
        ("model_finished", 6, FIXED_SOURCE)
    ] * runs


def test_lab_retry_trace_reports_retries() -> None:
    code, _, err = lab("--scenario", "retry")
    assert code == 0
    runs = len(lab_runs(SCENARIOS_BY_NAME["retry"], list(PROVIDERS), "both"))
    assert [(r.attempt, r.max_attempts) for r in retry_lines(err)] == [(2, 3), (3, 3)] * runs


def test_lab_json_trace_is_json_lines() -> None:
    result = run_lockgate("lab", "--scenario", "repair", "--provider", "responses", "--json")
    assert result.returncode == 0
    records = json_records(result.stdout)
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


def test_lab_json_summary_has_one_line_per_run() -> None:
    result = run_lockgate("lab", "--transport", "inprocess", "--json")
    assert result.returncode == 0
    records = json_records(result.stdout)
    runs = lab_runs(None, list(PROVIDERS), "inprocess")
    assert [(r["scenario"], r["provider"]) for r in records] == [(s.name, p) for s, p, _ in runs]
    assert all(r["as_expected"] and r["problems"] == [] for r in records)
    assert {r["transport"] for r in records} == {"inprocess"}


def test_lab_list_names_every_scenario_once_with_its_protocols() -> None:
    result = run_lockgate("lab", "--list", "--json")
    assert result.returncode == 0, result.stderr
    records = json_records(result.stdout)
    assert [r["name"] for r in records] == [s.name for s in SCENARIOS]
    assert all(r["event"] == "scenario" and r["summary"] and r["expected"] for r in records)
    human = run_lockgate("lab", "--list", "--provider", "chat")
    lines = human.stdout.splitlines()
    assert lines[-1] == f"{len(lines) - 1} scenarios"
    assert all(not line.split()[0].startswith(("anthropic-", "responses-")) for line in lines[:-1])


def test_lab_via_proxy_prints_its_table_and_exits_zero() -> None:
    code, stdout, _ = lab("--via", "proxy", "--scenario", "second-call-invalid")
    assert code == 0
    rows = {
        (row[0], row[1]): row for row in table_rows(stdout) if len(row) == 11 and row[2] == "as run"
    }
    gated = ("responses", "chat", "anthropic", "gemini", "bedrock", "bedrock-invoke")
    for provider in gated:
        # naive client, requests, passed, withheld, run executed, expected, naive via proxy,
        # naive direct, result
        assert rows["second-call-invalid", provider][2:] == [
            "as run",
            *("1", "0", "1", "0", "0", "0", "2"),
            "ok",
        ]
    websocket = [row for row in table_rows(stdout) if len(row) == 11 and row[2] == "WebSocket"]
    # the Responses WebSocket: the naive client executes a call at its output_item.done
    assert [row[1:] for row in websocket] == [
        ["responses", "WebSocket", *("1", "0", "1", "0", "0", "0", "2"), "ok"]
    ]
    assert stdout.splitlines()[-1] == "7 of 7 runs through the proxy as expected"


def test_lab_via_proxy_plays_a_client_that_declares_its_tools_a_second_time() -> None:
    code, stdout, _ = lab("--via", "proxy", "--scenario", "custom-tool-call")
    assert code == 0, stdout
    rows = [row for row in table_rows(stdout) if len(row) == 11 and row[0] == "custom-tool-call"]
    assert [row[1:] for row in rows] == [
        ["responses", "as run", *("1", "0", "1", "0", "0", "0", "1"), "ok"],
        ["responses", "declares its tools", *("1", "1", "0", "0", "1", "1", "1"), "ok"],
        ["responses", "WebSocket", *("1", "0", "1", "0", "0", "0", "1"), "ok"],
        [
            "responses",
            "WebSocket, declares its tools",
            *("1", "1", "0", "0", "1", "1", "1"),
            "ok",
        ],
    ]
    assert stdout.splitlines()[-1] == "4 of 4 runs through the proxy as expected"
    code, stdout, _ = lab("--via", "proxy", "--scenario", "websocket-upgrade", "--json")
    assert code == 0, stdout
    # Over HTTP against a server that refuses WebSockets: the 426 fall-back; on the
    # WebSocket against serve's WebSocket mode: the client stays on it.
    [fallback, socket] = json_records(stdout)
    assert (fallback["websocket_upgrade"], fallback["websocket"]) == (426, False)
    assert (socket["websocket_upgrade"], socket["websocket"]) == (101, True)
    for record in (fallback, socket):
        assert record["declares_tools"] is False
        assert record["naive_expected_via_proxy"] == record["naive_executed_via_proxy"] == 1


def test_lab_via_proxy_json_records_and_usage_errors() -> None:
    code, stdout, _ = lab("--via", "proxy", "--scenario", "repair", "--provider", "chat", "--json")
    assert code == 0
    records = json_records(stdout)
    assert [record["event"] for record in records] == ["lab_proxy_run"]
    assert records[0]["naive_executed_via_proxy"] == records[0]["run_executed"] == 6
    assert records[0]["as_expected"] is True
    code, stdout, _ = lab("--via", "proxy", "--scenario", "repair", "--provider", "gemini")
    assert code == 0  # every protocol is gated, Gemini's native one too
    assert stdout.splitlines()[-1] == "1 of 1 runs through the proxy as expected"
    code, _, stderr = lab("--via", "proxy", "--transport", "http")
    assert (code, stderr.strip()) == (
        2,
        "lockgate: --via proxy plays over HTTP; leave out --transport",
    )
