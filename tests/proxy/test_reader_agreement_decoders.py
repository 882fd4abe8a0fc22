"""Issue 27 through the proxy's engine: whatever the gate releases, every common reader
(openai-python, openai-node, anthropic-python, @anthropic-ai/sdk, the AI SDK, litellm) reads
as the same calls with the same arguments. The call shapes below were each read differently
by two of those readers (docs/wire/chat.md §5, anthropic.md, responses.md), so the engine
withholds them: the client receives no call, only the protocol's refusal. The same bytes
through `lockgate run`'s own client (the oracle) fail the same way. The shapes every reader
reads alike (Mistral's index-less whole calls in one array, a `tool_use` that starts with
`input: {}`) still pass."""

from __future__ import annotations

import copy
import json
from typing import Any

import pytest

from lockgate.providers.responses.render import ResponseBuilder
from lockgate.proxy import Accepted, Refused
from lockgate.scripted.script import Turn

from .support import (
    Chunks,
    ends_with_refusal,
    gate_stream,
    gate_turn,
    oracle_chunks,
    request_for,
    run,
    tool_events,
)

READ = '{"path": "README.md"}'


def refusal_from(provider: str, body: list[bytes], kind: str) -> None:
    gated = run(gate_stream(provider, request_for(provider), Chunks(body)))
    assert isinstance(gated.outcome, Refused), gated.outcome
    assert gated.outcome.refusal.kind == kind
    assert tool_events(gated.output) == []  # no call reached the client
    assert ends_with_refusal(gated.output, provider)
    verdict = run(oracle_chunks(provider, body))
    assert (verdict.accepted, verdict.kind) == (False, kind)


def _released(provider: str, body: list[bytes], calls: int) -> None:
    gated = run(gate_stream(provider, request_for(provider), Chunks(body)))
    assert isinstance(gated.outcome, Accepted), gated.outcome
    assert len(gated.outcome.decision.message.tool_calls) == calls
    verdict = run(oracle_chunks(provider, body))
    assert verdict.accepted


# --- Chat Completions ------------------------------------------------------------------------


def _chat(*fragments: list[dict[str, Any]], finish: str = "tool_calls") -> list[bytes]:
    """One chunk per list of tool-call fragments, then the finish and [DONE]."""
    frames = [{"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
    for entries in fragments:
        delta = {"tool_calls": entries}
        frames.append({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": delta}]})
    frames.append(
        {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
    )
    body = [f"data: {json.dumps(frame)}\n\n".encode() for frame in frames]
    return [*body, b"data: [DONE]\n\n"]


def _call(index: object, call_id: str | None, name: str | None, arguments: str) -> dict[str, Any]:
    entry: dict[str, Any] = {} if index == "absent" else {"index": index}
    if call_id is not None:
        entry.update(id=call_id, type="function")
    function: dict[str, Any] = {"arguments": arguments}
    if name is not None:
        function["name"] = name
    entry["function"] = function
    return entry


@pytest.mark.parametrize("index", [None, "absent"])
def test_chat_an_index_less_fragment_beside_indexed_ones_is_withheld(index: object) -> None:
    # openai-node and the AI SDK drop the fragment: they read `{"path": "READ`.
    body = _chat([_call(0, "call_1", "read", READ[:14])], [_call(index, None, None, READ[14:])])
    refusal_from("chat", body, "lifecycle")


def test_chat_a_new_id_at_an_index_in_use_is_withheld() -> None:
    # openai-python, openai-node and litellm read one call with both arguments run together.
    body = _chat([_call(0, "call_a", "read", READ)], [_call(0, "call_b", "discover", "{}")])
    refusal_from("chat", body, "lifecycle")


def test_chat_index_less_calls_in_two_chunks_are_withheld() -> None:
    # litellm reads one call with both arguments run together.
    body = _chat(
        [_call("absent", "call_a", "read", READ)], [_call("absent", "call_b", "discover", "{}")]
    )
    refusal_from("chat", body, "lifecycle")


@pytest.mark.parametrize("indexes", [(0, 2), (1, 0), (1,), (-1,), (2**32,)])
def test_chat_indexes_the_sdks_cannot_read_are_withheld(indexes: tuple[int, ...]) -> None:
    body = _chat(*([_call(i, f"call_{n}", "discover", "{}")] for n, i in enumerate(indexes)))
    refusal_from("chat", body, "lifecycle")


def test_chat_mistral_index_less_whole_calls_in_one_array_still_pass() -> None:
    body = _chat(
        [_call("absent", "QAw0JBXkB", "read", READ), _call("absent", "HlyhI5zAI", "discover", "{}")]
    )
    _released("chat", body, 2)


# --- Anthropic Messages ----------------------------------------------------------------------


def _anthropic(block: dict[str, Any], deltas: list[str]) -> list[bytes]:
    def frame(name: str, data: dict[str, Any]) -> bytes:
        return f"event: {name}\ndata: {json.dumps(data)}\n\n".encode()

    message: dict[str, Any] = {
        "id": "msg_1",
        "type": "message",
        "role": "assistant",
        "model": "m",
        "content": [],
        "stop_reason": None,
        "usage": {"input_tokens": 5, "output_tokens": 1},
    }
    body = [
        frame("message_start", {"type": "message_start", "message": message}),
        frame(
            "content_block_start",
            {"type": "content_block_start", "index": 0, "content_block": block},
        ),
    ]
    for piece in deltas:
        delta = {"type": "input_json_delta", "partial_json": piece}
        body.append(
            frame(
                "content_block_delta", {"type": "content_block_delta", "index": 0, "delta": delta}
            )
        )
    body.append(frame("content_block_stop", {"type": "content_block_stop", "index": 0}))
    stop = {
        "type": "message_delta",
        "delta": {"stop_reason": "tool_use"},
        "usage": {"output_tokens": 9},
    }
    body.append(frame("message_delta", stop))
    body.append(frame("message_stop", {"type": "message_stop"}))
    return body


@pytest.mark.parametrize("deltas", [[], [""], [READ]])
def test_anthropic_a_tool_use_with_a_start_input_is_withheld(deltas: list[str]) -> None:
    # anthropic-python keeps the start input, @anthropic-ai/sdk reads `{}` after an empty
    # delta, litellm `{}` always, the AI SDK the start input and the deltas run together.
    block = {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {"path": "a.py"}}
    refusal_from("anthropic", _anthropic(block, deltas), "lifecycle")


def test_anthropic_a_tool_use_without_any_input_is_withheld() -> None:
    # anthropic-python reads None, @anthropic-ai/sdk undefined, litellm and the AI SDK {}.
    block = {"type": "tool_use", "id": "toolu_1", "name": "discover"}
    refusal_from("anthropic", _anthropic(block, []), "lifecycle")


def test_anthropic_a_tool_use_that_starts_empty_still_passes() -> None:
    block = {"type": "tool_use", "id": "toolu_1", "name": "read", "input": {}}
    _released("anthropic", _anthropic(block, [READ[:9], READ[9:]]), 1)


# --- OpenAI Responses ------------------------------------------------------------------------


def _without_call_done(builder: ResponseBuilder) -> Turn:
    events = [
        copy.deepcopy(event)
        for event in builder.events
        if not (
            event.get("type") == "response.output_item.done"
            and event["item"].get("type") in ("function_call", "custom_tool_call")
        )
    ]
    return Turn(events=tuple(events))


def test_responses_a_function_call_without_its_item_done_is_withheld() -> None:
    # The AI SDK emits the call only at its `output_item.done`: without it, no call and
    # finish `stop`; openai-python and openai-node read the snapshot's call.
    builder = ResponseBuilder("resp_nodone").created().text("msg_1", "Reading.")
    builder.call("fc_1", "call_1", "read", {"path": "README.md"}).completed()
    request = request_for("responses")
    gated = run(gate_turn("responses", _without_call_done(builder), request))
    assert isinstance(gated.outcome, Refused)
    assert gated.outcome.refusal.kind == "lifecycle"
    assert tool_events(gated.output) == []
    assert ends_with_refusal(gated.output, "responses")
    # With it, released.
    gated = run(gate_turn("responses", builder.turn(), request))
    assert isinstance(gated.outcome, Accepted)


def test_responses_a_custom_tool_call_without_its_item_done_is_withheld() -> None:
    builder = ResponseBuilder("resp_nodone").created()
    builder.custom_call("ctc_1", "call_exec", "exec", "touch /tmp/marker").completed()
    request = {
        "model": "m",
        "stream": True,
        "input": "run it",
        "tools": [{"type": "custom", "name": "exec", "format": {"type": "text"}}],
    }
    gated = run(gate_turn("responses", _without_call_done(builder), request))
    assert isinstance(gated.outcome, Refused)
    assert gated.outcome.refusal.kind == "lifecycle"
    assert tool_events(gated.output) == []
    gated = run(gate_turn("responses", builder.turn(), request))
    assert isinstance(gated.outcome, Accepted)
