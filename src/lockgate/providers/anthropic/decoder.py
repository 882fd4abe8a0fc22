"""Anthropic Messages stream decoding: native events to normalized events.

THE COMPLETION RULE is written once, in `docs/wire/anthropic.md` (each line with the lab
scenario that proves it); this module implements it. In short: `message_start` starts the
response; blocks open and stop one at a time, in index order; a `tool_use` is complete at
its `content_block_stop` (its input the concatenated `partial_json`, `""` meaning `{}`);
thinking and redacted thinking become native items replayed unchanged to the same model;
provider-executed blocks are kept opaque and replayed, never calls; the `message_delta`
comes after the last block and states one stop reason; the decision is released only at
`message_stop`, by the stop reason's table (`FINISHES`) agreeing with the blocks; an
`error` event fails; a frame without an `event:` line is skipped, as the SDK skips it.

Usage (`USAGE_FIELDS`) is merged over `message_start` and every `message_delta`
(cumulative) and attached to the terminal event. Normalized events carry
`response_id=None`, except `ResponseStarted`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...errors import FailureKind, ResponseFailure
from ...events import (
    FINISH_PAUSED,
    FINISH_REFUSED,
    FINISH_WITH_CALLS,
    FINISH_WITHOUT_CALLS,
    MAX_NATIVE_BYTES,
    NativeOutput,
    ProviderReportedFailure,
    ReasoningDelta,
    ResponseCompleted,
    ResponseStarted,
    StreamEvent,
    TextBuffer,
    TextDelta,
    ToolArgumentsDelta,
    ToolCallStarted,
)
from ...jsonlimits import MAX_EVENT_DEPTH, parse_json
from ...sse import ServerSentEvent
from ..decoding import (
    AFTER_END,
    CONTENT_BEGAN,
    CONTEXT_WINDOW,
    NOTHING,
    OUTPUT_LIMIT,
    Finish,
    UsageFields,
    finish_event,
    malformed,
    object_field,
    optional_string_field,
    provider_error,
    string_field,
    typed_event,
    usage_from,
)

__all__ = [
    "FINISHES",
    "MAX_PROVIDER_BLOCK_BYTES",
    "PROVIDER_INPUT_BLOCKS",
    "USAGE_FIELDS",
    "AnthropicDecoder",
    "is_provider_block",
]

# Provider-executed blocks whose input streams as `input_json_delta`.
PROVIDER_INPUT_BLOCKS = frozenset({"server_tool_use", "mcp_tool_use"})
# The bound on one provider block's streamed input: the gate's bound on native output,
# which only sees the block at its stop.
MAX_PROVIDER_BLOCK_BYTES = MAX_NATIVE_BYTES
# Provider-executed blocks that arrive whole (besides every `*_tool_result`).
_PROVIDER_WHOLE_BLOCKS = frozenset({"container_upload"})
# Native stop reasons (`message_delta.delta.stop_reason`).
FINISHES: dict[str, Finish] = {
    "tool_use": Finish(FINISH_WITH_CALLS),
    "end_turn": Finish(FINISH_WITHOUT_CALLS),
    "stop_sequence": Finish(FINISH_WITHOUT_CALLS),
    "pause_turn": Finish(FINISH_PAUSED),
    "refusal": Finish(FINISH_REFUSED),
    "max_tokens": OUTPUT_LIMIT,
    "model_context_window_exceeded": CONTEXT_WINDOW,
}
# The usage fields merged over message_start and every message_delta (cumulative: a later
# value replaces an earlier one), and what they count in lockgate's terms: Anthropic's own
# `input_tokens` leaves out the cache, so input is the three summed.
_MERGED_FIELDS = (
    "input_tokens",
    "output_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
)
USAGE_FIELDS = UsageFields(
    input=(("input_tokens",), ("cache_read_input_tokens",), ("cache_creation_input_tokens",)),
    output=(("output_tokens",),),
    cached=(("cache_read_input_tokens",),),
    reasoning=(("output_tokens_details", "thinking_tokens"),),
    cache_write=(("cache_creation_input_tokens",),),
)

# Block kinds (what the decoder does with a block's deltas and stop).
_TEXT = 0
_TOOL = 1
_THINKING = 2
_REDACTED = 3
_PROVIDER_INPUT = 4
_PROVIDER_WHOLE = 5


def is_provider_block(block_type: str) -> bool:
    """Whether a content block type is work the provider did itself (never a local call)."""
    return (
        block_type in PROVIDER_INPUT_BLOCKS
        or block_type in _PROVIDER_WHOLE_BLOCKS
        or block_type.endswith("_tool_result")
    )


def _lifecycle(message: str) -> ResponseFailure:
    return ResponseFailure(FailureKind.LIFECYCLE, message)


def _index(payload: dict[str, Any]) -> int:
    index = payload.get("index")
    if type(index) is not int or index < 0:
        raise malformed("index must be a non-negative integer")
    return index


class _Block:
    """One open content block."""

    __slots__ = ("fragments", "index", "item", "key", "kind", "signature", "size", "streamed")

    def __init__(self, index: int, kind: int, item: dict[str, Any], size: int) -> None:
        self.index = index
        self.kind = kind
        self.item = item  # the block as it started
        self.key = str(index)
        # Thinking text and provider input, retained compactly (a tool's input is the
        # gate's to keep: here only whether any fragment carried text).
        self.fragments = TextBuffer()
        self.streamed = False
        self.signature = ""
        self.size = size  # bytes of its events' data so far


class AnthropicDecoder:
    """Maps one Anthropic Messages stream's events to normalized events."""

    __slots__ = (
        "_blocks",
        "_finished",
        "_handlers",
        "_message_delta_seen",
        "_open",
        "_problem",
        "_started",
        "_stop_details",
        "_stop_reason",
        "_usage",
    )

    def __init__(self) -> None:
        self._started = False
        self._finished = False  # message_stop or error seen
        self._blocks = 0  # blocks started so far (the next index)
        self._open: _Block | None = None
        self._message_delta_seen = False
        self._stop_reason: str | None = None
        self._stop_details: dict[str, Any] | None = None
        self._usage: dict[str, Any] = {}
        self._problem = ""  # a provider block whose input was not a JSON object
        self._handlers: dict[str, Callable[[dict[str, Any], int], Sequence[StreamEvent]]] = {
            "content_block_delta": self._delta,
            "content_block_start": self._block_start,
            "content_block_stop": self._block_stop,
            "message_start": self._message_start,
            "message_delta": self._message_delta,
            "message_stop": self._message_stop,
            "error": self._error,
        }

    def decode(self, event: ServerSentEvent) -> Sequence[StreamEvent]:
        if event.event is None:
            return NOTHING  # a frame without an `event:` line: the SDK skips it, so do we
        payload, kind = typed_event(event)
        if self._finished:
            return AFTER_END  # the gate fails anything after the terminal event
        handler = self._handlers.get(kind)
        if handler is None:
            return NOTHING  # ping and unknown event types are progress
        return handler(payload, len(event.data))

    def canonical_data(self) -> bytes | None:
        return None  # every event is read alike as it came

    def end_of_stream(self) -> Sequence[StreamEvent]:
        if self._started and not self._finished:
            self._finished = True
            return (
                ProviderReportedFailure(
                    FailureKind.STREAM_ENDED,
                    "the stream ended before message_stop; nothing executed",
                ),
            )
        return NOTHING  # nothing started: the client reports the end itself

    # --- blocks ------------------------------------------------------------------------

    def _require_start(self, what: str) -> None:
        if not self._started:
            raise _lifecycle(f"{what} before message_start")

    def _delta(self, payload: dict[str, Any], size: int) -> Sequence[StreamEvent]:
        # The hot handler: `_index`, `_object` and `_string` checks inline.
        block = self._open
        index = payload.get("index")
        if type(index) is not int or index < 0:
            raise malformed("index must be a non-negative integer")
        if block is None or block.index != index:
            self._require_start("content_block_delta")
            raise _lifecycle(f"delta for content block {index}, which is not open")
        delta = payload.get("delta")
        if type(delta) is not dict:
            raise malformed("delta must be an object")
        block.size += size
        kind = delta.get("type")
        if kind == "text_delta":
            if block.kind != _TEXT:
                raise malformed(f"text_delta for content block {index}, not a text block")
            text = delta.get("text")
            if type(text) is not str:
                raise malformed("delta.text must be a string")
            if not text:
                return NOTHING
            return (TextDelta(text),)
        if kind == "input_json_delta":
            piece = delta.get("partial_json")
            if type(piece) is not str:
                raise malformed("delta.partial_json must be a string")
            if block.kind == _TOOL:
                if not piece:
                    return NOTHING
                block.streamed = True
                return (ToolArgumentsDelta(block.key, piece),)
            if block.kind != _PROVIDER_INPUT:
                raise malformed(f"input_json_delta for content block {index}, not a tool block")
            if block.size > MAX_PROVIDER_BLOCK_BYTES:  # the gate never sees these fragments
                raise ResponseFailure(
                    FailureKind.BOUND_EXCEEDED,
                    f"provider block {index} exceeded {MAX_PROVIDER_BLOCK_BYTES} bytes",
                )
            block.fragments.append(piece)
            return NOTHING
        if kind == "thinking_delta":
            if block.kind != _THINKING:
                raise malformed(f"thinking_delta for content block {index}, not thinking")
            text = string_field(delta.get("thinking"), "delta.thinking")
            if not text:
                return NOTHING
            block.fragments.append(text)
            return (ReasoningDelta(text, "raw"),)
        if kind == "signature_delta":
            if block.kind != _THINKING:
                raise malformed(f"signature_delta for content block {index}, not thinking")
            block.signature = string_field(delta.get("signature"), "delta.signature")
            return NOTHING
        if type(kind) is not str:
            raise malformed("delta has no string 'type'")
        return NOTHING  # citations_delta and unknown delta types are progress

    def _block_start(self, payload: dict[str, Any], size: int) -> Sequence[StreamEvent]:
        self._require_start("content_block_start")
        index = _index(payload)
        if self._message_delta_seen:
            raise _lifecycle(f"content block {index} started after the message_delta")
        if self._open is not None:
            raise _lifecycle(
                f"content block {index} started while block {self._open.index} is open"
            )
        if index != self._blocks:
            raise _lifecycle(
                f"content block {index} started out of order (expected {self._blocks})"
            )
        item = object_field(payload.get("content_block"), "content_block")
        kind = string_field(item.get("type"), "content_block.type")
        self._blocks += 1
        if kind == "text":
            text = optional_string_field(item.get("text"), "text block text")
            self._open = _Block(index, _TEXT, item, size)
            if text:
                return (TextDelta(text),)
            return NOTHING
        if kind == "tool_use":
            call_id = string_field(item.get("id"), "tool_use id")
            name = string_field(item.get("name"), "tool_use name")
            # The API starts every `tool_use` with `input: {}` and streams the input as
            # `input_json_delta`s. The readers disagree on any other start (issue 27): the
            # SDKs keep a start input when no delta follows, and @anthropic-ai/sdk
            # replaces it with `{}` after an empty delta, litellm always; the AI SDK
            # prefixes it to the deltas. So a non-empty start input is refused.
            if "input" in item and object_field(item["input"], "tool_use input"):
                raise _lifecycle(
                    f"tool_use {call_id!r} starts with a non-empty input; readers of this "
                    "stream would read different arguments; nothing executed"
                )
            self._open = _Block(index, _TOOL, item, size)
            return (ToolCallStarted(self._open.key, call_id, name),)
        if kind == "thinking":
            block = _Block(index, _THINKING, item, size)
            text = optional_string_field(item.get("thinking"), "thinking text")
            block.signature = optional_string_field(item.get("signature"), "thinking signature")
            self._open = block
            if text:
                block.fragments.append(text)
                return (ReasoningDelta(text, "raw"),)
            return NOTHING
        if kind == "redacted_thinking":
            # A block kept but not shown began (redacted thinking, a provider-side tool): the
            # response has produced content, and a provider-side action may have begun.
            self._open = _Block(index, _REDACTED, item, size)
            return CONTENT_BEGAN
        if kind in PROVIDER_INPUT_BLOCKS:
            if "input" in item:
                object_field(item["input"], f"{kind} input")
            self._open = _Block(index, _PROVIDER_INPUT, item, size)
            return CONTENT_BEGAN
        if is_provider_block(kind):
            self._open = _Block(index, _PROVIDER_WHOLE, item, size)
            return CONTENT_BEGAN
        raise ResponseFailure(
            FailureKind.UNSUPPORTED_OUTPUT,
            f"content block type {kind!r} cannot be replayed; response rejected",
        )

    def _block_stop(self, payload: dict[str, Any], size: int) -> Sequence[StreamEvent]:
        block = self._open
        index = _index(payload)
        if block is None or block.index != index:
            self._require_start("content_block_stop")
            raise _lifecycle(f"stop for content block {index}, which is not open")
        self._open = None
        kind = block.kind
        if kind == _TEXT:
            return NOTHING
        size += block.size
        if kind == _TOOL:
            if block.streamed:
                return NOTHING
            if "input" not in block.item:
                # No input at all: the SDKs read `null` (anthropic-python `None`,
                # @anthropic-ai/sdk `undefined`), litellm and the AI SDK `{}`.
                raise _lifecycle(
                    f"tool_use {block.item.get('id')!r} carried no input, neither at its "
                    "start nor streamed; readers of this stream would read different "
                    "arguments; nothing executed"
                )
            return (ToolArgumentsDelta(block.key, "{}"),)
        if kind == _THINKING:
            item = {
                **block.item,
                "thinking": block.fragments.value(),
                "signature": block.signature,
            }
            return (NativeOutput("reasoning", item, size),)
        if kind == _REDACTED:
            return (NativeOutput("reasoning", block.item, size),)
        if kind == _PROVIDER_INPUT:
            return (NativeOutput("provider_output", self._provider_input(block), size),)
        return (NativeOutput("provider_output", block.item, size),)

    def _provider_input(self, block: _Block) -> dict[str, Any]:
        text = block.fragments.value()
        if not text.strip(" \t\n\r"):
            return block.item  # no input streamed: the start's (`{}`)
        try:
            value = parse_json(text, MAX_EVENT_DEPTH)
        except ValueError:
            value = None
        if type(value) is not dict:
            self._problem = (
                f"the input of provider block {block.index} ({block.item.get('type')}) "
                "is not a JSON object"
            )
            return block.item
        return {**block.item, "input": value}

    # --- the message -------------------------------------------------------------------

    def _message_start(self, payload: dict[str, Any], size: int) -> Sequence[StreamEvent]:
        message = object_field(payload.get("message"), "message")
        response_id = optional_string_field(message.get("id"), "message.id")
        if self._started:
            return (ResponseStarted(response_id=response_id),)  # the gate fails a second start
        self._started = True
        content = message.get("content")
        if content is not None and content != []:
            raise _lifecycle("message_start already carries content")
        self._merge_usage(message.get("usage"))
        model = m if isinstance(m := message.get("model"), str) and m else None
        return (ResponseStarted(response_id=response_id, model=model),)

    def _message_delta(self, payload: dict[str, Any], size: int) -> Sequence[StreamEvent]:
        self._require_start("message_delta")
        if self._open is not None:
            raise _lifecycle(f"message_delta while content block {self._open.index} is open")
        delta = object_field(payload.get("delta", {}), "message_delta.delta")
        reason = delta.get("stop_reason")
        if reason is not None:
            reason = string_field(reason, "stop_reason")
            if self._stop_reason is not None and reason != self._stop_reason:
                raise _lifecycle(f"stop_reason changed from {self._stop_reason!r} to {reason!r}")
            self._stop_reason = reason
        details = delta.get("stop_details")
        if type(details) is dict:
            self._stop_details = details
        self._merge_usage(payload.get("usage"))
        self._message_delta_seen = True
        return NOTHING

    def _message_stop(self, payload: dict[str, Any], size: int) -> Sequence[StreamEvent]:
        self._require_start("message_stop")
        self._finished = True
        usage = usage_from(self._usage, USAGE_FIELDS) if self._usage else None
        if self._open is not None:
            return (
                ProviderReportedFailure(
                    FailureKind.LIFECYCLE,
                    f"message_stop while content block {self._open.index} is still open",
                    usage=usage,
                ),
            )
        reason = self._stop_reason
        if reason is None:
            seen = self._message_delta_seen
            what = "without a stop_reason" if seen else "without a message_delta"
            return (
                ProviderReportedFailure(
                    FailureKind.LIFECYCLE, f"message_stop {what}; nothing executed", usage=usage
                ),
            )
        detail = self._refusal_detail() if reason == "refusal" else ""
        terminal = finish_event(
            FINISHES,
            reason,
            usage,
            otherwise="stop_reason {reason!r} is not a known completion; nothing executed",
            refusal_detail=detail,
        )
        if self._problem and isinstance(terminal, ResponseCompleted):
            # A provider block's input was not an object: no success carries it.
            return (
                ProviderReportedFailure(FailureKind.MALFORMED_EVENT, self._problem, usage=usage),
            )
        return (terminal,)

    def _refusal_detail(self) -> str:
        details = self._stop_details or {}
        for field in ("explanation", "category"):
            value = details.get(field)
            if type(value) is str and value:
                return value
        return ""  # the gate falls back on the answer text

    def _error(self, payload: dict[str, Any], size: int) -> Sequence[StreamEvent]:
        self._finished = True
        failure = provider_error(payload.get("error"))
        if not self._started:
            detail = f" [{failure.code}]" if failure.code else ""
            raise ResponseFailure(
                FailureKind.PROVIDER_ERROR,
                f"{failure.message}{detail}",
                transient=failure.transient,
            )
        return (failure,)

    def _merge_usage(self, raw: object) -> None:
        """Every field present replaces the earlier value (message_delta is cumulative)."""
        if type(raw) is not dict:
            return
        usage = self._usage
        for name in _MERGED_FIELDS:
            value = raw.get(name)
            if value is not None:
                usage[name] = value
        details = raw.get("output_tokens_details")
        if type(details) is dict and details.get("thinking_tokens") is not None:
            usage["output_tokens_details"] = details
