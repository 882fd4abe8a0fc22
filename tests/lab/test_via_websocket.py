"""`lockgate lab --via proxy` over the Responses WebSocket: the naive client executes a call
at its output item's `done`, and the judge catches a relay that lets a broken response's
call through, or refuses it for another reason than the fault's."""

from __future__ import annotations

import dataclasses
import json

import pytest

from lockgate.lab import via_websocket
from lockgate.lab.scenarios import SCENARIOS_BY_NAME
from lockgate.lab.via_websocket import (
    WEBSOCKET_FAULTS,
    WEBSOCKET_FAULTS_BY_NAME,
    calls_done,
    run_via_websocket,
)


def _done(item_type: str) -> str:
    return json.dumps({"type": "response.output_item.done", "item": {"type": item_type}})


def test_calls_done_counts_the_items_a_client_executes_at_their_done() -> None:
    messages = [
        json.dumps({"type": "response.output_item.added", "item": {"type": "function_call"}}),
        _done("function_call"),
        _done("custom_tool_call"),
        _done("shell_call"),
        _done("reasoning"),
        _done("web_search_call"),  # the provider runs it
        "not json",
    ]
    assert calls_done(messages) == 3


async def test_every_websocket_fault_would_run_the_edit_without_the_proxy() -> None:
    for fault in WEBSOCKET_FAULTS:
        result = await run_via_websocket(fault.scenario, "responses")
        assert result.problems == (), fault.scenario.name
        assert (result.direct_tools, result.naive_tools, result.withheld) == (1, 0, 1)


async def test_the_judge_names_a_refusal_for_another_reason_than_the_fault(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Without the proxy's keep-alive ping, the no-pong fault is plain silence: refused by
    the idle timeout, which is not the fault the run plays."""
    fault = WEBSOCKET_FAULTS_BY_NAME["ws-no-pong"]
    unpinged = dataclasses.replace(fault, keepalive=None)
    monkeypatch.setitem(via_websocket.WEBSOCKET_FAULTS_BY_NAME, "ws-no-pong", unpinged)
    result = await run_via_websocket(fault.scenario, "responses")
    assert result.naive_tools == 0
    assert result.problems == ("the relay refused with ['idle_timeout'], expected ['transport']",)


async def test_the_judge_catches_a_call_the_client_executed_through_the_proxy() -> None:
    """A scenario whose edit runs, judged as if nothing should: the naive client's count
    through the relay is compared, not assumed."""
    scenario = SCENARIOS_BY_NAME["websocket-upgrade"]
    result = await run_via_websocket(scenario, "responses", declared=False)
    assert result.naive_tools == result.expected_tools == 1
    assert result.upgrade == 101
    declaring_none = dataclasses.replace(
        scenario, other_client=dataclasses.replace(scenario.other_client, executes=0)
    )
    declared = await run_via_websocket(declaring_none, "responses", declared=True)
    assert declared.problems == (
        "the naive WebSocket client executed 1 tools through the proxy, expected 0",
    )
