"""The gating engine's judge (`engine.GatingStream`, `whole.judge_whole`): sans-IO, it frames,
decodes and gates one response (`StreamJudge`), says for each event whether it goes out now or is
held, and holds what it holds in memory maps (`_HeldBytes`) under the stream's bound and the
process's `HeldBudget`; `refusal_from` words a refusal. Also what a judgement takes and gives:
`GatingOptions`, `Accepted`, `Refused`. `engine` re-exports the public names."""

from __future__ import annotations

import mmap
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import Literal

from ..client import (
    DEADLINE_CHECK_EVERY,
    DEFAULT_DEADLINE_SECONDS,
    DEFAULT_IDLE_TIMEOUT_SECONDS,
    READ_SLICE_BYTES,
)
from ..errors import FailureKind, ResponseFailure
from ..events import (
    NativeOutput,
    ResponseCompleted,
    ToolArgumentsDelta,
    ToolCallIdentified,
    ToolCallStarted,
)
from ..gate import Decision, GateLimits, ResponseGate
from ..gateway import Gateway, Refusal
from ..http import describe
from ..providers.base import Provider
from ..sse import DEFAULT_MAX_EVENT_BYTES, RawFrame, ServerSentEvent
from ..transport import check_timeout
from .framing import Framing, SSEFraming

__all__ = [
    "DEFAULT_KEEPALIVE_SECONDS",
    "DEFAULT_MAX_HELD_BYTES",
    "HOLDS",
    "MAX_MESSAGE_CHARS",
    "RELEASE_SLICE_BYTES",
    "Accepted",
    "GatingOptions",
    "HeldBudget",
    "Hold",
    "Outcome",
    "Refused",
    "StreamJudge",
    "refusal_from",
]

DEFAULT_KEEPALIVE_SECONDS = 15.0
# The raw bytes one stream may hold before its end: the gate bounds what a decision keeps
# (text, reasoning, arguments, native output); this bounds the frames around them too
# (unknown events, comments, data-less frames), which the gate never sees.
DEFAULT_MAX_HELD_BYTES = 64 * 1024 * 1024
# What the engine holds: from the first call, action or finish on (`tools`, the default), or
# only the finish and the terminal (`terminal`: calls stream live, for clients that act only
# on the terminal and want argument progress; a client that acts on arguments before the
# stream ends is then unprotected).
# What a stream holds: from its first tool call (`tools`), only its finish (`terminal`), or
# everything until it is judged complete and valid (`all`: nothing but keep-alives reaches
# the client before, so any refusal can be retried unseen).
Hold = Literal["tools", "terminal", "all"]
HOLDS: tuple[Hold, ...] = ("tools", "terminal", "all")
MAX_MESSAGE_CHARS = 2000  # of the reason a refusal states
# The held bytes of an accepted stream go out in pieces this large (one write each).
RELEASE_SLICE_BYTES = 256 * 1024

# The normalized events from which a stream is held: a call, and the terminal.
_HOLDS = frozenset({ToolCallStarted, ToolCallIdentified, ToolArgumentsDelta, ResponseCompleted})
# Refusals after which a new request may succeed, whatever the provider said.
_TRANSIENT_KINDS = frozenset(
    {
        FailureKind.TRANSPORT,
        FailureKind.STREAM_ENDED,
        FailureKind.IDLE_TIMEOUT,
        FailureKind.DEADLINE,
        FailureKind.CLEANUP,
    }
)


@dataclass(frozen=True, slots=True)
class GatingOptions:
    """How a stream is judged: the gate's bounds, the per-event byte bound, the silence
    limit and the deadline (the client's defaults), the keep-alive interval while frames
    are held, and whether calls are checked against the request's own schemas (by
    default: a schema sent upstream does not replace the host's own validation; a schema
    the gate cannot use leaves that tool's calls checked as a JSON object only)."""

    limits: GateLimits = field(default_factory=GateLimits)
    max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES
    idle_timeout: float = DEFAULT_IDLE_TIMEOUT_SECONDS
    deadline: float = DEFAULT_DEADLINE_SECONDS
    keepalive_interval: float = DEFAULT_KEEPALIVE_SECONDS
    validate_schemas: bool = True
    hold: Hold = "tools"
    max_held_bytes: int = 0  # 0: DEFAULT_MAX_HELD_BYTES
    # The longest wait for an answer's head and then its first content (a text or a call),
    # from the attempt's start, apart from the silence limit (None: the silence limit).
    first_byte_timeout: float | None = None

    def __post_init__(self) -> None:
        if self.hold not in HOLDS:
            raise ValueError(f"hold must be one of {', '.join(HOLDS)}")
        if self.first_byte_timeout is not None:
            check_timeout(self.first_byte_timeout, "first_byte_timeout")
        check_timeout(self.idle_timeout, "idle_timeout")
        check_timeout(self.deadline, "deadline")
        check_timeout(self.keepalive_interval, "keepalive_interval")
        if self.max_event_bytes <= 0:
            raise ValueError("max_event_bytes must be positive")
        if self.max_held_bytes < 0:
            raise ValueError("max_held_bytes must be 0 (the default) or positive")


@dataclass(frozen=True, slots=True)
class Accepted:
    """The stream was released: its decision (what `lockgate run` would act on)."""

    decision: Decision


@dataclass(frozen=True, slots=True)
class Refused:
    """The stream ended with the protocol's error: why (`failure`: the failure that
    refused it, when it was one)."""

    refusal: Refusal
    failure: ResponseFailure | None = None


Outcome = Accepted | Refused


class HeldBudget:
    """The bytes that every gated stream of one process may hold at once (the frames held
    until a response ends). A stream whose next frame does not fit is refused
    (`bound_exceeded`, transient: a new request may find room); the others go on. Each
    stream gives back what it took when it ends, however it ends. `on_change` hears every
    new total (the proxy's metrics). One event loop: not thread-safe."""

    __slots__ = ("held", "limit", "on_change")

    def __init__(self, limit: int, on_change: Callable[[int], None] | None = None) -> None:
        if limit < 1:
            raise ValueError("a held-bytes budget must be at least 1 byte")
        self.limit = limit
        self.held = 0  # held now, by every stream
        self.on_change = on_change

    def take(self, size: int) -> bool:
        if self.held + size > self.limit:
            return False
        self.held += size
        if self.on_change is not None:
            self.on_change(self.held)
        return True

    def give(self, size: int) -> None:
        self.held = max(0, self.held - size)
        if self.on_change is not None:
            self.on_change(self.held)


class _HeldBytes:
    """The frames one stream holds, in order, in anonymous memory maps of `SEGMENT` bytes
    each (made as needed; a page is resident once written). A frame is a few hundred bytes:
    as objects of their own they cost a third more than their bytes, fragment the heap, and
    joining them for the release made a second copy of everything held; and a buffer from
    the C heap may stay resident after it is freed. Mapped segments are given back to the
    system as the release passes them (`pieces`) or when the stream ends (`close`)."""

    __slots__ = ("_segments", "_used", "size")

    SEGMENT = 1024 * 1024

    def __init__(self) -> None:
        self._segments: list[mmap.mmap] = []
        self._used = self.SEGMENT  # of the last segment
        self.size = 0

    def append(self, data: bytes) -> None:
        used = self._used
        end = used + len(data)
        if end <= self.SEGMENT:  # the common case: it fits in the last segment
            self._segments[-1][used:end] = data
            self._used = end
            self.size += len(data)
            return
        view = memoryview(data)
        try:
            while view:
                if self._used == self.SEGMENT:
                    self._segments.append(mmap.mmap(-1, self.SEGMENT))
                    self._used = 0
                count = min(len(view), self.SEGMENT - self._used)
                self._segments[-1][self._used : self._used + count] = view[:count]
                self._used += count
                view = view[count:]
        finally:
            view.release()
        self.size += len(data)

    def pieces(self, size: int) -> Iterator[bytes]:
        """What is held, in order, in pieces of at most `size` bytes; each segment is given
        back once its last piece was taken."""
        while self._segments:
            segment = self._segments[0]
            end = self._used if len(self._segments) == 1 else self.SEGMENT
            for start in range(0, end, size):
                yield segment[start : min(end, start + size)]
            self._segments.pop(0).close()
        self.size = 0

    def close(self) -> None:
        for segment in self._segments:
            segment.close()
        self._segments.clear()
        self.size = 0


class StreamJudge:
    """Frames, decodes and gates one stream; decides per frame whether it is forwarded now
    or held. Synchronous: the engine feeds it and sends what it says."""

    __slots__ = (
        "budget",
        "budgeted",
        "calls",
        "clock",
        "deadline_at",
        "decision",
        "decoder",
        "framing",
        "gate",
        "gateway",
        "held",
        "held_bytes",
        "held_from",
        "hold_all",
        "holding",
        "last",
        "max_held",
        "out",
        "preamble",
        "sent_content",
        "terminal_only",
    )

    def __init__(
        self,
        gateway: Gateway,
        gate: ResponseGate,
        max_event_bytes: int,
        clock: Callable[[], float],
        deadline_at: float,
        hold: Hold = "tools",
        max_held: int = 0,
        budget: HeldBudget | None = None,
        hold_preamble: bool = False,
        framing: Framing | None = None,
    ) -> None:
        self.gateway = gateway
        self.terminal_only = hold == "terminal"
        self.hold_all = hold == "all"
        self.max_held = max_held or DEFAULT_MAX_HELD_BYTES
        self.held_bytes = 0
        self.budget = budget  # shared by every stream of the process, if any
        self.budgeted = 0  # what this stream took of it
        # The wire under the judge (SSE unless the caller names another): frames in, the
        # client's bytes out.
        self.framing = framing if framing is not None else SSEFraming(gateway, max_event_bytes)
        self.decoder = gateway.new_decoder()
        self.gate = gate
        self.clock = clock
        self.deadline_at = deadline_at
        self.decision: Decision | None = None
        self.holding = False
        self.held = _HeldBytes()
        self.out: list[bytes] = []  # to send now
        self.calls = 0  # tool calls that began
        self.last: ServerSentEvent | None = None  # the last event forwarded
        # The events before the first content (the start, progress), held while a failure
        # could still be retried unseen (`hold_preamble`); None: forwarded as they come.
        self.preamble: list[bytes] | None = [] if hold_preamble else None
        self.sent_content = False  # an event (not a keep-alive) was given to send
        self.held_from: float | None = None  # when holding began

    @property
    def withholding(self) -> bool:
        """Whether the client is waiting on something held (frames, the start kept for a
        retry, or everything with `hold: all`): its keep-alives are due."""
        return self.holding or self.hold_all or self.preamble is not None

    def drain(self) -> bytes:
        out = self.out
        if not out:
            return b""
        self.out = []
        return out[0] if len(out) == 1 else b"".join(out)

    def take(self, chunk: bytes) -> None:
        """Judge the frames a read completed; raise ResponseFailure to refuse."""
        if len(chunk) <= READ_SLICE_BYTES:
            self._frames(self.framing.feed(chunk))
        else:  # a huge read is framed a slice at a time, the deadline looked at between
            for start in range(0, len(chunk), READ_SLICE_BYTES):
                self._frames(self.framing.feed(chunk[start : start + READ_SLICE_BYTES]))
                self._check_deadline()
        self._check_deadline()

    def end(self) -> bytes:
        """The body ended cleanly: the judgement's last steps; the bytes to release."""
        self._frames(self.framing.finish())
        if self.framing.cut:
            raise ResponseFailure(
                FailureKind.STREAM_ENDED,
                "the body ended inside an SSE event (the stream was cut); nothing executed",
            )
        for event in self.decoder.end_of_stream():
            result = self.gate.accept(event)
            if result is not None:
                self.decision = result
        decision = self.decision
        if decision is None:
            raise ResponseFailure(
                FailureKind.STREAM_ENDED,
                "stream ended without a terminal event; nothing executed",
            )
        if len(decision.message.tool_calls) != self.calls:
            raise _ModelRefused(decision)
        # The tail (a comment no blank line ended) is not released: nothing but judged
        # events and keep-alives reaches a client. What goes before the held frames: the
        # events judged last, the start held for a retry; the held frames then follow
        # (`released`), never joined into a copy of them all.
        return b"".join([self.drain(), *(self.preamble or ())])

    def released(self) -> Iterator[bytes]:
        """The held frames, in order, in pieces of at most `RELEASE_SLICE_BYTES`."""
        return self.held.pieces(RELEASE_SLICE_BYTES)

    def _check_deadline(self) -> None:
        if self.clock() > self.deadline_at:
            raise ResponseFailure(FailureKind.DEADLINE, "no complete response within the deadline")

    def _frames(self, frames: list[RawFrame]) -> None:
        gateway = self.gateway
        framing = self.framing
        decoder = self.decoder
        gate = self.gate
        for number, frame in enumerate(frames, 1):
            if not number % DEADLINE_CHECK_EVERY:
                self._check_deadline()
            event = frame.event
            if event is None:  # no data line: nothing to decode, nothing a client may read
                if frame.keepalive:  # an upstream comment: the gateway's own keep-alive
                    keepalive = framing.keepalive()
                    if keepalive is not None:
                        self.out.append(keepalive)
                continue  # `id:`, `retry:`, fields no reader agrees on: dropped
            hold = self.holding or self.hold_all
            unreadable = gateway.unreadable_action(event)
            if unreadable is not None:
                raise ResponseFailure(FailureKind.UNSUPPORTED_OUTPUT, unreadable)
            # What the client will read of this event (None: nothing, as the decoder reads
            # nothing of it); an event no form can carry unambiguously refuses the stream.
            sent = None if gateway.skipped(event) else framing.encode(frame)
            decoded_events = decoder.decode(event)
            rewritten = decoder.canonical_data()
            if rewritten is not None and sent is not None:
                # What the readers read differently, removed: what the decoder read.
                sent = framing.frame(ServerSentEvent(event.event, rewritten))
            for decoded in decoded_events:
                kind = type(decoded)
                if kind is ToolCallStarted:
                    self.calls += 1  # before the gate: a call beyond a bound is withheld too
                result = gate.accept(decoded)
                if result is not None:
                    self.decision = result
                if kind in _HOLDS:
                    hold = hold or not self.terminal_only or kind is ResponseCompleted
                elif isinstance(decoded, NativeOutput) and decoded.kind == "provider_output":
                    hold = hold or not self.terminal_only
            if not hold:
                if self.terminal_only:
                    hold = gateway.is_finish(event)
                else:
                    hold = gateway.begins_hold(event)
            if sent is None:
                self._start_holding(hold)
            elif not hold:
                preamble = self.preamble
                if preamble is not None:
                    if not gate.content_started:
                        preamble.append(sent)  # the start: held until content comes
                        continue
                    self.out.extend(preamble)
                    self.preamble = None
                self.out.append(sent)
                self.sent_content = True
                self.last = event
            elif gateway.is_keepalive(event):
                self.out.append(sent)  # a keep-alive passes, even while holding
                self._start_holding(True)
            else:
                self._hold(sent)
                self._start_holding(True)

    def _start_holding(self, hold: bool) -> None:
        if hold and not self.holding:
            self.holding = True
            self.held_from = time.monotonic()  # observers' clock (`Flow`)

    def _hold(self, frame: bytes) -> None:
        size = len(frame)
        self.held_bytes += size
        if self.held_bytes > self.max_held:
            raise ResponseFailure(
                FailureKind.BOUND_EXCEEDED,
                f"more than {self.max_held} bytes held before the response ended",
            )
        budget = self.budget
        if budget is not None:
            if not budget.take(size):
                raise ResponseFailure(
                    FailureKind.BOUND_EXCEEDED,
                    f"the proxy holds {budget.limit} bytes of unfinished responses, its "
                    "limit; this one was refused",
                    transient=True,
                )
            self.budgeted += size
        self.held.append(frame)

    def give_back(self) -> None:
        """Return what this stream holds to the shared budget and its memory to the system
        (it ended, either way)."""
        self.held.close()
        if self.budget is not None and self.budgeted:
            self.budget.give(self.budgeted)
            self.budgeted = 0


class _ModelRefused(Exception):
    """A decision that releases fewer calls than streamed (a refusal drops them)."""

    def __init__(self, decision: Decision) -> None:
        super().__init__(decision.finish_reason)
        self.decision = decision


def refusal_from(exc: BaseException, calls: int, redact: Callable[[str], str]) -> Refused:
    """What a refusal tells the client: its kind, the sentence (how many tool calls were
    withheld, and why; redacted and bounded) and whether a new request may succeed."""
    failure: ResponseFailure | None = None
    if isinstance(exc, ResponseFailure):
        failure = exc
        kind = str(exc.kind)
        reason = exc.message
        transient = exc.transient or exc.kind in _TRANSIENT_KINDS
    elif isinstance(exc, _ModelRefused):
        kind = "model_refused"
        message = exc.decision.message
        reason = f"the model refused ({message.refusal or 'no reason given'})"
        transient = False
    else:
        kind = "internal_error"
        reason = f"lockgate could not judge the response ({describe(exc)})"
        transient = False
    reason = redact(reason).translate(_UNAMBIGUOUS)
    if len(reason) > MAX_MESSAGE_CHARS:
        reason = reason[:MAX_MESSAGE_CHARS] + "…"
    if calls:
        plural = "" if calls == 1 else "s"
        text = f"lockgate withheld {calls} tool call{plural}: {kind}: {reason}"
    else:
        text = f"lockgate refused the response: {kind}: {reason}"
    return Refused(Refusal(kind, text, transient, calls), failure)


# The characters some SSE readers split lines on that JSON writes raw (it escapes the
# control characters itself): a reason quoting the upstream (a tool's name) must not carry
# them into the refusal frame.
_UNAMBIGUOUS = str.maketrans(
    {"\x85": "\ufffd", "\u2028": "\ufffd", "\u2029": "\ufffd", "\ufeff": "\ufffd"}
)


def _unchanged(text: str) -> str:
    return text


def _gateway(entry: Provider) -> Gateway:
    if entry.gateway is None:
        raise ValueError(f"provider {entry.name!r} has no gateway")
    return entry.gateway()
