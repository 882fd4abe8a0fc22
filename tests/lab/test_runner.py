"""The lab runner (`lab/runner.py`): every scenario behaves as expected on every run."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from lockgate.fixture import CALCULATOR, create_fixture
from lockgate.lab import runner
from lockgate.lab.runner import LabTransport, lab_runs, run_scenario
from lockgate.lab.scenarios import FIXED_SOURCE, SCENARIOS_BY_NAME
from lockgate.providers import PROVIDERS
from lockgate.scripted.scenario import Expectation, Scenario

from ..helpers import CLI, PROXY_VARIABLES, assert_closing_lines, closings, dead_port, stderr_lines

REQUIRED_HTTP = {
    "reset-mid-stream",
    "clean-eof",
    "stall",
    "slow-drip",
    "giant-frame",
    "malformed-json",
    "http-401",
    "http-429-quota",
    "http-503-then-ok",
    "utf8-split",
}
REQUIRED = REQUIRED_HTTP | {
    "repair",
    "retry",
    "disconnect",
    "malformed",
    "output-limit",
    "unknown-tool",
    "second-call-invalid",
    "changed-call",
    "missing-call",
    "duplicate-start",
    "wrong-response-id",
    "reasoning-item",
    "cleanup-failure",
    "cancellation",
}


def test_every_required_scenario_exists() -> None:
    assert set(SCENARIOS_BY_NAME) >= REQUIRED


RUNS = lab_runs(None, list(PROVIDERS), "both")


@pytest.mark.parametrize(
    ("scenario", "provider", "kind"), RUNS, ids=[f"{s.name}-{p}-{k}" for s, p, k in RUNS]
)
async def test_scenario_behaves_as_expected(
    scenario: Scenario, provider: str, kind: LabTransport
) -> None:
    result = await run_scenario(scenario, kind, provider=provider)
    assert result.problems == []
    assert result.observed == scenario.expect.outcome
    assert result.streams_closed
    if scenario.expect.is_failure:
        assert result.tools_executed == 0
        assert result.final_source == CALCULATOR
    if kind == "http":
        assert result.server is not None
        assert result.server.requests == result.attempts


async def test_repair_fixes_the_file_and_retry_takes_three_attempts() -> None:
    repair = await run_scenario(SCENARIOS_BY_NAME["repair"])
    assert repair.final_source == FIXED_SOURCE
    assert repair.tools_executed == 6
    retry = await run_scenario(SCENARIOS_BY_NAME["retry"])
    assert retry.attempts == 3
    assert retry.observed == "model_finished"


def _entries(folder: Path) -> list[Path]:
    return list(folder.iterdir())


async def test_a_run_in_a_workspace_makes_one_fixture_there_and_removes_it(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    # `lockgate lab` gives every run one shared folder: a run makes its fixture directly in
    # it (one directory made and removed per run, not two) and leaves nothing behind.
    made: list[Path] = []

    def recorded(parent: Path) -> Path:
        made.append(create_fixture(parent))
        return made[-1]

    monkeypatch.setattr(runner, "create_fixture", recorded)
    result = await run_scenario(SCENARIOS_BY_NAME["repair"], workspace=tmp_path)
    assert result.final_source == FIXED_SOURCE
    [fixture] = made
    assert fixture.parent == tmp_path
    assert _entries(tmp_path) == []


async def test_lab_reports_an_unexpected_success_as_a_problem() -> None:
    # The repair conversation judged against a failure expectation must not pass.
    wrong = dataclasses.replace(
        SCENARIOS_BY_NAME["repair"], expect=Expectation("stream_ended", 1, 0)
    )
    result = await run_scenario(wrong)
    assert not result.as_expected
    assert any("outcome model_finished" in p for p in result.problems)
    assert any("tools executed" in p for p in result.problems)
    assert any("changed" in p for p in result.problems)


async def test_http_lab_reports_server_disagreement() -> None:
    # Expecting the client to stay to the end of a stall must be reported as a problem.
    stall = SCENARIOS_BY_NAME["stall"]
    wrong = dataclasses.replace(stall, expect=dataclasses.replace(stall.expect, closed_early=0))
    result = await run_scenario(wrong, "http")
    assert any("closed early" in p for p in result.problems)


# --- the lab's own network ---------------------------------------------------------------


def test_the_lab_ignores_proxy_variables(cli: CLI) -> None:
    dead = f"http://127.0.0.1:{dead_port()}"
    env = {name: dead for name in PROXY_VARIABLES if "no_" not in name.lower()}
    result = cli("lab", "--transport", "http", "--scenario", "repair", env=env)
    assert result.code == 0, result.output[-3000:]
    runs = lab_runs(SCENARIOS_BY_NAME["repair"], list(PROVIDERS), "http")
    assert stderr_lines(result.err, "scenario ") == [
        f"scenario repair ({provider}, http): as expected" for _, provider, _ in runs
    ]
    assert_closing_lines(result, FIXED_SOURCE)
    endings = [(e.stopped, e.executed_tools, e.source) for e in closings(result.out)]
    assert endings == [("model_finished", 6, FIXED_SOURCE)] * len(runs)
