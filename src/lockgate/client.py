"""The provider boundary: `complete(history, tools) -> Message`.

Only opening a stream is retried. Once a stream is acquired, every failure fails this
response without a second request. The stream is closed on success, failure and
cancellation, and a failure to close prevents dispatch.
"""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import random
from collections.abc import Sequence
from typing import Protocol

from .conversation import Message, ToolSpec
from .errors import FailureKind, OpenFailure, ResponseFailure, StreamInterrupted
from .events import DecisionReady, Observer, ResponseFailed, Retrying, ignore_event
from .gate import Decision, GateLimits, ResponseGate
from .providers.base import ProviderCodec, StreamDecoder
from .retry import RetryPolicy, Sleep
from .sse import DEFAULT_MAX_EVENT_BYTES, ServerSentEvent, SSEDecoder
from .transport import ByteStream, Transport

DEFAULT_IDLE_TIMEOUT_SECONDS = 60.0
DEFAULT_DEADLINE_SECONDS = 600.0


class ModelClient(Protocol):
    """What the agent loop awaits each turn."""

    async def complete(self, history: Sequence[Message], tools: Sequence[ToolSpec]) -> Message: ...


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
    ) -> None:
        self.codec = codec
        self.transport = transport
        self.observer = observer
        self.retry = retry or RetryPolicy()
        self.limits = limits or GateLimits()
        self.max_event_bytes = max_event_bytes
        if idle_timeout <= 0 or deadline <= 0:
            raise ValueError("idle_timeout and deadline must be positive")
        self.idle_timeout = idle_timeout
        self.deadline = deadline
        self.sleep = sleep
        self.rng = rng
        self.opening_attempts = 0  # total over this client's life, for reports

    async def complete(self, history: Sequence[Message], tools: Sequence[ToolSpec]) -> Message:
        request = self.codec.encode(history, tools)
        gate = ResponseGate(tools, self.observer, self.limits)
        try:
            try:
                async with asyncio.timeout(self.deadline) as whole:
                    stream = await self._open(request)
                    decision = await self._consume(stream, gate)
            except TimeoutError:
                if not whole.expired():
                    raise
                raise ResponseFailure(
                    FailureKind.DEADLINE,
                    f"no complete response within the {self.deadline:g} s deadline",
                ) from None
        except ResponseFailure as failure:
            self.observer(ResponseFailed(failure.kind, failure.message, gate.partial_text))
            raise
        message = dataclasses.replace(decision.message, producer=self.codec.producer)
        self.observer(DecisionReady(message, decision.finish_reason, decision.usage))
        return message

    async def _open(self, request: dict[str, object]) -> ByteStream:
        attempts = self.retry.attempts
        for attempt in range(1, attempts + 1):
            self.opening_attempts += 1
            try:
                return await self.transport.open(request)
            except OpenFailure as failure:
                if not failure.retryable or attempt == attempts:
                    raise
                delay = self._delay(failure, attempt)
                self.observer(Retrying(attempt + 1, attempts, delay, failure.message))
                await self.sleep(delay)
        raise AssertionError("unreachable: the loop returns or raises")

    def _delay(self, failure: OpenFailure, attempt: int) -> float:
        """The server's instruction wins; a wait beyond the policy's maximum fails now
        rather than retrying early."""
        wanted = failure.retry_after
        if wanted is None:
            return self.retry.backoff(attempt, self.rng)
        if wanted > self.retry.max_delay:
            raise OpenFailure(
                f"the server asked to wait {wanted:g} s before retrying, longer than the "
                f"{self.retry.max_delay:g} s maximum; not retried ({failure.message})",
                retryable=False,
                status=failure.status,
                kind=FailureKind.RETRY_WAIT_TOO_LONG,
                retry_after=wanted,
            ) from None
        return wanted

    async def _consume(self, stream: ByteStream, gate: ResponseGate) -> Decision:
        try:
            decision = await self._read(stream, gate)
        except BaseException as exc:  # failure or cancellation: close, then propagate
            # The response already failed; that failure is what the caller sees.
            with contextlib.suppress(Exception):
                await stream.aclose()
            if isinstance(exc, StreamInterrupted):
                raise ResponseFailure(FailureKind.TRANSPORT, f"stream broke: {exc}") from None
            raise
        try:
            await stream.aclose()
        except Exception as exc:
            raise ResponseFailure(
                FailureKind.CLEANUP,
                f"closing the stream failed ({type(exc).__name__}); decision withheld",
            ) from None
        return decision

    async def _read(self, stream: ByteStream, gate: ResponseGate) -> Decision:
        sse = SSEDecoder(self.max_event_bytes)
        decoder = self.codec.new_decoder()
        chunks = aiter(stream)
        idle = self.idle_timeout
        while True:
            try:
                async with asyncio.timeout(idle):
                    chunk = await anext(chunks)
            except StopAsyncIteration:
                break
            except TimeoutError:
                raise ResponseFailure(
                    FailureKind.IDLE_TIMEOUT, f"no bytes for {idle:g} s; connection closed"
                ) from None
            decision = _advance(sse.feed(chunk), decoder, gate)
            if decision is not None:
                return decision
        decision = _advance(sse.finish(), decoder, gate)
        if decision is not None:
            return decision
        raise ResponseFailure(
            FailureKind.STREAM_ENDED, "stream ended without a terminal event; nothing executed"
        )


def _advance(
    sse_events: list[ServerSentEvent], decoder: StreamDecoder, gate: ResponseGate
) -> Decision | None:
    """Decode and gate complete SSE events; the decision, if the terminal event was among them."""
    for sse_event in sse_events:
        event = decoder.decode(sse_event)
        if event is not None:
            decision = gate.accept(event)
            if decision is not None:
                return decision
    return None
