"""Google Gemini stream decoding (`:streamGenerateContent?alt=sse`): chunks to normalized
events.

THE COMPLETION RULE is written once, in `docs/wire/gemini.md` (each line with the lab
scenario that proves it); this module implements it. In short: every SSE `data:` payload is
one whole `GenerateContentResponse`, and there is no end sentinel; the response starts at the
first chunk (its `responseId`, which later chunks may not change); a decision only when a
candidate carried `finishReason: STOP` AND the body then ended cleanly (after the finish only
content-free chunks may come; content or another finish is `lifecycle` at once); every other
finish fails closed at once by its table (`FAILED_FINISHES`); an `error` chunk is
`provider_error` and `promptFeedback.blockReason` `response_incomplete`; one candidate
(`index` absent or 0), any other is `lifecycle`; calls arrive whole (`args` an object, absent
= `{}`, serialized once as compact JSON), their missing ids synthesized just before the
terminal event (never sent back: the encoder knows them); a part holds one kind of data (the
API's oneof: two, such as text and a call, are malformed, never read as text alone); thought
text is reasoning, kept as one native item per run (a call marked thought is a call, as
google-genai reports it); a `thoughtSignature` is kept as `{"thoughtSignature": …}` right
after the text or call it came on (the encoder puts it back on that part), and one that
arrives later on an empty part signs the unsigned call just before it, else stays a part of
its own; provider-executed parts and generated media are kept unchanged, never calls; a part
that cannot be replayed is `unsupported_output`.

Gemini has no terminal snapshot: the gate builds the decision from the streamed parts. The
decoder checks shapes (a field of the wrong type is `malformed_event`) and leaves lifecycle
and batch validation to the gate; what it shares with the other decoders comes from the
decoding kit (`providers/decoding.py`). Usage (`USAGE_FIELDS`) is the LAST `usageMetadata`
seen (a running total, never summed), attached to the terminal event. Normalized events
carry `response_id=None`, except `ResponseStarted`.
"""

from __future__ import annotations

import dataclasses
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
from ..decoding import (
    AFTER_END,
    NOTHING,
    OUTPUT_LIMIT,
    Finish,
    UsageFields,
    compact_json,
    finish_event,
    provider_error_message,
    read_error,
    synthesized_call_id,
    usage_from,
)
from ..decoding import malformed as _malformed
from .errors import read_google_error

__all__ = [
    "FAILED_FINISHES",
    "PROVIDER_PARTS",
    "SIGNATURE",
    "USAGE_FIELDS",
    "GeminiDecoder",
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
_INCOMPLETE = FailureKind.RESPONSE_INCOMPLETE
_FILTERED = Finish(
    failure=_INCOMPLETE,
    message="response incomplete: the output was blocked by a content filter",
)
_CALL_REJECTED = Finish(
    failure=FailureKind.INVALID_BATCH,
    message="the provider rejected the model's function call; nothing executed",
)
_FAILED = Finish(failure=FailureKind.RESPONSE_FAILED, message="the response failed")
# Every finish reason but STOP (the one success, decided at the end of the body): what it
# means. Content filters are incomplete responses; the provider's verdict on the model's
# call is the gate's own `invalid_batch`; the rest say the response failed. Unknown values
# are `lifecycle` (not a known completion).
FAILED_FINISHES: dict[str, Finish] = {
    "MAX_TOKENS": OUTPUT_LIMIT,
    "CONTINUATION": Finish(
        failure=_INCOMPLETE,
        message="response incomplete: the per-request token limit cut it off",
        truncated=True,
    ),
    **dict.fromkeys(
        (
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
        ),
        _FILTERED,
    ),
    "MALFORMED_FUNCTION_CALL": _CALL_REJECTED,
    "UNEXPECTED_TOOL_CALL": _CALL_REJECTED,
    **dict.fromkeys(
        (
            "MISSING_THOUGHT_SIGNATURE",
            "TOO_MANY_TOOL_CALLS",
            "MALFORMED_RESPONSE",
            "PUP_LIMITED_DISABLED",
            "OTHER",
            "FINISH_REASON_UNSPECIFIED",
        ),
        _FAILED,
    ),
}
# Gemini's usage fields in lockgate's terms: the prompt count includes cached content; the
# tool-use prompt (server-side tools) is input too; thoughts are output, counted apart.
USAGE_FIELDS = UsageFields(
    input=(("promptTokenCount",), ("toolUsePromptTokenCount",)),
    output=(("candidatesTokenCount",), ("thoughtsTokenCount",)),
    cached=(("cachedContentTokenCount",),),
    reasoning=(("thoughtsTokenCount",),),
    total=(("totalTokenCount",),),
)
_STOP = "STOP"
# A part's data fields (the API's `Part.data` oneof: a part holds one), beside which it may
# carry only metadata; in the order a failure names them.
_DATA_ORDER = ("text", "functionCall", "functionResponse", *PROVIDER_PARTS)
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


def _lifecycle(message: str, usage: Usage | None) -> ProviderReportedFailure:
    return ProviderReportedFailure(
        FailureKind.LIFECYCLE, f"{message}; nothing executed", usage=usage
    )


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
        if event.event is not None:
            # Gemini streams are data lines only; google-genai reads any other line as raw
            # JSON and raises, @google/genai reads nothing after it.
            raise _malformed(f"a Gemini event carries no name (this one is named {event.event!r})")
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
            self._start(response_id, events, payload.get("modelVersion"))
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

    def canonical_data(self) -> bytes | None:
        return None  # every event is read alike as it came

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

    def _start(self, response_id: str | None, events: list[StreamEvent], model: object) -> None:
        self._started = True
        if response_id:
            self._named = True
            self._response_id = response_id
        else:
            self._response_id = "gemini-lockgate-" + secrets.token_hex(6)
        stated = model if isinstance(model, str) and model else None
        events.append(ResponseStarted(response_id=self._response_id, model=stated))

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
                            _lifecycle(
                                "content arrived after finishReason STOP", self._typed_usage()
                            )
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
        # `thought` marks thought text; google-genai reports a call whatever the flag (its
        # `function_calls` reads every part's call), so a call flagged so is read as a call,
        # and a provider part flagged so is kept whole, as it came.
        thought = part.get("thought") is True
        if len(part) > 1:
            data = [name for name in _DATA_ORDER if part.get(name) is not None]
            if len(data) > 1:
                # The API's Part holds one kind of data (a oneof); google-genai would read
                # each field (the text as text, the call as a call), which no one judged
                # part could replay.
                raise _malformed(
                    f"a part holds {' and '.join(data)}: a part holds one kind of data"
                )
            if data and data[0] != "text":
                thought = False
        text = part.get("text")
        if thought:
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
        if known is not None and known.truncated:
            self._identify_calls(events)  # a truncated call can then be paired (--recover)
        failed = finish_event(
            FAILED_FINISHES,
            finish,
            usage,
            otherwise="finishReason {reason!r} is not a known completion; nothing executed",
        )
        assert isinstance(failed, ProviderReportedFailure)  # the table holds failures only
        detail = candidate.get("finishMessage")
        said = f": {detail}" if type(detail) is str and detail else ""
        if known is not None:
            failed = dataclasses.replace(
                failed, message=f"{failed.message} (finishReason {finish}{said})"
            )
        events.append(failed)

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
        """The one transience rule (`decoding.read_error`), except that a spent daily quota
        (Google's `QuotaFailure` detail) is never transient, whatever its code says."""
        self._terminated = True
        reading = read_error(error)
        transient = reading.transient and not read_google_error(error).terminal_quota
        text = provider_error_message(reading.message)
        if not self._started:
            detail = f" [{reading.code}]" if reading.code else ""
            raise ResponseFailure(
                FailureKind.PROVIDER_ERROR, f"{text}{detail}", transient=transient
            )
        return (
            ProviderReportedFailure(
                FailureKind.PROVIDER_ERROR,
                text,
                reading.code,
                self._typed_usage(),
                transient=transient,
            ),
        )

    # --- helpers --------------------------------------------------------------------------

    def _identify_calls(self, events: list[StreamEvent]) -> None:
        for call in self._calls:
            if not call.call_id:
                call.call_id = synthesized_call_id(self._response_id, call.key)
                events.append(ToolCallIdentified(call.key, call.call_id))

    def _typed_usage(self) -> Usage | None:
        return usage_from(self._usage, USAGE_FIELDS)
