"""Secrets redacted from a recorded Bedrock event-stream body (`cassette/eventstream_scrub.py`):
message by message, so the recording still decodes whole (its lengths and CRCs right), and a
secret base64-encoded inside an InvokeModel `chunk` is found too; reads split where they met."""

from __future__ import annotations

import base64
import json
from pathlib import Path

from lockgate.cassette.eventstream_scrub import scrub_eventstream
from lockgate.cassette.format import load
from lockgate.cassette.recorder import CassetteRecorder, SecretScrubber
from lockgate.eventstream import EventStreamDecoder, Header, encode_message

SECRET = "sk-live-SECRET1234567890abcdef"


def _message(event_type: str, payload: object) -> bytes:
    headers = [
        Header.string(":event-type", event_type),
        Header.string(":content-type", "application/json"),
        Header.string(":message-type", "event"),
    ]
    return encode_message(headers, json.dumps(payload).encode())


def _text(delta: str) -> bytes:
    return _message("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": delta}})


def _chunk(text: str) -> bytes:
    event = {
        "type": "content_block_delta",
        "index": 0,
        "delta": {"type": "text_delta", "text": text},
    }
    encoded = base64.b64encode(json.dumps(event).encode()).decode()
    return _message("chunk", {"bytes": encoded})


def _record(tmp_path: Path, body: bytes, reads: list[int]) -> bytes:
    recorder = CassetteRecorder(tmp_path, secrets=[SECRET])
    exchange = recorder.exchange("bedrock", "http://127.0.0.1:1", "POST", "/model/m/x", {})
    exchange.head(200, [("content-type", "application/vnd.amazon.eventstream")])
    start = 0
    for end in [*reads, len(body)]:
        exchange.read(body[start:end])
        start = end
    exchange.end("clean")
    path = exchange.finish()
    assert path is not None
    assert SECRET not in path.read_text()
    return b"".join(read.data for read in load(path).reads)


def test_a_converse_stream_is_redacted_and_still_decodes_whole(tmp_path: Path) -> None:
    body = _text("Hello. ") + _text(f"your key is {SECRET}") + _text("Bye.")
    recorded = _record(tmp_path, body, [5, 40, 130])
    decoder = EventStreamDecoder()
    messages = decoder.feed(recorded)
    decoder.finish()  # nothing left over: not a cut stream
    texts = [json.loads(m.payload)["delta"]["text"] for m in messages]
    assert texts == ["Hello. ", "your key is [redacted]", "Bye."]


def test_a_secret_inside_an_invoke_chunk_is_found_and_redacted(tmp_path: Path) -> None:
    recorded = _record(tmp_path, _chunk(f"your key is {SECRET}"), [])
    [message] = EventStreamDecoder().feed(recorded)
    inner = json.loads(base64.b64decode(json.loads(message.payload)["bytes"]))
    assert inner["delta"]["text"] == "your key is [redacted]"


def test_a_message_without_a_secret_and_a_cut_tail_stay_as_they_came() -> None:
    clean = _text("Hello.")
    cut = _text(f"your key is {SECRET}")[:30]  # a message cut inside: redacted as bytes
    pieces = [clean[:10], clean[10:], cut]
    scrubbed = scrub_eventstream(SecretScrubber([SECRET]), pieces)
    assert scrubbed[:2] == pieces[:2]  # byte for byte, where the reads met
    assert len(scrubbed) == 3


def test_read_boundaries_inside_a_shrunk_message_stay_inside_it() -> None:
    secret_message = _text(f"{SECRET} {SECRET}")
    body = secret_message + _text("after")
    cut = len(secret_message) - 5  # near the end of the message that shrinks
    pieces = [body[:cut], body[cut:]]
    first, second = scrub_eventstream(SecretScrubber([SECRET]), pieces)
    messages = EventStreamDecoder().feed(first + second)
    assert len(messages) == 2
    assert SECRET.encode() not in first + second
    assert EventStreamDecoder().feed(first) == []  # the first read still ends inside it
