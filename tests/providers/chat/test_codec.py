"""The Chat Completions request encoder (and its registry entry)."""

from __future__ import annotations

import dataclasses
import json
from typing import Any

import pytest

from lockgate.conversation import CallPart, Message, NativeItem, ToolCall, ToolSpec
from lockgate.fixture import ALL_TOOLS
from lockgate.gate import ResponseGate
from lockgate.providers.base import CodecOptions
from lockgate.providers.chat import PROVIDER
from lockgate.providers.chat.codec import ChatCodec, encode_messages, encode_tool
from lockgate.providers.chat.decoder import ChatDecoder
from lockgate.providers.openai.models import REASONING_MODEL_PREFIXES, is_reasoning_model
from lockgate.providers.responses import codec as responses_codec
from lockgate.sse import ServerSentEvent

READ = ToolCall("call_9", "read", {"path": "README.md"}, '{"path":  "README.md"}')


def history() -> list[Message]:
    return [
        Message("system", "be careful"),
        Message("user", "fix it"),
        Message("assistant", "Reading.", (READ,)),
        Message("tool", "# calculator", tool_call_id="call_9"),
        Message("assistant", "Done."),
    ]


def test_request_shape_with_tools() -> None:
    request = ChatCodec("gpt-4.1-mini").encode(history(), ALL_TOOLS)
    assert request == {
        "model": "gpt-4.1-mini",
        "messages": [
            {"role": "system", "content": "be careful"},
            {"role": "user", "content": "fix it"},
            {
                "role": "assistant",
                "content": "Reading.",
                "tool_calls": [
                    {
                        "id": "call_9",
                        "type": "function",
                        "function": {"name": "read", "arguments": '{"path":  "README.md"}'},
                    }
                ],
            },
            {"role": "tool", "tool_call_id": "call_9", "content": "# calculator"},
            {"role": "assistant", "content": "Done."},
        ],
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 2048,
        "tools": [encode_tool(tool) for tool in ALL_TOOLS],
        "tool_choice": "auto",
        "parallel_tool_calls": False,
    }


def test_request_without_tools_has_no_tool_fields() -> None:
    request = ChatCodec("gpt-4.1-mini").encode([Message("user", "hi")], [])
    assert not {"tools", "tool_choice", "parallel_tool_calls"} & set(request)
    assert request["messages"] == [{"role": "user", "content": "hi"}]


@pytest.mark.parametrize(
    ("model", "field"),
    [
        ("o4-mini", "max_completion_tokens"),
        ("o3", "max_completion_tokens"),
        ("o1-preview", "max_completion_tokens"),
        ("gpt-5", "max_completion_tokens"),
        ("gpt-5-mini", "max_completion_tokens"),
        ("openai/gpt-5-nano", "max_completion_tokens"),
        ("codex-mini-latest", "max_completion_tokens"),
        ("gpt-4.1-mini", "max_tokens"),
        ("gpt-4o", "max_tokens"),
        ("gpt-5-chat-latest", "max_tokens"),
        ("deepseek-chat", "max_tokens"),
        ("llama3.1", "max_tokens"),
    ],
)
def test_token_cap_field_follows_the_model(model: str, field: str) -> None:
    codec = ChatCodec.from_options(CodecOptions(model, max_output_tokens=300))
    request = codec.encode([Message("user", "hi")], ALL_TOOLS)
    other = {"max_tokens", "max_completion_tokens"} - {field}
    assert request[field] == 300
    assert not other & set(request)


def test_strict_only_when_the_schema_qualifies() -> None:
    strict = encode_tool(ALL_TOOLS[1])
    assert strict == {
        "type": "function",
        "function": {
            "name": "read",
            "description": ALL_TOOLS[1].description,
            "parameters": dict(ALL_TOOLS[1].parameters),
            "strict": True,
        },
    }
    loose = ToolSpec(
        "search",
        "Search.",
        {
            "type": "object",
            "properties": {"query": {"type": "string"}, "limit": {"type": "integer"}},
            "required": ["query"],
        },
    )
    encoded = encode_tool(loose)
    assert "strict" not in encoded["function"]
    assert "strict" not in encoded
    assert encoded["function"]["parameters"] == dict(loose.parameters)


def test_exact_argument_bytes_are_replayed() -> None:
    odd = '{ "path" : "calculator.py", "old": "a\\u0020-", "new": "é" }'
    call = ToolCall("call_1", "edit", json.loads(odd), odd)
    messages = encode_messages([Message("assistant", "", (call,))])
    assert messages[0]["tool_calls"][0]["function"]["arguments"] == odd


@pytest.mark.parametrize("arguments_json", ["", "  ", "\n"])
def test_empty_arguments_become_an_empty_object(arguments_json: str) -> None:
    call = ToolCall("call_1", "discover", {}, arguments_json)
    messages = encode_messages([Message("assistant", "", (call,))])
    assert messages[0]["tool_calls"][0]["function"]["arguments"] == "{}"


def test_parsed_arguments_are_used_when_no_bytes_were_kept() -> None:
    call = ToolCall("call_1", "read", {"path": "README.md"})
    messages = encode_messages([Message("assistant", "", (call,))])
    assert messages[0]["tool_calls"][0]["function"]["arguments"] == '{"path":"README.md"}'


def test_assistant_content_text_refusal_null_or_empty() -> None:
    messages = encode_messages(
        [
            Message("assistant", "", (READ,)),
            Message("tool", "x", tool_call_id="call_9"),
            Message("assistant", "", refusal="I can't help with that."),
            Message("assistant", ""),
        ]
    )
    assert messages[0]["content"] is None
    assert messages[2] == {"role": "assistant", "content": "I can't help with that."}
    assert messages[3] == {"role": "assistant", "content": ""}
    assert "tool_calls" not in messages[2]


def test_tool_result_must_follow_its_call() -> None:
    with pytest.raises(ValueError, match="does not follow its call"):
        encode_messages([Message("tool", "x", tool_call_id="call_9")])
    with pytest.raises(ValueError, match="does not follow its call"):
        encode_messages(
            [Message("assistant", "", (READ,)), Message("tool", "x", tool_call_id="call_other")]
        )


def test_tool_result_answers_a_call_once() -> None:
    answered = [Message("assistant", "", (READ,)), Message("tool", "x", tool_call_id="call_9")]
    assert len(encode_messages(answered)) == 2
    with pytest.raises(ValueError, match="'call_9' does not follow its call"):
        encode_messages([*answered, Message("tool", "again", tool_call_id="call_9")])


def _reasoning_turn(producer: str) -> Message:
    call = ToolCall("call_1", "discover", {}, "{}")
    details = [{"type": "reasoning.text", "text": "t", "signature": "sig", "index": 0}]
    return Message(
        "assistant",
        "",
        (call,),
        producer=producer,
        output=(
            CallPart("call_1"),
            NativeItem("reasoning", {"reasoning_content": "Let me look."}),
            NativeItem("reasoning", {"reasoning_details": details}),
            NativeItem("provider_output", {"type": "web_search_call"}),
        ),
    )


def test_reasoning_fields_are_replayed_to_the_same_producer_only() -> None:
    codec = ChatCodec("deepseek-reasoner")
    turn = _reasoning_turn(codec.producer)
    history = [Message("user", "go"), turn, Message("tool", "a.py", tool_call_id="call_1")]
    assistant = codec.encode(history, ALL_TOOLS)["messages"][1]
    assert assistant["reasoning_content"] == "Let me look."
    assert assistant["reasoning_details"] == [
        {"type": "reasoning.text", "text": "t", "signature": "sig", "index": 0}
    ]
    assert set(assistant) == {
        "role",
        "content",
        "tool_calls",
        "reasoning_content",
        "reasoning_details",
    }
    for other in (ChatCodec("deepseek-chat"), ChatCodec("o4-mini")):
        replayed = other.encode(history, ALL_TOOLS)["messages"][1]
        assert set(replayed) == {"role", "content", "tool_calls"}
    # A message of another provider with the same model name gets nothing either.
    foreign = [Message("user", "go"), _reasoning_turn("responses:deepseek-reasoner")]
    assert set(encode_messages(foreign, codec.producer)[1]) == {"role", "content", "tool_calls"}


def test_a_decoded_response_replays_its_synthesized_id_and_reasoning() -> None:
    """Decode a DeepSeek-like stream whose call has no id, then encode the next request."""
    codec = ChatCodec("deepseek-reasoner")
    decoder = codec.new_decoder()
    gate = ResponseGate(ALL_TOOLS, lambda event: None)
    chunks: list[dict[str, Any]] = [
        {"id": "chatcmpl-d", "choices": [{"index": 0, "delta": {"reasoning_content": "Hm."}}]},
        {
            "id": "chatcmpl-d",
            "choices": [
                {
                    "index": 0,
                    "delta": {
                        "tool_calls": [
                            {"index": 0, "function": {"name": "discover", "arguments": "{}"}}
                        ]
                    },
                }
            ],
        },
        {"id": "chatcmpl-d", "choices": [{"index": 0, "delta": {}, "finish_reason": "tool_calls"}]},
    ]
    decision = None
    for item in [*(json.dumps(c).encode() for c in chunks), b"[DONE]"]:
        for event in decoder.decode(ServerSentEvent(None, item)):
            decision = gate.accept(event) or decision
    assert decision is not None
    message = dataclasses.replace(decision.message, producer=codec.producer)
    (call,) = message.tool_calls
    assert call.id.startswith("call_")
    assert message.output[-1] == NativeItem("reasoning", {"reasoning_content": "Hm."})
    assert message.output[0] == CallPart(call.id)
    request = codec.encode(
        [Message("user", "go"), message, Message("tool", "a.py", tool_call_id=call.id)], ALL_TOOLS
    )
    assistant, tool = request["messages"][1:]
    assert assistant["tool_calls"][0]["id"] == call.id == tool["tool_call_id"]
    assert assistant["tool_calls"][0]["function"]["arguments"] == "{}"
    assert assistant["reasoning_content"] == "Hm."


def test_reasoning_model_names_moved_to_openai_models() -> None:
    assert responses_codec.is_reasoning_model is is_reasoning_model
    assert responses_codec.REASONING_MODEL_PREFIXES is REASONING_MODEL_PREFIXES
    assert REASONING_MODEL_PREFIXES == ("o1", "o3", "o4", "gpt-5", "codex")
    assert is_reasoning_model("o4-mini")
    assert is_reasoning_model("azure/GPT-5")
    assert not is_reasoning_model("gpt-4.1-mini")
    assert not is_reasoning_model("gpt-5-chat-latest")


def test_registry_entry() -> None:
    assert (PROVIDER.name, PROVIDER.title, PROVIDER.key_variable, PROVIDER.default_model) == (
        "chat",
        "OpenAI Chat Completions",
        "OPENAI_API_KEY",
        "gpt-4.1-mini",
    )
    assert PROVIDER.base_url_hint == "https://api.openai.com/v1"
    assert PROVIDER.options is None
    codec = PROVIDER.make_codec(CodecOptions("o3", max_output_tokens=99))
    assert isinstance(codec, ChatCodec)
    assert codec.producer == "chat:o3"
    assert codec.encode([Message("user", "hi")], [])["max_completion_tokens"] == 99
    assert isinstance(codec.new_decoder(), ChatDecoder)
    with pytest.raises(ValueError, match="model"):
        ChatCodec("")
