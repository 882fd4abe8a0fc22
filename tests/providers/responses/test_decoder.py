"""The Responses stream decoder: events, output items, errors, incomplete calls."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lockgate.errors import FailureKind, ResponseFailure
from lockgate.events import (
    OutputCall,
    OutputNative,
    OutputRefusal,
    OutputText,
    ProviderReportedFailure,
    ResponseCompleted,
    ResponseProgress,
    ResponseStarted,
    TextDelta,
    ToolArgumentsDelta,
    ToolCallStarted,
    UnsupportedOutput,
)
from lockgate.fixture import ALL_TOOLS
from lockgate.providers.responses.decoder import ResponsesDecoder
from lockgate.providers.responses.render import ResponseBuilder
from lockgate.sse import ServerSentEvent

from ...helpers import CLI, EDIT, HISTORY, json_records, replay_client, stop_kind


def decode(payload: object, event: str | None = None) -> object:
    """The one normalized event of a native event (None: pure progress)."""
    data = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
    events = ResponsesDecoder().decode(ServerSentEvent(event, data))
    assert len(events) <= 1
    return events[0] if events else None


@pytest.mark.parametrize(
    "item",
    [
        {"type": "message", "id": "msg_1", "content": []},
        {"type": "reasoning", "id": "rs_1", "summary": [], "encrypted_content": "gAAA"},
        {"type": "web_search_call", "id": "ws_1", "status": "in_progress"},
    ],
)
def test_any_other_output_item_added_is_output_begun(item: dict[str, object]) -> None:
    # Not shown, perhaps never shown (encrypted reasoning, a provider-side tool at work),
    # but output: a response that failed after it was no stream that never started.
    added = {"type": "response.output_item.added", "output_index": 0, "item": item}
    assert decode(added) == ResponseProgress(content=True)


def test_decodes_lifecycle_and_deltas() -> None:
    assert decode({"type": "response.created", "response": {"id": "resp_1"}}) == ResponseStarted(
        response_id="resp_1"
    )
    created = {"type": "response.created", "response": {"id": "resp_2", "model": "gpt-x-1"}}
    assert decode(created) == ResponseStarted(response_id="resp_2", model="gpt-x-1")
    assert decode(
        {"type": "response.output_text.delta", "delta": "hi", "item_id": "m"}
    ) == TextDelta("hi")
    item = {
        "type": "function_call",
        "id": "fc_1",
        "call_id": "call_1",
        "name": "read",
        "arguments": "",
    }
    assert decode({"type": "response.output_item.added", "item": item}) == ToolCallStarted(
        "fc_1", "call_1", "read", ""
    )
    assert decode(
        {"type": "response.function_call_arguments.delta", "item_id": "fc_1", "delta": "{"}
    ) == ToolArgumentsDelta("fc_1", "{")


def completed_after_added(output: list[Any]) -> object:
    """The normalized terminal of a stream that adds each item of `output` and marks it
    done, then completes with it as the snapshot."""
    decoder = ResponsesDecoder()
    for place, item in enumerate(output):
        for stage in ("added", "done"):
            state = {"type": f"response.output_item.{stage}", "output_index": place, "item": item}
            decoder.decode(ServerSentEvent(None, json.dumps(state).encode()))
    response = {"id": "r", "status": "completed", "output": output}
    terminal = {"type": "response.completed", "response": response}
    [event] = decoder.decode(ServerSentEvent(None, json.dumps(terminal).encode()))
    return event


def test_completed_maps_output_items() -> None:
    output = [
        {
            "type": "message",
            "content": [{"type": "output_text", "text": "a"}, {"type": "refusal", "refusal": "no"}],
        },
        {"type": "function_call", "id": "fc_1", "call_id": "c", "name": "n", "arguments": "{}"},
        {"type": "reasoning", "id": "rs_1", "summary": []},
        {"type": "web_search_call", "id": "ws_1"},
    ]
    event = completed_after_added(output)
    assert event == ResponseCompleted(
        None,
        None,
        (
            OutputText("a"),
            OutputRefusal("no"),
            OutputCall("fc_1", "c", "n", "{}"),
            OutputNative("reasoning", {"type": "reasoning", "id": "rs_1", "summary": []}),
            OutputNative("provider_output", {"type": "web_search_call", "id": "ws_1"}),
        ),
        response_id="r",
    )
    computer = {"type": "computer_call", "id": "cu_1", "call_id": "c2", "action": {}}
    client_search = {"type": "tool_search_call", "id": "ts_1", "execution": "client"}
    for item in (computer, client_search):
        terminal = completed_after_added([item])
        assert isinstance(terminal, ResponseCompleted)
        assert terminal.output == (UnsupportedOutput(str(item["type"])),)


def test_error_event_flat_and_nested_shapes() -> None:
    flat = decode({"type": "error", "code": "server_error", "message": "boom"})
    nested = decode(
        {
            "type": "error",
            "error": {
                "type": "server_error",
                "code": "rate_limit_exceeded",
                "message": "slow down",
            },
        }
    )
    # One transience rule for every protocol: a server error or a rate limit may pass.
    assert flat == ProviderReportedFailure(
        FailureKind.PROVIDER_ERROR, "provider error: boom", "server_error", transient=True
    )
    invalid = decode({"type": "error", "code": "invalid_prompt", "message": "no"})
    assert invalid == ProviderReportedFailure(
        FailureKind.PROVIDER_ERROR, "provider error: no", "invalid_prompt"
    )
    assert nested == ProviderReportedFailure(
        FailureKind.PROVIDER_ERROR,
        "provider error: slow down",
        "rate_limit_exceeded",
        transient=True,
    )


def test_failed_and_incomplete() -> None:
    failed = decode(
        {
            "type": "response.failed",
            "response": {
                "id": "r",
                "status": "failed",
                "error": {"code": "server_error", "message": "x"},
            },
        }
    )
    incomplete = decode(
        {
            "type": "response.incomplete",
            "response": {"id": "r", "incomplete_details": {"reason": "max_output_tokens"}},
        }
    )
    assert isinstance(failed, ProviderReportedFailure)
    assert failed.kind is FailureKind.RESPONSE_FAILED
    assert failed.code == "server_error"
    assert isinstance(incomplete, ProviderReportedFailure)
    assert incomplete.code == "max_output_tokens"
    assert incomplete.truncated
    assert not failed.truncated


@pytest.mark.parametrize(
    "data",
    [
        b"{not json",
        b"[1, 2]",
        b'{"no": "type"}',
        b'{"type": 7}',
        b"\xff\xfe",
        b'{"type": "response.output_text.delta", "delta": 5}',
        b'{"type": "response.created", "response": "resp_1"}',
    ],
)
def test_malformed_events_fail(data: bytes) -> None:
    with pytest.raises(ResponseFailure) as caught:
        decode(data)
    assert caught.value.kind is FailureKind.MALFORMED_EVENT


def test_event_name_must_agree_with_type() -> None:
    with pytest.raises(ResponseFailure, match="disagrees"):
        decode({"type": "response.completed", "response": {}}, event="response.output_text.delta")


def test_unknown_events_done_events_and_done_sentinel_are_progress() -> None:
    assert decode({"type": "response.future_thing", "new_field": 1}) is None
    assert decode(b"[DONE]") is None
    decoder = ResponsesDecoder()
    item = {"type": "function_call", "id": "fc_1", "call_id": "c", "name": "n", "arguments": ""}
    events = [
        {"type": "response.output_item.added", "output_index": 0, "item": item},
        {"type": "response.function_call_arguments.done", "item_id": "fc_1", "arguments": "{}"},
        {"type": "response.output_item.done", "output_index": 0, "item": item},
    ]
    decoded = [decoder.decode(ServerSentEvent(None, json.dumps(e).encode())) for e in events]
    assert [len(produced) for produced in decoded] == [1, 0, 0]  # the call's start, then none


def test_json_whitespace_is_tolerated_and_trailing_data_is_not() -> None:
    spaced = b'  {"type": "response.output_text.delta", "delta": "a"}  \n'
    assert decode(spaced) == TextDelta("a")
    with pytest.raises(ResponseFailure, match="not valid JSON"):
        decode(b'{"type": "response.output_text.delta", "delta": "a"} {"x": 1}')


# --- a function call the provider marks incomplete ---------------------------------------


@pytest.mark.parametrize("where", ["item-done", "terminal-output", "both"])
async def test_a_call_marked_incomplete_fails_closed(where: str) -> None:
    builder = ResponseBuilder("resp_inc").created()
    builder.call("fc_1", "call_1", "edit", EDIT, status="incomplete")
    if where == "item-done":
        builder.output[-1] = {**builder.output[-1], "status": "completed"}
    elif where == "terminal-output":
        done = builder.events[-1]
        done["item"] = {**done["item"], "status": "completed"}
    client, _, _ = replay_client([builder.completed().turn()])
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.kind is FailureKind.RESPONSE_INCOMPLETE
    assert "call_1" in caught.value.message


def test_the_incomplete_call_item_lab_scenario_behaves(cli: CLI) -> None:
    result = cli(
        "lab",
        "--provider",
        "responses",
        "--transport",
        "inprocess",
        "--scenario",
        "incomplete-call-item",
        "--json",
    )
    assert result.code == 0, result.output[-2000:]
    records = json_records(result.out)
    [final] = [r for r in records if r["event"] == "final"]
    assert stop_kind(final["stopped"]) == FailureKind.RESPONSE_INCOMPLETE
    assert final["executed_tools"] == 0
    [run] = [r for r in records if r["event"] == "lab_run"]
    assert (run["scenario"], run["as_expected"], run["problems"]) == (
        "incomplete-call-item",
        True,
        [],
    )


# --- a call item whose output_item.done never came ----------------------------------------


def _without_call_done(builder: ResponseBuilder) -> ResponseBuilder:
    """The builder's events with every call item's `output_item.done` left out."""
    builder.events[:] = [
        event
        for event in builder.events
        if not (
            event.get("type") == "response.output_item.done"
            and event["item"].get("type") in ("function_call", "custom_tool_call")
        )
    ]
    return builder


async def test_a_call_whose_item_never_got_its_done_fails_closed() -> None:
    # Issue 27: the AI SDK emits a function call only at its `output_item.done`; without it
    # it ended with no call and finish `stop`, while openai-python and openai-node read the
    # snapshot's call. Every recorded call item has its `.done`.
    builder = ResponseBuilder("resp_nodone").created().text("msg_1", "Reading.")
    _without_call_done(builder.call("fc_1", "call_1", "read", {"path": "README.md"}))
    client, _, _ = replay_client([builder.completed().turn()])
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.kind is FailureKind.LIFECYCLE
    assert "call item 1 (function_call 'fc_1') never got its output_item.done" in (
        caught.value.message
    )


def test_a_custom_tool_call_whose_item_never_got_its_done_fails_closed() -> None:
    decoder = ResponsesDecoder(client_items=True)
    builder = ResponseBuilder("resp_nodone").created()
    _without_call_done(builder.custom_call("ctc_1", "call_1", "exec", "touch x"))
    builder.completed()
    produced = [
        event
        for raw in builder.events
        for event in decoder.decode(ServerSentEvent(None, json.dumps(raw).encode()))
    ]
    terminal = produced[-1]
    assert isinstance(terminal, ProviderReportedFailure)
    assert terminal.kind is FailureKind.LIFECYCLE
    assert "custom_tool_call 'ctc_1'" in terminal.message
