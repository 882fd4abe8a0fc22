"""The model client: `complete(history, tools) -> Message`, the rest of the invariant.

Only opening a stream is retried (and, when enabled, a stream that failed transiently before
any content arrived). Once content of a response has arrived, every failure fails that
response without a second request. One silence limit applies from the request onwards
(waiting for the response head included), one deadline bounds the whole response, the
stream is closed on success, failure and cancellation, and a failure to close prevents
dispatch. The body is read to its end before anything is released: an event after the
terminal event fails the response, whichever read it arrives in, and a body that ends inside
an event was cut.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
from collections.abc import Callable, Sequence
from typing import Protocol

from .codec import FramedCodec, Framer, ProviderCodec, StreamDecoder
from .conversation import Message, ToolSpec
from .credentials import Redactor
from .errors import FailureKind, OpenFailure, ResponseFailure, StreamInterrupted
from .events import DecisionReady, Observer, ResponseFailed, Retrying, ignore_event
from .gate import Decision, GateLimits, ResponseGate
from .retry import RetryPolicy, Sleep
from .sse import DEFAULT_MAX_EVENT_BYTES, ServerSentEvent, SSEDecoder
from .transport import ByteStream, Transport, check_timeout

__all__ = [
    "DEFAULT_DEADLINE_SECONDS",
    "DEFAULT_IDLE_TIMEOUT_SECONDS",
    "ModelClient",
    "StreamingModelClient",
]

DEFAULT_IDLE_TIMEOUT_SECONDS = 60.0
DEFAULT_DEADLINE_SECONDS = 600.0


class ModelClient(Protocol):
    """What the agent loop awaits each turn."""

    async def complete(self, history: Sequence[Message], tools: Sequence[ToolSpec]) -> Message: ...


class _Watchdog:
    """One timer per response for the silence limit, re-armed from a timestamp: touching it
    on every read costs a clock read, and nothing is retained per chunk. Disarmed (while a
    retry waits, or the stream is being closed) it holds no timer at all."""

    __slots__ = ("_cancelling", "_handle", "_loop", "_task", "fired", "idle", "last")

    def __init__(self, idle: float) -> None:
        self._loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        self._task = task
        self._cancelling = task.cancelling()
        self.idle = idle
        self.last = self._loop.time()
        self.fired = False
        self._handle: asyncio.TimerHandle | None = None

    def arm(self) -> None:
        """Start the silence limit from now."""
        self.disarm()
        self.last = self._loop.time()
        self._handle = self._loop.call_at(self.last + self.idle, self._check)

    def disarm(self) -> None:
        if self._handle is not None:
            self._handle.cancel()
            self._handle = None

    def touch(self) -> None:
        self.last = self._loop.time()

    def _check(self) -> None:
        due = self.last + self.idle
        if self._loop.time() < due:  # bytes arrived meanwhile: wait for the new due time
            self._handle = self._loop.call_at(due, self._check)
            return
        self._handle = None
        self.fired = True
        self._task.cancel()

    def absorb(self) -> bool:
        """After a CancelledError: True if it was this watchdog's alone (its cancellation is
        then undone). If someone else cancelled too, theirs stands."""
        if not self.fired:
            return False
        self.fired = False
        return self._task.uncancel() <= self._cancelling


class StreamingModelClient:
    """Encodes, opens with retry, decodes, gates and closes one response per call."""

    def __init__(
        self,
        codec: ProviderCodec,
        transport: Transport,
        *,
        observer: Observer = ignore_event,
        retry: RetryPolicy | None = None,
        limits: GateLimits | None = None,
        max_event_bytes: int = DEFAULT_MAX_EVENT_BYTES,
        idle_timeout: float = DEFAULT_IDLE_TIMEOUT_SECONDS,
        deadline: float = DEFAULT_DEADLINE_SECONDS,
        sleep: Sleep = asyncio.sleep,
        rng: random.Random | None = None,
        redactor: Redactor | None = None,
    ) -> None:
        self.codec = codec
        self.transport = transport
        self.observer = observer
        self.retry = retry or RetryPolicy()
        self.limits = limits or GateLimits()
        self.max_event_bytes = max_event_bytes
        self.idle_timeout = check_timeout(idle_timeout, "idle_timeout")
        self.deadline = check_timeout(deadline, "deadline")
        self.sleep = sleep
        self.rng = rng
        # Server text in failures never carries the credential (the transport knows it).
        self.redact: Callable[[str], str] = (
            redactor or getattr(transport, "redactor", None) or (lambda text: text)
        )
        self.opening_attempts = 0  # total over this client's life, for reports
        self.closed = False

    async def aclose(self) -> None:
        """Close the transport; later calls to `complete` fail without a request."""
        self.closed = True
        await self.transport.aclose()

    async def complete(self, history: Sequence[Message], tools: Sequence[ToolSpec]) -> Message:
        gate = ResponseGate(tools, self.observer, self.limits)
        try:
            if self.closed:
                raise ResponseFailure(FailureKind.OPENING, "the client is closed; no request made")
            try:
                request = self.codec.encode(history, tools)
            except ValueError as exc:  # a history this provider cannot carry
                raise ResponseFailure(
                    FailureKind.OPENING, f"the request cannot be encoded, none made: {exc}"
                ) from None
            decision = await self._complete(request, gate)
        except ResponseFailure as failure:
            failure.message = self.redact(failure.message)
            failure.args = (failure.message,)
            self.observer(ResponseFailed(failure.kind, failure.message, gate.partial_text))
            raise
        message = dataclasses.replace(decision.message, producer=self.codec.producer)
        self.observer(DecisionReady(message, decision.finish_reason, decision.usage))
        return message

    async def _complete(self, request: dict[str, object], gate: ResponseGate) -> Decision:
        try:
            async with asyncio.timeout(self.deadline) as whole:
                watchdog = _Watchdog(self.idle_timeout)
                deadline_at = whole.when()
                assert deadline_at is not None
                try:
                    return await self._attempts(request, gate, watchdog, deadline_at)
                except asyncio.CancelledError:
                    if watchdog.absorb():
                        raise ResponseFailure(
                            FailureKind.IDLE_TIMEOUT,
                            f"no bytes for {self.idle_timeout:g} s; connection closed",
                        ) from None
                    raise
                finally:
                    watchdog.disarm()
        except TimeoutError:
            if not whole.expired():
                raise
            raise ResponseFailure(
                FailureKind.DEADLINE,
                f"no complete response within the {self.deadline:g} s deadline",
            ) from None

    async def _attempts(
        self,
        request: dict[str, object],
        gate: ResponseGate,
        watchdog: _Watchdog,
        deadline_at: float,
    ) -> Decision:
        attempts = self.retry.attempts
        attempt = 0
        while True:
            attempt += 1
            try:
                stream = await self._open(request, watchdog, attempt - 1)
                return await self._consume(stream, gate, watchdog, deadline_at)
            except OpenFailure as failure:
                if not failure.retryable or attempt >= attempts:
                    raise
                delay = self._delay(failure, attempt)
                self.observer(Retrying(attempt + 1, attempts, delay, self.redact(failure.message)))
                watchdog.disarm()
                await self.sleep(delay)
                gate.reset()

    async def _open(
        self, request: dict[str, object], watchdog: _Watchdog, retries: int
    ) -> ByteStream:
        self.opening_attempts += 1
        watchdog.arm()
        try:
            return await self.transport.open(request, attempt=retries)
        except asyncio.CancelledError:
            if watchdog.absorb():
                raise OpenFailure(
                    f"no response head within the {self.idle_timeout:g} s idle timeout",
                    retryable=True,
                    kind=FailureKind.IDLE_TIMEOUT,
                ) from None
            raise

    def _delay(self, failure: OpenFailure, attempt: int) -> float:
        """The server's instruction is the least wait (the backoff is the floor under it); a
        wait beyond the policy's maximum fails now rather than retrying early."""
        backoff = self.retry.backoff(attempt, self.rng)
        wanted = failure.retry_after
        if wanted is None:
            return backoff
        if wanted > self.retry.max_delay:
            raise OpenFailure(
                f"the server asked to wait {wanted:g} s before retrying, longer than the "
                f"{self.retry.max_delay:g} s maximum; not retried ({failure.message})",
                retryable=False,
                status=failure.status,
                kind=FailureKind.RETRY_WAIT_TOO_LONG,
                retry_after=wanted,
            ) from None
        # The server's wait is the least wait: never shorter than the backoff, so that a
        # `retry-after: 0` does not turn the retries into a burst.
        return max(wanted, backoff)

    async def _consume(
        self, stream: ByteStream, gate: ResponseGate, watchdog: _Watchdog, deadline_at: float
    ) -> Decision:
        try:
            decision = await self._read(stream, gate, watchdog, deadline_at)
        except BaseException as exc:  # failure or cancellation: close, then propagate
            watchdog.disarm()
            # The response already failed; that failure is what the caller sees.
            with contextlib.suppress(Exception):
                await stream.aclose()
            if isinstance(exc, StreamInterrupted):
                raise ResponseFailure(FailureKind.TRANSPORT, f"stream broke: {exc}") from None
            if isinstance(exc, ResponseFailure) and self._retry_unstarted(exc, gate):
                raise OpenFailure(
                    f"the stream failed before any content ({exc.message})",
                    retryable=True,
                    kind=exc.kind,
                ) from None
            raise
        watchdog.disarm()
        try:
            await stream.aclose()
        except Exception as exc:
            raise ResponseFailure(
                FailureKind.CLEANUP,
                f"closing the stream failed ({type(exc).__name__}); decision withheld",
            ) from None
        return decision

    def _retry_unstarted(self, failure: ResponseFailure, gate: ResponseGate) -> bool:
        """Opt-in: a transient provider error before any content counts as a failed
        opening."""
        return self.retry.retry_unstarted and failure.transient and not gate.content_started

    async def _read(
        self, stream: ByteStream, gate: ResponseGate, watchdog: _Watchdog, deadline_at: float
    ) -> Decision:
        """`deadline_at`: the loop time at which this response's deadline falls."""
        codec = self.codec
        sse: Framer = (
            codec.new_framer(self.max_event_bytes)
            if isinstance(codec, FramedCodec)
            else SSEDecoder(self.max_event_bytes)
        )
        decoder = codec.new_decoder()
        decision: Decision | None = None
        clock = asyncio.get_running_loop().time
        # The body is read to its end, within the silence limit and the deadline: a
        # decision is released only once the body has ended cleanly after it, and any
        # event after the terminal event fails the response, whichever read it came in.
        async for chunk in stream:
            watchdog.touch()
            # A huge read (a decompressed flood) is framed a slice at a time, so that the
            # deadline is looked at while it is decoded.
            pieces = (chunk,) if len(chunk) <= READ_SLICE_BYTES else _slices(chunk)
            for piece in pieces:
                decision = _advance(sse.feed(piece), decoder, gate, decision, clock, deadline_at)
        decision = _advance(sse.finish(), decoder, gate, decision, clock, deadline_at)
        if sse.cut:
            raise ResponseFailure(
                FailureKind.STREAM_ENDED,
                "the body ended inside an SSE event (the stream was cut); nothing executed",
            )
        for event in decoder.end_of_stream():
            decision = gate.accept(event) or decision
        if decision is not None:
            return decision
        raise ResponseFailure(
            FailureKind.STREAM_ENDED,
            "stream ended without a terminal event; nothing executed",
        )


DEADLINE_CHECK_EVERY = 512  # events decoded between two looks at the clock
READ_SLICE_BYTES = 256 * 1024


def _slices(chunk: bytes) -> list[bytes]:
    return [chunk[i : i + READ_SLICE_BYTES] for i in range(0, len(chunk), READ_SLICE_BYTES)]


def _advance(
    sse_events: list[ServerSentEvent],
    decoder: StreamDecoder,
    gate: ResponseGate,
    decision: Decision | None,
    clock: Callable[[], float],
    deadline_at: float,
) -> Decision | None:
    """Decode and gate every complete SSE event already received: after a decision, any
    further event fails the response (the gate accepts nothing after the terminal event).
    A read that holds very many events (a decompressed flood) is decoded without yielding,
    so the deadline is checked here too, not only by the loop's timer."""
    for number, sse_event in enumerate(sse_events, 1):
        if not number % DEADLINE_CHECK_EVERY and clock() > deadline_at:
            raise ResponseFailure(FailureKind.DEADLINE, "no complete response within the deadline")
        for event in decoder.decode(sse_event):
            result = gate.accept(event)
            if result is not None:
                decision = result
    if clock() > deadline_at:
        raise ResponseFailure(FailureKind.DEADLINE, "no complete response within the deadline")
    return decision
