"""The Gemini request encoder: contents and roles, the system instruction, tools, the
output limit and thinking, the same-producer replay (parts in order, signatures back on
their parts byte for byte, provider parts unchanged), ids only where the server sent them,
and the function responses (one user turn, in call order)."""

from __future__ import annotations

import dataclasses
import json
from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from lockgate.conversation import CallPart, Message, NativeItem, TextPart, ToolCall, ToolSpec
from lockgate.defaults import MAX_OUTPUT_TOKENS
from lockgate.fixture import ALL_TOOLS
from lockgate.gate import ResponseGate
from lockgate.http import encode_body
from lockgate.providers.base import CodecOptions
from lockgate.providers.decoding import synthesized_call_id
from lockgate.providers.gemini import PROVIDER
from lockgate.providers.gemini.codec import GeminiCodec, encode_contents, encode_tool
from lockgate.providers.gemini.decoder import GeminiDecoder
from lockgate.providers.gemini.options import GeminiOptions
from lockgate.providers.gemini.render import ChunkBuilder, GeminiRenderer
from lockgate.scripted.reply import LAB_MODEL, split
from lockgate.sse import SSEDecoder

EDIT = {"path": "calculator.py", "old": "return a - b", "new": "return a + b"}
SIG = "EvsDCvgDAQw51sfOm202VhDM/fOzDucl3NeMekkiE7gOacjnPJ069JpRTXp+=="
LATE = "EoECCv4BAQw51segR8LGndTf8Iwu2QYvjZg3wHjXGTJ8+VvJoEShPtn7lNbF=="
CODEC = GeminiCodec("gemini-test")
LAB = GeminiRenderer()


def released(builder: ChunkBuilder, codec: GeminiCodec = CODEC) -> Message:
    """The message the client would put in history for a stream: decoded, gated, stamped
    with the producer."""
    payload = b"".join(LAB.frame(event) for event in builder.events)
    sse = SSEDecoder()
    decoder = GeminiDecoder()
    gate = ResponseGate(ALL_TOOLS, lambda event: None)
    decision = None
    for event in sse.feed(payload) + sse.finish():
        for normalized in decoder.decode(event):
            decision = gate.accept(normalized) or decision
    for normalized in decoder.end_of_stream():
        decision = gate.accept(normalized) or decision
    assert decision is not None
    return dataclasses.replace(decision.message, producer=codec.producer)


def results(message: Message, *outputs: str) -> list[Message]:
    return [
        Message("tool", output, tool_call_id=call.id)
        for call, output in zip(message.tool_calls, outputs, strict=True)
    ]


def exact(value: object) -> str:
    return json.dumps(value, ensure_ascii=False, separators=(",", ":"))


def model_parts(request: Mapping[str, Any], number: int = 0) -> list[dict[str, Any]]:
    turns = [c["parts"] for c in request["contents"] if c["role"] == "model"]
    parts: list[dict[str, Any]] = turns[number]
    return parts


def user_parts_after(request: Mapping[str, Any], number: int = 0) -> list[dict[str, Any]]:
    contents = request["contents"]
    positions = [i for i, c in enumerate(contents) if c["role"] == "model"]
    following = contents[positions[number] + 1]
    assert following["role"] == "user"
    parts: list[dict[str, Any]] = following["parts"]
    return parts


# --- construction --------------------------------------------------------------------------------


def test_the_producer_names_the_provider_and_model() -> None:
    assert CODEC.producer == "gemini:gemini-test"
    codec = PROVIDER.make_codec(
        CodecOptions("gemini-2.5-flash", 100, GeminiOptions(thinking_budget=1))
    )
    assert isinstance(codec, GeminiCodec)
    assert (codec.producer, codec.max_output_tokens, codec.thinking_budget) == (
        "gemini:gemini-2.5-flash",
        100,
        1,
    )
    assert isinstance(CODEC.new_decoder(), GeminiDecoder)


@pytest.mark.parametrize("budget", [1, 128, 512, 1023, 24576])
def test_any_positive_thinking_budget_is_accepted(budget: int) -> None:
    assert GeminiCodec("m", thinking_budget=budget).thinking_budget == budget


@pytest.mark.parametrize("budget", [0, -1, True, 1.5, "512"])
def test_other_thinking_budgets_are_refused(budget: Any) -> None:
    with pytest.raises(ValueError, match="thinking budget"):
        GeminiCodec("m", thinking_budget=budget)


@pytest.mark.parametrize(("model", "limit"), [("", 10), ("m", 0), ("m", -5), ("m", True)])
def test_an_empty_model_or_a_bad_limit_is_refused(model: str, limit: Any) -> None:
    with pytest.raises(ValueError, match=r"model|max_output_tokens"):
        GeminiCodec(model, max_output_tokens=limit)


# --- the request ---------------------------------------------------------------------------------


def test_a_first_request() -> None:
    history = [
        Message("system", "Be careful."),
        Message("system", "Use the tools."),
        Message("user", "fix it"),
    ]
    request = CODEC.encode(history, ALL_TOOLS)
    assert request["model"] == "gemini-test"
    assert request["systemInstruction"] == {"parts": [{"text": "Be careful.\n\nUse the tools."}]}
    assert request["contents"] == [{"role": "user", "parts": [{"text": "fix it"}]}]
    [tools] = request["tools"]
    assert tools == {"functionDeclarations": [encode_tool(tool) for tool in ALL_TOOLS]}
    assert request["generationConfig"] == {"maxOutputTokens": MAX_OUTPUT_TOKENS}
    assert "thinkingConfig" not in request["generationConfig"]
    json.loads(encode_body(request))  # JSON on the wire as it is


def test_a_tool_is_declared_with_its_json_schema_unchanged() -> None:
    schema = {
        "type": "object",
        "properties": {"when": {"anyOf": [{"type": "string"}, {"type": "null"}]}},
        "required": ["when"],
        "additionalProperties": False,
    }
    tool = ToolSpec("wait", "Wait until then.", schema)
    assert encode_tool(tool) == {
        "name": "wait",
        "description": "Wait until then.",
        "parametersJsonSchema": schema,
    }


def test_no_tools_no_system_no_tools_field() -> None:
    request = CODEC.encode([Message("user", "hi")], [])
    assert set(request) == {"model", "contents", "generationConfig"}


def test_thinking_asks_for_thoughts_and_keeps_the_answer_its_own_limit() -> None:
    request = GeminiCodec("m", max_output_tokens=300, thinking_budget=512).encode(
        [Message("user", "hi")], []
    )
    assert request["generationConfig"] == {
        "maxOutputTokens": 812,
        "thinkingConfig": {"thinkingBudget": 512, "includeThoughts": True},
    }


def test_consecutive_user_messages_merge_into_one_turn() -> None:
    contents = encode_contents([Message("user", "one"), Message("user", "two")])
    assert contents == [{"role": "user", "parts": [{"text": "one"}, {"text": "two"}]}]


def test_an_empty_assistant_message_is_skipped() -> None:
    contents = encode_contents(
        [Message("user", "a"), Message("assistant", ""), Message("user", "b")], "gemini:m"
    )
    assert contents == [{"role": "user", "parts": [{"text": "a"}, {"text": "b"}]}]


# --- the same producer: the original parts, in order ----------------------------------------------


def test_a_signed_call_with_its_server_id_is_replayed_exactly() -> None:
    builder = ChunkBuilder("resp-1").text("Fixing.", 2)
    builder.call("edit", EDIT, "srv_1", signature=SIG).finish()
    message = released(builder)
    history = [Message("user", "fix"), message, *results(message, "ok")]
    request = CODEC.encode(history, ALL_TOOLS)
    expected = [
        {"text": "Fixing."},
        {"functionCall": {"name": "edit", "args": EDIT, "id": "srv_1"}, "thoughtSignature": SIG},
    ]
    assert exact(model_parts(request)) == exact(expected)
    assert user_parts_after(request) == [
        {"functionResponse": {"name": "edit", "response": {"result": "ok"}, "id": "srv_1"}}
    ]
    assert SIG in encode_body(request).decode()  # byte for byte on the wire


def test_a_late_signature_goes_back_on_its_call() -> None:
    builder = ChunkBuilder("resp-late").call("edit", EDIT)
    builder.chunk([{"text": "", "thoughtSignature": LATE}], "STOP")
    message = released(builder)
    request = CODEC.encode([Message("user", "fix"), message, *results(message, "ok")], ALL_TOOLS)
    assert model_parts(request) == [
        {"functionCall": {"name": "edit", "args": EDIT}, "thoughtSignature": LATE}
    ]


def test_thoughts_signed_text_and_a_trailing_signature_part_keep_their_places() -> None:
    builder = ChunkBuilder("resp-think").thought("Plan it.", 2)
    builder.text("The bug is in add.", 3, signature=SIG).finish(signature=LATE)
    first, *rest = split("The bug is in add.", 3)
    message = released(builder)
    request = CODEC.encode([Message("user", "why?"), message, Message("user", "thanks")], [])
    assert model_parts(request) == [
        {"text": "Plan it.", "thought": True},
        {"text": first, "thoughtSignature": SIG},  # the signed part exactly as it came
        {"text": "".join(rest)},  # the unsigned rest merged
        {"text": "", "thoughtSignature": LATE},
    ]


def test_provider_parts_are_replayed_unchanged_in_place() -> None:
    builder = ChunkBuilder("resp-code").code_execution("print(1)", "1\n").text("One.", 1)
    builder.search("srch_1", "add function", SIG).call("edit", EDIT).finish()
    message = released(builder)
    request = CODEC.encode([Message("user", "go"), message, *results(message, "ok")], ALL_TOOLS)
    kinds = [next(iter(part)) for part in model_parts(request)]
    assert kinds == [
        "executableCode",
        "codeExecutionResult",
        "text",
        "toolCall",
        "toolResponse",
        "functionCall",
    ]
    assert model_parts(request)[3]["thoughtSignature"] == SIG
    assert exact(model_parts(request)[:2]) == exact(builder.parts[:2])


def test_synthesized_ids_stay_local() -> None:
    builder = ChunkBuilder("resp-noid", index=None)
    parts = [builder.call_part("read", {"path": "a"}), builder.call_part("read", {"path": "b"})]
    message = released(builder.chunk(parts, "STOP"))
    assert [c.id for c in message.tool_calls] == [
        synthesized_call_id("resp-noid", "0"),
        synthesized_call_id("resp-noid", "1"),
    ]
    request = CODEC.encode(
        [Message("user", "read"), message, *results(message, "A", "B")], ALL_TOOLS
    )
    assert model_parts(request) == [
        {"functionCall": {"name": "read", "args": {"path": "a"}}},
        {"functionCall": {"name": "read", "args": {"path": "b"}}},
    ]
    assert user_parts_after(request) == [
        {"functionResponse": {"name": "read", "response": {"result": "A"}}},
        {"functionResponse": {"name": "read", "response": {"result": "B"}}},
    ]
    assert "call_" not in encode_body(request).decode()


def test_a_server_id_beside_a_synthesized_one() -> None:
    builder = ChunkBuilder("resp-mixed")
    parts = [
        builder.call_part("read", {"path": "a"}, "srv_a"),
        builder.call_part("read", {"path": "b"}),
    ]
    message = released(builder.chunk(parts, "STOP"))
    request = CODEC.encode(
        [Message("user", "read"), message, *results(message, "A", "B")], ALL_TOOLS
    )
    assert [p["functionCall"].get("id") for p in model_parts(request)] == ["srv_a", None]
    assert [p["functionResponse"].get("id") for p in user_parts_after(request)] == ["srv_a", None]


def test_an_output_that_names_a_call_it_does_not_carry_is_refused() -> None:
    message = Message(
        "assistant",
        tool_calls=(ToolCall("c1", "discover", {}, "{}"),),
        producer=CODEC.producer,
        output=(CallPart("c2"),),
    )
    with pytest.raises(ValueError, match="c2"):
        CODEC.encode([Message("user", "go"), message, Message("tool", "x", tool_call_id="c1")], [])


# --- another producer: text and calls only --------------------------------------------------------


def test_another_producers_message_sends_text_and_calls_without_signatures_or_ids() -> None:
    message = Message(
        "assistant",
        "Fixing.",
        (ToolCall("toolu_01", "edit", EDIT, json.dumps(EDIT)),),
        producer="anthropic:claude",
        response_id="msg_1",
        output=(
            NativeItem("reasoning", {"type": "thinking", "thinking": "x", "signature": "s"}),
            TextPart("Fixing."),
            CallPart("toolu_01"),
        ),
    )
    request = CODEC.encode([Message("user", "fix"), message, *results(message, "ok")], ALL_TOOLS)
    assert model_parts(request) == [
        {"text": "Fixing."},
        {"functionCall": {"name": "edit", "args": EDIT}},
    ]
    assert user_parts_after(request) == [
        {"functionResponse": {"name": "edit", "response": {"result": "ok"}}}
    ]


def test_the_same_model_name_under_another_protocol_is_another_producer() -> None:
    message = released(ChunkBuilder("resp-1").text("Hi.", 1).finish(), GeminiCodec("other"))
    request = CODEC.encode([Message("user", "a"), message], [])
    assert model_parts(request) == [{"text": "Hi."}]


def test_a_refusal_from_another_producer_is_sent_as_text() -> None:
    message = Message("assistant", refusal="I can't.", producer="responses:gpt")
    request = CODEC.encode([Message("user", "a"), message], [])
    assert model_parts(request) == [{"text": "I can't."}]


# --- function responses ---------------------------------------------------------------------------


def two_calls() -> Message:
    return Message(
        "assistant",
        "",
        (
            ToolCall("c1", "read", {"path": "a"}, '{"path":"a"}'),
            ToolCall("c2", "test", {}, "{}"),
        ),
    )


def test_results_go_in_one_user_turn_in_the_calls_order() -> None:
    history = [
        Message("user", "go"),
        two_calls(),
        Message("tool", "tests failed", tool_call_id="c2"),
        Message("tool", "A", tool_call_id="c1"),
        Message("user", "and then?"),
    ]
    contents = encode_contents(history)
    assert contents[-1] == {
        "role": "user",
        "parts": [
            {"functionResponse": {"name": "read", "response": {"result": "A"}}},
            {"functionResponse": {"name": "test", "response": {"result": "tests failed"}}},
            {"text": "and then?"},
        ],
    }
    assert [c["role"] for c in contents] == ["user", "model", "user"]


def test_an_error_observation_is_sent_as_an_error() -> None:
    history = [
        Message("user", "go"),
        two_calls(),
        Message("tool", "error: not executed", tool_call_id="c1"),
        Message("tool", "ok", tool_call_id="c2"),
    ]
    first = encode_contents(history)[-1]["parts"][0]
    assert first == {
        "functionResponse": {"name": "read", "response": {"error": "error: not executed"}}
    }


@pytest.mark.parametrize(
    ("tail", "problem"),
    [
        ([Message("tool", "x", tool_call_id="c9")], "does not answer"),
        (
            [Message("tool", "x", tool_call_id="c1"), Message("tool", "y", tool_call_id="c1")],
            "second tool result",
        ),
        ([Message("tool", "x", tool_call_id="c1")], "c2 has no result"),
        ([Message("tool", "x", tool_call_id="c1"), Message("user", "next")], "c2 has no result"),
    ],
)
def test_results_that_do_not_pair_with_the_calls_are_refused(
    tail: Sequence[Message], problem: str
) -> None:
    with pytest.raises(ValueError, match=problem):
        encode_contents([Message("user", "go"), two_calls(), *tail])


def test_a_result_without_a_model_turn_before_it_is_refused() -> None:
    with pytest.raises(ValueError, match="does not answer"):
        encode_contents([Message("user", "go"), Message("tool", "x", tool_call_id="c1")])


def test_the_lab_model_path_and_the_codec_model_agree() -> None:
    request = GeminiCodec(LAB_MODEL).encode([Message("user", "go")], [])
    assert LAB.path == f"/v1beta/models/{request['model']}:streamGenerateContent"
