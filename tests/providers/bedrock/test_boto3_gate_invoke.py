"""`gated_bedrock(client)` on InvokeModelWithResponseStream (and InvokeModel) for Anthropic
models: each `chunk` message's base64 `bytes` is an Anthropic Messages event, judged by the
Anthropic gate with the `tools` of the invoke body. A real boto3 client against the loopback
stand-in (`boto3_server`): a complete tool call passes exactly; a cut last message, an
invalid second call or an exception raise `BedrockGateError` before any `tool_use` of it is
read; text comes before the terminal is sent; a body of another model family is refused
before it is sent."""

from __future__ import annotations

import base64
import json
from collections.abc import Sequence
from typing import Any

import pytest

boto3 = pytest.importorskip("boto3")

from botocore.exceptions import EventStreamError  # type: ignore[import-untyped]  # noqa: E402

from lockgate import BedrockGateError  # noqa: E402
from lockgate.eventstream import encode_message  # noqa: E402
from lockgate.providers.bedrock.framing import message_headers  # noqa: E402
from lockgate.providers.bedrock.invoke import chunk_message  # noqa: E402
from lockgate.scripted.scenario import EDIT_FIX  # noqa: E402

from .boto3_server import Answer, Wait, serving  # noqa: E402
from .test_boto3_gate import EDIT_SCHEMA, MODEL, READ_SCHEMA, client  # noqa: E402

TOOLS = [
    {"name": "edit", "description": "Edit a file", "input_schema": EDIT_SCHEMA},
    {"name": "read", "description": "Read a file", "input_schema": READ_SCHEMA},
]
BODY = {
    "anthropic_version": "bedrock-2023-05-31",
    "max_tokens": 1024,
    "messages": [{"role": "user", "content": "fix calculator.py"}],
    "tools": TOOLS,
}


def _text(index: int, text: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": "text", "text": ""},
        },
        {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "text_delta", "text": text},
        },
        {"type": "content_block_stop", "index": index},
    ]


def _call(index: int, call_id: str, name: str, arguments: dict[str, Any]) -> list[dict[str, Any]]:
    text = json.dumps(arguments)
    half = len(text) // 2
    return [
        {
            "type": "content_block_start",
            "index": index,
            "content_block": {"type": "tool_use", "id": call_id, "name": name, "input": {}},
        },
        {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "input_json_delta", "partial_json": text[:half]},
        },
        {
            "type": "content_block_delta",
            "index": index,
            "delta": {"type": "input_json_delta", "partial_json": text[half:]},
        },
        {"type": "content_block_stop", "index": index},
    ]


def _end(stop: str) -> list[dict[str, Any]]:
    return [
        {
            "type": "message_delta",
            "delta": {"stop_reason": stop, "stop_sequence": None},
            "usage": {"output_tokens": 30},
        },
        {"type": "message_stop"},
    ]


START: dict[str, Any] = {
    "type": "message_start",
    "message": {
        "id": "msg_bdrk_1",
        "type": "message",
        "role": "assistant",
        "model": "claude-sonnet-4-5",
        "content": [],
        "stop_reason": None,
        "stop_sequence": None,
        "usage": {"input_tokens": 10, "output_tokens": 1},
    },
}


def edit_events(stop: str = "tool_use", *more: list[dict[str, Any]]) -> list[dict[str, Any]]:
    events = [START, *_text(0, "Fixing the bug in add."), *_call(1, "toolu_1", "edit", EDIT_FIX)]
    for extra in more:
        events.extend(extra)
    return [*events, *_end(stop)]


def chunks(events: list[dict[str, Any]]) -> list[bytes]:
    return [chunk_message(json.dumps(event).encode()) for event in events]


def invoke(bedrock: Any, into: list[dict[str, Any]], body: dict[str, Any] = BODY) -> None:
    answer = bedrock.invoke_model_with_response_stream(
        modelId=MODEL, body=json.dumps(body), contentType="application/json"
    )
    for event in answer["body"]:
        into.append(json.loads(event["chunk"]["bytes"]))


def tool_uses(events: list[dict[str, Any]]) -> list[str]:
    return [
        event["content_block"]["name"]
        for event in events
        if event["type"] == "content_block_start" and event["content_block"]["type"] == "tool_use"
    ] + ["+input" for event in events if event.get("delta", {}).get("type") == "input_json_delta"]


def read_both(
    steps: Sequence[bytes | object],
) -> tuple[list[dict[str, Any]], Exception | None, list[dict[str, Any]], BedrockGateError]:
    plain: list[dict[str, Any]] = []
    gated: list[dict[str, Any]] = []
    raised: Exception | None = None
    with serving(Answer(steps), Answer(steps)) as server:
        try:
            invoke(client(server.url, gated=False), plain)
        except Exception as exc:
            raised = exc
        with pytest.raises(BedrockGateError) as refused:
            invoke(client(server.url), gated)
    return plain, raised, gated, refused.value


def test_a_complete_tool_call_is_released_exactly() -> None:
    steps = chunks(edit_events())
    plain: list[dict[str, Any]] = []
    gated: list[dict[str, Any]] = []
    with serving(Answer(steps), Answer(steps)) as server:
        invoke(client(server.url, gated=False), plain)
        invoke(client(server.url), gated)
        sent = json.loads(server.received[1].body)
        path = server.received[1].path
    assert gated == plain
    assert tool_uses(gated) == ["edit", "+input", "+input"]
    assert gated[-1] == {"type": "message_stop"}
    assert sent == BODY
    assert path.endswith("/invoke-with-response-stream")


@pytest.mark.parametrize("cut", [3, 14, 40], ids=["prelude", "headers", "payload"])
def test_a_cut_last_message_raises_where_botocore_ends_cleanly(cut: int) -> None:
    *frames, last = chunks(edit_events())
    plain, raised, gated, refused = read_both([*frames, last[:cut]])
    assert raised is None
    assert tool_uses(plain)[0] == "edit"
    assert not any(event["type"] == "message_stop" for event in plain)
    assert refused.kind == "stream_ended"
    assert refused.transient
    assert refused.response["Error"]["Code"] == "serviceUnavailableException"
    assert tool_uses(gated) == []
    assert gated[0]["type"] == "message_start"


def test_a_bad_crc_raises() -> None:
    *frames, last = chunks(edit_events())
    broken = bytearray(last)
    broken[-6] ^= 0x01
    plain, _, gated, refused = read_both([*frames, bytes(broken)])
    assert tool_uses(plain)[0] == "edit"
    assert refused.kind == "malformed_event"
    assert tool_uses(gated) == []


@pytest.mark.parametrize(
    ("name", "arguments"),
    [("edit", {"path": 1}), ("delete_everything", {"path": "/"})],
    ids=["against-schema", "unknown-tool"],
)
def test_an_invalid_second_call_withholds_both(name: str, arguments: dict[str, Any]) -> None:
    steps = chunks(edit_events("tool_use", _call(2, "toolu_2", name, arguments)))
    plain, raised, gated, refused = read_both(steps)
    assert raised is None
    assert tool_uses(plain)[:2] == ["edit", name]
    assert refused.kind == "invalid_batch"
    assert refused.withheld == 2
    assert tool_uses(gated) == []


def test_max_tokens_raises() -> None:
    plain, raised, gated, refused = read_both(chunks(edit_events("max_tokens")))
    assert raised is None
    assert tool_uses(plain)[0] == "edit"
    assert refused.kind == "response_incomplete"
    assert tool_uses(gated) == []


def test_an_exception_message_raises_before_any_tool_use() -> None:
    payload = json.dumps({"message": "lab: the model failed"}).encode()
    failure = encode_message(message_headers("modelStreamErrorException", "exception"), payload)
    *frames, _, _ = chunks(edit_events())
    plain, raised, gated, refused = read_both([*frames, failure])
    assert isinstance(raised, EventStreamError)
    assert tool_uses(plain)[0] == "edit"
    # Refused either way; the invoke gateway hands the exception to the Anthropic decoder,
    # which reads it as an event without a `type` (malformed_event) for now.
    assert refused.kind in ("provider_error", "malformed_event")
    assert tool_uses(gated) == []


def test_text_reaches_the_caller_before_the_terminal_is_sent() -> None:
    frames = chunks(edit_events())
    wait = Wait(seconds=5.0)
    steps: list[bytes | object] = [*frames[:4], wait, *frames[4:]]  # the text block, then wait
    events: list[dict[str, Any]] = []
    with serving(Answer(steps)) as server:
        answer = client(server.url).invoke_model_with_response_stream(
            modelId=MODEL, body=json.dumps(BODY)
        )
        for event in answer["body"]:
            events.append(json.loads(event["chunk"]["bytes"]))
            if events[-1].get("delta", {}).get("type") == "text_delta":
                wait.event.set()
    assert wait.released is True
    assert tool_uses(events)[0] == "edit"


def test_a_body_of_another_model_family_is_refused_before_it_is_sent() -> None:
    titan = {"inputText": "hello", "textGenerationConfig": {"maxTokenCount": 10}}
    with serving(Answer(chunks(edit_events()))) as server:
        with pytest.raises(BedrockGateError) as refused:
            invoke(client(server.url), [], titan)
        received = list(server.received)
    assert refused.value.kind == "unsupported_request"
    assert "anthropic_version" in str(refused.value)
    assert received == []


def test_a_whole_invoke_answer_is_judged_and_still_readable() -> None:
    def answer(*content: dict[str, Any]) -> Answer:
        message = {**START["message"], "content": list(content), "stop_reason": "tool_use"}
        return Answer([json.dumps(message).encode()], content_type="application/json")

    edit = {"type": "tool_use", "id": "toolu_1", "name": "edit", "input": EDIT_FIX}
    bad = {"type": "tool_use", "id": "toolu_2", "name": "edit", "input": {"path": 1}}
    with serving(answer(edit), answer(edit, bad)) as server:
        good = client(server.url).invoke_model(modelId=MODEL, body=json.dumps(BODY))
        read = json.loads(good["body"].read())
        with pytest.raises(BedrockGateError) as refused:
            client(server.url).invoke_model(modelId=MODEL, body=json.dumps(BODY))
    assert read["content"] == [edit]
    assert refused.value.kind == "invalid_batch"
    assert refused.value.withheld == 2


def test_base64_of_the_chunk_is_what_the_caller_reads() -> None:
    """The released chunk messages are the upstream's bytes: the caller's `bytes` decode to
    the very event JSON that was sent."""
    events = edit_events()
    steps = chunks(events)
    read: list[bytes] = []
    with serving(Answer(steps)) as server:
        answer = client(server.url).invoke_model_with_response_stream(
            modelId=MODEL, body=json.dumps(BODY)
        )
        read.extend(event["chunk"]["bytes"] for event in answer["body"])
    assert read == [json.dumps(event).encode() for event in events]
    assert base64.b64encode(read[0])  # bytes, as botocore decodes the blob
