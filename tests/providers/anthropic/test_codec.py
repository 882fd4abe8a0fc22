"""The Anthropic Messages request encoder (`providers/anthropic/codec.py`).

System top level, alternation and merging, native blocks replayed in order to the same
producer only, tool_result placement and is_error, pause continuation, tools and the
thinking budget.
"""

from __future__ import annotations

import json
from typing import Any

import pytest

from lockgate.conversation import CallPart, Message, NativeItem, TextPart, ToolCall
from lockgate.fixture import ALL_TOOLS, DISCOVER
from lockgate.providers.anthropic import DEFAULT_MODEL, PROVIDER
from lockgate.providers.anthropic.codec import AnthropicCodec, encode_messages
from lockgate.providers.anthropic.options import AnthropicOptions
from lockgate.providers.base import CodecOptions
from lockgate.providers.responses.options import ResponsesOptions

MODEL = "claude-test"
PRODUCER = f"anthropic:{MODEL}"
THINKING = {"type": "thinking", "thinking": "Plan: read first.", "signature": "EuYB+/sig=="}
REDACTED = {"type": "redacted_thinking", "data": "EmwK+opaque=="}
SEARCH = {"type": "server_tool_use", "id": "srv_1", "name": "web_search", "input": {"q": "x"}}
RESULT = {"type": "web_search_tool_result", "tool_use_id": "srv_1", "content": []}
READ = ToolCall("toolu_1", "read", {"path": "README.md"}, '{"path": "README.md"}')
TEST = ToolCall("toolu_2", "test", {}, "")


def assistant(
    *parts: Any,
    calls: tuple[ToolCall, ...] = (),
    producer: str = PRODUCER,
    text: str = "",
    paused: bool = False,
) -> Message:
    return Message(
        "assistant",
        text,
        calls,
        producer=producer,
        response_id="msg_1",
        output=tuple(parts),
        paused=paused,
    )


def tool(call_id: str, output: str) -> Message:
    return Message("tool", output, tool_call_id=call_id)


def encode(history: list[Message], **options: Any) -> dict[str, Any]:
    return AnthropicCodec(MODEL, **options).encode(history, ALL_TOOLS)


def test_the_request_shape() -> None:
    request = encode([Message("system", "Be careful."), Message("user", "Fix it.")])
    assert list(request) == [
        "model",
        "max_tokens",
        "system",
        "messages",
        "tools",
        "tool_choice",
        "stream",
    ]
    assert request["model"] == MODEL
    assert request["max_tokens"] == 2048
    assert request["stream"] is True
    assert request["tool_choice"] == {"type": "auto", "disable_parallel_tool_use": True}
    assert request["tools"][0] == {
        "name": "discover",
        "description": DISCOVER.description,
        "input_schema": dict(DISCOVER.parameters),
    }
    assert "thinking" not in request


def test_no_tools_means_no_tools_and_no_tool_choice() -> None:
    request = AnthropicCodec(MODEL).encode([Message("user", "hi")], [])
    assert "tools" not in request
    assert "tool_choice" not in request


def test_system_messages_go_top_level_joined() -> None:
    request = encode([Message("system", "One."), Message("user", "Hi."), Message("system", "Two.")])
    assert request["system"] == "One.\n\nTwo."
    assert request["messages"] == [{"role": "user", "content": [{"type": "text", "text": "Hi."}]}]
    assert "system" not in encode([Message("user", "Hi.")])


def test_the_same_producer_gets_its_blocks_back_in_order_unchanged() -> None:
    message = assistant(
        NativeItem("reasoning", THINKING),
        TextPart("Reading."),
        NativeItem("provider_output", SEARCH),
        NativeItem("provider_output", RESULT),
        CallPart("toolu_1"),
        NativeItem("reasoning", REDACTED),
        CallPart("toolu_2"),
        calls=(READ, TEST),
        text="Reading.",
    )
    history = [Message("user", "go"), message, tool("toolu_1", "# readme"), tool("toolu_2", "ok")]
    content = encode(history)["messages"][1]["content"]
    assert content == [
        THINKING,
        {"type": "text", "text": "Reading."},
        SEARCH,
        RESULT,
        {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "README.md"}},
        REDACTED,
        {"type": "tool_use", "id": "toolu_2", "name": "test", "input": {}},
    ]
    # byte for byte: the thinking block's JSON is exactly what was received
    assert json.dumps(content[0]) == json.dumps(THINKING)


def test_another_producer_gets_only_text_and_calls() -> None:
    message = assistant(
        NativeItem("reasoning", THINKING),
        TextPart("Reading."),
        NativeItem("provider_output", SEARCH),
        CallPart("toolu_1"),
        calls=(READ,),
        text="Reading.",
        producer="anthropic:another-model",
    )
    history = [Message("user", "go"), message, tool("toolu_1", "# readme")]
    assert encode(history)["messages"][1]["content"] == [
        {"type": "text", "text": "Reading."},
        {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "README.md"}},
    ]


def test_a_portable_message_without_output_sends_text_and_calls() -> None:
    message = Message("assistant", "", (READ,))
    history = [Message("user", "go"), message, tool("toolu_1", "x")]
    assert encode(history)["messages"][1]["content"] == [
        {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "README.md"}}
    ]


def test_tool_use_input_is_the_parsed_object_even_for_odd_argument_text() -> None:
    recovered = ToolCall("toolu_9", "edit", {}, '{"path": "calc')  # a --recover replay
    history = [Message("user", "go"), Message("assistant", "", (recovered,)), tool("toolu_9", "e")]
    assert encode(history)["messages"][1]["content"][0]["input"] == {}


def test_all_results_of_one_response_go_first_in_one_user_message() -> None:
    message = assistant(CallPart("toolu_1"), CallPart("toolu_2"), calls=(READ, TEST))
    history = [
        Message("user", "go"),
        message,
        tool("toolu_1", "# readme"),
        tool("toolu_2", "error: tests failed to start"),
        Message("user", "And now?"),
    ]
    messages = encode(history)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[2]["content"] == [
        {"type": "tool_result", "tool_use_id": "toolu_1", "content": "# readme"},
        {
            "type": "tool_result",
            "tool_use_id": "toolu_2",
            "content": "error: tests failed to start",
            "is_error": True,
        },
        {"type": "text", "text": "And now?"},
    ]


def test_is_error_only_for_observations_starting_with_error() -> None:
    message = assistant(CallPart("toolu_1"), calls=(READ,))
    history = [Message("user", "go"), message, tool("toolu_1", "no error: fine")]
    result = encode(history)["messages"][2]["content"][0]
    assert "is_error" not in result


@pytest.mark.parametrize(
    "history",
    [
        [Message("user", "go"), tool("toolu_1", "orphan")],
        [
            Message("user", "go"),
            assistant(CallPart("toolu_1"), calls=(READ,)),
            tool("toolu_1", "x"),
            tool("toolu_1", "again"),
        ],
        [
            Message("user", "go"),
            assistant(CallPart("toolu_1"), calls=(READ,)),
            tool("toolu_1", "x"),
            assistant(TextPart("more"), text="more"),
            tool("toolu_1", "late: answers an older assistant message"),
        ],
    ],
)
def test_a_result_must_answer_a_call_of_the_assistant_message_before_it(
    history: list[Message],
) -> None:
    with pytest.raises(ValueError, match="does not answer"):
        encode(history)


@pytest.mark.parametrize(
    "history",
    [
        [Message("user", "go"), assistant(CallPart("toolu_1"), calls=(READ,))],
        [
            Message("user", "go"),
            assistant(CallPart("toolu_1"), calls=(READ,)),
            Message("user", "no result"),
        ],
    ],
)
def test_a_call_without_a_result_is_refused(history: list[Message]) -> None:
    with pytest.raises(ValueError, match="has no tool_result"):
        encode(history)


def test_consecutive_messages_of_one_role_are_merged() -> None:
    history = [
        Message("user", "one"),
        Message("user", "two"),
        assistant(TextPart("a"), text="a"),
        assistant(TextPart("b"), text="b"),
        Message("user", ""),  # empty text sends no block
        Message("user", "three"),
    ]
    assert encode(history)["messages"] == [
        {
            "role": "user",
            "content": [{"type": "text", "text": "one"}, {"type": "text", "text": "two"}],
        },
        {
            "role": "assistant",
            "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
        },
        {"role": "user", "content": [{"type": "text", "text": "three"}]},
    ]


def test_a_paused_response_is_sent_back_as_it_is_and_ends_the_request() -> None:
    paused = assistant(
        NativeItem("reasoning", THINKING),
        TextPart("Searching."),
        NativeItem("provider_output", SEARCH),
        text="Searching.",
        paused=True,
    )
    messages = encode([Message("user", "go"), paused])["messages"]
    assert messages[-1] == {
        "role": "assistant",
        "content": [THINKING, {"type": "text", "text": "Searching."}, SEARCH],
    }
    # the continuation, once it arrives, joins the same assistant turn
    continued = assistant(NativeItem("provider_output", RESULT), TextPart("Found."), text="Found.")
    history = [Message("user", "go"), paused, continued, Message("user", "thanks")]
    messages = encode(history)["messages"]
    assert [m["role"] for m in messages] == ["user", "assistant", "user"]
    assert messages[1]["content"][-2:] == [RESULT, {"type": "text", "text": "Found."}]


def test_thinking_budget_sets_thinking_and_raises_max_tokens() -> None:
    request = encode([Message("user", "go")], thinking_budget=1024, max_output_tokens=500)
    assert request["thinking"] == {"type": "enabled", "budget_tokens": 1024}
    assert request["max_tokens"] == 1524  # must exceed the budget: budget + output limit
    assert request["tool_choice"]["type"] == "auto"  # the only choice thinking allows


@pytest.mark.parametrize("budget", [0, 1023, -5, True])
def test_thinking_budget_below_the_api_minimum_is_refused(budget: int) -> None:
    with pytest.raises(ValueError, match="1024"):
        AnthropicCodec(MODEL, thinking_budget=budget)


def test_codec_from_options_and_the_registry_entry() -> None:
    codec = PROVIDER.make_codec(
        CodecOptions(
            "claude-x",
            max_output_tokens=100,
            provider_options=AnthropicOptions(thinking_budget=2000),
        )
    )
    assert isinstance(codec, AnthropicCodec)
    assert codec.producer == "anthropic:claude-x"
    assert codec.max_tokens == 2100
    assert PROVIDER.name == "anthropic"
    assert PROVIDER.key_variable == "ANTHROPIC_API_KEY"
    assert PROVIDER.base_url_hint == "https://api.anthropic.com"
    assert PROVIDER.options is AnthropicOptions
    with pytest.raises(ValueError, match="ResponsesOptions are not AnthropicOptions"):
        PROVIDER.make_codec(CodecOptions("claude-x", provider_options=ResponsesOptions()))
    assert PROVIDER.default_model == DEFAULT_MODEL
    with pytest.raises(ValueError, match="model"):
        AnthropicCodec("")
    with pytest.raises(ValueError, match="max_output_tokens"):
        AnthropicCodec(MODEL, max_output_tokens=0)


def test_the_default_model_is_in_the_installed_sdk() -> None:
    from typing import get_args

    from anthropic.types.model import Model

    literal = get_args(Model)[0]
    assert DEFAULT_MODEL in get_args(literal)


def test_encode_messages_is_usable_alone() -> None:
    assert encode_messages([Message("user", "hi")]) == [
        {"role": "user", "content": [{"type": "text", "text": "hi"}]}
    ]
