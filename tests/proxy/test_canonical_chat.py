"""Issue 27's canonical form on the Chat wire: a call whose `id` or `function.name` is sent
again, identical, on a later fragment at the same index (DeepSeek, Qwen and sglang do) is
read once by lockgate's decoder, litellm, openai-node and the AI SDK, but openai-python's
`ChatCompletionStreamState` (`client.chat.completions.stream()`) concatenates every string
and ends with `gogo` / `call_1call_1`: a call to another declared tool. The engine (the
proxy and the transport) releases such a chunk with the repeated id and name removed from
the continuation fragment (`StreamDecoder.canonical_data`), so that every reader reads the
call the gate released; every other event goes out byte for byte (docs/wire/chat.md §5)."""

from __future__ import annotations

import json
from typing import Any, cast

import pytest
from openai._models import construct_type
from openai.lib.streaming.chat import ChatCompletionStreamState
from openai.types.chat import ChatCompletionChunk

from lockgate.proxy import Accepted, Refused

from .support import Chunks, frames, gate_stream, options, run, tool_events

_PARAMETERS = {"type": "object", "properties": {"x": {"type": "integer"}}}
# `gogo` is declared too: what openai-python reads of a repeated `go` is a call it may run.
REQUEST: dict[str, Any] = {
    "model": "m",
    "stream": True,
    "messages": [{"role": "user", "content": "x"}],
    "tools": [
        {"type": "function", "function": {"name": name, "parameters": _PARAMETERS}}
        for name in ("go", "gogo")
    ],
}


def _chunk(delta: dict[str, Any], finish: str | None = None) -> dict[str, Any]:
    return {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "created": 1,
        "model": "m",
        "choices": [{"index": 0, "delta": delta, "finish_reason": finish}],
    }


def _frame(payload: dict[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def _opening(call_id: str = "call_1", name: str = "go") -> dict[str, Any]:
    return {
        "index": 0,
        "id": call_id,
        "type": "function",
        "function": {"name": name, "arguments": ""},
    }


def _continuation(arguments: str, **repeated: str) -> dict[str, Any]:
    fragment: dict[str, Any] = {"index": 0}
    if "call_id" in repeated:
        fragment["id"] = repeated["call_id"]
    fragment["function"] = {"arguments": arguments}
    if "name" in repeated:
        fragment["function"] = {"name": repeated["name"], "arguments": arguments}
    return fragment


def _body(*fragment_lists: list[dict[str, Any]]) -> list[bytes]:
    """A stream: the role, one chunk per list of call fragments, the finish, [DONE]."""
    frames_ = [_frame(_chunk({"role": "assistant", "content": ""}))]
    frames_ += [_frame(_chunk({"tool_calls": fragments})) for fragments in fragment_lists]
    frames_ += [_frame(_chunk({}, "tool_calls")), b"data: [DONE]\n\n"]
    return frames_


def _openai_python(data: bytes) -> list[tuple[str, str, str]]:
    """What `chat.completions.stream()` ends with: (name, id, arguments) of each call."""
    state: ChatCompletionStreamState[Any] = ChatCompletionStreamState()
    for frame in frames(data):
        event = frame.event
        if event is None or event.data == b"[DONE]":
            continue
        # As the client builds each chunk: constructed, not validated.
        chunk = construct_type(type_=ChatCompletionChunk, value=json.loads(event.data))
        state.handle_chunk(cast(ChatCompletionChunk, chunk))
    message = state.get_final_completion().choices[0].message
    return [
        (call.function.name, call.id, call.function.arguments) for call in message.tool_calls or []
    ]


def _statements(data: bytes) -> tuple[list[str], list[str]]:
    """Every call id and every name the client's tool-call fragments state, in order."""
    ids: list[str] = []
    names: list[str] = []
    for frame in tool_events(data):
        for choice in json.loads(frame)["choices"]:
            for fragment in (choice.get("delta") or {}).get("tool_calls") or ():
                if "id" in fragment:
                    ids.append(fragment["id"])
                function = fragment.get("function") or {}
                if "name" in function:
                    names.append(function["name"])
    return ids, names


REPEATS = {
    "id": {"call_id": "call_1"},
    "name": {"name": "go"},
    "id and name": {"call_id": "call_1", "name": "go"},
}


@pytest.mark.parametrize("hold", ["tools", "terminal"])
@pytest.mark.parametrize("repeated", list(REPEATS))
def test_a_repeated_id_or_name_goes_out_once(repeated: str, hold: str) -> None:
    body = _body(
        [_opening()],
        [_continuation('{"x":', **REPEATS[repeated])],
        [_continuation("1}", **REPEATS[repeated])],
    )
    # Read as it came, openai-python reads another call than the one the gate releases.
    upstream = b"".join(body)
    assert _openai_python(upstream)[0] != ("go", "call_1", '{"x":1}')

    gated = run(gate_stream("chat", REQUEST, Chunks(body), options(hold=hold)))
    assert isinstance(gated.outcome, Accepted), gated.outcome
    [call] = gated.outcome.decision.message.tool_calls
    assert (call.name, call.id, call.arguments) == ("go", "call_1", {"x": 1})
    assert _statements(gated.output) == (["call_1"], ["go"])
    assert _openai_python(gated.output) == [("go", "call_1", '{"x":1}')]


def test_only_the_repeating_events_are_rewritten() -> None:
    body = _body(
        [_opening()],
        [_continuation('{"x":')],  # no repeat: byte for byte
        [_continuation("1", call_id="call_1", name="go")],
        [_continuation("}")],
    )
    gated = run(gate_stream("chat", REQUEST, Chunks(body)))
    assert isinstance(gated.outcome, Accepted), gated.outcome
    sent = [frame for frame in gated.output.split(b"\n\n") if frame]
    came = [frame.rstrip(b"\n") for frame in body]
    assert len(sent) == len(came)
    differing = [number for number, (a, b) in enumerate(zip(sent, came, strict=True)) if a != b]
    assert differing == [3]
    # The one rewritten: the same chunk, without the repeated id and name.
    rewritten = json.loads(sent[3].removeprefix(b"data: "))
    expected = json.loads(came[3].removeprefix(b"data: "))
    del expected["choices"][0]["delta"]["tool_calls"][0]["id"]
    del expected["choices"][0]["delta"]["tool_calls"][0]["function"]["name"]
    assert rewritten == expected
    assert _openai_python(gated.output) == [("go", "call_1", '{"x":1}')]


def test_a_repeat_in_the_chunk_that_opens_the_call() -> None:
    # The opening fragment and a continuation restating both, in one array.
    body = _body([_opening(), _continuation('{"x":1}', call_id="call_1", name="go")])
    gated = run(gate_stream("chat", REQUEST, Chunks(body)))
    assert isinstance(gated.outcome, Accepted), gated.outcome
    assert _statements(gated.output) == (["call_1"], ["go"])
    assert _openai_python(gated.output) == [("go", "call_1", '{"x":1}')]


def test_text_and_unicode_beside_a_repeat_are_read_alike() -> None:
    # The rest of the chunk is written again as equal JSON (U+2028 escaped, é kept).
    chunk = _chunk({"content": "caf\u00e9 \u2028", "tool_calls": []})
    chunk["choices"][0]["delta"]["tool_calls"] = [
        _continuation('{"x":1}', call_id="call_1", name="go")
    ]
    chunk["usage"] = None
    body = _body([_opening()])
    body.insert(2, b"data: " + json.dumps(chunk, ensure_ascii=False).encode() + b"\n\n")
    gated = run(gate_stream("chat", REQUEST, Chunks(body)))
    assert isinstance(gated.outcome, Accepted), gated.outcome
    rewritten = frames(gated.output)[2].event
    assert b"\xe2\x80\xa8" not in rewritten.data
    read = json.loads(rewritten.data)
    assert read["choices"][0]["delta"]["content"] == "caf\u00e9 \u2028"
    assert _openai_python(gated.output) == [("go", "call_1", '{"x":1}')]


@pytest.mark.parametrize("different", [{"call_id": "call_2"}, {"name": "gogo"}], ids=["id", "name"])
def test_a_different_id_or_name_is_still_refused(different: dict[str, str]) -> None:
    body = _body([_opening()], [_continuation('{"x":1}', **different)])
    gated = run(gate_stream("chat", REQUEST, Chunks(body)))
    assert isinstance(gated.outcome, Refused), gated.outcome
    assert tool_events(gated.output) == []  # no call reached the client


@pytest.mark.parametrize("absent", ["missing", "null"])
def test_index_less_whole_calls_go_out_with_their_position(absent: str) -> None:
    # Mistral, Gemini's compatible endpoint and Ollama send whole calls without an index,
    # all in one array (Mistral without a type); openai-python raises on them and
    # openai-node reads none, unless each has its position as its index, and a type.
    fragments: list[dict[str, Any]] = [
        {"id": call_id, "function": {"name": name, "arguments": arguments}}
        for call_id, name, arguments in (("call_1", "go", '{"x":1}'), ("call_2", "gogo", "{}"))
    ]
    if absent == "null":
        for fragment in fragments:
            fragment["index"] = None
    body = _body(fragments)
    with pytest.raises(TypeError):
        _openai_python(b"".join(body))
    gated = run(gate_stream("chat", REQUEST, Chunks(body)))
    assert isinstance(gated.outcome, Accepted), gated.outcome
    [sent] = [
        delta["tool_calls"]
        for released in tool_events(gated.output)
        if "tool_calls" in (delta := json.loads(released)["choices"][0]["delta"])
    ]
    assert [fragment["index"] for fragment in sent] == [0, 1]
    assert [fragment["type"] for fragment in sent] == ["function", "function"]  # none came
    assert [(call.name, call.id) for call in gated.outcome.decision.message.tool_calls] == [
        ("go", "call_1"),
        ("gogo", "call_2"),
    ]
    assert _openai_python(gated.output) == [
        ("go", "call_1", '{"x":1}'),
        ("gogo", "call_2", "{}"),
    ]


def _arguments_texts(data: bytes) -> list[object]:
    """Every `function.arguments` the client's tool-call fragments carry, as sent."""
    found: list[object] = []
    for frame in tool_events(data):
        for choice in json.loads(frame)["choices"]:
            for fragment in (choice.get("delta") or {}).get("tool_calls") or ():
                function = fragment.get("function") or {}
                if "arguments" in function:
                    found.append(function["arguments"])
    return found


@pytest.mark.parametrize("whole", [False, True], ids=["continuation", "whole call"])
def test_arguments_sent_as_an_object_go_out_as_their_text(whole: bool) -> None:
    # llama.cpp and MiniMax send the arguments as a JSON value. The AI SDK's chunk schema
    # wants a string: it skips such a chunk and runs the call built from the rest, and
    # openai-node appends "[object Object]"; clients must read the text the gate judged.
    value = {"x": 1}
    if whole:
        opening = _opening()
        opening["function"]["arguments"] = value
        body = _body([opening])
    else:
        body = _body([_opening()], [{"index": 0, "function": {"arguments": value}}])
    gated = run(gate_stream("chat", REQUEST, Chunks(body), options()))
    assert isinstance(gated.outcome, Accepted), gated.outcome
    [call] = gated.outcome.decision.message.tool_calls
    assert (call.name, call.arguments) == ("go", value)
    texts = _arguments_texts(gated.output)
    assert texts, "no arguments went out"
    assert all(isinstance(text, str) for text in texts), texts
    assert "".join(cast(list[str], texts)) == '{"x":1}'
    assert _openai_python(gated.output) == [("go", "call_1", '{"x":1}')]
