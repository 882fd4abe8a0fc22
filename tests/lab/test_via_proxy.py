"""The lab through the proxy: for every scenario of every protocol with a gateway, a naive
client that executes every call it has seen, through `lockgate proxy` in front of the
scripted server, executes exactly what `lockgate run` executes; every answer the proxy
passed is what the client receives directly. Where the scenario's other client declares
tools lockgate cannot (a custom tool, a namespace, the shell), it executes, with them
declared, exactly what the scenario says; where it asks for a WebSocket first, the proxy
answers 426 itself and never passes the upgrade on."""

from __future__ import annotations

import dataclasses
import re

import pytest

from lockgate.lab.scenarios import SCENARIOS, SCENARIOS_BY_NAME
from lockgate.lab.via_proxy import (
    ProxyRun,
    calls_seen,
    declaring,
    proxy_lab_runs,
    run_via_proxy,
    skip_reason,
    wire_skip_reason,
)
from lockgate.providers import NAMES, provider
from lockgate.providers.variants import lab_entry, with_variants
from lockgate.scripted.reply import Call, Reply, Say
from lockgate.scripted.scenario import EDIT_FIX, OtherClient

RUNS, SKIPPED = proxy_lab_runs(None, list(NAMES))


def _id(run: ProxyRun) -> str:
    declared = "-declared" if run.declared else ""
    return f"{run.scenario.name}-{run.provider}{declared}" + ("-ws" if run.websocket else "")


@pytest.mark.parametrize("run", RUNS, ids=[_id(run) for run in RUNS])
async def test_the_naive_client_through_the_proxy_executes_what_lockgate_run_does(
    run: ProxyRun,
) -> None:
    scenario = run.scenario
    result = await run_via_proxy(
        scenario, run.provider, declared=run.declared, websocket=run.websocket
    )
    assert result.problems == ()
    assert result.websocket == run.websocket
    expected = scenario.other_client.executes if run.declared else result.run_tools
    assert result.naive_tools == result.expected_tools == expected
    assert result.passed + result.withheld <= result.requests
    if scenario.expect.is_failure and not run.declared:
        assert result.naive_tools == 0


def test_every_gated_protocol_plays_and_only_client_side_faults_are_skipped() -> None:
    assert {run.provider for run in RUNS} == {
        "responses",
        "chat",
        "anthropic",
        "gemini",
        "bedrock",
        "bedrock-invoke",  # Bedrock's InvokeModelWithResponseStream, a lab variant
    }
    assert len(RUNS) >= 300
    assert all(wire_skip_reason(name) is None for name in with_variants(NAMES))
    for scenario, _name, reason in SKIPPED:
        assert skip_reason(scenario) == reason
        assert (
            scenario.options.close_fails
            or scenario.options.neutral
            or ("http" not in scenario.transports)
        )


async def test_the_naive_client_would_run_the_invalid_batch_without_the_proxy() -> None:
    """The point of the comparison: directly, the naive client executes calls that the
    proxy withholds."""
    result = await run_via_proxy(SCENARIOS_BY_NAME["second-call-invalid"], "chat")
    assert (result.run_tools, result.naive_tools) == (0, 0)
    assert result.direct_tools == 2
    assert result.withheld == 1


@pytest.mark.parametrize("name", ["responses", "chat", "anthropic", "gemini"])
def test_calls_seen_counts_call_starts_even_in_a_broken_body(name: str) -> None:
    renderer = provider(name).render()
    reply = Reply("resp_seen", (Say("Fixing."), Call("call_1", "edit", EDIT_FIX, 3)))
    frames = [renderer.frame(event) for event in renderer.events(reply)]
    whole = b"".join(frames)
    assert calls_seen(name, whole) == 1
    # cut just after the call's first frame, in the middle of the next
    end = re.compile(rb"\r?\n\r?\n").search(whole, whole.index(b'"edit"'))  # Gemini: CRLF
    assert end is not None
    cut = whole[: end.end() + 10]
    assert calls_seen(name, cut) == 1
    assert calls_seen(name, b"data: {not json}\n\n" + whole) == 1
    assert calls_seen(name, b"") == 0


@pytest.mark.parametrize("name", ["bedrock", "bedrock-invoke"])
def test_calls_seen_reads_an_event_stream_as_botocore_would(name: str) -> None:
    """Each whole message up to the end, or to the first that does not decode: a cut last
    message is dropped, and the call before it is seen (what botocore hands its caller)."""
    renderer = lab_entry(name).render()
    reply = Reply("resp_seen", (Say("Fixing."), Call("call_1", "edit", EDIT_FIX, 3)))
    frames = [renderer.frame(event) for event in renderer.events(reply)]
    whole = b"".join(frames)
    assert calls_seen(name, whole) == 1
    assert calls_seen(name, whole[:-7]) == 1  # the last message cut: the call still seen
    corrupt = bytearray(frames[0])
    corrupt[-1] ^= 1  # the first message's CRC: botocore raises, nothing after is read
    assert calls_seen(name, bytes(corrupt) + b"".join(frames[1:])) == 0
    assert calls_seen(name, b"") == 0


@pytest.mark.parametrize(
    ("provider", "scenario"),
    [
        ("bedrock", "bedrock-cut-in-payload"),
        ("bedrock", "bedrock-bad-crc"),
        ("bedrock", "bedrock-malformed-tool-use"),
        ("bedrock-invoke", "second-call-invalid"),
        ("bedrock-invoke", "output-limit"),
    ],
)
async def test_the_naive_event_stream_client_would_run_a_refused_call_without_the_proxy(
    provider: str, scenario: str
) -> None:
    result = await run_via_proxy(SCENARIOS_BY_NAME[scenario], provider)
    assert result.problems == ()
    assert (result.run_tools, result.naive_tools) == (0, 0)
    assert result.direct_tools >= 1
    assert result.withheld == 1


# --- what a client other than lockgate does -----------------------------------------------------


def test_a_scenario_whose_client_declares_tools_is_played_both_ways() -> None:
    declaring_scenarios = {s.name for s in SCENARIOS if s.other_client.declares}
    assert declaring_scenarios == {
        "custom-tool-call",
        "custom-tool-call-cut",
        "namespaced-call",
        "custom-call-beside-invalid-call",
        "shell-call",
    }
    for name in declaring_scenarios:
        plays = [(r.provider, r.declared, r.websocket) for r in RUNS if r.scenario.name == name]
        assert plays == [
            ("responses", False, False),
            ("responses", True, False),
            ("responses", False, True),  # the Responses WebSocket (`via_websocket`)
            ("responses", True, True),
        ]
    assert not any(r.declared for r in RUNS if r.scenario.name not in declaring_scenarios)


def test_declaring_adds_the_tools_where_the_client_declares_them() -> None:
    request = {
        "model": "m",
        "tools": [{"type": "function", "name": "edit"}],
        "input": [{"role": "user", "content": "fix it"}],
    }
    shell = {"type": "shell"}
    on_top = declaring(request, OtherClient((shell,), executes=1))
    assert on_top["tools"] == [{"type": "function", "name": "edit"}, shell]
    assert on_top["input"] == request["input"]
    exec_tool = {"type": "custom", "name": "exec"}
    in_input = declaring(request, OtherClient((exec_tool,), in_input=True, executes=1))
    assert in_input["tools"] == request["tools"]
    assert in_input["input"] == [
        {"type": "additional_tools", "role": "developer", "tools": [exec_tool]},
        {"role": "user", "content": "fix it"},
    ]
    assert request["tools"] == [{"type": "function", "name": "edit"}]  # not changed


@pytest.mark.parametrize("name", ["custom-tool-call", "shell-call", "namespaced-call"])
async def test_a_call_runs_through_the_proxy_only_where_its_tool_is_declared(name: str) -> None:
    """lockgate run refuses it; the naive client would run it without the proxy; through
    the proxy it runs only when the request declared its tool."""
    scenario = SCENARIOS_BY_NAME[name]
    undeclared = await run_via_proxy(scenario, "responses")
    declared = await run_via_proxy(scenario, "responses", declared=True)
    assert (undeclared.run_tools, undeclared.direct_tools, undeclared.naive_tools) == (0, 1, 0)
    assert (undeclared.passed, undeclared.withheld) == (0, 1)
    assert (declared.run_tools, declared.direct_tools, declared.naive_tools) == (0, 1, 1)
    assert (declared.passed, declared.withheld) == (1, 0)
    assert undeclared.problems == declared.problems == ()


async def test_a_declared_tool_does_not_release_a_cut_or_invalid_batch() -> None:
    for name, direct in (("custom-tool-call-cut", 1), ("custom-call-beside-invalid-call", 2)):
        result = await run_via_proxy(SCENARIOS_BY_NAME[name], "responses", declared=True)
        assert (result.direct_tools, result.naive_tools, result.withheld) == (direct, 0, 1)
        assert result.problems == ()


async def test_the_judge_says_when_the_naive_client_runs_other_than_expected() -> None:
    """A declared play is judged against the scenario's own count, not against itself."""
    scenario = SCENARIOS_BY_NAME["custom-tool-call"]
    wrong = dataclasses.replace(scenario, other_client=OtherClient((), executes=0))
    declared_nothing = await run_via_proxy(wrong, "responses", declared=True)
    assert declared_nothing.problems == ()  # nothing declared: nothing runs, as expected
    expects_none = dataclasses.replace(
        scenario, other_client=dataclasses.replace(scenario.other_client, executes=0)
    )
    result = await run_via_proxy(expects_none, "responses", declared=True)
    assert result.problems == (
        "the naive client executed 1 tools through the proxy with its tools declared, expected 0",
    )


async def test_the_proxy_answers_a_websocket_upgrade_itself() -> None:
    result = await run_via_proxy(SCENARIOS_BY_NAME["websocket-upgrade"], "responses")
    assert result.upgrade == 426
    assert (result.requests, result.passed, result.run_tools, result.naive_tools) == (2, 2, 1, 1)
    assert result.problems == ()


async def test_a_proxy_that_passed_the_upgrade_on_would_be_caught(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    from lockgate.proxy import admit

    monkeypatch.setattr(admit, "upgrades", lambda request: False)
    result = await run_via_proxy(SCENARIOS_BY_NAME["websocket-upgrade"], "responses")
    assert result.problems == (
        "the WebSocket upgrade was answered 405 through the proxy, not 426",
        "the WebSocket upgrade reached the server through the proxy",
    )
