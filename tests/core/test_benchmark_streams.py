"""The benchmarks' OpenAI-shaped streams (`benchmarks/_streams.py`, style `openai`): what the
proxy benchmark measures is a stream lockgate accepts, shaped as OpenAI sends it."""

from __future__ import annotations

import json

import pytest
from benchmarks._common import advance
from benchmarks._streams import StreamSpec, parse_spec, stream_frames, whole_body

from lockgate.events import ignore_event
from lockgate.fixture import ALL_TOOLS
from lockgate.gate import ResponseGate
from lockgate.providers import PROVIDERS, CodecOptions
from lockgate.sse import SSEDecoder


@pytest.mark.parametrize("protocol", ["chat", "responses"])
@pytest.mark.parametrize(("text", "arguments"), [(40, 0), (20, 20), (0, 12)])
def test_openai_shaped_streams_are_accepted_whole(protocol: str, text: int, arguments: int) -> None:
    spec = StreamSpec(protocol, "chunks", text, arguments, style="openai")
    assert parse_spec(spec.name) == spec
    frames = stream_frames(spec)
    assert frames == stream_frames(spec)  # the same bytes every run
    codec = PROVIDERS[protocol].make_codec(CodecOptions(model="bench-model"))
    sse, decoder = SSEDecoder(), codec.new_decoder()
    gate = ResponseGate(ALL_TOOLS, ignore_event)
    decision = None
    for frame in frames:
        decision = advance(sse.feed(frame), decoder, gate, decision)
    for event in decoder.end_of_stream():
        decision = gate.accept(event) or decision
    assert decision is not None
    assert [call.name for call in decision.message.tool_calls] == (["edit"] if arguments else [])
    assert (decision.message.content != "") == bool(text)


def test_chat_chunks_carry_what_openai_sends() -> None:
    frames = stream_frames(StreamSpec("chat", "chunks", 30, 0, style="openai"))
    chunks = [json.loads(frame[len(b"data: ") :]) for frame in frames[:-1]]
    assert frames[-1] == b"data: [DONE]\n\n"
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": "", "refusal": None}
    assert all(chunk["system_fingerprint"].startswith("fp_") for chunk in chunks)
    assert all(chunk["obfuscation"] for chunk in chunks)
    assert all(choice["logprobs"] is None for chunk in chunks for choice in chunk["choices"])
    assert chunks[-1]["choices"] == []
    assert chunks[-1]["usage"]["total_tokens"] > 0
    sizes = [len(chunk["choices"][0]["delta"]["content"]) for chunk in chunks[1:-2]]
    assert min(sizes) >= 1
    assert max(sizes) <= 8


def test_the_whole_answer_is_a_chat_completion() -> None:
    body = json.loads(whole_body(StreamSpec("chat", "json", 50, 0, style="openai")))
    assert body["object"] == "chat.completion"
    assert body["choices"][0]["message"]["content"]
