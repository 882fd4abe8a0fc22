from __future__ import annotations

import dataclasses

import pytest

from lockgate.fixture import CALCULATOR
from lockgate.lab.runner import run_scenario
from lockgate.lab.scenarios import FIXED_SOURCE, SCENARIOS, SCENARIOS_BY_NAME, Expectation

REQUIRED = {
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


@pytest.mark.parametrize("scenario", SCENARIOS, ids=lambda s: s.name)
async def test_scenario_behaves_as_expected(scenario) -> None:  # type: ignore[no-untyped-def]
    result = await run_scenario(scenario)
    assert result.problems == []
    assert result.observed == scenario.expect.outcome
    assert result.streams_closed
    if scenario.expect.is_failure:
        assert result.tools_executed == 0
        assert result.final_source == CALCULATOR
        assert result.attempts == 1


async def test_repair_fixes_the_file_and_retry_takes_three_attempts() -> None:
    repair = await run_scenario(SCENARIOS_BY_NAME["repair"])
    assert repair.final_source == FIXED_SOURCE
    assert repair.tools_executed == 6
    retry = await run_scenario(SCENARIOS_BY_NAME["retry"])
    assert retry.attempts == 3
    assert retry.observed == "model_finished"


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
