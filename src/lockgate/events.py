"""Normalized events: the only vocabulary between provider decoders, the gate, the loop and
observers (the terminal display and `--json`).

Provider decoders turn native wire events into `StreamEvent`s; the words are no provider's
own. The gate consumes those and publishes progress; the client and the loop publish the
rest. Observers see `Event`s and never authorize anything.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, fields
from typing import Any, Literal, TypeVar

from .conversation import JSONObject, Message, NativeKind, StopReason, ToolCall, Usage
from .errors import FailureKind

_Class = TypeVar("_Class", bound=type)
_VARIADIC = 0x04 | 0x08  # CO_VARARGS | CO_VARKEYWORDS


def fast_init(cls: _Class) -> _Class:
    """Give a frozen, slotted dataclass a faster `__init__`: the same signature (parameter
    names, kinds and defaults, copied from the dataclass's own), setting each slot through
    its member descriptor instead of `object.__setattr__` by name. Instances stay the same
    frozen values (equality, hashing, repr, `dataclasses.replace`); only construction is
    quicker (about 0.2-0.3 µs saved per event on the hot path).
    """
    original: Any = cls.__dict__["__init__"]
    code = original.__code__
    positional = code.co_varnames[1 : code.co_argcount]
    keyword = code.co_varnames[code.co_argcount : code.co_argcount + code.co_kwonlyargcount]
    names = (*positional, *keyword)
    if (
        code.co_flags & _VARIADIC
        or set(names) != {f.name for f in fields(cls)}
        or hasattr(cls, "__post_init__")
    ):
        raise TypeError(f"{cls.__name__}: not a plain dataclass __init__")
    namespace: dict[str, Any] = {}
    for name in names:
        slot: Any = cls.__dict__.get(name) or getattr(cls, name, None)
        if type(slot).__name__ != "member_descriptor":
            raise TypeError(f"{cls.__name__}.{name} is not a slot")
        namespace[f"_set_{name}"] = slot.__set__
    parameters = ["self", *positional, *(["*", *keyword] if keyword else [])]
    body = "".join(f"    _set_{name}(self, {name})\n" for name in names) or "    pass\n"
    exec(f"def __init__({', '.join(parameters)}):\n{body}", namespace)
    init = namespace["__init__"]
    init.__defaults__ = original.__defaults__
    init.__kwdefaults__ = original.__kwdefaults__
    init.__annotations__ = original.__annotations__
    init.__qualname__ = f"{cls.__qualname__}.__init__"
    init.__module__ = cls.__module__
    type.__setattr__(cls, "__init__", init)
    return cls


# A call's form (`ToolCallStarted.form`): its arguments a JSON object, or free text (the
# Responses API's custom tools); any other form is a client-executed built-in tool's item type.
CALL_FUNCTION = "function"
CALL_CUSTOM = "custom"

_FOLD = 64  # fragments joined into one block (a module global: cheaper than self.FOLD)


class TextBuffer:
    """Text that arrives in fragments, retained compactly (the gate's text and arguments, a
    decoder's thinking or refusal text).

    Every 64 fragments are joined into one block, and a block absorbs the blocks before it
    while they are not at least twice its length, so block lengths halve from first to last:
    a buffer holds O(log n) blocks plus at most 63 pending fragments, whatever the fragment
    sizes. One-character deltas then cost about their characters, not an object (and a list
    slot) per fragment, and each character is copied O(log n) times. Empty fragments are
    dropped (they change nothing and would otherwise be retained).
    """

    __slots__ = ("_blocks", "_pending", "chars")

    FOLD = _FOLD

    def __init__(self, first: str = "") -> None:
        self._blocks: list[str] = []
        self._pending: list[str] = [first] if first else []
        self.chars = len(first)

    def append(self, text: str) -> None:
        if not text:
            return
        pending = self._pending
        pending.append(text)
        self.chars += len(text)
        if len(pending) >= _FOLD:
            self._fold()

    def _fold(self) -> None:
        block = "".join(self._pending)
        self._pending.clear()
        blocks = self._blocks
        while blocks and len(blocks[-1]) < 2 * len(block):
            block = blocks.pop() + block
        blocks.append(block)

    def value(self) -> str:
        """The whole text (joined once; appending may continue)."""
        if self._pending:
            self._fold()
        blocks = self._blocks
        if len(blocks) > 1:
            self._blocks = blocks = ["".join(blocks)]
        return blocks[0] if blocks else ""


# --- produced by provider decoders -------------------------------------------------------

# The bound on all native output one response may retain (`GateLimits.max_native_bytes`);
# decoders that keep native output before the gate sees it bound it by the same figure.
MAX_NATIVE_BYTES = 4 * 1024 * 1024


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class StreamEvent:
    """Base of decoder output. `response_id` is set when the native event named its response
    in a way that is a safety signal (the gate then checks it is the same response)."""

    response_id: str | None = None


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseStarted(StreamEvent):
    """The provider opened a response (must come first, exactly once, with an id).
    `model`: the response's model as the stream stated it at its start (None: not stated);
    observers report it (`gen_ai.response.model`), nothing decides on it."""

    model: str | None = None


@fast_init
@dataclass(frozen=True, slots=True, kw_only=True)
class ResponseProgress(StreamEvent):
    """A lifecycle heartbeat (in progress, a ping, a provider-side tool working).
    `content=True`: the provider began output that lockgate keeps but does not show (an
    encrypted reasoning entry, a server tool block) — the response has produced content, so
    it is no longer a stream that never started."""

    content: bool = False


@fast_init
@dataclass(frozen=True, slots=True)
class TextDelta(StreamEvent):
    text: str


@fast_init
@dataclass(frozen=True, slots=True)
class RefusalDelta(StreamEvent):
    """A piece of a refusal: shown, but kept apart from the answer text."""

    text: str


@fast_init
@dataclass(frozen=True, slots=True)
class ReasoningDelta(StreamEvent):
    """Reasoning progress, kept apart from answer text: a summary or raw reasoning text."""

    text: str
    kind: Literal["summary", "raw"] = "summary"


@fast_init
@dataclass(frozen=True, slots=True)
class ToolCallStarted(StreamEvent):
    """A call began. `key` routes its later fragments (the decoder's choice: an item id, a
    block index, a chunk index and id); `call_id` and `name` may still be empty and arrive
    later (`ToolCallIdentified`). `namespace`: the group of tools its name belongs to (""
    for none); `form`: what its arguments are (`CALL_FUNCTION`: a JSON object;
    `CALL_CUSTOM`: free text; anything else: the item type of a client-executed built-in
    tool, its arguments the item's action as compact JSON)."""

    key: str
    call_id: str
    name: str
    arguments: str = ""
    namespace: str = ""
    form: str = "function"


@fast_init
@dataclass(frozen=True, slots=True)
class ToolCallIdentified(StreamEvent):
    """A later id or name for an open call. Values are set, never concatenated; an empty
    string means "not stated here"."""

    key: str
    call_id: str = ""
    name: str = ""


@fast_init
@dataclass(frozen=True, slots=True)
class ToolArgumentsDelta(StreamEvent):
    key: str
    delta: str


@fast_init
@dataclass(frozen=True, slots=True)
class NativeOutput(StreamEvent):
    """An opaque native item completed in the stream (reasoning output at its end, a
    provider-executed tool's output, reasoning fields a server wants back). It becomes part of
    the response's output in stream order; it never authorizes anything."""

    kind: NativeKind
    item: JSONObject
    size: int = 0  # its size on the wire (bytes), for the gate's bound on retained output


@fast_init
@dataclass(frozen=True, slots=True)
class ProviderReportedFailure(StreamEvent):
    """The stream says the response failed. The decoder chose the `kind` (provider_error,
    response_failed, response_incomplete, lifecycle …). `truncated`: cut off by the
    output-token limit. `transient`: the provider's error type says a retry may succeed
    (used only to retry a stream that never started, when that is enabled)."""

    kind: FailureKind
    message: str
    code: str | None = None
    usage: Usage | None = None
    truncated: bool = False
    transient: bool = False


@fast_init
@dataclass(frozen=True, slots=True)
class OutputText:
    text: str
    item_id: str = ""


@fast_init
@dataclass(frozen=True, slots=True)
class OutputRefusal:
    text: str
    item_id: str = ""


@fast_init
@dataclass(frozen=True, slots=True)
class OutputCall:
    """A call of the terminal snapshot (`ToolCallStarted` says what each field is)."""

    key: str
    call_id: str
    name: str
    arguments: str
    namespace: str = ""
    form: str = "function"


@fast_init
@dataclass(frozen=True, slots=True)
class OutputNative:
    """A native item of the terminal snapshot, opaque to lockgate, replayed unchanged."""

    kind: NativeKind
    item: JSONObject


@fast_init
@dataclass(frozen=True, slots=True)
class UnsupportedOutput:
    item_type: str


OutputItem = OutputText | OutputRefusal | OutputCall | OutputNative | UnsupportedOutput

# Normalized finish reasons of a successful completion (decoders translate native ones).
FINISH_WITH_CALLS = "tool_calls"
FINISH_WITHOUT_CALLS = "stop"
FINISH_PAUSED = "pause_turn"  # the provider paused its own work; no local call runs
FINISH_REFUSED = "refusal"  # the model refused; no call runs


@fast_init
@dataclass(frozen=True, slots=True)
class ResponseCompleted(StreamEvent):
    """The protocol's terminal success. `finish_reason` is the provider's stated reason
    translated by its decoder (`tool_calls`, `stop`, `pause_turn`, `refusal`), or None if
    it states none (the calls then imply it). `output` is the provider's own final output
    snapshot where the protocol has one (the gate then checks it against what streamed);
    None means the gate builds the decision from the streamed parts itself; `call_order`
    then names the streamed calls' keys in the order the protocol defines, where that is
    not the order they began in (Chat's `index`)."""

    finish_reason: str | None = None
    usage: Usage | None = None
    output: tuple[OutputItem, ...] | None = None
    refusal_detail: str = ""  # why the model refused, where the provider says
    call_order: tuple[str, ...] | None = None


# --- published by the gate, the client and the loop --------------------------------------


@fast_init
@dataclass(frozen=True, slots=True)
class ToolArgumentProgress:
    """Argument characters buffered so far for one call; execution still waits."""

    call_id: str
    name: str
    chars: int


@fast_init
@dataclass(frozen=True, slots=True)
class Retrying:
    """Opening failed retryably; another attempt follows after `delay` seconds."""

    attempt: int
    max_attempts: int
    delay: float
    reason: str


@fast_init
@dataclass(frozen=True, slots=True)
class UsageReported:
    """Token usage of one response (completed, incomplete or failed)."""

    usage: Usage


@fast_init
@dataclass(frozen=True, slots=True)
class DecisionReady:
    """A complete, validated response whose stream was closed cleanly."""

    message: Message
    finish_reason: str
    usage: Usage | None


@fast_init
@dataclass(frozen=True, slots=True)
class Recovering:
    """A rejected batch or a truncated response became `error:` observations (`--recover`)."""

    kind: str
    calls: int
    consecutive: int
    budget: int


@fast_init
@dataclass(frozen=True, slots=True)
class ResponseFailed:
    """A response failed; nothing it requested runs."""

    kind: str
    message: str
    partial_text: str


@fast_init
@dataclass(frozen=True, slots=True)
class ToolStarted:
    call: ToolCall


@fast_init
@dataclass(frozen=True, slots=True)
class ToolFinished:
    call_id: str
    name: str
    output: str


@fast_init
@dataclass(frozen=True, slots=True)
class RunStopped:
    reason: StopReason | Literal["provider_failure", "interrupted"]
    detail: str = ""


Event = (
    ResponseStarted
    | TextDelta
    | RefusalDelta
    | ReasoningDelta
    | UsageReported
    | Recovering
    | ToolCallStarted
    | ToolArgumentProgress
    | Retrying
    | DecisionReady
    | ResponseFailed
    | ToolStarted
    | ToolFinished
    | RunStopped
)

Observer = Callable[[Event], None]


def ignore_event(event: Event) -> None:
    """An observer that discards everything."""


class UsageMeter:
    """An observer that sums every reported usage (completed, incomplete or failed).
    `reported` stays False when no response reported any usage."""

    def __init__(self) -> None:
        self.total = Usage()
        self.reported = False

    def __call__(self, event: Event) -> None:
        if isinstance(event, UsageReported):
            self.total += event.usage
            self.reported = True

    @property
    def usage(self) -> Usage | None:
        """The sum, or None when no response reported usage ("not reported", never 0)."""
        return self.total if self.reported else None


def fan_out(*observers: Observer) -> Observer:
    """One observer that forwards each event to every observer, in order."""

    def forward(event: Event) -> None:
        for observer in observers:
            observer(event)

    return forward
