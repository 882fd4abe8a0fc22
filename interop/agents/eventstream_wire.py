"""The AWS event stream as the hostile server speaks it (`wire` renders with it): messages
encoded here, both CRC32s, independent of lockgate's codec (`eventstream_message`), and the
two Bedrock streams.

- InvokeModelWithResponseStream (`bedrock`: Claude Code with `CLAUDE_CODE_USE_BEDROCK=1`,
  the AI SDK's `@ai-sdk/amazon-bedrock/anthropic`): the Anthropic events, each in a `chunk`
  message (`{"bytes": <base64 of the event's JSON>}`); the in-stream error an `exception`
  message (`modelStreamErrorException`).
- ConverseStream (`converse`: the AI SDK's `@ai-sdk/amazon-bedrock`): `messageStart`, a text
  block's deltas, each call as `contentBlockStart` (`toolUse`), two `input` fragments and
  `contentBlockStop`, then `messageStop` (its stop reason) and `metadata`.

The event stream's own faults (`Script.fault`), on the first message after the calls
(`message_delta`, `messageStop`): `bad-crc` (a wrong message CRC) and `cut-in-frame` (the
body ends halfway through it).
"""

from __future__ import annotations

import base64
import json
import struct
import zlib
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from .outcomes import Terminal

if TYPE_CHECKING:
    from .script import Script

__all__ = [
    "bedrock",
    "bedrock_chunk",
    "converse",
    "converse_event",
    "eventstream_exception",
    "eventstream_message",
]

PAUSE = b""  # `wire.PAUSE`: where the server waits
Renderer = Callable[["Script", int], list[bytes]]


def _json(value: object) -> bytes:
    return json.dumps(value, separators=(",", ":")).encode()


# --- Bedrock InvokeModelWithResponseStream (Anthropic events in the AWS event stream) --------


def _string_header(name: str, value: str) -> bytes:
    encoded = value.encode()
    return bytes([len(name)]) + name.encode() + b"\x07" + struct.pack(">H", len(encoded)) + encoded


def eventstream_message(
    headers: list[tuple[str, str]], payload: bytes, *, bad_crc: bool = False
) -> bytes:
    """One AWS event-stream message: prelude (total and headers length, its CRC32), string
    headers, payload, the message's CRC32 (`bad_crc`: one bit of it flipped)."""
    encoded = b"".join(_string_header(name, value) for name, value in headers)
    total = 12 + len(encoded) + len(payload) + 4
    prelude = struct.pack(">II", total, len(encoded))
    message = prelude + struct.pack(">I", zlib.crc32(prelude)) + encoded + payload
    crc = zlib.crc32(message) ^ (1 if bad_crc else 0)
    return message + struct.pack(">I", crc)


def bedrock_chunk(event: dict[str, Any], *, bad_crc: bool = False) -> bytes:
    payload = _json({"bytes": base64.b64encode(_json(event)).decode()})
    headers = [
        (":event-type", "chunk"),
        (":content-type", "application/json"),
        (":message-type", "event"),
    ]
    return eventstream_message(headers, payload, bad_crc=bad_crc)


def eventstream_exception(kind: str, message: str) -> bytes:
    headers = [
        (":exception-type", kind),
        (":content-type", "application/json"),
        (":message-type", "exception"),
    ]
    return eventstream_message(headers, _json({"message": message}))


def bedrock(script: Script, serial: int, anthropic: Renderer) -> list[bytes]:
    """The Anthropic stream, each event in a `chunk` message; its `error` event as an
    `exception` message; the script's fault on the first message after the calls."""
    frames: list[bytes] = []
    faulted = False
    for frame in anthropic(script, serial):
        if frame == PAUSE:
            frames.append(PAUSE)
            continue
        data = next(line for line in frame.split(b"\n") if line.startswith(b"data: "))
        event = json.loads(data[len(b"data: ") :])
        if event.get("type") == "error":
            frames.append(
                eventstream_exception("modelStreamErrorException", "hostile: model stream error")
            )
            continue
        after_calls = event.get("type") == "message_delta" and not faulted
        if after_calls and script.fault == "bad-crc":
            faulted = True
            frames.append(bedrock_chunk(event, bad_crc=True))
            continue
        if after_calls and script.fault == "cut-in-frame":
            whole = bedrock_chunk(event)
            return [*frames, whole[: len(whole) // 2]]
        frames.append(bedrock_chunk(event))
    return frames


# --- Bedrock ConverseStream -------------------------------------------------------------------


def converse_event(name: str, payload: dict[str, Any], *, bad_crc: bool = False) -> bytes:
    headers = [
        (":event-type", name),
        (":content-type", "application/json"),
        (":message-type", "event"),
    ]
    return eventstream_message(headers, _json(payload), bad_crc=bad_crc)


def converse(script: Script, serial: int) -> list[bytes]:
    """ConverseStream: `messageStart`, a text block's deltas, each call as `contentBlockStart`
    (`toolUse`), two `input` fragments and `contentBlockStop`, then `messageStop` (its stop
    reason) and `metadata`; the error an `exception` message; the script's fault on
    `messageStop`."""
    frames = [converse_event("messageStart", {"role": "assistant"})]
    index = 0
    if script.text is not None:
        delta = {"contentBlockIndex": 0, "delta": {"text": script.text}}
        frames.append(converse_event("contentBlockDelta", delta))
        frames.append(converse_event("contentBlockStop", {"contentBlockIndex": 0}))
        index = 1
    for number, call in enumerate(script.calls):
        last = number == len(script.calls) - 1
        use = {"toolUseId": f"tooluse_hostile_{serial}_{number}", "name": call.name}
        start = {"contentBlockIndex": index, "start": {"toolUse": use}}
        frames.append(converse_event("contentBlockStart", start))
        for piece in call.halves():
            delta = {"contentBlockIndex": index, "delta": {"toolUse": {"input": piece}}}
            frames.append(converse_event("contentBlockDelta", delta))
            if script.cut and last:
                return [*frames, PAUSE]
        frames.append(converse_event("contentBlockStop", {"contentBlockIndex": index}))
        frames.append(PAUSE)
        index += 1
    if script.terminal is Terminal.ERROR:
        return [
            *frames,
            eventstream_exception("modelStreamErrorException", "hostile: model stream error"),
        ]
    if script.terminal is Terminal.NONE:
        return frames
    stop = {
        Terminal.LIMIT: "max_tokens",
        Terminal.MALFORMED: "malformed_tool_use",
    }.get(script.terminal, "tool_use" if script.calls else "end_turn")
    stop_message = converse_event(
        "messageStop", {"stopReason": stop}, bad_crc=script.fault == "bad-crc"
    )
    if script.fault == "cut-in-frame":
        return [*frames, stop_message[: len(stop_message) // 2]]
    usage = {"inputTokens": 100, "outputTokens": 20, "totalTokens": 120}
    metadata = {"usage": usage, "metrics": {"latencyMs": 10}}
    return [*frames, stop_message, converse_event("metadata", metadata)]
