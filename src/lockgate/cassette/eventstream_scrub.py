"""Secrets redacted from a recorded event-stream body (Bedrock's binary
`application/vnd.amazon.eventstream`) message by message, not byte by byte: a secret replaced
inside a message's raw bytes would leave its length and CRCs wrong (the replay would be a
cut stream where the recording was whole), and a secret inside an InvokeModel `chunk` is
base64 in the payload's `bytes`, where no byte pattern finds it.

Each whole message is decoded, its string headers and its payload redacted (a JSON payload's
`bytes` decoded from base64, redacted and encoded again), and encoded again with its CRCs
when anything changed; a message that does not decode (a bad CRC recorded as it came) and a
cut tail are redacted as bytes. The reads are split again where they met: a boundary inside a
message stays inside it (as far from its start, or from its end, as it was).
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Sequence
from typing import Protocol

from ..eventstream import (
    MIN_MESSAGE_BYTES,
    PRELUDE_BYTES,
    EventStreamDecoder,
    EventStreamError,
    Header,
    HeaderType,
    encode_message,
)

__all__ = ["Scrubber", "scrub_eventstream"]


class Scrubber(Protocol):
    """What replaces secrets in bytes and text (`recorder.SecretScrubber`)."""

    def data(self, data: bytes) -> bytes: ...

    def text(self, text: str) -> str: ...


def scrub_eventstream(scrub: Scrubber, pieces: Sequence[bytes]) -> list[bytes]:
    """`pieces` (the reads of one event-stream body) with every secret redacted inside each
    message, re-framed; as many pieces as came."""
    data = b"".join(pieces)
    out = bytearray()
    segments: list[tuple[int, int, int, int]] = []  # old start, old length, new start, new length
    position = 0
    while len(data) - position >= PRELUDE_BYTES:
        total = int.from_bytes(data[position : position + 4], "big")
        if total < MIN_MESSAGE_BYTES or position + total > len(data):
            break
        raw = data[position : position + total]
        scrubbed = _message(scrub, raw)
        segments.append((position, total, len(out), len(scrubbed)))
        out += scrubbed
        position += total
    tail = scrub.data(data[position:])
    segments.append((position, len(data) - position, len(out), len(tail)))
    out += tail
    cuts: list[int] = []
    offset = 0
    for piece in pieces[:-1]:
        offset += len(piece)
        cuts.append(_moved(offset, segments))
    bounds = [0, *cuts, len(out)]
    return [bytes(out[bounds[i] : bounds[i + 1]]) for i in range(len(bounds) - 1)] if pieces else []


def _moved(offset: int, segments: list[tuple[int, int, int, int]]) -> int:
    """Where an offset of the old body is in the new one."""
    for old_start, old_length, new_start, new_length in segments:
        if old_start <= offset < old_start + old_length:
            inside = offset - old_start
            if inside == 0 or new_length < 2:
                return new_start + min(inside, new_length)
            # as far from the start, or from the end, as it was: never past either
            from_end = old_length - inside
            return new_start + min(max(1, min(inside, new_length - from_end)), new_length - 1)
    last = segments[-1]
    return last[2] + last[3]  # the end


def _message(scrub: Scrubber, raw: bytes) -> bytes:
    """One whole message, redacted and re-framed (as it came when it holds no secret)."""
    try:
        [message] = EventStreamDecoder().feed(raw)
    except (EventStreamError, ValueError):  # recorded as it came (a bad CRC): as bytes
        return scrub.data(raw)
    headers = [
        Header(header.name, header.type, scrub.text(header.value))
        if header.type is HeaderType.STRING and isinstance(header.value, str)
        else header
        for header in message.headers
    ]
    payload = _payload(scrub, message.payload)
    if payload == message.payload and headers == list(message.headers):
        return raw
    try:
        return encode_message(headers, payload)
    except ValueError:  # it cannot be framed again: the bytes, redacted
        return scrub.data(raw)


def _payload(scrub: Scrubber, payload: bytes) -> bytes:
    """A payload redacted: a JSON object's base64 `bytes` (an InvokeModel `chunk`) decoded,
    redacted and encoded again; every other form of the secret in its bytes."""
    redacted = scrub.data(payload)
    try:
        value = json.loads(redacted)
    except ValueError:
        return redacted
    if not isinstance(value, dict) or not isinstance(value.get("bytes"), str):
        return redacted
    try:
        inner = base64.b64decode(value["bytes"], validate=True)
    except (binascii.Error, ValueError):
        return redacted
    cleaned = scrub.data(inner)
    if cleaned == inner:
        return redacted
    value["bytes"] = base64.b64encode(cleaned).decode("ascii")
    return json.dumps(value, separators=(",", ":")).encode()
