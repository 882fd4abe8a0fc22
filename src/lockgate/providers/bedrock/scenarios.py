"""The Bedrock ConverseStream provider's own lab scenarios: the event-stream faults (a message
cut in its prelude, headers or payload; a bad CRC; a message announced over the bound), the
in-stream exceptions, and the stop reasons only Converse has; beside the neutral scenarios
every protocol runs (`lockgate.lab.scenarios`), of which `NEUTRAL_NOT_EXPRESSIBLE` names those
no Bedrock stream can play.

The cut scenarios cut the LAST message of a stream whose call is otherwise complete: the
body ends a few bytes into `messageStop` (or into the `metadata` after it). botocore's
`EventStreamBuffer` ends such a body as if it were complete; lockgate refuses it.
"""

from __future__ import annotations

import struct
import zlib
from typing import Any

from ...errors import FailureKind
from ...eventstream import MAX_MESSAGE_BYTES
from ...scripted.scenario import (
    EDIT_FIX,
    Expectation,
    LabOptions,
    Observation,
    Scenario,
    answered,
    failure,
    finished,
    own,
    stopped_with,
    text_turn,
)
from ...scripted.script import Faults, Turn
from .render import ConverseBuilder, frame_bytes

__all__ = ["NEUTRAL_NOT_EXPRESSIBLE", "SCENARIOS"]

# The neutral scenarios no Bedrock stream can play, and why.
NEUTRAL_NOT_EXPRESSIBLE: dict[str, str] = {
    "framing-variants": "SSE line ends and keep-alive comments do not exist in a binary "
    "event stream (its own cut and CRC scenarios stand in)",
    "giant-frame": "the SSE frame that never ends has no event-stream form: a message states "
    "its length first (bedrock-giant-message announces 64 MiB instead)",
    "refusal": "Converse has no refusal signal: a refusal is answer text, or a guardrail's "
    "stop (bedrock-guardrail)",
    "rate-limit-reset-header": "Bedrock states no rate-limit reset time in any header",
    "usage": "Bedrock's usage has no reasoning-token count (bedrock-usage checks its own fields)",
}


def _edit_stream(**finish: Any) -> ConverseBuilder:
    builder = ConverseBuilder().start().text("Fixing the bug in add.", 2)
    builder.tool_use("tooluse_edit_1", "edit", EDIT_FIX, 4)
    return builder


def _answer(text: str = "Fixed.") -> Turn:
    return text_turn("bedrock-answer", text)


def _cut_last(where: str) -> list[Turn]:
    """A complete edit call whose `messageStop` is cut `where` (prelude, headers, payload)."""
    builder = _edit_stream()
    stop = frame_bytes({"type": "messageStop", "stopReason": "tool_use"})
    (head,) = struct.unpack_from(">I", stop, 4)
    cut = {"prelude": 7, "headers": 12 + head // 2, "payload": len(stop) - 9}[where]
    builder.raw(stop[:cut])
    return [builder.turn()]


def _cut_metadata_turns() -> list[Turn]:
    builder = _edit_stream().finish("tool_use", metadata=False)
    metadata = frame_bytes({"type": "metadata", "usage": {"inputTokens": 1, "outputTokens": 1}})
    builder.raw(metadata[: len(metadata) - 2])  # inside its message CRC
    return [builder.turn()]


def _bad_crc_turns() -> list[Turn]:
    builder = _edit_stream()
    stop = bytearray(frame_bytes({"type": "messageStop", "stopReason": "tool_use"}))
    stop[-6] ^= 0x01  # one bit of the payload: the message CRC no longer matches
    builder.raw(bytes(stop))
    builder.emit({"type": "metadata", "usage": {"inputTokens": 1, "outputTokens": 1}})
    return [builder.turn()]


def _bad_prelude_crc_turns() -> list[Turn]:
    builder = _edit_stream()
    stop = bytearray(frame_bytes({"type": "messageStop", "stopReason": "tool_use"}))
    stop[9] ^= 0x80  # the prelude CRC itself
    builder.raw(bytes(stop))
    return [builder.turn()]


def _giant_message_turns() -> list[Turn]:
    total = 4 * MAX_MESSAGE_BYTES
    prelude = struct.pack(">II", total, 40)
    prelude += struct.pack(">I", zlib.crc32(prelude))
    builder = ConverseBuilder().start().text("Fixing the bug in add.", 2)
    builder.raw(prelude + b"\x00" * 4096)
    # The server then goes silent: only a client that stops at the prelude leaves early.
    return [builder.turn(faults=Faults(stall_after=len(builder.events), stall_seconds=30.0))]


def _throttled_mid_stream_turns() -> list[Turn]:
    builder = ConverseBuilder().start().text("Fixing the bug in add.", 2)
    builder.tool_use("tooluse_edit_1", "edit", EDIT_FIX, 4, finish=False)
    builder.exception("throttlingException", "Too many tokens, please wait before trying again.")
    return [builder.turn()]


def _throttled_first_turns() -> list[Turn]:
    first = ConverseBuilder().exception("throttlingException", "Too many requests.")
    return [first.turn(), _answer("Answered after the throttling.")]


def _exception_turns(kind: str) -> list[Turn]:
    builder = ConverseBuilder().start().text("Fixing the bug in add.", 2)
    builder.tool_use("tooluse_edit_1", "edit", EDIT_FIX, 4)
    builder.exception(kind, f"lab: {kind}")
    return [builder.turn()]


def _no_message_stop_turns() -> list[Turn]:
    return [_edit_stream().turn()]  # every block closed, then the body ends cleanly


def _stop_turns(reason: str) -> list[Turn]:
    return [_edit_stream().finish(reason).turn()]


def _guardrail_turns() -> list[Turn]:
    builder = ConverseBuilder().start().text("Sorry, the model cannot answer that.", 2)
    return [builder.finish("guardrail_intervened").turn()]


def _event_after_metadata_turns() -> list[Turn]:
    builder = _edit_stream().finish("tool_use")
    builder.emit({"type": "messageStop", "stopReason": "tool_use"})
    return [builder.turn()]


def _exception_after_stop_turns() -> list[Turn]:
    builder = _edit_stream().finish("tool_use", metadata=False)
    builder.exception("internalServerException", "lab: after the stop")
    return [builder.turn()]


def _tool_then_answer() -> list[Turn]:
    return [_edit_stream().finish("tool_use").turn(), _answer()]


def _grounding_turns() -> list[Turn]:
    builder = ConverseBuilder().start().grounding("tooluse_ground_1", "latest Python release")
    return [builder.text("Python's latest release is on python.org.", 3).finish("end_turn").turn()]


def _reasoning_turns() -> list[Turn]:
    builder = ConverseBuilder().start().reasoning("add subtracts.", "bedrock-lab-signature", 2)
    builder.tool_use("tooluse_edit_1", "edit", EDIT_FIX, 3).finish("tool_use")
    return [builder.turn(), _answer()]


def check_reasoning_replayed(observation: Observation) -> list[str]:
    if len(observation.requests) < 2:
        return ["no second request"]
    messages = observation.requests[1].get("messages") or []
    assistant: dict[str, Any] = next((m for m in messages if m.get("role") == "assistant"), {})
    blocks = assistant.get("content") or []
    reasoning = blocks[0].get("reasoningContent", {}) if blocks else {}
    text = reasoning.get("reasoningText", {})
    if text.get("signature") != "bedrock-lab-signature" or text.get("text") != "add subtracts.":
        return [f"the reasoning was not replayed first with its signature: {blocks[:1]}"]
    return []


USAGE_BLOCK = {
    "inputTokens": 200,
    "cacheReadInputTokens": 1000,
    "cacheWriteInputTokens": 24,
    "outputTokens": 30,
    "totalTokens": 1254,
}


def _usage_turns() -> list[Turn]:
    builder = ConverseBuilder().start().text("Counted.", 2)
    builder.emit({"type": "messageStop", "stopReason": "end_turn"})
    builder.emit({"type": "metadata", "usage": USAGE_BLOCK, "metrics": {"latencyMs": 9}})
    return [builder.turn()]


def check_usage(observation: Observation) -> list[str]:
    usage = observation.usage
    if usage is None or (usage.input_tokens, usage.cached_input_tokens) != (1224, 1000):
        return [f"usage {usage}: input must count the cache (1224, 1000 cached)"]
    if (usage.output_tokens, usage.total_tokens, usage.cache_write_tokens) != (30, 1254, 24):
        return [f"usage {usage}: output 30, total 1254, cache writes 24 expected"]
    return []


def _s(name: str, summary: str, expect: Expectation, turns: Any, **kw: Any) -> Scenario:
    return Scenario(f"bedrock-{name}", summary, expect, turns, **kw)


_STREAM_ENDED = failure(FailureKind.STREAM_ENDED, closed_early=0)
_MALFORMED = failure(FailureKind.MALFORMED_EVENT)
_PROVIDER_ERROR = failure(FailureKind.PROVIDER_ERROR)

SCENARIOS: tuple[Scenario, ...] = own(
    "bedrock",
    _s(
        "cut-in-prelude",
        "a complete call, then the body ends 7 bytes into messageStop's prelude",
        _STREAM_ENDED,
        lambda: _cut_last("prelude"),
    ),
    _s(
        "cut-in-headers",
        "a complete call, then the body ends inside messageStop's headers",
        _STREAM_ENDED,
        lambda: _cut_last("headers"),
    ),
    _s(
        "cut-in-payload",
        "a complete call, then the body ends inside messageStop's payload",
        _STREAM_ENDED,
        lambda: _cut_last("payload"),
    ),
    _s(
        "cut-metadata",
        "messageStop arrived, then the metadata message is cut inside its CRC",
        _STREAM_ENDED,
        _cut_metadata_turns,
    ),
    _s(
        "bad-crc",
        "messageStop with one payload bit flipped: the message CRC does not match",
        _MALFORMED,
        _bad_crc_turns,
    ),
    _s(
        "bad-prelude-crc",
        "messageStop with its prelude CRC flipped",
        _MALFORMED,
        _bad_prelude_crc_turns,
    ),
    _s(
        "giant-message",
        "a message whose prelude announces 64 MiB (bound: 4 MiB): refused from the prelude",
        failure(FailureKind.BOUND_EXCEEDED, closed_early=1),
        _giant_message_turns,
    ),
    _s(
        "throttled-mid-stream",
        "a throttlingException message mid-arguments: a provider error, nothing runs",
        _PROVIDER_ERROR,
        _throttled_mid_stream_turns,
        check=stopped_with("rate limited"),
    ),
    _s(
        "throttled-first",
        "a throttlingException before messageStart, retry_unstarted on: retried, answered",
        answered(2, "Answered after the throttling."),
        _throttled_first_turns,
        options=LabOptions(retry_unstarted=True),
    ),
    *(
        _s(
            f"exception-{kind.removesuffix('Exception').lower()}",
            f"a {kind} message after a complete call, before messageStop",
            _PROVIDER_ERROR,
            lambda kind=kind: _exception_turns(kind),
            check=stopped_with(kind),
        )
        for kind in (
            "serviceUnavailableException",
            "internalServerException",
            "modelStreamErrorException",
            "modelTimeoutException",
            "validationException",
        )
    ),
    _s(
        "exception-after-stop",
        "messageStop tool_use, then an internalServerException: nothing runs",
        _PROVIDER_ERROR,
        _exception_after_stop_turns,
    ),
    _s(
        "no-message-stop",
        "every block closed, then the body ends cleanly without messageStop",
        _STREAM_ENDED,
        _no_message_stop_turns,
    ),
    _s(
        "malformed-tool-use",
        "a complete call under stopReason malformed_tool_use (Bedrock's own verdict)",
        failure(FailureKind.INVALID_BATCH),
        lambda: _stop_turns("malformed_tool_use"),
        check=stopped_with("malformed"),
    ),
    _s(
        "malformed-model-output",
        "a complete call under stopReason malformed_model_output",
        failure(FailureKind.RESPONSE_FAILED),
        lambda: _stop_turns("malformed_model_output"),
    ),
    _s(
        "context-window",
        "a complete call under stopReason model_context_window_exceeded",
        failure(FailureKind.RESPONSE_INCOMPLETE),
        lambda: _stop_turns("model_context_window_exceeded"),
    ),
    _s(
        "guardrail",
        "text under stopReason guardrail_intervened: blocked, nothing released",
        failure(FailureKind.RESPONSE_INCOMPLETE),
        _guardrail_turns,
    ),
    _s(
        "content-filtered",
        "a complete call under stopReason content_filtered",
        failure(FailureKind.RESPONSE_INCOMPLETE),
        lambda: _stop_turns("content_filtered"),
    ),
    _s(
        "event-after-metadata",
        "a second messageStop after the metadata that ends the stream",
        failure(FailureKind.LIFECYCLE),
        _event_after_metadata_turns,
    ),
    _s(
        "tool-use",
        "messageStop tool_use then metadata: the edit runs, the answer follows",
        finished(2, 1, fixed=True),
        _tool_then_answer,
    ),
    _s(
        "reasoning-replayed",
        "reasoning with its signature before an edit: replayed first, signature unchanged",
        finished(2, 1, fixed=True),
        _reasoning_turns,
        check=check_reasoning_replayed,
    ),
    _s(
        "grounding",
        "Nova's provider-run grounding (server_tool_use + toolResult), then text: no call",
        answered(1, "Python's latest release is on python.org."),
        _grounding_turns,
    ),
    _s(
        "usage",
        "metadata usage with cache reads and writes: input counts the cache",
        answered(1, "Counted."),
        _usage_turns,
        check=check_usage,
    ),
)
