from __future__ import annotations

import json

import pytest

from lockgate.conversation import Message, ToolCall
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
from lockgate.providers.responses.codec import ResponsesCodec
from lockgate.providers.responses.decoder import ResponsesDecoder
from lockgate.sse import ServerSentEvent


def history() -> list[Message]:
    call = ToolCall("call_9", "read", {"path": "README.md"}, '{"path":"README.md"}')
    return [
        Message("system", "be careful"),
        Message("user", "fix it"),
        Message("assistant", "Reading.", (call,)),
        Message("tool", "# calculator", tool_call_id="call_9"),
        Message("assistant", "Done."),
    ]


def test_request_carries_full_history_and_fixed_options() -> None:
    request = ResponsesCodec("gpt-4.1-mini").encode(history(), ALL_TOOLS)
    assert request["model"] == "gpt-4.1-mini"
    assert request["store"] is False
    assert "previous_response_id" not in request
    assert request["parallel_tool_calls"] is False
    assert request["max_output_tokens"] == 2048
    assert request["stream"] is True
    assert request["input"] == [
        {"role": "system", "content": "be careful"},
        {"role": "user", "content": "fix it"},
        {"role": "assistant", "content": "Reading."},
        {
            "type": "function_call",
            "call_id": "call_9",
            "name": "read",
            "arguments": '{"path":"README.md"}',
        },
        {"type": "function_call_output", "call_id": "call_9", "output": "# calculator"},
        {"role": "assistant", "content": "Done."},
    ]


def test_tools_are_strict_function_schemas() -> None:
    request = ResponsesCodec("m").encode([Message("user", "hi")], ALL_TOOLS)
    names = [tool["name"] for tool in request["tools"]]
    assert names == ["discover", "read", "edit", "test"]
    for tool in request["tools"]:
        assert tool["type"] == "function"
        assert tool["strict"] is True
        parameters = tool["parameters"]
        assert parameters["additionalProperties"] is False
        assert sorted(parameters["required"]) == sorted(parameters["properties"])


def test_arguments_without_raw_text_are_serialized_as_json_string() -> None:
    call = ToolCall("call_1", "edit", {"path": "a", "old": "b", "new": "c"})
    items = ResponsesCodec("m").encode([Message("assistant", "", (call,))], ALL_TOOLS)["input"]
    assert items == [
        {
            "type": "function_call",
            "call_id": "call_1",
            "name": "edit",
            "arguments": json.dumps({"path": "a", "old": "b", "new": "c"}, separators=(",", ":")),
        }
    ]


def test_tool_output_before_its_call_is_refused() -> None:
    with pytest.raises(ValueError, match="does not follow its call"):
        ResponsesCodec("m").encode([Message("tool", "x", tool_call_id="call_404")], ALL_TOOLS)


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
    event = decode(
        {
            "type": "response.completed",
            "response": {"id": "r", "status": "completed", "output": output},
        }
    )
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
        terminal = decode(
            {
                "type": "response.completed",
                "response": {"id": "r", "status": "completed", "output": [item]},
            }
        )
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
    assert decode({"type": "response.output_item.done", "item": {"type": "function_call"}}) is None
    assert decode({"type": "response.function_call_arguments.done", "arguments": "{}"}) is None
    assert decode(b"[DONE]") is None


def test_json_whitespace_is_tolerated_and_trailing_data_is_not() -> None:
    spaced = b'  {"type": "response.output_text.delta", "delta": "a"}  \n'
    assert decode(spaced) == TextDelta("a")
    with pytest.raises(ResponseFailure, match="not valid JSON"):
        decode(b'{"type": "response.output_text.delta", "delta": "a"} {"x": 1}')
