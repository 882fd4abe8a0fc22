"""OpenAI Chat Completions stream decoding: chunks to normalized events.

THE COMPLETION RULE is written once, in `docs/wire/chat.md` (each line with the lab scenario
that proves it); this module implements it. In short: a decision only when THE choice's
`finish_reason` arrived and the stream then ended cleanly (`[DONE]`, or a clean end of body
for servers without it); the finish covers only what came before or with it (a later call
fragment fails, other later content only passes with the same finish restated); the first
choice index named is THE choice and any other fails; calls open at index 0, 1, 2 … in
order (or come index-less, whole, in the stream's one `tool_calls` array), and any shape the
common readers would read as other calls fails (issue 27); ids and names are set, never
concatenated, synthesized where absent; errors inside the stream, failing finishes and
anything after the end fail closed.

Chat has no terminal snapshot: the gate builds the decision from the streamed parts. The
decoder checks shapes (a field of the wrong type is `malformed_event`) and leaves lifecycle
and batch validation to the gate; what it shares with the other decoders comes from the
decoding kit (`providers/decoding.py`).
"""

from __future__ import annotations

import secrets
from collections.abc import Sequence
from typing import Any

from ...conversation import Usage
from ...errors import FailureKind, ResponseFailure
from ...events import (
    FINISH_WITH_CALLS,
    MAX_NATIVE_BYTES,
    NativeOutput,
    ProviderReportedFailure,
    ReasoningDelta,
    RefusalDelta,
    ResponseStarted,
    StreamEvent,
    TextBuffer,
    TextDelta,
    ToolArgumentsDelta,
    ToolCallIdentified,
    ToolCallStarted,
)
from ...jsonlimits import parse_event
from ...sse import ServerSentEvent
from ..decoding import (
    AFTER_END,
    CONTENT_BEGAN,
    IMPLIED,
    NOTHING,
    Finish,
    UsageFields,
    compact_json,
    finish_event,
    malformed,
    provider_error,
    synthesized_call_id,
    usage_from,
)

__all__ = [
    "MAX_REASONING_DETAILS_CHARS",
    "MAX_REASONING_DETAILS_ENTRIES",
    "ChatDecoder",
]

_DONE = b"[DONE]"
_CALL_EVENTS = frozenset({ToolCallStarted, ToolCallIdentified, ToolArgumentsDelta})
_CONCATENATED = frozenset({"text", "summary", "data"})
# The bounds on merged `reasoning_details`: the gate's bound on native output, which sees
# them only when the response completes.
MAX_REASONING_DETAILS_CHARS = MAX_NATIVE_BYTES
MAX_REASONING_DETAILS_ENTRIES = 256


def _size(value: object) -> int:
    """Characters a retained JSON value holds (strings directly, containers serialized)."""
    if type(value) is str:
        return len(value)
    if type(value) is dict or type(value) is list:
        return len(compact_json(value))
    return 8


class _Call:
    __slots__ = ("call_id", "key", "name")

    def __init__(self, key: str, call_id: str, name: str) -> None:
        self.key = key
        self.call_id = call_id
        self.name = name


class ChatDecoder:
    """Maps one Chat Completions stream's chunks to normalized events."""

    __slots__ = (
        "_calls",
        "_choice",
        "_details",
        "_details_chars",
        "_finish",
        "_indexless",
        "_indexless_closed",
        "_payload",
        "_reasoning_content",
        "_response_id",
        "_rewrite",
        "_started",
        "_terminated",
        "_usage",
    )

    def __init__(self) -> None:
        self._started = False
        self._terminated = False
        self._response_id = ""
        self._choice: int | None = None  # THE choice: the first index seen
        self._finish: str | None = None
        self._usage: dict[str, Any] | None = None  # the last non-null usage object
        self._calls: list[_Call] = []
        # Calls are addressed by position: `index` 0, 1, 2 … in the order they open; or,
        # without indexes, one call per entry of the stream's only `tool_calls` array.
        self._indexless = False  # the calls came without indexes
        self._indexless_closed = False  # and their array has ended
        self._reasoning_content = TextBuffer()  # for replay, retained compactly
        self._details: dict[tuple[object, object], dict[str, Any]] = {}
        self._details_chars = 0
        # The event just decoded, and whether a fragment of it stated again what readers
        # read differently (`canonical_data` then writes it without that).
        self._payload: dict[str, Any] | None = None
        self._rewrite = False

    # --- the StreamDecoder protocol -------------------------------------------------------

    def decode(self, event: ServerSentEvent) -> Sequence[StreamEvent]:
        data = event.data
        if data == _DONE:
            return self._end(done=True)
        if self._terminated:
            return AFTER_END
        try:
            payload = parse_event(data)
        except ValueError as exc:
            if data.strip() == _DONE:
                return self._end(done=True)
            raise malformed(f"event data is not valid JSON ({exc})") from None
        if type(payload) is not dict:
            raise malformed("event data is not a JSON object")
        self._payload = payload
        usage = payload.get("usage")
        if usage is not None and type(usage) is dict:
            self._usage = usage
        extra = payload.get("x_groq")
        if extra is not None and type(extra) is dict:
            usage = extra.get("usage")
            if usage is not None and type(usage) is dict and payload.get("usage") is None:
                self._usage = usage
        events: list[StreamEvent] | None = None
        if not self._started:
            chunk_id = payload.get("id")
            if type(chunk_id) is str and chunk_id:
                self._response_id = chunk_id
                self._started = True
                model = m if isinstance(m := payload.get("model"), str) and m else None
                events = [ResponseStarted(response_id=chunk_id, model=model)]
        error = payload.get("error")
        if error is not None:
            return self._error(error, events)
        if event.event == "error":
            return self._error(payload, events)
        choices = payload.get("choices")
        if not choices:
            if choices is not None and type(choices) is not list:
                raise malformed("choices must be a list")
            return events or NOTHING
        if type(choices) is not list:
            raise malformed("choices must be a list")
        for choice in choices:
            if type(choice) is not dict:
                raise malformed("a choice must be an object")
            index = choice.get("index", 0)
            if type(index) is not int:
                raise malformed("choice index must be an integer")
            if index != self._choice:
                failure = self._claim(index)
                if failure is not None:
                    return self._with_start(events, failure)
            error = choice.get("error")
            if error is not None:
                return self._error(error, events)
            delta = choice.get("delta")
            finish = choice.get("finish_reason")
            if delta:
                if type(delta) is not dict:
                    raise malformed("delta must be an object")
                produced = self._delta(delta, index)
                if produced is not None:  # the delta carried content
                    if self._finish is not None:
                        failure = self._after_finish(produced, finish)
                        if failure is not None:
                            return self._with_start(events, failure)
                    if not self._started:
                        events = self._start_synthesized(events)
                    if events is None:
                        if len(choices) == 1 and finish is None:
                            return produced  # the common chunk: one choice, one delta
                        events = list(produced)
                    else:
                        events.extend(produced)
            elif delta is not None and type(delta) is not dict:
                raise malformed("delta must be an object")
            if finish is not None:
                failure = self._finished(finish)
                if failure is not None:
                    return self._with_start(events, failure)
        return events or NOTHING

    def end_of_stream(self) -> Sequence[StreamEvent]:
        if self._terminated:
            return NOTHING
        return self._end(done=False)

    def canonical_data(self) -> bytes | None:
        """The event just decoded without what the common readers read differently (see
        `_fragment`), as compact JSON; None when it held nothing such (nearly always)."""
        if not self._rewrite:
            return None
        self._rewrite = False
        return compact_json(self._payload).encode()

    # --- chunks ---------------------------------------------------------------------------

    def _delta(self, delta: dict[str, Any], index: int) -> list[StreamEvent] | None:
        """The events of one choice's delta, in the order of its fields except that
        `reasoning_details` events come last; None when it carried no content (an encrypted
        reasoning entry alone is `ResponseProgress(content=True)`)."""
        if len(delta) == 1:
            content = delta.get("content")
            if type(content) is str:  # the common chunk: one text piece
                return [TextDelta(content)] if content else None
        produced: list[StreamEvent] = []
        shown_reasoning = False
        details: object = None
        for field, value in delta.items():
            if value is None:
                continue
            if field == "content":
                if type(value) is str:
                    if value:
                        produced.append(TextDelta(value))
                elif type(value) is list:
                    _content_parts(value, produced)
                else:
                    raise malformed("delta.content must be a string, a list or null")
            elif field == "tool_calls":
                if type(value) is not list:
                    raise malformed("delta.tool_calls must be a list")
                for fragment in value:
                    self._fragment(fragment, produced)
                if self._indexless:
                    self._indexless_closed = True
            elif field == "refusal":
                if type(value) is str and value:
                    produced.append(RefusalDelta(value))
            elif field == "reasoning_content":
                if type(value) is str and value:
                    self._reasoning_content.append(value)
                    produced.append(ReasoningDelta(value, "raw"))
                    shown_reasoning = True
            elif field == "reasoning":
                if type(value) is str and value:
                    produced.append(ReasoningDelta(value, "raw"))
                    shown_reasoning = True
            elif field == "reasoning_details":
                details = value
        if (
            details is not None
            and type(details) is list
            and details
            and self._reasoning_details(details, produced, show=not shown_reasoning)
        ):
            if not produced:  # content kept, not shown (encrypted): the response has begun
                produced.extend(CONTENT_BEGAN)
            return produced
        return produced or None

    def _fragment(self, fragment: object, produced: list[StreamEvent]) -> None:
        if type(fragment) is not dict:
            raise malformed("a tool-call fragment must be an object")
        index = fragment.get("index")
        if index is not None and type(index) is not int:
            raise malformed("tool-call index must be an integer")
        call_id = fragment.get("id")
        if call_id is None:
            call_id = ""
        elif type(call_id) is not str:
            raise malformed("tool-call id must be a string or null")
        function = fragment.get("function")
        if function is None:
            name = ""
            arguments: object = None
        elif type(function) is dict:
            raw_name = function.get("name")
            if raw_name is None:
                name = ""
            elif type(raw_name) is str:
                name = raw_name
            else:
                raise malformed("tool-call name must be a string or null")
            arguments = function.get("arguments")
        else:
            raise malformed("tool-call function must be an object")
        if arguments is None or type(arguments) is str:
            text = arguments or ""
        elif type(arguments) is dict or type(arguments) is list:
            # llama.cpp, MiniMax: the arguments as a JSON value, not its text. The decoder
            # reads its compact text; clients read that text too (the AI SDK skips a chunk
            # whose arguments are not a string and runs the call built from the rest,
            # openai-node appends "[object Object]"): docs/wire/chat.md §5.
            text = compact_json(arguments)
            assert type(function) is dict  # arguments come only from a function object
            function["arguments"] = text
            self._rewrite = True
        else:
            raise malformed("tool-call arguments must be a string, an object or null")
        call = None
        if index is None:
            self._unindexed(fragment, name)
        else:
            call = self._indexed(index, call_id, name)
        if call is None:
            if index is None:
                # A whole call without an index: every reader that reads one reads it as the
                # next call; clients read it with its position as its index, and its type
                # (Mistral sends none), which every reader reads so (openai-python raises
                # without an index, openai-node reads no call without either, the AI SDK
                # none without an index).
                fragment["index"] = len(self._calls)
                if fragment.get("type") is None:
                    fragment["type"] = "function"
                self._rewrite = True
            call = _Call(str(len(self._calls)), call_id, name)
            self._calls.append(call)
            produced.append(ToolCallStarted(call.key, call_id, name, text))
            return
        new_id = call_id if call_id and not call.call_id else ""
        new_name = name if name and not call.name else ""
        if (call_id and not new_id) or (name and not new_name):
            # The call's id or name stated again, identical (another one was refused): the
            # decoder reads it once; openai-python's stream state concatenates every string
            # (`gogo`, a call to another tool), the other readers set it. Clients read the
            # fragment without it (docs/wire/chat.md §5).
            if call_id and not new_id:
                del fragment["id"]
            if name and not new_name and function is not None:  # a name is in a function
                del function["name"]
            self._rewrite = True
        if new_id or new_name:
            if new_id:
                call.call_id = new_id
            if new_name:
                call.name = new_name
            produced.append(ToolCallIdentified(call.key, new_id, new_name))
        if text:
            produced.append(ToolArgumentsDelta(call.key, text))

    def _indexed(self, index: int, call_id: str, name: str) -> _Call | None:
        """The call a fragment with an integer `index` continues, or None when it opens the
        next one. Every reader reads `index` as the call's position in the message (the
        official SDKs as a list position): the calls must open at 0, 1, 2 … in order, and a
        fragment at an index in use must not name another call, or two readers would read
        different calls (docs/wire/chat.md rule 6)."""
        if self._indexless:
            raise _ambiguous(
                f"a tool-call fragment with index {index} beside fragments without an index"
            )
        opened = len(self._calls)
        if index == opened:
            return None
        if index < 0 or index > opened:
            expected = "0" if not opened else f"at most {opened}"
            raise _ambiguous(f"tool-call index {index} where {expected} was due")
        call = self._calls[index]
        if call_id and call.call_id and call_id != call.call_id:
            raise _ambiguous(
                f"a new call id {call_id!r} at index {index}, which call {call.call_id!r} holds"
            )
        if name and call.name and name != call.name:
            raise _ambiguous(f"a new name {name!r} at index {index}, which {call.name!r} holds")
        return call

    def _unindexed(self, fragment: dict[str, Any], name: str) -> None:
        """A fragment without an integer `index` (absent or null). Only one shape is read
        alike by every reader that reads it at all (Mistral, Gemini's compatible endpoint and
        Ollama, as recorded): whole calls, each with its name, all in the first and only
        `tool_calls` array of the stream. Each entry is a call of its own; anything else
        (a continuation, a second array, an index beside) is refused (docs/wire/chat.md
        rule 6)."""
        if self._calls and not self._indexless:
            what = "without an index" if "index" not in fragment else "with index null"
            raise _ambiguous(f"a tool-call fragment {what} beside indexed fragments")
        if self._indexless_closed:
            raise _ambiguous("tool-call fragments without an index in more than one chunk")
        if not name:
            raise _ambiguous("a tool-call fragment without an index and without a name")
        self._indexless = True
        return None

    def _retain_details(self, chars: int) -> None:
        self._details_chars += chars
        if self._details_chars > MAX_REASONING_DETAILS_CHARS:
            raise ResponseFailure(
                FailureKind.BOUND_EXCEEDED,
                f"reasoning_details exceeded {MAX_REASONING_DETAILS_CHARS} characters",
            )

    def _reasoning_details(
        self, details: list[Any], produced: list[StreamEvent], *, show: bool
    ) -> bool:
        """Merge OpenRouter's reasoning entries for replay (and show their text); whether
        any entry arrived."""
        merged = self._details
        carried = False
        for entry in details:
            if type(entry) is not dict:
                continue
            carried = True
            kind = entry.get("type")
            index = entry.get("index")
            key = (
                index if index is None or type(index) is int else repr(index),
                kind if type(kind) is str else repr(kind),
            )
            target = merged.get(key)
            if target is None:
                if len(merged) >= MAX_REASONING_DETAILS_ENTRIES:
                    raise ResponseFailure(
                        FailureKind.BOUND_EXCEEDED,
                        f"more than {MAX_REASONING_DETAILS_ENTRIES} reasoning_details entries",
                    )
                target = merged[key] = {}
            for field, value in entry.items():
                if value is None:
                    continue
                # Everything retained counts against one bound, like a provider block's
                # input (the gate sees these only at the end): a new field its name, a
                # concatenated one each piece, any other the change of its value (a field
                # sent again replaces the earlier value).
                previous = target.get(field)
                if field in _CONCATENATED and type(value) is str:
                    # Concatenated in a compact buffer (not `previous + value`: quadratic).
                    self._retain_details(len(value) + (len(field) if previous is None else 0))
                    if type(previous) is TextBuffer:
                        previous.append(value)
                    else:
                        target[field] = TextBuffer(value)
                else:
                    size = _size(value)
                    self._retain_details(
                        size + len(field) if previous is None else size - _size(previous)
                    )
                    target[field] = value
            if not show:
                continue
            if kind == "reasoning.text":
                text = entry.get("text")
                if type(text) is str and text:
                    produced.append(ReasoningDelta(text, "raw"))
            elif kind == "reasoning.summary":
                text = entry.get("summary")
                if type(text) is str and text:
                    produced.append(ReasoningDelta(text, "summary"))
        return carried

    def _claim(self, index: int) -> ProviderReportedFailure | None:
        """A choice entry with `index` arrived: the first index seen is THE choice; any
        other fails (lockgate asks for one choice)."""
        if self._choice is None:
            self._choice = index
            return None
        self._terminated = True
        return ProviderReportedFailure(
            FailureKind.LIFECYCLE,
            f"two choices in one stream (indexes {self._choice} and {index}); "
            "lockgate asks for one choice",
            usage=self._typed_usage(),
        )

    def _after_finish(
        self, produced: list[StreamEvent], finish: object
    ) -> ProviderReportedFailure | None:
        """Content in a chunk after the finish: the finish never covered it. A tool-call
        fragment fails at once (the shape of a gateway splicing a retried attempt after the
        first attempt's finish); other content only when its own chunk states the same
        finish again (servers that send the finish on every chunk)."""
        stated = self._finish
        if any(type(event) in _CALL_EVENTS for event in produced):
            problem = f"a tool-call fragment arrived after finish_reason {stated!r}"
        elif finish != stated:
            problem = f"content arrived after finish_reason {stated!r} without a finish of its own"
        else:
            return None
        self._terminated = True
        return ProviderReportedFailure(
            FailureKind.LIFECYCLE, f"{problem}; nothing executed", usage=self._typed_usage()
        )

    def _finished(self, finish: object) -> ProviderReportedFailure | None:
        if type(finish) is not str:
            raise malformed("finish_reason must be a string or null")
        if self._finish is None or finish == self._finish:
            self._finish = finish
            return None
        self._terminated = True
        return ProviderReportedFailure(
            FailureKind.LIFECYCLE,
            f"finish_reason changed from {self._finish!r} to {finish!r}",
            usage=self._typed_usage(),
        )

    def _error(
        self, error: object, events: list[StreamEvent] | None = None
    ) -> Sequence[StreamEvent]:
        self._terminated = True
        return self._with_start(events, provider_error(error, self._typed_usage()))

    # --- the end --------------------------------------------------------------------------

    def _end(self, *, done: bool) -> Sequence[StreamEvent]:
        if self._terminated:
            return AFTER_END
        self._terminated = True
        finish = self._finish
        usage = self._typed_usage()
        events = self._start_synthesized(None)
        if finish is None:
            if done:
                events.append(
                    ProviderReportedFailure(
                        FailureKind.LIFECYCLE,
                        "[DONE] arrived without any finish_reason; nothing executed",
                        usage=usage,
                    )
                )
            else:
                events.append(
                    ProviderReportedFailure(
                        FailureKind.STREAM_ENDED,
                        "the stream ended without a finish_reason (no [DONE] either); "
                        "nothing executed",
                        usage=usage,
                    )
                )
            return events
        if finish in ("tool_calls", "stop", "length"):
            # A truncated call gets its id too: it can then be paired (--recover).
            self._identify_calls(events)
        if finish in ("tool_calls", "stop"):
            self._native_reasoning(events)
        events.append(
            finish_event(
                FINISHES,
                finish,
                usage,
                otherwise="finish_reason {reason!r} is not a successful completion",
                has_calls=bool(self._calls),
            )
        )
        return events

    def _identify_calls(self, events: list[StreamEvent]) -> None:
        for call in self._calls:
            if not call.call_id:
                call.call_id = synthesized_call_id(self._response_id, call.key)
                events.append(ToolCallIdentified(call.key, call.call_id))

    def _native_reasoning(self, events: list[StreamEvent]) -> None:
        if self._reasoning_content.chars:
            text = self._reasoning_content.value()
            events.append(NativeOutput("reasoning", {"reasoning_content": text}, len(text)))
        if self._details:
            entries = [
                {
                    field: value.value() if type(value) is TextBuffer else value
                    for field, value in entry.items()
                }
                for entry in self._details.values()
            ]
            item = {"reasoning_details": entries}
            size = len(compact_json(item))
            events.append(NativeOutput("reasoning", item, size))

    # --- helpers --------------------------------------------------------------------------

    def _start_synthesized(self, events: list[StreamEvent] | None) -> list[StreamEvent]:
        events = [] if events is None else events
        if not self._started:
            self._started = True
            self._response_id = "chatcmpl-lockgate-" + secrets.token_hex(6)
            model = (self._payload or {}).get("model")
            model = model if isinstance(model, str) and model else None
            events.append(ResponseStarted(response_id=self._response_id, model=model))
        return events

    def _with_start(
        self, events: list[StreamEvent] | None, failure: ProviderReportedFailure
    ) -> Sequence[StreamEvent]:
        events = self._start_synthesized(events)
        events.append(failure)
        return events

    def _typed_usage(self) -> Usage | None:
        return usage_from(self._usage, USAGE_FIELDS)


def _ambiguous(problem: str) -> ResponseFailure:
    """A call-fragment shape the common readers read as different calls (issue 27: the
    official SDKs key calls by `index` as a list position, the AI SDK by index and id,
    litellm by index defaulting to 0): refused before any call is released."""
    return ResponseFailure(
        FailureKind.LIFECYCLE,
        f"{problem}: readers of this stream would read different calls; nothing executed",
    )


def _content_parts(parts: list[Any], produced: list[StreamEvent]) -> None:
    """Mistral's typed content parts: text is text, thinking is raw reasoning."""
    for part in parts:
        if type(part) is not dict:
            continue
        kind = part.get("type")
        if kind == "text":
            text = part.get("text")
            if type(text) is str and text:
                produced.append(TextDelta(text))
        elif kind == "thinking":
            inner = part.get("thinking")
            if type(inner) is not list:
                continue
            for piece in inner:
                if type(piece) is dict and piece.get("type") == "text":
                    text = piece.get("text")
                    if type(text) is str and text:
                        produced.append(ReasoningDelta(text, "raw"))


# Chat's usage fields in lockgate's terms (`prompt_tokens` counts cached input already).
USAGE_FIELDS = UsageFields(
    input=(("prompt_tokens",),),
    output=(("completion_tokens",),),
    cached=(("prompt_tokens_details", "cached_tokens"),),
    reasoning=(("completion_tokens_details", "reasoning_tokens"),),
    total=(("total_tokens",),),
)

# Native finish reasons. `stop` lets the calls say whether there were calls (OpenAI's named
# tool_choice, Gemini and Ollama end calls with `stop`).
FINISHES: dict[str, Finish] = {
    "tool_calls": Finish(FINISH_WITH_CALLS),
    "stop": Finish(IMPLIED),
    "length": Finish(
        failure=FailureKind.RESPONSE_INCOMPLETE,
        message="response incomplete: finish_reason length (the output token limit)",
        truncated=True,
    ),
    "content_filter": Finish(
        failure=FailureKind.RESPONSE_INCOMPLETE,
        message="response incomplete: finish_reason content_filter",
    ),
    "error": Finish(
        failure=FailureKind.PROVIDER_ERROR, message="provider error: finish_reason error"
    ),
}
