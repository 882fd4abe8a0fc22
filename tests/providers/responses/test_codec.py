"""The Responses request encoder: history, strict tools, reasoning replay, continuation."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lockgate.conversation import CallPart, Message, NativeItem, TextPart, ToolCall
from lockgate.fixture import ALL_TOOLS
from lockgate.providers.responses.codec import (
    ResponsesCodec,
    check_no_orphan_reasoning,
    is_reasoning_model,
)


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


# --- reasoning items and native continuation -------------------------------------------

RS_1 = {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "enc-1"}
RS_2 = {"id": "rs_2", "type": "reasoning", "summary": [], "encrypted_content": "enc-2"}


def assistant_with_reasoning(producer: str, response_id: str = "resp_1") -> Message:
    call = ToolCall("call_1", "discover", {}, "{}")
    return Message(
        "assistant",
        "Looking.",
        (call,),
        producer=producer,
        response_id=response_id,
        output=(TextPart("Looking."), NativeItem("reasoning", RS_1), CallPart("call_1")),
    )


def test_reasoning_models_get_encrypted_reasoning_others_do_not() -> None:
    assert is_reasoning_model("o4-mini")
    assert is_reasoning_model("gpt-5")
    assert is_reasoning_model("o3")
    assert not is_reasoning_model("gpt-4.1-mini")
    assert not is_reasoning_model("gpt-5-chat-latest")
    history = [Message("user", "hi")]
    assert ResponsesCodec("o4-mini").encode(history, ALL_TOOLS)["include"] == [
        "reasoning.encrypted_content"
    ]
    assert "include" not in ResponsesCodec("gpt-4.1-mini").encode(history, ALL_TOOLS)
    assert "include" in ResponsesCodec("custom-model", encrypted_reasoning=True).encode(
        history, ALL_TOOLS
    )


def test_reasoning_is_replayed_unchanged_before_its_call_to_the_same_producer_only() -> None:
    codec = ResponsesCodec("o4-mini")
    history = [
        Message("user", "go"),
        assistant_with_reasoning(codec.producer),
        Message("tool", "files", tool_call_id="call_1"),
    ]
    items = codec.encode(history, ALL_TOOLS)["input"]
    assert [i.get("type") or i.get("role") for i in items] == [
        "user",
        "assistant",
        "reasoning",
        "function_call",
        "function_call_output",
    ]
    assert items[2] == RS_1
    switched = ResponsesCodec("gpt-5").encode(history, ALL_TOOLS)["input"]
    assert all(i.get("type") != "reasoning" for i in switched)
    assert [i.get("type") for i in switched if i.get("type")] == [
        "function_call",
        "function_call_output",
    ]


def test_native_continuation_sends_only_new_items() -> None:
    codec = ResponsesCodec("gpt-4.1-mini", continuation="native")
    first = codec.encode([Message("system", "s"), Message("user", "go")], ALL_TOOLS)
    assert first["store"] is True
    assert "previous_response_id" not in first
    history = [
        Message("system", "s"),
        Message("user", "go"),
        assistant_with_reasoning(codec.producer, "resp_7"),
        Message("tool", "files", tool_call_id="call_1"),
        Message("user", "also check the tests"),
    ]
    continued = codec.encode(history, ALL_TOOLS)
    assert continued["previous_response_id"] == "resp_7"
    assert continued["input"] == [
        {"type": "function_call_output", "call_id": "call_1", "output": "files"},
        {"role": "user", "content": "also check the tests"},
    ]
    assert "include" not in continued


def test_native_continuation_falls_back_to_full_history() -> None:
    codec = ResponsesCodec("gpt-4.1-mini", continuation="native")
    text_only = [
        Message("user", "go"),
        Message("assistant", "Hi.", producer=codec.producer, response_id="resp_1"),
        Message("user", "more"),
    ]
    other_model = [
        Message("user", "go"),
        assistant_with_reasoning("openai-responses:gpt-5", "resp_2"),
        Message("tool", "x", tool_call_id="call_1"),
    ]
    no_id = [
        Message("user", "go"),
        assistant_with_reasoning(codec.producer, ""),
        Message("tool", "x", tool_call_id="call_1"),
    ]
    for history in (text_only, other_model, no_id):
        request = codec.encode(history, ALL_TOOLS)
        assert "previous_response_id" not in request
        assert len(request["input"]) >= 3


def test_the_encoder_refuses_to_send_an_orphan_reasoning_item() -> None:
    from lockgate.providers.responses.codec import check_no_orphan_reasoning

    check_no_orphan_reasoning([RS_1, RS_2, {"type": "function_call"}])
    check_no_orphan_reasoning([RS_1, {"type": "message", "role": "assistant"}])
    orphans: list[list[dict[str, Any]]] = [
        [{"type": "function_call"}, RS_1],
        [RS_1, {"role": "user", "content": "next"}],
        [RS_1, {"type": "function_call_output", "call_id": "c", "output": "x"}],
    ]
    for orphan in orphans:
        with pytest.raises(ValueError, match="without its following item"):
            check_no_orphan_reasoning(orphan)


def test_provider_items_are_never_read_as_messages_by_the_orphan_guard() -> None:
    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    opaque = {"type": "web_search_call", "role": "user", "id": "ws_1"}  # hostile, opaque
    check_no_orphan_reasoning([reasoning, opaque, {"role": "assistant", "content": "x"}])
