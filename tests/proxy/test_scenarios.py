"""Every lab scenario's streaming turns, on every protocol, through the engine: it must decide
as `lockgate run` decides on the same bytes (the oracle: `StreamingModelClient` over the
in-process replay), pass an accepted stream unchanged (keep-alives aside), and end a refused
one with the protocol's error and no tool event, on which the official SDK's own stream
parser raises."""

from __future__ import annotations

import json
from collections import Counter

import pytest

from lockgate.lab.scenarios import SCENARIOS
from lockgate.providers import provider as registry_entry
from lockgate.proxy import Accepted, Refused
from lockgate.scripted.scenario import Scenario
from lockgate.sse import SSEDecoder

from .support import (
    PROTOCOLS,
    Verdict,
    as_released,
    ends_with_refusal,
    frames,
    gate_turn,
    is_streaming,
    keepalive_count,
    not_canonical,
    oracle_turn,
    request_for,
    run,
    sdk_raises,
    tool_events,
    turn_bytes,
    without_keepalives,
)


def _cases() -> list[tuple[str, Scenario]]:
    cases = []
    for provider in PROTOCOLS:
        entry = registry_entry(provider)
        unplayable = entry.unplayable() if entry.unplayable is not None else {}
        for scenario in SCENARIOS:
            if scenario.runs_on(provider) and not scenario.options.neutral:
                if scenario.name in unplayable:
                    continue
                if any(is_streaming(turn, provider) for turn in scenario.turns()):
                    cases.append((provider, scenario))
    return cases


CASES = _cases()


def _own_reading(provider: str, frame: bytes) -> tuple[str, bool]:
    """What lockgate's own decoder makes of a refusal frame: (failure kind, transient)."""
    from lockgate.errors import ResponseFailure
    from lockgate.gate import ResponseGate

    gateway = registry_entry(provider).gateway
    assert gateway is not None
    decoder = gateway().new_decoder()
    gate = ResponseGate((), lambda event: None)
    # A started response first, so that the error is read in the stream, not before it.
    starts = {
        "responses": (
            b'event: response.created\ndata: {"type":"response.created",'
            b'"response":{"id":"resp_x"}}\n\n'
        ),
        "chat": b'data: {"id":"chatcmpl-x","choices":[]}\n\n',
        "anthropic": (
            b'event: message_start\ndata: {"type":"message_start",'
            b'"message":{"id":"msg_x","content":[]}}\n\n'
        ),
        "gemini": (
            b'data: {"candidates":[{"content":{"parts":[{"text":"x"}],"role":"model"}}],'
            b'"responseId":"r_x"}\n\n'
        ),
    }
    sse = SSEDecoder()
    try:
        for event in sse.feed(starts[provider] + frame):
            for decoded in decoder.decode(event):
                gate.accept(decoded)
    except ResponseFailure as failure:
        return str(failure.kind), failure.transient
    return "none", False


# Where the engine, in front of a client that may run a client-executed built-in tool's item
# (`local_shell_call`, `computer_call`), reads it as one more call (which the request did
# not declare, or which the snapshot does not list), where lockgate's own loop, which never
# runs one, refuses it as output it cannot replay: (the engine's kind, calls it withholds
# beyond lockgate run's).
IN_FRONT_OF_A_CLIENT = {
    ("responses", "unsupported-item"): ("invalid_batch", 1),
    ("responses", "done-item-unlisted"): ("call_mismatch", 1),
    ("responses", "custom-tool-call"): ("invalid_batch", 1),
    ("responses", "custom-tool-call-cut"): ("stream_ended", 1),
    ("responses", "custom-call-beside-invalid-call"): ("invalid_batch", 1),
    ("responses", "shell-call"): ("invalid_batch", 1),
}


async def _check_turns(provider: str, scenario: Scenario) -> tuple[list[str], list[Verdict]]:
    problems: list[str] = []
    verdicts: list[Verdict] = []
    options = scenario.options
    for number, turn in enumerate(scenario.turns()):
        if not is_streaming(turn, provider):
            continue
        where = f"turn {number + 1}"
        close_fails = number in options.close_fails
        verdict = await oracle_turn(
            provider,
            turn,
            model=options.model,
            options=options.provider_options,
            close_fails=close_fails,
        )
        verdicts.append(verdict)
        request = request_for(provider, model=options.model, options=options.provider_options)
        gated = await gate_turn(provider, turn, request, close_fails=close_fails)
        sent = turn_bytes(turn, provider)
        outcome = gated.outcome
        if verdict.accepted:
            if not isinstance(outcome, Accepted):
                assert isinstance(outcome, Refused)
                problems.append(f"{where}: lockgate run accepts, the engine refused: {outcome}")
                continue
            if without_keepalives(gated.output, gated.gateway) != as_released(
                without_keepalives(sent, gated.gateway), provider
            ):
                problems.append(f"{where}: the accepted stream's events changed")
            if not_canonical(gated.output, gated.gateway):
                problems.append(
                    f"{where}: not canonical: {not_canonical(gated.output, gated.gateway)}"
                )
            if keepalive_count(gated.output, gated.gateway) < keepalive_count(sent, gated.gateway):
                problems.append(f"{where}: upstream keep-alives were lost")
            continue
        if not isinstance(outcome, Refused):
            problems.append(f"{where}: lockgate run refuses ({verdict.kind}), the engine accepted")
            continue
        refusal = outcome.refusal
        kind, calls = IN_FRONT_OF_A_CLIENT.get((provider, scenario.name), (verdict.kind, 0))
        calls += verdict.calls
        if refusal.kind != kind:
            problems.append(f"{where}: refused as {refusal.kind}, expected {kind}")
        if refusal.withheld != calls:
            problems.append(f"{where}: withheld {refusal.withheld} calls of {calls}")
        if tool_events(gated.output):
            problems.append(
                f"{where}: a tool event reached the client: {tool_events(gated.output)}"
            )
        last = gated.pieces[-1]
        error = json.loads(SSEDecoder().feed(last)[0].data)
        message = error["error"]["message"]
        # One refusal: one frame (Responses: `error`, then `response.failed`).
        if not ends_with_refusal(gated.output, provider) or len(frames(last)) != (
            2 if provider == "responses" else 1
        ):
            problems.append(f"{where}: the output does not end with one refusal frame")
        if not message.startswith("lockgate ") or refusal.kind not in message:
            problems.append(f"{where}: the error does not say what was withheld and why")
        if calls and f"withheld {calls} tool call" not in message:
            problems.append(f"{where}: the error does not count the withheld calls: {message}")
        forwarded = without_keepalives(gated.output[: -len(last)], gated.gateway)
        if forwarded != without_keepalives(sent, gated.gateway)[: len(forwarded)]:
            problems.append(f"{where}: what was forwarded is not the upstream's beginning")
        problems.extend(f"{where}: {p}" for p in await sdk_raises(provider, gated.output))
        if provider != "anthropic":
            read = _own_reading(provider, last)
            if read != ("provider_error", refusal.transient):
                problems.append(f"{where}: lockgate's own decoder reads the error as {read}")
        else:
            wanted = "overloaded_error" if refusal.transient else "api_error"
            if error["error"]["type"] != wanted:
                problems.append(f"{where}: error type {error['error']['type']}, want {wanted}")
    return problems, verdicts


@pytest.mark.parametrize(("provider", "scenario"), CASES, ids=[f"{p}-{s.name}" for p, s in CASES])
def test_the_engine_decides_as_lockgate_run_does(provider: str, scenario: Scenario) -> None:
    problems, verdicts = run(_check_turns(provider, scenario))
    assert verdicts  # every case has a streaming turn
    assert problems == []


def test_the_scenarios_cover_acceptance_and_every_kind_of_refusal() -> None:
    # The test above passes vacuously if nothing is refused (or nothing accepted): it is not.
    async def tally() -> Counter[str]:
        kinds: Counter[str] = Counter()
        for provider, scenario in CASES:
            for verdict in (await _check_turns(provider, scenario))[1]:
                kinds[verdict.kind] += 1
        return kinds

    kinds = run(tally())
    assert kinds["accepted"] > 100
    for kind in (
        "invalid_batch",
        "lifecycle",
        "provider_error",
        "stream_ended",
        "transport",
        "idle_timeout",
        "bound_exceeded",
        "malformed_event",
        "cleanup",
        "call_mismatch",
        "unsupported_output",
        "response_incomplete",
        "model_refused",
    ):
        assert kinds[kind], kind
