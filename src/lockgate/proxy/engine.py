"""The gating engine: one native response stream in, the stream a client may see out.

`GatingStream` puts the gate on the wire for any protocol with a gateway
(`gateway.Gateway`, in `providers/<name>/gateway.py`). It takes the parsed native request
(its `tools` are what a call may name) and the upstream body as it arrives, and yields the
bytes for the client:

- **Event for event.** A client reads only what the gate judged: each event is sent in its
  canonical form (`sse.canonical_frame`: `event: NAME` when it has one, one `data:` line,
  LF line ends), which every SSE reader reads alike — the specification's, the official
  Python and TypeScript SDKs' (which strip U+FEFF from every line), clients that split lines
  with `str.splitlines` (U+2028, U+0085, `\x0b` …) or parse each `data:` line on its own.
  A frame that is already canonical (nearly every real one) goes out byte for byte. An
  event that states what the common readers read differently, and the decoder reads one
  way, goes out as the decoder read it (`StreamDecoder.canonical_data`: Chat's call id or
  name sent again on a later fragment, which openai-python concatenates; an index-less
  whole call, given its position as its `index`).
  Nothing else goes out: `id:` and `retry:` lines, fields no reader agrees on, frames
  without data, the events the decoder skips unread (`Gateway.skipped`: Anthropic frames
  without `event:`, a Responses `[DONE]`) and a tail no blank line ended are dropped; an
  upstream comment becomes the gateway's own keep-alive; an event no canonical form can
  carry (data that is not JSON and holds a line break or a separator; an odd event name)
  refuses the stream (`malformed_event`).
- **Forward, then hold.** Every event is forwarded as soon as it is complete and judged,
  until the first that carries a tool call or an action (a function call's start, identity
  or arguments; an item or block the gateway says begins an action: a provider-executed
  tool, an item asking the client for an action), the protocol's finish (Chat's
  `finish_reason`, Anthropic's `message_delta`) or its terminal (`response.completed`,
  Chat's `[DONE]`, `message_stop`). From there on every event is held, in order, so that
  no index or sequence number has to be rewritten; keep-alives (comments, the protocol's
  keep-alive events: `ping`) still pass at once. The bytes held are bounded per stream
  (`GatingOptions.max_held_bytes`) and, with a `HeldBudget`, across every stream of the
  process; they are kept in anonymous memory maps (`judge._HeldBytes`: what the budget
  counts is what they cost) and released in pieces, each map given back to the system as
  the release passes it.
- **The judgement** is the client's (`client.StreamingModelClient._read`): the provider's
  decoder and `gate.ResponseGate` on every event, the body read to its end, a body ending
  inside an event refused as cut, the decoder's `end_of_stream`, then the upstream closed
  (a failure to close withholds the decision), within the silence limit and the deadline;
  every bound of `GateLimits` and the per-event byte bound. The whole batch is validated:
  every call must name a tool of the request, with arguments that are a JSON object (and
  match the tool's schema with `validate_schemas`). Provider-executed items pass, as in
  `lockgate run`. A decision releases only when it releases every call that streamed (a
  refusal releases none: its calls are withheld).
- **Accepted**: the held events are released in order. Apart from keep-alives, the client
  receives exactly the upstream's events (and, for canonical frames, its bytes), those
  the decoder rewrote (`canonical_data`) as it read them.
- **Refused** (a reset, a clean end too early, silence, the deadline, a broken lifecycle,
  an invalid batch, a bound): the held frames are dropped and the stream ends with ONE
  frame, the protocol's stream error (`Gateway.refusal_frame`), which says how many tool
  calls lockgate withheld and why, marked transient where a new request may succeed
  (transport, cut or clean end, silence, deadline, a failed close, or a provider error the
  provider marks transient). A terminal is never fabricated.
- **Keep-alives**: while frames are held, the gateway's keep-alive (an SSE comment; a
  `ping` for Anthropic) goes out whenever nothing was sent for `keepalive_interval`, so that
  the client's read timeout does not fire.

The upstream is any async iterable of body bytes; any exception while reading it is a
transport break. If it has `aclose`, the engine closes it at the end, before releasing
(as the client does), and on failure or cancellation quietly. Timers run only while the
engine awaits the upstream, never while the consumer handles a yielded piece: the silence
limit counts from the start of each read; the deadline from `started_at` (a loop time, by
default when iteration starts).

**One timer per stream** (`timers._ReadTimer`, as `lockgate run` keeps one silence watchdog per
response): the silence limit, the deadline and, while frames are held, the next keep-alive
share one loop timer, armed once and re-armed only when it fires before what is due (a read
began since, a piece went out since); a read costs a clock read, not a timer of its own.
When what is due falls while the engine awaits the upstream, the timer cancels the engine's
task and the engine takes the cancellation back (a cancellation from anyone else stands). A
body that can be read again after a cancelled wait (`ResumableBody`: the proxy's upstream
body, over aiohttp's `readany`) is read in the engine's own task throughout: a keep-alive
due while it waits cancels the wait, goes out, and the read goes on. Any other iterable is
read the same way while frames are forwarded; while they are held, each read runs in a task
of its own, so that keep-alives can go out while it waits (cancelling it would end it).

**The wire** is a `Framing` (`framing/`: frames in, the client's bytes out, its keep-alive and
its refusal): SSE, as described above, unless the caller names another (`framing=`, the
target's `ProtocolTarget.framing`); the judge sees events only.

`gates`, `capped_body` and `forwarded_headers` are what a server or transport needs for the
rest: which responses are gated (a 2xx answer to a request that asks for a stream), error
bodies passed under the existing cap, and the headers to pass on.

This module is the facade: the judge (`judge.py`: `StreamJudge`, `HeldBudget`, the options and
outcomes), the clocks (`timers.py`) and the whole answer (`whole.py`: `judge_whole`) live
beside it, and their public names are importable from here as before.
"""

from __future__ import annotations

import asyncio
import contextlib
import math
import time
from collections.abc import (
    AsyncIterable,
    AsyncIterator,
    Awaitable,
    Callable,
    Mapping,
    Sequence,
)
from typing import Any, Protocol, runtime_checkable

from multidict import CIMultiDict

from ..conversation import ToolSpec
from ..errors import FailureKind, ResponseFailure
from ..events import Observer, ignore_event
from ..gate import ResponseGate
from ..gateway import HOP_BY_HOP, Gateway, ProtocolTarget
from ..http import ERROR_BODY_CAP_BYTES, describe
from ..providers.base import Provider
from .framing import framing_for
from .judge import (
    DEFAULT_KEEPALIVE_SECONDS,
    DEFAULT_MAX_HELD_BYTES,
    HOLDS,
    Accepted,
    GatingOptions,
    HeldBudget,
    Hold,
    Outcome,
    Refused,
    StreamJudge,
    _gateway,
    _unchanged,
    refusal_from,
)
from .judge import RELEASE_SLICE_BYTES as RELEASE_SLICE_BYTES  # re-exported
from .judge import _HeldBytes as _HeldBytes  # re-exported
from .timers import _EXPIRED, _next, _ReadTimer, _settle
from .whole import MAX_WHOLE_BYTES, WholeVerdict, judge_whole

__all__ = [
    "DEFAULT_KEEPALIVE_SECONDS",
    "DEFAULT_MAX_HELD_BYTES",
    "HOLDS",
    "MAX_WHOLE_BYTES",
    "Accepted",
    "GatingOptions",
    "GatingStream",
    "HeldBudget",
    "Hold",
    "Refused",
    "ResumableBody",
    "WholeVerdict",
    "capped_body",
    "forwarded_headers",
    "gates",
    "judge_whole",
]


@runtime_checkable
class ResumableBody(Protocol):
    """An upstream body read a chunk at a time (b"": it ended), whose wait may be cancelled
    without losing a byte: the next `read_chunk` goes on where the cancelled one stopped. The
    engine reads such a body in its own task even while frames are held (see the module
    docstring)."""

    read_chunk: Callable[[], Awaitable[bytes]]

    async def aclose(self) -> None: ...


class GatingStream:
    """One gated response stream: iterate it for the bytes to send to the client (once).
    `outcome` tells, after the iteration, whether it was accepted or refused (None: the
    iteration was abandoned before the end)."""

    def __init__(
        self,
        entry: Provider,
        request: Mapping[str, Any],
        upstream: AsyncIterable[bytes],
        options: GatingOptions | None = None,
        *,
        observer: Observer = ignore_event,
        redact: Callable[[str], str] | None = None,
        started_at: float | None = None,
        budget: HeldBudget | None = None,
        tools: Sequence[ToolSpec] | None = None,
        hold_preamble: bool = False,
        framing: str = "sse",
        first_content_by: float | None = None,
    ) -> None:
        self.gateway: Gateway = _gateway(entry)
        self.options = options or GatingOptions()
        # The request's tools (`tools`: already read from it by the caller).
        self.tools = (
            tuple(tools)
            if tools is not None
            else self.gateway.tools(request, validate_schemas=self.options.validate_schemas)
        )
        self.outcome: Outcome | None = None
        self._upstream = upstream
        self._observer = observer
        self._redact = redact or _unchanged
        self._started_at = started_at
        self._budget = budget
        self._hold_preamble = hold_preamble
        self._framing = framing  # the wire's (`framing.FRAMINGS`)
        # The first content (a text, a call) must come by then (loop time; None: no limit
        # apart from the silence limit): `GatingOptions.first_byte_timeout`.
        self._first_content_by = first_content_by
        self._used = False
        self._judge: StreamJudge | None = None
        self.first_read_at: float | None = None  # the upstream's first bytes (loop time)

    @property
    def sent_content(self) -> bool:
        """Whether an event (not a keep-alive) was given to send: before that, nothing of
        the response reached the client, and a retry would go unseen (`hold_preamble`)."""
        return self._judge is not None and self._judge.sent_content

    @property
    def held_from(self) -> float | None:
        """When the stream began to be held (loop time), or None."""
        return None if self._judge is None else self._judge.held_from

    def __aiter__(self) -> AsyncIterator[bytes]:
        if self._used:
            raise RuntimeError("a GatingStream is iterated once")
        self._used = True
        return self._run()

    async def _run(self) -> AsyncIterator[bytes]:
        options = self.options
        loop = asyncio.get_running_loop()
        clock = loop.time
        start = clock() if self._started_at is None else self._started_at
        deadline_at = start + options.deadline
        gate = ResponseGate(self.tools, self._observer, options.limits)
        judge = StreamJudge(
            self.gateway,
            gate,
            options.max_event_bytes,
            clock,
            deadline_at,
            options.hold,
            options.max_held_bytes,
            self._budget,
            self._hold_preamble,
            framing_for(self._framing, self.gateway, options.max_event_bytes),
        )
        self._judge = judge
        keepalive = judge.framing.keepalive()  # None: the wire has none
        upstream = self._upstream
        resumable = upstream if isinstance(upstream, ResumableBody) else None
        iterator = None if resumable is not None else aiter(upstream)
        interval = options.keepalive_interval
        idle = options.idle_timeout
        first_by = self._first_content_by
        timer = _ReadTimer(
            loop, idle, deadline_at, interval, math.inf if first_by is None else first_by
        )
        waiting_first = first_by is not None
        read: asyncio.Future[bytes | None] | None = None
        last_sent = clock()
        closed = False
        woken = False
        try:
            try:
                while True:
                    chunk: bytes | None = None
                    if resumable is not None or not judge.withholding:
                        # In this task, the one timer watching (see the module docstring).
                        timer.reading(judge.withholding, last_sent, resumed=woken)
                        woken = False
                        try:
                            if resumable is not None:
                                chunk = await resumable.read_chunk() or None
                            else:
                                assert iterator is not None
                                chunk = await anext(iterator, None)
                        except asyncio.CancelledError:
                            why = timer.read()
                            if why is None:
                                raise
                            if why == _EXPIRED:
                                if timer.expired_by_first_byte():
                                    raise self._no_first_content() from None
                                raise self._expired(timer.expired_by_deadline()) from None
                            woken = True
                        except Exception as exc:
                            timer.read()
                            raise _broke(exc) from None
                        else:
                            timer.read()
                        if woken:  # a keep-alive fell due: it goes out, the read goes on
                            if keepalive is not None:
                                yield keepalive
                            last_sent = clock()
                            continue
                    else:
                        # Held, from a body a cancelled wait would end: the read runs in a
                        # task of its own while keep-alives go out.
                        assert iterator is not None
                        read_from = clock()
                        read = asyncio.ensure_future(_next(iterator))
                        first = first_by if waiting_first and first_by is not None else math.inf
                        while True:
                            now = clock()
                            expiry = min(read_from + idle, deadline_at, first)
                            wake = min(expiry, last_sent + interval)
                            done, _ = await asyncio.wait((read,), timeout=max(0.0, wake - now))
                            if done:
                                break
                            now = clock()
                            if now >= expiry:
                                await _settle(read)
                                read = None
                                if now >= first and first < min(read_from + idle, deadline_at):
                                    raise self._no_first_content()
                                raise self._expired(now >= deadline_at)
                            if now >= last_sent + interval:
                                if keepalive is not None:
                                    yield keepalive
                                last_sent = clock()
                        try:
                            chunk = read.result()
                        except Exception as exc:
                            raise _broke(exc) from None
                        finally:
                            read = None
                    if chunk is None:
                        break
                    if self.first_read_at is None:
                        self.first_read_at = time.monotonic()  # observers' clock
                    failure: BaseException | None = None
                    try:
                        judge.take(chunk)
                    except Exception as exc:  # ResponseFailure, or a bug to report as one
                        failure = exc
                    if waiting_first and judge.gate.content_started:
                        waiting_first = False
                        timer.content_came()
                    data = judge.drain()
                    if data:
                        yield data
                        last_sent = clock()
                    if failure is not None:
                        raise failure
                    if judge.withholding and clock() >= last_sent + interval:
                        if keepalive is not None:
                            yield keepalive
                        last_sent = clock()
                timer.stop()
                released = judge.end()
                await self._close(iterator, quietly=False)
            except Exception as exc:
                closed = True
                timer.stop()
                data = judge.drain()  # judged and forwardable before the refusal
                await _settle(read)
                read = None
                await self._close(iterator, quietly=True)
                if data:
                    yield data
                yield self._refuse(exc, judge)
                return
            closed = True
            assert judge.decision is not None
            self.outcome = Accepted(judge.decision)
            held = judge.held.size
            if held and len(released) + held <= RELEASE_SLICE_BYTES:
                yield b"".join([released, *judge.released()])  # one write, as ever
            else:
                if released:
                    yield released
                for piece in judge.released():  # in pieces: never a copy of all held
                    yield piece
        finally:
            # Abandoned (the consumer closed the iteration, or was cancelled): nothing
            # more is read, and the upstream is closed.
            timer.stop()
            judge.give_back()
            try:
                await _settle(read)
            finally:
                if not closed:
                    await self._close(iterator, quietly=True)

    def _expired(self, by_deadline: bool) -> ResponseFailure:
        if by_deadline:
            return ResponseFailure(
                FailureKind.DEADLINE,
                f"no complete response within the {self.options.deadline:g} s deadline",
            )
        return ResponseFailure(
            FailureKind.IDLE_TIMEOUT,
            f"no bytes for {self.options.idle_timeout:g} s; connection closed",
        )

    def _no_first_content(self) -> ResponseFailure:
        limit = self.options.first_byte_timeout
        return ResponseFailure(
            FailureKind.IDLE_TIMEOUT,
            f"no content within the {limit:g} s first-byte timeout; connection closed",
        )

    async def _close(self, iterator: AsyncIterator[bytes] | None, *, quietly: bool) -> None:
        """Close the body: the iterator (an async generator left suspended), then the
        upstream itself; a failure to close it after the body ended withholds the
        decision."""
        if iterator is not None and iterator is not self._upstream:
            finish = getattr(iterator, "aclose", None)
            if finish is not None:
                with contextlib.suppress(Exception):
                    await finish()
        close = getattr(self._upstream, "aclose", None)
        if close is None:
            return
        try:
            await close()
        except Exception as exc:
            if not quietly:
                raise ResponseFailure(
                    FailureKind.CLEANUP,
                    f"closing the stream failed ({type(exc).__name__}); decision withheld",
                ) from None

    def _refuse(self, exc: BaseException, judge: StreamJudge) -> bytes:
        refused = refusal_from(exc, judge.calls, self._redact)
        self.outcome = refused
        return judge.framing.refusal(refused.refusal, judge.last)


def _broke(exc: BaseException) -> ResponseFailure:
    return ResponseFailure(FailureKind.TRANSPORT, f"stream broke: {describe(exc)}")


# --- what a server or transport needs besides the stream -----------------------------------


def gates(
    gateway: Gateway,
    request: Mapping[str, Any],
    status: int,
    target: ProtocolTarget,
) -> bool:
    """Whether a response goes through the engine: a 2xx answer to a request that asks for
    a stream (its path, as `target` says, else its body). Anything else (a non-streaming
    request, an error status) passes as it came."""
    return 200 <= status < 300 and gateway.wants_stream(request, target)


async def capped_body(
    upstream: AsyncIterable[bytes], cap: int = ERROR_BODY_CAP_BYTES
) -> AsyncIterator[bytes]:
    """An error body as it came, its first `cap` bytes (the cap lockgate reads error bodies
    under); the rest is never read. A body that breaks off ends with what arrived."""
    sent = 0
    iterator = aiter(upstream)
    try:
        while sent < cap:
            try:
                piece = await anext(iterator, None)
            except Exception:
                return
            if piece is None:
                return
            piece = piece[: cap - sent]
            sent += len(piece)
            if piece:
                yield piece
    finally:
        for target in (iterator, upstream):
            close = getattr(target, "aclose", None)
            if close is not None:
                with contextlib.suppress(Exception):
                    await close()
            if iterator is upstream:
                break


# Hop-by-hop headers and those a proxy's body changes.
_NOT_FORWARDED = HOP_BY_HOP | {
    "content-length",  # a gated or capped body has another length
    "content-encoding",  # the engine reads and sends decoded bytes
}


def forwarded_headers(headers: Mapping[str, str]) -> CIMultiDict[str]:
    """The upstream response headers to pass on (`retry-after`, rate-limit headers, request
    ids, the content type …), every value of a repeated one (a multidict's items), names in
    any letter case: all but the hop-by-hop ones, those the `Connection` headers name, and
    those the body's framing changes (the bytes passed on are the decoded body)."""
    items = list(headers.items())
    named = {
        part.strip().lower()
        for name, value in items
        if name.lower() == "connection"
        for part in value.split(",")
    }
    return CIMultiDict(
        (name, value)
        for name, value in items
        if name.lower() not in _NOT_FORWARDED and name.lower() not in named
    )
