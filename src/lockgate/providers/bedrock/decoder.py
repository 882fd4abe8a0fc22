"""Bedrock ConverseStream decoding: event-stream messages to normalized events.

THE COMPLETION RULE (written out in `docs/wire/bedrock.md`): `messageStart` starts the
response (Bedrock names no response, so its id is made here); content blocks follow in
`contentBlockIndex` order, one open at a time. A `toolUse` block begins with a
`contentBlockStart` (`toolUseId`, `name`); text, reasoning and citation blocks begin with
their first `contentBlockDelta` (Bedrock sends them no start, recorded in every stream). A
call's input is its `delta.toolUse.input` fragments concatenated (none at all: `{}`), complete
at its `contentBlockStop`. Reasoning (`reasoningContent`: `text`, `signature`,
`redactedContent`) becomes one native item per block, replayed with its signature to the
same model. A `toolUse` of `type: "server_tool_use"` and a `toolResult` block are work the
provider did itself (Nova's code interpreter and grounding): kept and replayed, never calls.
`messageStop` states the stop reason (`FINISHES`); `metadata` (usage, metrics) comes AFTER
it and is not terminal evidence, so the decision is released at the end of the body, after
`messageStop` (and `metadata`, if any) and nothing else: anything after `metadata`, or
any event after an exception, fails the response. A body that ends without `messageStop` is
`stream_ended`; an `exception` or `error` message is a provider error of its kind
(`EXCEPTIONS`: throttling is rate limited and transient, like a server-side failure).

Only `tool_use` authorizes calls, and `end_turn` / `stop_sequence` a response without them
(the gate refuses calls under a finish that does not request them); `max_tokens` and
`model_context_window_exceeded` are incomplete (truncated), `guardrail_intervened` and
`content_filtered` are responses a filter blocked (incomplete, not truncated: no call
runs), `malformed_tool_use` is Bedrock's own verdict on the model's call (`invalid_batch`),
`malformed_model_output` a failed response, any other reason `lifecycle`.
"""

from __future__ import annotations

import secrets
from collections.abc import Callable, Sequence
from typing import Any

from ...errors import FailureKind, ResponseFailure
from ...events import (
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
from ...jsonlimits import MAX_EVENT_DEPTH, parse_event, parse_json
from ...sse import ServerSentEvent
from ..decoding import (
    CONTENT_BEGAN,
    CONTEXT_WINDOW,
    NOTHING,
    OUTPUT_LIMIT,
    Finish,
    UsageFields,
    finish_event,
    malformed,
    object_field,
    string_field,
    usage_from,
)
from .framing import ERROR_PREFIX, EXCEPTION_PREFIX

__all__ = [
    "EXCEPTIONS",
    "FINISHES",
    "SERVER_TOOL_USE",
    "USAGE_FIELDS",
    "BedrockDecoder",
    "ExceptionKind",
    "exception_failure",
]

SERVER_TOOL_USE = "server_tool_use"  # a `toolUse.type` the provider runs itself

_INCOMPLETE = FailureKind.RESPONSE_INCOMPLETE
_FILTERED = Finish(
    failure=_INCOMPLETE,
    message="response incomplete: a guardrail or content filter blocked the output",
)
FINISHES: dict[str, Finish] = {
    "tool_use": Finish(FINISH_WITH_CALLS),
    "end_turn": Finish(FINISH_WITHOUT_CALLS),
    "stop_sequence": Finish(FINISH_WITHOUT_CALLS),
    "max_tokens": OUTPUT_LIMIT,
    "model_context_window_exceeded": CONTEXT_WINDOW,
    "guardrail_intervened": _FILTERED,
    "content_filtered": _FILTERED,
    "malformed_tool_use": Finish(
        failure=FailureKind.INVALID_BATCH,
        message="Bedrock reports the model's tool use as malformed; nothing executed",
    ),
    "malformed_model_output": Finish(
        failure=FailureKind.RESPONSE_FAILED,
        message="Bedrock reports the model's output as malformed; nothing executed",
    ),
}

# Bedrock's usage in lockgate's terms: like Anthropic's, its `inputTokens` leaves out the
# cache, so input is the three summed.
USAGE_FIELDS = UsageFields(
    input=(("inputTokens",), ("cacheReadInputTokens",), ("cacheWriteInputTokens",)),
    output=(("outputTokens",),),
    cached=(("cacheReadInputTokens",),),
    cache_write=(("cacheWriteInputTokens",),),
    total=(("totalTokens",),),
)


class ExceptionKind:
    """What one in-stream exception type means: its HTTP status and whether a retry may
    succeed."""

    __slots__ = ("status", "transient")

    def __init__(self, status: int, transient: bool) -> None:
        self.status = status
        self.transient = transient


# The in-stream exceptions ConverseStream declares (the status each maps to).
EXCEPTIONS: dict[str, ExceptionKind] = {
    "throttlingException": ExceptionKind(429, True),
    "serviceUnavailableException": ExceptionKind(503, True),
    "internalServerException": ExceptionKind(500, True),
    "modelStreamErrorException": ExceptionKind(424, False),
    "modelTimeoutException": ExceptionKind(408, True),
    "validationException": ExceptionKind(400, False),
}


def exception_failure(name: str, payload: bytes) -> ProviderReportedFailure:
    """The provider error of an `exception` message (`name`: its `:exception-type`)."""
    message = ""
    try:
        document = parse_event(payload) if payload else None
    except ValueError:
        document = None
    if type(document) is dict:
        value = document.get("message") or document.get("Message")
        if type(value) is str:
            message = value
    kind = EXCEPTIONS.get(name)
    what = "rate limited" if name == "throttlingException" else name
    return ProviderReportedFailure(
        FailureKind.PROVIDER_ERROR,
        f"provider error: {what}: {message or 'no message'}",
        name,
        transient=kind is not None and kind.transient,
    )


# Block kinds.
_TEXT = 0
_TOOL = 1
_REASONING = 2
_PROVIDER = 3  # a server_tool_use or a toolResult: kept, never a call


def _lifecycle(message: str) -> ResponseFailure:
    return ResponseFailure(FailureKind.LIFECYCLE, message)


class _Block:
    __slots__ = ("fragments", "index", "item", "key", "kind", "redacted", "signature", "size")

    def __init__(self, index: int, kind: int, item: dict[str, Any]) -> None:
        self.index = index
        self.kind = kind
        self.item = item
        self.key = str(index)
        self.fragments = TextBuffer()  # reasoning text, a provider block's input
        self.signature = ""
        self.redacted = ""
        self.size = 0


class BedrockDecoder:
    """Maps one ConverseStream body's messages to normalized events."""

    __slots__ = (
        "_failed",
        "_handlers",
        "_metadata",
        "_next",
        "_open",
        "_problem",
        "_response_id",
        "_stop_reason",
        "_streamed",
        "_usage",
    )

    def __init__(self) -> None:
        self._response_id = ""
        self._next = 0  # the lowest index a new block may take
        self._open: _Block | None = None
        self._streamed = False  # the open tool block received an input fragment
        self._stop_reason: str | None = None
        self._metadata = False
        self._usage: dict[str, Any] | None = None
        self._failed = False
        self._problem = ""
        self._handlers: dict[str, Callable[[dict[str, Any], int], Sequence[StreamEvent]]] = {
            "messageStart": self._message_start,
            "contentBlockStart": self._block_start,
            "contentBlockDelta": self._delta,
            "contentBlockStop": self._block_stop,
            "messageStop": self._message_stop,
            "metadata": self._meta,
        }

    def canonical_data(self) -> bytes | None:
        return None

    def decode(self, event: ServerSentEvent) -> Sequence[StreamEvent]:
        name = event.event or ""
        if self._failed:
            raise _lifecycle(f"{name or 'an event'} after the stream's exception")
        if name.startswith(EXCEPTION_PREFIX):
            return self._exception(exception_failure(name[len(EXCEPTION_PREFIX) :], event.data))
        if name.startswith(ERROR_PREFIX):
            text = event.data.decode("utf-8", "replace")
            failure = ProviderReportedFailure(
                FailureKind.PROVIDER_ERROR,
                f"provider error: {text or 'no message'}",
                name[len(ERROR_PREFIX) :],
            )
            return self._exception(failure)
        try:
            payload = parse_event(event.data)
        except ValueError as exc:
            raise malformed(f"{name} payload is not valid JSON ({exc})") from None
        if type(payload) is not dict:
            raise malformed(f"{name} payload is not a JSON object")
        if self._metadata:
            raise _lifecycle(f"{name} after the metadata that ends the stream")
        handler = self._handlers.get(name)
        if handler is None:
            if self._stop_reason is not None:
                raise _lifecycle(f"{name!r} after messageStop; nothing executed")
            return NOTHING  # an event type added later is progress, as the SDKs skip it
        return handler(payload, len(event.data))

    def end_of_stream(self) -> Sequence[StreamEvent]:
        if self._failed or not self._response_id:
            return NOTHING  # a failure was reported, or nothing started: the client says so
        usage = usage_from(self._usage, USAGE_FIELDS) if self._usage is not None else None
        reason = self._stop_reason
        if reason is None:
            return (
                ProviderReportedFailure(
                    FailureKind.STREAM_ENDED,
                    "the stream ended before messageStop; nothing executed",
                    usage=usage,
                ),
            )
        terminal = finish_event(
            FINISHES,
            reason,
            usage,
            otherwise="stopReason {reason!r} is not a known completion; nothing executed",
        )
        if self._problem and isinstance(terminal, ResponseCompleted):
            return (
                ProviderReportedFailure(FailureKind.MALFORMED_EVENT, self._problem, usage=usage),
            )
        return (terminal,)

    # --- the message -----------------------------------------------------------------

    def _exception(self, failure: ProviderReportedFailure) -> Sequence[StreamEvent]:
        # Before messageStart too: the gate takes a failure as the first event as it is.
        self._failed = True
        return (failure,)

    def _require_open_message(self, what: str) -> None:
        if not self._response_id:
            raise _lifecycle(f"{what} before messageStart")
        if self._stop_reason is not None:
            raise _lifecycle(f"{what} after messageStop")

    def _message_start(self, payload: dict[str, Any], size: int) -> Sequence[StreamEvent]:
        if self._response_id:
            raise _lifecycle("a second messageStart")
        role = payload.get("role")
        if role != "assistant":
            raise _lifecycle(f"messageStart with role {role!r}, not 'assistant'")
        self._response_id = "bedrock-lockgate-" + secrets.token_hex(6)
        return (ResponseStarted(response_id=self._response_id),)

    def _message_stop(self, payload: dict[str, Any], size: int) -> Sequence[StreamEvent]:
        self._require_open_message("messageStop")
        if self._open is not None:
            raise _lifecycle(f"messageStop while content block {self._open.index} is open")
        self._stop_reason = string_field(payload.get("stopReason"), "messageStop.stopReason")
        return NOTHING

    def _meta(self, payload: dict[str, Any], size: int) -> Sequence[StreamEvent]:
        if self._stop_reason is None:
            raise _lifecycle("metadata before messageStop")
        self._metadata = True
        usage = payload.get("usage")
        if usage is not None:
            self._usage = object_field(usage, "metadata.usage")
        return NOTHING

    # --- blocks --------------------------------------------------------------------------

    def _index(self, payload: dict[str, Any]) -> int:
        index = payload.get("contentBlockIndex")
        if type(index) is not int or index < 0:
            raise malformed("contentBlockIndex must be a non-negative integer")
        return index

    def _open_block(self, index: int, kind: int, item: dict[str, Any]) -> _Block:
        if self._open is not None:
            raise _lifecycle(f"content block {index} began while block {self._open.index} is open")
        if index < self._next:
            raise _lifecycle(f"content block {index} began again, or out of order")
        self._next = index + 1
        block = _Block(index, kind, item)
        self._open = block
        self._streamed = False
        return block

    def _block_start(self, payload: dict[str, Any], size: int) -> Sequence[StreamEvent]:
        self._require_open_message("contentBlockStart")
        index = self._index(payload)
        start = object_field(payload.get("start"), "contentBlockStart.start")
        if "toolUse" in start:
            tool = object_field(start["toolUse"], "start.toolUse")
            call_id = string_field(tool.get("toolUseId"), "toolUse.toolUseId")
            name = string_field(tool.get("name"), "toolUse.name")
            kind = tool.get("type")
            if kind == SERVER_TOOL_USE:
                self._open_block(index, _PROVIDER, {"toolUse": dict(tool)})
                return CONTENT_BEGAN
            if kind not in (None, "tool_use"):
                raise ResponseFailure(
                    FailureKind.UNSUPPORTED_OUTPUT,
                    f"toolUse of type {kind!r} cannot be replayed; response rejected",
                )
            if not call_id or not name:
                raise _lifecycle("a toolUse start without its toolUseId or name")
            block = self._open_block(index, _TOOL, tool)
            return (ToolCallStarted(block.key, call_id, name),)
        if "toolResult" in start:
            result = object_field(start["toolResult"], "start.toolResult")
            self._open_block(index, _PROVIDER, {"toolResult": {**result, "content": []}})
            return CONTENT_BEGAN
        raise ResponseFailure(
            FailureKind.UNSUPPORTED_OUTPUT,
            f"content block start {sorted(start)} cannot be replayed; response rejected",
        )

    def _delta(self, payload: dict[str, Any], size: int) -> Sequence[StreamEvent]:
        self._require_open_message("contentBlockDelta")
        index = self._index(payload)
        delta = object_field(payload.get("delta"), "contentBlockDelta.delta")
        block = self._open
        if block is None or block.index != index:
            # Text, reasoning and citations begin with their first delta.
            # A text block may open with a citation (recorded: a document citation first).
            kind = (
                _TEXT
                if "text" in delta or "citation" in delta
                else _REASONING
                if "reasoningContent" in delta
                else None
            )
            if kind is None:
                raise _lifecycle(f"a delta for content block {index}, which is not open")
            block = self._open_block(index, kind, {})
        block.size += size
        if "text" in delta:
            if block.kind != _TEXT:
                raise malformed(f"text for content block {index}, not a text block")
            text = string_field(delta["text"], "delta.text")
            return (TextDelta(text),) if text else NOTHING
        if "toolUse" in delta:
            piece = string_field(
                object_field(delta["toolUse"], "delta.toolUse").get("input"),
                "delta.toolUse.input",
            )
            if block.kind == _TOOL:
                if not piece:
                    return NOTHING
                self._streamed = True
                return (ToolArgumentsDelta(block.key, piece),)
            if block.kind == _PROVIDER and "toolUse" in block.item:
                self._bound(block)
                block.fragments.append(piece)
                return NOTHING
            raise malformed(f"toolUse input for content block {index}, not a tool block")
        if "reasoningContent" in delta:
            if block.kind != _REASONING:
                raise malformed(f"reasoning for content block {index}, not a reasoning block")
            return self._reasoning(block, object_field(delta["reasoningContent"], "reasoning"))
        if "toolResult" in delta:
            if block.kind != _PROVIDER or "toolResult" not in block.item:
                raise malformed(f"toolResult for content block {index}, not a result block")
            self._bound(block)
            content = delta["toolResult"]
            if type(content) is not list:
                raise malformed("delta.toolResult must be a list")
            block.item["toolResult"]["content"].extend(content)
            return NOTHING
        if "citation" in delta:
            if block.kind != _TEXT:
                raise malformed(f"citation for content block {index}")
            return NOTHING  # citations are not kept: the text is replayed without them
        raise malformed(f"a delta of an unknown kind {sorted(delta)}")

    def _bound(self, block: _Block) -> None:
        if block.size > MAX_NATIVE_BYTES:
            raise ResponseFailure(
                FailureKind.BOUND_EXCEEDED,
                f"provider block {block.index} exceeded {MAX_NATIVE_BYTES} bytes",
            )

    def _reasoning(self, block: _Block, reasoning: dict[str, Any]) -> Sequence[StreamEvent]:
        self._bound(block)
        if "text" in reasoning:
            text = string_field(reasoning["text"], "reasoningContent.text")
            if text:
                block.fragments.append(text)
                return (ReasoningDelta(text, "raw"),)
            return NOTHING
        if "signature" in reasoning:
            block.signature += string_field(reasoning["signature"], "reasoningContent.signature")
            return NOTHING
        if "redactedContent" in reasoning:
            block.redacted += string_field(
                reasoning["redactedContent"], "reasoningContent.redactedContent"
            )
            return CONTENT_BEGAN
        raise malformed(f"reasoningContent of an unknown kind {sorted(reasoning)}")

    def _block_stop(self, payload: dict[str, Any], size: int) -> Sequence[StreamEvent]:
        self._require_open_message("contentBlockStop")
        index = self._index(payload)
        block = self._open
        if block is None or block.index != index:
            raise _lifecycle(f"stop for content block {index}, which is not open")
        self._open = None
        kind = block.kind
        if kind == _TOOL:
            # No input streamed at all: a tool without parameters (boto3 readers take {}).
            return NOTHING if self._streamed else (ToolArgumentsDelta(block.key, "{}"),)
        if kind == _REASONING:
            if block.redacted:
                item: dict[str, Any] = {"reasoningContent": {"redactedContent": block.redacted}}
            else:
                text: dict[str, Any] = {"text": block.fragments.value()}
                if block.signature:
                    text["signature"] = block.signature
                item = {"reasoningContent": {"reasoningText": text}}
            return (NativeOutput("reasoning", item, block.size),)
        if kind == _PROVIDER:
            return (NativeOutput("provider_output", self._provider_item(block), block.size),)
        return NOTHING

    def _provider_item(self, block: _Block) -> dict[str, Any]:
        if "toolUse" not in block.item:
            return block.item
        text = block.fragments.value()
        value: object = {}
        if text.strip():
            try:
                value = parse_json(text, MAX_EVENT_DEPTH)
            except ValueError:
                value = None
        if type(value) is not dict:
            self._problem = f"the input of provider tool block {block.index} is not a JSON object"
            return block.item
        return {"toolUse": {**block.item["toolUse"], "input": value}}
