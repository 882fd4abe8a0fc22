"""OpenAI Responses stream decoding: native events to normalized events.

THE COMPLETION RULE is written once, in `docs/wire/responses.md` (each line with the lab
scenario that proves it); this module implements it. In short: a decision only at
`response.completed` with status `completed`, whose output snapshot lists exactly the calls
that streamed (the gate compares them); `response.failed`, `response.incomplete` and `error`
fail; a call the provider marks incomplete fails closed; provider-executed items are kept
opaque and replayed, never executed; items asking the client for an action lockgate cannot
take fail closed; anything after the terminal event fails (a gateway's `data: [DONE]` is a
sentinel, not an event).

Every item a client can read is the judged one (`_Items`): an item is added once at its
place (`output_index`), done at most once as the same type and id, and the snapshot holds
exactly the items that were added, in their places, of the same types and ids (a reasoning
item's id excepted: a gateway mints a new one for the snapshot); a call's `.done` item and
its `function_call_arguments.done` state the snapshot's call byte for byte (so, by the
gate's rule, the streamed one). Codex starts each tool at its `.done` item; the SDK reads
the snapshot; neither may read a call the gate did not validate.

The decoder checks shape (through the decoding kit, `providers/decoding.py`) and the items'
own statements (above: only the native events show them), and leaves the response's
lifecycle and validation rules to the gate.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

from ...conversation import Usage
from ...errors import FailureKind, ResponseFailure
from ...events import (
    CALL_CUSTOM,
    MAX_NATIVE_BYTES,
    OutputCall,
    OutputItem,
    OutputNative,
    OutputRefusal,
    OutputText,
    ProviderReportedFailure,
    ReasoningDelta,
    RefusalDelta,
    ResponseCompleted,
    ResponseProgress,
    ResponseStarted,
    StreamEvent,
    TextDelta,
    ToolArgumentsDelta,
    ToolCallStarted,
    UnsupportedOutput,
)
from ...sse import ServerSentEvent
from ..decoding import (
    AFTER_END,
    CONTENT_BEGAN,
    NOTHING,
    UsageFields,
    compact_json,
    malformed,
    object_field,
    optional_string_field,
    provider_error,
    read_error,
    string_field,
    typed_event,
    usage_from,
)

# Output items the provider executes itself: never a request for a local action.
PROVIDER_EXECUTED_ITEMS = frozenset(
    {
        "web_search_call",
        "file_search_call",
        "code_interpreter_call",
        "image_generation_call",
        "mcp_call",
        "mcp_list_tools",
        "tool_search_call",
        "tool_search_output",
    }
)
# Provider output that is no tool at all: a compaction of the conversation so far (opaque,
# replayed as it came).
PROVIDER_OUTPUT_ITEMS = PROVIDER_EXECUTED_ITEMS | {"compaction"}
# The built-in tools a client executes itself, by their type in a request's `tools`, and the
# item type of their calls. Only a client that declared one runs its items: lockgate's own
# loop declares none and refuses them (`client_items`).
CLIENT_BUILTIN_TOOLS = {
    "shell": "shell_call",
    "local_shell": "local_shell_call",
    "apply_patch": "apply_patch_call",
    "computer_use_preview": "computer_call",
    "computer": "computer_call",
    # Tool search the client runs itself (`execution: "client"`, as Codex declares it): its
    # `tool_search_call` items with `execution: "client"` are calls; others the provider's.
    "tool_search": "tool_search_call",
}
_CLIENT_BUILTIN_ITEMS = frozenset(CLIENT_BUILTIN_TOOLS.values())
_CUSTOM = "custom_tool_call"
# The item types that are calls: lockgate's own loop reads function calls only; in front of
# another client (`client_items`), custom tool calls and client-executed built-in tool items
# too.
_OWN_CALLS = frozenset({"function_call"})
_CLIENT_CALLS = frozenset({"function_call", _CUSTOM, *_CLIENT_BUILTIN_ITEMS})
# Items whose arguments stream in fragments: a function call's JSON, a custom call's input.
_STREAMED_CALLS = frozenset({"function_call", _CUSTOM})


_TERMINAL = frozenset({"response.completed", "response.failed", "response.incomplete", "error"})
# The output items one response may stream, and the characters of their types and ids, which
# the decoder keeps until the snapshot (message items pass the engine unheld: this bounds
# what they make lockgate retain).
MAX_OUTPUT_ITEMS = 256
MAX_OUTPUT_ITEM_IDENTITY_CHARS = MAX_NATIVE_BYTES
_REASONING = "reasoning"


def _response_id(response: dict[str, Any]) -> str:
    return optional_string_field(response.get("id"), "response.id")


def _lifecycle(message: str) -> ResponseFailure:
    return ResponseFailure(FailureKind.LIFECYCLE, message)


def _is_call(item: dict[str, Any], call_kinds: frozenset[str]) -> bool:
    """Whether an output item is a call (an item of `call_kinds`; a tool search only when
    the client executes it)."""
    kind = item.get("type")
    if kind == "tool_search_call":
        return kind in call_kinds and item.get("execution") == "client"
    return kind in call_kinds


def _disagreement_kind(call_kinds: frozenset[str], *kinds: str) -> FailureKind:
    """Statements of an item that disagree: about a call (an item of `call_kinds`),
    `call_mismatch` (as the gate names a snapshot call that differs from the streamed one);
    else `lifecycle`."""
    return (
        FailureKind.CALL_MISMATCH
        if any(kind in call_kinds for kind in kinds)
        else FailureKind.LIFECYCLE
    )


def _place(value: object) -> int:
    if type(value) is not int or value < 0:
        raise malformed("output_index must be a non-negative integer")
    return value


def _call_of(item: dict[str, Any]) -> OutputCall:
    """The call an item states: a function call (its JSON arguments, its namespace), a
    custom tool call (its free-text input), or a client-executed built-in tool's item (its
    type as name and form, its action as compact JSON)."""
    kind = item.get("type")
    key = optional_string_field(item.get("id"), "item.id")
    call_id = optional_string_field(item.get("call_id"), "item.call_id")
    namespace = optional_string_field(item.get("namespace"), "item.namespace")
    if kind == _CUSTOM:
        text = optional_string_field(item.get("input"), "item.input")
        name = optional_string_field(item.get("name"), "item.name")
        return OutputCall(key, call_id, name, text, namespace, CALL_CUSTOM)
    if kind in _CLIENT_BUILTIN_ITEMS:
        action = {k: v for k, v in item.items() if k not in _NOT_ACTION}
        return OutputCall(key, call_id, str(kind), compact_json(action), "", str(kind))
    return OutputCall(
        key,
        call_id,
        optional_string_field(item.get("name"), "item.name"),
        optional_string_field(item.get("arguments"), "item.arguments"),
        namespace,
    )


# What a built-in tool's item states besides its action: identity, type and progress.
_NOT_ACTION = frozenset({"id", "call_id", "type", "status"})


class _Streamed:
    """One item `response.output_item.added` announced: its type and id, and whether its
    `.done` arrived."""

    __slots__ = ("done", "item_id", "kind")

    def __init__(self, kind: str, item_id: str) -> None:
        self.kind = kind
        self.item_id = item_id
        self.done = False

    def names(self) -> str:
        return f"{self.kind or 'untyped'} {self.item_id!r}"


class _Items:
    """The output items as the stream states them, held to the snapshot at the end.

    Places are the events' `output_index` (the SDK's key), else the order items were added
    in. A call's `.done` item and its `function_call_arguments.done` are kept to be compared
    with the snapshot's call: the gate holds the snapshot's calls to the streamed ones, so
    every statement of a call is then the judged call."""

    __slots__ = ("_chars", "arguments_done", "call_kinds", "calls", "done_calls", "streamed")

    def __init__(self, call_kinds: frozenset[str]) -> None:
        self.call_kinds = call_kinds  # the item types read as calls
        self.streamed: dict[int, _Streamed] = {}
        self.calls: dict[str, int] = {}  # a streamed call's item id -> its place
        self.done_calls: dict[int, OutputCall] = {}  # place -> the call its `.done` states
        self.arguments_done: dict[str, tuple[str, str | None]] = {}  # id -> (arguments, name)
        self._chars = 0

    def added(self, payload: dict[str, Any], kind: str, item_id: str) -> None:
        index = payload.get("output_index")
        place = len(self.streamed) if index is None else _place(index)
        if place in self.streamed:
            raise _lifecycle(f"output item {place} added twice")
        if len(self.streamed) >= MAX_OUTPUT_ITEMS:
            raise ResponseFailure(
                FailureKind.BOUND_EXCEEDED, f"more than {MAX_OUTPUT_ITEMS} output items"
            )
        self._chars += len(kind) + len(item_id)
        if self._chars > MAX_OUTPUT_ITEM_IDENTITY_CHARS:
            raise ResponseFailure(
                FailureKind.BOUND_EXCEEDED,
                f"output item types and ids exceeded {MAX_OUTPUT_ITEM_IDENTITY_CHARS} characters",
            )
        self.streamed[place] = _Streamed(kind, item_id)
        if kind in _STREAMED_CALLS and kind in self.call_kinds:
            self.calls[item_id] = place

    def done(self, payload: dict[str, Any], item: dict[str, Any]) -> None:
        kind = optional_string_field(item.get("type"), "item.type")
        item_id = optional_string_field(item.get("id"), "item.id")
        index = payload.get("output_index")
        place = self._open_place(kind, item_id) if index is None else _place(index)
        streamed = None if place is None else self.streamed.get(place)
        if place is None or streamed is None:
            where = "" if place is None else f" {place}"
            raise ResponseFailure(
                _disagreement_kind(self.call_kinds, kind),
                f"output item{where} ({kind or 'untyped'} {item_id!r}) is done but was never added",
            )
        if streamed.done:
            raise _lifecycle(f"output item {place} ({streamed.names()}) is done twice")
        if (streamed.kind, streamed.item_id) != (kind, item_id):
            raise ResponseFailure(
                _disagreement_kind(self.call_kinds, kind, streamed.kind),
                f"output item {place} was added as {streamed.names()} and is done as "
                f"{kind or 'untyped'} {item_id!r}",
            )
        streamed.done = True
        if _is_call(item, self.call_kinds):
            self.done_calls[place] = _call_of(item)

    def _open_place(self, kind: str, item_id: str) -> int | None:
        """Where a `.done` without an `output_index` belongs: the first item added as the
        same type and id whose `.done` has not come."""
        for place, streamed in self.streamed.items():
            if not streamed.done and (streamed.kind, streamed.item_id) == (kind, item_id):
                return place
        return None

    def argument_place(self, payload: dict[str, Any], key: str) -> None:
        """An argument event that states an `output_index` must state its call's place
        (the SDK routes the fragment by it; lockgate by the item id)."""
        index = payload.get("output_index")
        place = self.calls.get(key)
        if index is not None and place is not None and index != place:
            raise _lifecycle(
                f"an argument event of tool item {key!r} names output index {index!r}, "
                f"not the item's ({place})"
            )

    def arguments_finished(self, payload: dict[str, Any], field: str = "arguments") -> None:
        """A call's arguments (or a custom call's input: `field`) are done: kept to be
        compared with the snapshot's call."""
        key = string_field(payload.get("item_id"), "item_id")
        arguments = string_field(payload.get(field), field)
        name = payload.get("name")
        stated = None if name is None else string_field(name, "name")
        if key not in self.calls:
            raise _lifecycle(f"arguments done for unknown tool item {key!r}")
        self.argument_place(payload, key)
        if key in self.arguments_done:
            raise _lifecycle(f"the arguments of tool item {key!r} are done twice")
        self.arguments_done[key] = (arguments, stated)

    def disagreement(self, output: list[dict[str, Any]]) -> tuple[FailureKind, str] | None:
        """Where the stream's items and the snapshot (`output`, a list of objects) differ:
        the failure's kind and message, or None."""
        for place in self.calls.values():
            streamed = self.streamed[place]
            if not streamed.done:
                # The AI SDK emits a function call (or custom tool call) only at its
                # `output_item.done`: without it, it ends with no call (finish `stop`)
                # where the snapshot lists one (issue 27). Every recorded call has it.
                return (
                    FailureKind.LIFECYCLE,
                    f"call item {place} ({streamed.names()}) never got its "
                    "output_item.done before the terminal; readers of this stream would "
                    "read different calls",
                )
        for place, streamed in sorted(self.streamed.items()):
            if place >= len(output):
                return (
                    _disagreement_kind(self.call_kinds, streamed.kind),
                    f"streamed output item {place} ({streamed.names()}) is missing from the "
                    "terminal response",
                )
            listed = output[place]
            kind = optional_string_field(listed.get("type"), "output item type")
            item_id = optional_string_field(listed.get("id"), "output item id")
            if kind != streamed.kind or (item_id != streamed.item_id and kind != _REASONING):
                return (
                    _disagreement_kind(self.call_kinds, kind, streamed.kind),
                    f"output item {place} streamed as {streamed.names()} is "
                    f"{kind or 'untyped'} {item_id!r} in the terminal response",
                )
        if len(output) > len(self.streamed):
            place = next(p for p in range(len(output)) if p not in self.streamed)
            kind = optional_string_field(output[place].get("type"), "output item type")
            item_id = optional_string_field(output[place].get("id"), "output item id")
            return (
                _disagreement_kind(self.call_kinds, kind),
                f"terminal output item {place} ({kind or 'untyped'} {item_id!r}) was never "
                "streamed",
            )
        for place, done in sorted(self.done_calls.items()):
            if _call_of(output[place]) != done:
                return (
                    FailureKind.CALL_MISMATCH,
                    f"the output_item.done of call {done.call_id or done.key!r} differs from "
                    "the terminal response",
                )
        for key, (arguments, name) in self.arguments_done.items():
            listed_call = _call_of(output[self.calls[key]])
            if arguments != listed_call.arguments or name not in (None, listed_call.name):
                return (
                    FailureKind.CALL_MISMATCH,
                    f"the arguments (or input) done event of tool item {key!r} differs from "
                    "the terminal response",
                )
        return None


class ResponsesDecoder:
    """Maps one Responses stream's events to normalized events.

    `client_items`: the decoder stands in front of another client (the gating engine), and
    reads as calls what that client may execute besides function calls: custom tool calls
    (their free-text input streamed like arguments) and the items of client-executed
    built-in tools (`shell_call`, `apply_patch_call`, …: a call whose arguments are the
    item's action, started when its `.done` states it whole). The gate then holds each to a
    tool the request declares. Without it (lockgate's own loop) such items cannot be
    replayed and are refused (`unsupported_output`)."""

    __slots__ = (
        "_call_kinds",
        "_call_places",
        "_ended",
        "_handlers",
        "_incomplete_calls",
        "_items",
        "_started",
    )

    def __init__(self, *, client_items: bool = False) -> None:
        self._started = False
        self._ended = False  # a terminal event was decoded
        self._incomplete_calls: list[str] = []  # calls whose item.done said `incomplete`
        self._call_kinds = _CLIENT_CALLS if client_items else _OWN_CALLS
        self._items = _Items(self._call_kinds)
        self._call_places = self._items.calls  # read on every argument delta
        self._handlers: dict[str, Callable[[dict[str, Any]], Sequence[StreamEvent]]] = {
            "response.output_text.delta": self._text_delta,
            "response.function_call_arguments.delta": self._arguments_delta,
            "response.function_call_arguments.done": self._arguments_done,
            "response.refusal.delta": self._refusal_delta,
            "response.reasoning_summary_text.delta": self._reasoning_summary_delta,
            "response.reasoning_text.delta": self._reasoning_raw_delta,
            "response.output_item.added": self._item_added,
            "response.output_item.done": self._item_done,
            "response.created": self._created,
            "response.in_progress": self._progress,
            "response.queued": self._progress,
            "response.completed": self._completed,
            "response.failed": self._failed,
            "response.incomplete": self._incomplete,
            "error": self._error,
        }
        if client_items:
            self._handlers["response.custom_tool_call_input.delta"] = self._arguments_delta
            self._handlers["response.custom_tool_call_input.done"] = self._input_done

    def decode(self, event: ServerSentEvent) -> Sequence[StreamEvent]:
        if event.data == b"[DONE]":
            return NOTHING  # a gateway's sentinel, not an event
        payload, kind = typed_event(event)
        if self._ended:
            return AFTER_END  # whatever it is, the gate refuses it after the terminal event
        handler = self._handlers.get(kind)
        if handler is None:
            return NOTHING  # unknown types and per-item `.done` events are progress
        if kind in _TERMINAL:
            self._ended = True
        return handler(payload)

    def end_of_stream(self) -> Sequence[StreamEvent]:
        return NOTHING  # only `response.completed` completes a Responses stream

    def canonical_data(self) -> bytes | None:
        return None  # every event is read alike as it came

    # Identity: only a few native events name their response; pass it on when they do.
    @staticmethod
    def _identity(payload: dict[str, Any]) -> str | None:
        value = payload.get("response_id")
        return None if value is None else string_field(value, "response_id")

    # The two hot handlers (nearly every event of a stream) check inline what `_string`
    # and `_identity` check.
    def _text_delta(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        text = payload.get("delta")
        if type(text) is not str:
            raise malformed("delta must be a string")
        if payload.get("response_id") is None:
            return (TextDelta(text),)
        return (TextDelta(text, response_id=self._identity(payload)),)

    def _refusal_delta(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        text = string_field(payload.get("delta"), "delta")
        return (RefusalDelta(text, response_id=self._identity(payload)),)

    def _reasoning_summary_delta(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        text = string_field(payload.get("delta"), "delta")
        return (ReasoningDelta(text, "summary", response_id=self._identity(payload)),)

    def _reasoning_raw_delta(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        text = string_field(payload.get("delta"), "delta")
        return (ReasoningDelta(text, "raw", response_id=self._identity(payload)),)

    def _arguments_delta(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        key = payload.get("item_id")
        if type(key) is not str:
            raise malformed("item_id must be a string")
        delta = payload.get("delta")
        if type(delta) is not str:
            raise malformed("delta must be a string")
        index = payload.get("output_index")
        if index is not None and index != self._call_places.get(key, index):
            self._items.argument_place(payload, key)  # raises: the SDK routes it elsewhere
        if payload.get("response_id") is None:
            return (ToolArgumentsDelta(key, delta),)
        return (ToolArgumentsDelta(key, delta, response_id=self._identity(payload)),)

    def _arguments_done(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        self._items.arguments_finished(payload)
        return NOTHING

    def _input_done(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        self._items.arguments_finished(payload, "input")
        return NOTHING

    def _item_added(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        item = object_field(payload.get("item"), "item")
        kind = optional_string_field(item.get("type"), "item.type")
        item_id = optional_string_field(item.get("id"), "item.id")
        self._items.added(payload, kind, item_id)
        if kind not in self._call_kinds or kind not in _STREAMED_CALLS:
            # Output began (a message, reasoning that may be encrypted only, a tool the
            # provider runs itself; a built-in tool's item, a call once its `.done` states it
            # whole): the response is no longer a stream that never started.
            return CONTENT_BEGAN
        return (self._started_call(item, payload),)

    def _started_call(self, item: dict[str, Any], payload: dict[str, Any]) -> ToolCallStarted:
        call = _call_of(item)
        return ToolCallStarted(
            call.key,
            call.call_id,
            call.name,
            call.arguments,
            call.namespace,
            call.form,
            response_id=self._identity(payload),
        )

    def _item_done(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        item = object_field(payload.get("item"), "item")
        self._items.done(payload, item)
        if not _is_call(item, self._call_kinds):
            return NOTHING
        if item.get("status") not in (None, "completed"):
            self._incomplete_calls.append(
                optional_string_field(item.get("call_id"), "item.call_id")
            )
        elif item.get("type") not in _STREAMED_CALLS:
            return (self._started_call(item, payload),)  # a built-in tool's item, whole
        return NOTHING

    def _start(self, payload: dict[str, Any], *, created: bool) -> Sequence[StreamEvent]:
        response = object_field(payload.get("response"), "response")
        response_id = _response_id(response)
        if response.get("output") not in (None, []):
            # The SDK takes these as output items too; only `output_item.added` adds one.
            raise _lifecycle("a lifecycle event before the terminal carries output items")
        if not self._started or created:
            # A second `response.created` reaches the gate as a second start (a failure).
            self._started = True
            model = m if isinstance(m := response.get("model"), str) and m else None
            return (ResponseStarted(response_id=response_id, model=model),)
        return (ResponseProgress(response_id=response_id),)

    def _created(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        return self._start(payload, created=True)

    def _progress(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        return self._start(payload, created=False)

    def _completed(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        response = object_field(payload.get("response"), "response")
        response_id = _response_id(response)
        usage = _usage(response.get("usage"))
        status = optional_string_field(response.get("status"), "response.status")
        if status != "completed":
            return (
                ProviderReportedFailure(
                    FailureKind.LIFECYCLE,
                    f"terminal event has status {status!r}",
                    usage=usage,
                    response_id=response_id,
                ),
            )
        output = response.get("output", [])
        if type(output) is not list:
            raise malformed("response.output must be a list")
        items = tuple(
            item
            for raw in output
            for item in _output_items(object_field(raw, "output item"), self._call_kinds)
        )
        incomplete = self._incomplete_calls + [
            call_id
            for raw in output
            if _is_call(raw, self._call_kinds) and raw.get("status") not in (None, "completed")
            for call_id in [str(raw.get("call_id"))]
        ]
        if incomplete:
            return (
                ProviderReportedFailure(
                    FailureKind.RESPONSE_INCOMPLETE,
                    f"the provider marks call(s) {', '.join(sorted(set(incomplete)))} incomplete",
                    usage=usage,
                    response_id=response_id,
                ),
            )
        disagreement = self._items.disagreement(output)
        if disagreement is not None:
            # In the terminal's place: the gate checks the response id first, and reports
            # the usage.
            kind, message = disagreement
            return (ProviderReportedFailure(kind, message, usage=usage, response_id=response_id),)
        # Responses states no finish reason: the calls imply it.
        return (ResponseCompleted(None, usage, items, response_id=response_id),)

    def _failed(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        response = object_field(payload.get("response"), "response")
        error = read_error(response.get("error"))
        return (
            ProviderReportedFailure(
                FailureKind.RESPONSE_FAILED,
                f"response failed: {error.message or 'no message'}",
                error.code,
                _usage(response.get("usage")),
                transient=error.transient,
                response_id=_response_id(response),
            ),
        )

    def _incomplete(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        response = object_field(payload.get("response"), "response")
        details = response.get("incomplete_details")
        reason = details.get("reason") if type(details) is dict else None
        reason_text = reason if type(reason) is str and reason else "unknown"
        return (
            ProviderReportedFailure(
                FailureKind.RESPONSE_INCOMPLETE,
                f"response incomplete: {reason_text}",
                reason_text,
                _usage(response.get("usage")),
                truncated=reason_text == "max_output_tokens",
                response_id=_response_id(response),
            ),
        )

    def _error(self, payload: dict[str, Any]) -> Sequence[StreamEvent]:
        # Nested (`{"type": "error", "error": {...}}`) or flat (`{"type": "error", "code",
        # "message"}`): the flat form's own `type` is the event's, not an error type.
        nested = payload.get("error")
        error = nested if type(nested) is dict else {**payload, "type": None}
        return (provider_error(error),)


def _output_items(item: dict[str, Any], call_kinds: frozenset[str]) -> list[OutputItem]:
    kind = item.get("type")
    if _is_call(item, call_kinds):
        return [_call_of(item)]
    if kind == _REASONING:
        return [OutputNative("reasoning", item)]
    if kind in PROVIDER_OUTPUT_ITEMS and item.get("execution") != "client":
        return [OutputNative("provider_output", item)]
    if kind == "message":
        content = item.get("content", [])
        if type(content) is not list:
            raise malformed("message content must be a list")
        parts: list[OutputItem] = []
        item_id = optional_string_field(item.get("id"), "item.id")
        for raw in content:
            part = object_field(raw, "content part")
            if part.get("type") == "output_text":
                parts.append(
                    OutputText(string_field(part.get("text"), "output_text.text"), item_id)
                )
            elif part.get("type") == "refusal":
                parts.append(OutputRefusal(string_field(part.get("refusal"), "refusal"), item_id))
            else:
                parts.append(UnsupportedOutput(f"message content {part.get('type')!s}"))
        return parts
    return [UnsupportedOutput(str(kind))]


# Responses' usage fields in lockgate's terms (`input_tokens` counts cached input already).
USAGE_FIELDS = UsageFields(
    input=(("input_tokens",),),
    output=(("output_tokens",),),
    cached=(("input_tokens_details", "cached_tokens"),),
    reasoning=(("output_tokens_details", "reasoning_tokens"),),
    cache_write=(("input_tokens_details", "cache_write_tokens"),),
    total=(("total_tokens",),),
)


def _usage(raw: object) -> Usage | None:
    return usage_from(raw, USAGE_FIELDS)
