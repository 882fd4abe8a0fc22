"""The lab through the proxy: for every scenario of every protocol with a gateway, a naive
client that executes every call it has seen, through `lockgate proxy` in front of the
scripted server, executes exactly what `lockgate run` executes; every answer the proxy
passed is what the client receives directly."""

from __future__ import annotations

import re

import pytest

from lockgate.lab.scenarios import SCENARIOS_BY_NAME
from lockgate.lab.via_proxy import calls_seen, proxy_lab_runs, run_via_proxy, skip_reason
from lockgate.providers import NAMES, provider
from lockgate.scripted.reply import Call, Reply, Say
from lockgate.scripted.scenario import EDIT_FIX, Scenario

RUNS, SKIPPED = proxy_lab_runs(None, list(NAMES))


@pytest.mark.parametrize(("scenario", "name"), RUNS, ids=[f"{s.name}-{p}" for s, p in RUNS])
async def test_the_naive_client_through_the_proxy_executes_what_lockgate_run_does(
    scenario: Scenario, name: str
) -> None:
    result = await run_via_proxy(scenario, name)
    assert result.problems == ()
    assert result.naive_tools == result.run_tools
    assert result.passed + result.withheld <= result.requests
    if scenario.expect.is_failure:
        assert result.naive_tools == 0


def test_every_gated_protocol_plays_and_only_client_side_faults_are_skipped() -> None:
    assert {name for _, name in RUNS} == {"responses", "chat", "anthropic", "gemini"}
    assert len(RUNS) >= 150
    for scenario, _, reason in SKIPPED:
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
