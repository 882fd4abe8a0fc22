"""Google Gemini stream decoding (`:streamGenerateContent?alt=sse`): chunks to normalized
events.

Every SSE `data:` payload is one whole `GenerateContentResponse`; there is no end sentinel
and no terminal snapshot (the gate builds the decision from the streamed parts). THE
COMPLETION RULE, as implemented here (every line is tested, accepting and failing):

1. The response starts (`ResponseStarted`) at the first chunk, its id the chunk's
   `responseId`, else a synthesized `gemini-lockgate-<12 hex>` (random per decoder). Every
   chunk of a real stream repeats the same `responseId`: a later chunk naming another one
   is a second response spliced into this one (`lifecycle`).
2. A decision is released only when a candidate carried `finishReason: STOP` AND the body
   then ended cleanly (`end_of_stream`): `ResponseCompleted(FINISH_WITH_CALLS)` when calls
   arrived, else `ResponseCompleted(FINISH_WITHOUT_CALLS)` (Gemini states STOP for both).
   A clean end before any finish is `stream_ended`; a reset is the client's `transport`
   failure. After the finish only chunks without content may follow (usage, an empty
   `{"text": ""}` part, the same finish again); any content, or another finish, is
   `lifecycle` at once: the finish never covered it.
3. Every other finish fails closed at once, with the usage seen so far (the table is
   `FAILED_FINISHES`): `MAX_TOKENS` → `response_incomplete`, truncated (`--recover` may
   answer its calls); the content filters (`SAFETY`, `RECITATION`, `LANGUAGE`,
   `BLOCKLIST`, `PROHIBITED_CONTENT`, `SPII`, image filters …) → `response_incomplete`; the
   provider's verdict on the model's call (`MALFORMED_FUNCTION_CALL`,
   `UNEXPECTED_TOOL_CALL`) → `invalid_batch` (even when a call parsed: the provider says it
   is not a valid call); `MISSING_THOUGHT_SIGNATURE`, `OTHER`, `TOO_MANY_TOOL_CALLS`,
   `MALFORMED_RESPONSE` … → `response_failed`; an unknown value → `lifecycle` (not a known
   completion). The `finishMessage`, when sent, is part of the failure's message.
4. An `error` object in a chunk is `provider_error` at once: message `provider error:
   <message>`, code the gRPC status (else the numeric code), transient for `UNAVAILABLE`,
   `INTERNAL`, `DEADLINE_EXCEEDED`, `RESOURCE_EXHAUSTED` without a terminal quota, or a code
   >= 500 or 429. One before any other chunk is raised by the decoder itself (nothing can be
   buffered yet), so that `retry_unstarted` can retry it.
5. `promptFeedback.blockReason` (the prompt itself was blocked, nothing is generated) is
   `response_incomplete` at once, code the block reason: a filter on the input, like the
   content filters on the output.
6. Candidates: lockgate asks for one. A candidate whose `index` is not 0 (absent means 0:
   2.0-flash, Vertex AI and code-execution chunks omit it), or two candidates in one chunk,
   is `lifecycle` (as Chat refuses a second choice).
7. Parts, in order (consecutive unsigned text is merged by the gate into one text part):
   - `text` is answer text (`TextDelta`); `{"text": ""}` is nothing.
   - `thought: true` parts are reasoning, shown as `ReasoningDelta(kind="summary")`, never
     answer text; a run of them becomes one `NativeOutput("reasoning", {"text": <joined>,
     "thought": true[, "thoughtSignature"]})` when the next other part arrives (or at the
     end), replayed in place to the same model.
   - `functionCall` arrives whole (no argument fragments on the Gemini API): `args` must be
     an object (absent or null = `{}`), serialized once as compact JSON; it is
     `ToolCallStarted(key, id, name, arguments)` with key "0", "1" … in order. A call
     without an `id` (most models send none) gets `synthesized_call_id(response_id, key)`
     as `ToolCallIdentified` just before the terminal event (and before a `MAX_TOKENS`
     failure, so that `--recover` can pair it); the id is lockgate's alone and is never sent
     back (the encoder recognizes it). `partialArgs` / `willContinue` (Vertex AI's streamed
     arguments, which lockgate never asks for) are `unsupported_output`.
   - `thoughtSignature`, an opaque string the server wants back on the same part, is kept
     as `NativeOutput("reasoning", {"thoughtSignature": <it>})` right AFTER the text or call
     it came on: the encoder puts it back on that part. A signature on a part with no data
     of its own (an empty text part, seen in later chunks in 3.x streams) signs the call
     just before it when that call came last and carries none; otherwise it is kept as its
     own part, `{"text": "", "thoughtSignature": <it>}`, in place.
   - Provider-executed parts (`executableCode`, `codeExecutionResult`, `toolCall`,
     `toolResponse`) and generated media (`inlineData`, `fileData`) become
     `NativeOutput("provider_output", <the part unchanged>)`: replayed, never executed.
   - A part with any other data (`functionResponse`, a future kind) cannot be replayed:
     `unsupported_output` at once.
8. Malformed (`malformed_event`): data that is not a JSON object within the nesting bound;
   `candidates`, `parts` not lists; a candidate, its `content`, a part, `functionCall`,
   `usageMetadata`, `promptFeedback` not objects; `index` not an integer; `text`,
   `thoughtSignature`, `finishReason`, `responseId`, a call's `name` or `id` of the wrong
   type; `args` not an object. The SSE `event:` name is not read (Gemini sends none).
   Anything after the terminal event reaches the gate as progress, which refuses it.

Usage: from the LAST `usageMetadata` seen (every chunk repeats a running total, and
`promptTokenCount` may change in the last chunk: never summed), attached to the terminal
event: input = `promptTokenCount + toolUsePromptTokenCount`, cached =
`cachedContentTokenCount` (part of the prompt count), output = `candidatesTokenCount +
thoughtsTokenCount`, reasoning = `thoughtsTokenCount`, total = `totalTokenCount`, else
input + output (in every real recording that states it, `totalTokenCount` is exactly
prompt + tool-use prompt + candidates + thoughts). None reported means `usage=None`.

Normalized events carry `response_id=None`, except `ResponseStarted`.
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from ...conversation import Usage
from ...errors import FailureKind, ResponseFailure
from ...events import (
    FINISH_WITH_CALLS,
    FINISH_WITHOUT_CALLS,
    NativeOutput,
    ProviderReportedFailure,
    ReasoningDelta,
    ResponseCompleted,
    ResponseStarted,
    StreamEvent,
    TextBuffer,
    TextDelta,
    ToolCallIdentified,
    ToolCallStarted,
)
from ...jsonlimits import parse_event
from ...sse import ServerSentEvent
from ..chat.decoder import synthesized_call_id
from ..fields import AFTER_END, NOTHING, compact_json, provider_error_message
from ..fields import malformed as _malformed
from ..fields import token_count as _count
from .errors import read_google_error

__all__ = [
    "FAILED_FINISHES",
    "PROVIDER_PARTS",
    "SIGNATURE",
    "GeminiDecoder",
    "normalize_usage",
]

SIGNATURE = "thoughtSignature"
# Parts the provider executed or generated itself: kept whole, replayed, never executed.
PROVIDER_PARTS = (
    "executableCode",
    "codeExecutionResult",
    "toolCall",
    "toolResponse",
    "inlineData",
    "fileData",
)
_CONTENT_FILTER = "response incomplete: the output was blocked by a content filter"
_CALL_VERDICT = "the provider rejected the model's function call; nothing executed"
_FAILED = "the response failed"
# finishReason → (failure kind, what it means, truncated by the output-token limit).
FAILED_FINISHES: dict[str, tuple[FailureKind, str, bool]] = {
    "MAX_TOKENS": (
        FailureKind.RESPONSE_INCOMPLETE,
        "response incomplete: the output-token limit cut it off",
        True,
    ),
    "CONTINUATION": (
        FailureKind.RESPONSE_INCOMPLETE,
        "response incomplete: the per-request token limit cut it off",
        True,
    ),
    **{
        reason: (FailureKind.RESPONSE_INCOMPLETE, _CONTENT_FILTER, False)
        for reason in (
            "SAFETY",
            "RECITATION",
            "LANGUAGE",
            "BLOCKLIST",
            "PROHIBITED_CONTENT",
            "SPII",
            "IMAGE_SAFETY",
            "IMAGE_PROHIBITED_CONTENT",
            "IMAGE_RECITATION",
            "IMAGE_OTHER",
            "NO_IMAGE",
            "MODEL_ARMOR",
            "ESCALATION",
        )
    },
    "MALFORMED_FUNCTION_CALL": (FailureKind.INVALID_BATCH, _CALL_VERDICT, False),
    "UNEXPECTED_TOOL_CALL": (FailureKind.INVALID_BATCH, _CALL_VERDICT, False),
    **{
        reason: (FailureKind.RESPONSE_FAILED, _FAILED, False)
        for reason in (
            "MISSING_THOUGHT_SIGNATURE",
            "TOO_MANY_TOOL_CALLS",
            "MALFORMED_RESPONSE",
            "PUP_LIMITED_DISABLED",
            "OTHER",
            "FINISH_REASON_UNSPECIFIED",
        )
    },
}
_STOP = "STOP"
# Part data fields beside which a part may carry only metadata.
_DATA_FIELDS = frozenset({"text", "functionCall", "functionResponse", *PROVIDER_PARTS})
_METADATA_FIELDS = frozenset(
    {
        "thought",
        SIGNATURE,
        "partMetadata",
        "videoMetadata",
        "mediaResolution",
        "audioTranscription",
        "mediaProcessing",
        "speechMetadata",
        "documentMetadata",
        "spreadsheetMetadata",
        "audioMetadata",
    }
)
_EMPTY_TEXT = {"text": ""}

# What the last element of the gate's layout is (where a late signature belongs).
_NOTHING_YET = 0
_TEXT = 1
_UNSIGNED_CALL = 2
_OTHER = 3


def normalize_usage(raw: dict[str, Any]) -> Usage:
    """A Gemini `usageMetadata` (the last one of the stream) in lockgate's terms."""
    input_tokens = _count(raw.get("promptTokenCount")) + _count(raw.get("toolUsePromptTokenCount"))
    thoughts = _count(raw.get("thoughtsTokenCount"))
    output_tokens = _count(raw.get("candidatesTokenCount")) + thoughts
    return Usage(
        input_tokens=input_tokens,
        cached_input_tokens=_count(raw.get("cachedContentTokenCount")),
        output_tokens=output_tokens,
        reasoning_tokens=thoughts,
        total_tokens=_count(raw.get("totalTokenCount")) or input_tokens + output_tokens,
    )


def _lifecycle(message: str, usage: Usage | None) -> ProviderReportedFailure:
    return ProviderReportedFailure(FailureKind.LIFECYCLE, f"{message}; nothing executed", usage=usage)


def _signature(part: dict[str, Any]) -> str:
    signature = part.get(SIGNATURE)
    if signature is None:
        return ""
    if type(signature) is not str:
        raise _malformed("thoughtSignature must be a string")
    return signature


def _has_content(part: object) -> bool:
    """Whether a part after the finish carries anything (`{}` and `{"text": ""}` do not)."""
    return part != _EMPTY_TEXT and part != {}


class _Call:
    __slots__ = ("call_id", "key")

    def __init__(self, key: str, call_id: str) -> None:
        self.key = key
        self.call_id = call_id


class GeminiDecoder:
    """Maps one Gemini `streamGenerateContent` SSE stream's chunks to normalized events."""

    __slots__ = (
        "_calls",
        "_finished",
        "_named",
        "_response_id",
        "_started",
        "_tail",
        "_terminated",
        "_thought",
        "_thought_signature",
        "_usage",
    )

    def __init__(self) -> None:
        self._started = False
        self._named = False  # the first chunk named its response (later ones must agree)
        self._response_id = ""
        self._finished = False  # STOP arrived: only content-free chunks may follow
        self._terminated = False  # a terminal event was emitted (or the stream failed)
        self._usage: dict[str, Any] | None = None  # the last usageMetadata seen
        self._calls: list[_Call] = []
        self._tail = _NOTHING_YET
        self._thought: TextBuffer | None = None  # a run of thought parts, for replay
        self._thought_signature = ""

    # --- the StreamDecoder protocol -------------------------------------------------------

    def decode(self, event: ServerSentEvent) -> Sequence[StreamEvent]:
        if self._terminated:
            return AFTER_END
        try:
            payload = parse_event(event.data)
        except ValueError as exc:
            raise _malformed(f"event data is not valid JSON ({exc})") from None
        if type(payload) is not dict:
            raise _malformed("event data is not a JSON object")
        usage = payload.get("usageMetadata")
        if usage is not None:
            if type(usage) is not dict:
                raise _malformed("usageMetadata must be an object")
            self._usage = usage
        error = payload.get("error")
        if error is not None:
            return self._error(error)
        response_id = payload.get("responseId")
        if response_id is not None and type(response_id) is not str:
            raise _malformed("responseId must be a string")
        events: list[StreamEvent] = []
        if not self._started:
            self._start(response_id, events)
        elif self._named and response_id and response_id != self._response_id:
            self._terminated = True
            return (
                _lifecycle(
                    f"a chunk of response {response_id!r} inside response {self._response_id!r}",
                    self._typed_usage(),
                ),
            )
        candidates = payload.get("candidates")
        if candidates:
            if type(candidates) is not list:
                raise _malformed("candidates must be a list")
            if len(candidates) > 1:
                self._terminated = True
                events.append(
                    _lifecycle(
                        f"{len(candidates)} candidates in one chunk; lockgate asks for one",
                        self._typed_usage(),
                    )
                )
                return events
            self._candidate(candidates[0], events)
        elif candidates is not None and type(candidates) is not list:
            raise _malformed("candidates must be a list")
        if not self._terminated:
            feedback = payload.get("promptFeedback")
            if feedback is not None:
                self._feedback(feedback, events)
        return events or NOTHING

    def end_of_stream(self) -> Sequence[StreamEvent]:
        if self._terminated or not self._started:
            return NOTHING  # nothing started: the client reports the end itself
        self._terminated = True
        usage = self._typed_usage()
        if not self._finished:
            return (
                ProviderReportedFailure(
                    FailureKind.STREAM_ENDED,
                    "the stream ended without a finishReason; nothing executed",
                    usage=usage,
                ),
            )
        events: list[StreamEvent] = []
        self._flush_thought(events)
        self._identify_calls(events)
        finish = FINISH_WITH_CALLS if self._calls else FINISH_WITHOUT_CALLS
        events.append(ResponseCompleted(finish, usage))
        return events

    # --- chunks ---------------------------------------------------------------------------

    def _start(self, response_id: str | None, events: list[StreamEvent]) -> None:
        self._started = True
        if response_id:
            self._named = True
            self._response_id = response_id
        else:
            self._response_id = "gemini-lockgate-" + secrets.token_hex(6)
        events.append(ResponseStarted(response_id=self._response_id))

    def _candidate(self, candidate: object, events: list[StreamEvent]) -> None:
        if type(candidate) is not dict:
            raise _malformed("a candidate must be an object")
        index = candidate.get("index", 0)
        if type(index) is not int:
            raise _malformed("candidate index must be an integer")
        if index != 0:
            self._terminated = True
            events.append(
                _lifecycle(
                    f"a second candidate (index {index}); lockgate asks for one",
                    self._typed_usage(),
                )
            )
            return
        content = candidate.get("content")
        if content is not None:
            if type(content) is not dict:
                raise _malformed("candidate content must be an object")
            parts = content.get("parts")
            if parts is not None:
                if type(parts) is not list:
                    raise _malformed("content parts must be a list")
                if self._finished:
                    if any(_has_content(part) for part in parts):
                        self._terminated = True
                        events.append(
                            _lifecycle("content arrived after finishReason STOP", self._typed_usage())
                        )
                        return
                else:
                    for part in parts:
                        self._part(part, events)
                        if self._terminated:
                            return
        finish = candidate.get("finishReason")
        if finish is not None:
            self._finish(finish, candidate, events)

    def _part(self, part: object, events: list[StreamEvent]) -> None:
        if type(part) is not dict:
            raise _malformed("a part must be an object")
        text = part.get("text")
        if part.get("thought") is True:
            if text is not None and type(text) is not str:
                raise _malformed("part text must be a string")
            self._thought_part(text or "", _signature(part), events)
            return
        if text is not None:
            if type(text) is not str:
                raise _malformed("part text must be a string")
            signature = _signature(part)
            if text:
                if self._thought is not None:
                    self._flush_thought(events)
                events.append(TextDelta(text))
                self._tail = _TEXT
                if signature:
                    events.append(NativeOutput("reasoning", {SIGNATURE: signature}, len(signature)))
                    self._tail = _OTHER
            elif signature:
                self._late_signature(signature, events)
            return
        call = part.get("functionCall")
        if call is not None:
            self._call(call, _signature(part), events)
            return
        for name in PROVIDER_PARTS:
            if name in part:
                if self._thought is not None:
                    self._flush_thought(events)
                events.append(NativeOutput("provider_output", part, len(compact_json(part))))
                self._tail = _OTHER
                return
        unknown = sorted(set(part) - _METADATA_FIELDS)
        if unknown:
            self._terminated = True
            events.append(
                ProviderReportedFailure(
                    FailureKind.UNSUPPORTED_OUTPUT,
                    f"a part with {', '.join(unknown)} cannot be replayed; response rejected",
                    usage=self._typed_usage(),
                )
            )
            return
        signature = _signature(part)
        if signature:
            self._late_signature(signature, events)

    def _thought_part(self, text: str, signature: str, events: list[StreamEvent]) -> None:
        if self._thought is not None and signature and self._thought_signature:
            self._flush_thought(events)  # a second signed thought: a part of its own
        if self._thought is None:
            self._thought = TextBuffer()
        self._thought.append(text)
        if signature:
            self._thought_signature = signature
        if text:
            events.append(ReasoningDelta(text, "summary"))

    def _flush_thought(self, events: list[StreamEvent]) -> None:
        thought = self._thought
        if thought is None:
            return
        text = thought.value()
        item: dict[str, Any] = {"text": text, "thought": True}
        size = len(text)
        if self._thought_signature:
            item[SIGNATURE] = self._thought_signature
            size += len(self._thought_signature)
        self._thought = None
        self._thought_signature = ""
        events.append(NativeOutput("reasoning", item, size))
        self._tail = _OTHER

    def _late_signature(self, signature: str, events: list[StreamEvent]) -> None:
        """A signature on a part without data of its own: it signs the call that came
        last, if that call has none; else it is a part of its own."""
        if self._thought is not None:
            self._flush_thought(events)
        if self._tail == _UNSIGNED_CALL:
            events.append(NativeOutput("reasoning", {SIGNATURE: signature}, len(signature)))
        else:
            part = {"text": "", SIGNATURE: signature}
            events.append(NativeOutput("reasoning", part, len(signature)))
        self._tail = _OTHER

    def _call(self, call: object, signature: str, events: list[StreamEvent]) -> None:
        if type(call) is not dict:
            raise _malformed("functionCall must be an object")
        name = call.get("name")
        if type(name) is not str:
            raise _malformed("functionCall.name must be a string")
        call_id = call.get("id")
        if call_id is None:
            call_id = ""
        elif type(call_id) is not str:
            raise _malformed("functionCall.id must be a string")
        args = call.get("args")
        if args is None:
            arguments = "{}"
        elif type(args) is dict:
            arguments = compact_json(args)
        else:
            raise _malformed("functionCall.args must be an object")
        if call.get("partialArgs") is not None or call.get("willContinue"):
            self._terminated = True
            events.append(
                ProviderReportedFailure(
                    FailureKind.UNSUPPORTED_OUTPUT,
                    "streamed function-call arguments (partialArgs) are not supported; "
                    "response rejected",
                    usage=self._typed_usage(),
                )
            )
            return
        if self._thought is not None:
            self._flush_thought(events)
        key = str(len(self._calls))
        self._calls.append(_Call(key, call_id))
        events.append(ToolCallStarted(key, call_id, name, arguments))
        if signature:
            events.append(NativeOutput("reasoning", {SIGNATURE: signature}, len(signature)))
            self._tail = _OTHER
        else:
            self._tail = _UNSIGNED_CALL

    def _finish(self, finish: object, candidate: dict[str, Any], events: list[StreamEvent]) -> None:
        if type(finish) is not str:
            raise _malformed("finishReason must be a string")
        if finish == _STOP:
            self._finished = True
            return
        self._terminated = True
        usage = self._typed_usage()
        if self._finished:
            events.append(_lifecycle(f"finishReason changed from STOP to {finish!r}", usage))
            return
        known = FAILED_FINISHES.get(finish)
        if known is None:
            events.append(
                _lifecycle(f"finishReason {finish!r} is not a known completion", usage)
            )
            return
        kind, meaning, truncated = known
        detail = candidate.get("finishMessage")
        said = f": {detail}" if type(detail) is str and detail else ""
        if truncated:
            self._identify_calls(events)  # a truncated call can then be paired (--recover)
        events.append(
            ProviderReportedFailure(
                kind,
                f"{meaning} (finishReason {finish}{said})",
                finish,
                usage,
                truncated=truncated,
            )
        )

    def _feedback(self, feedback: object, events: list[StreamEvent]) -> None:
        if type(feedback) is not dict:
            raise _malformed("promptFeedback must be an object")
        reason = feedback.get("blockReason")
        if reason is None:
            return
        if type(reason) is not str:
            raise _malformed("promptFeedback.blockReason must be a string")
        self._terminated = True
        detail = feedback.get("blockReasonMessage")
        said = f": {detail}" if type(detail) is str and detail else ""
        events.append(
            ProviderReportedFailure(
                FailureKind.RESPONSE_INCOMPLETE,
                f"the prompt was blocked (blockReason {reason}{said}); nothing was generated",
                reason,
                self._typed_usage(),
            )
        )

    def _error(self, error: object) -> Sequence[StreamEvent]:
        self._terminated = True
        read = read_google_error(error)
        text = provider_error_message(read.message)
        code = read.label
        if not self._started:
            detail = f" [{code}]" if code else ""
            raise ResponseFailure(
                FailureKind.PROVIDER_ERROR, f"{text}{detail}", transient=read.transient
            )
        return (
            ProviderReportedFailure(
                FailureKind.PROVIDER_ERROR,
                text,
                code or None,
                self._typed_usage(),
                transient=read.transient,
            ),
        )

    # --- helpers --------------------------------------------------------------------------

    def _identify_calls(self, events: list[StreamEvent]) -> None:
        for call in self._calls:
            if not call.call_id:
                call.call_id = synthesized_call_id(self._response_id, call.key)
                events.append(ToolCallIdentified(call.key, call.call_id))

    def _typed_usage(self) -> Usage | None:
        return None if self._usage is None else normalize_usage(self._usage)
