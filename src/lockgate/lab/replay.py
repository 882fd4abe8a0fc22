"""In-process replay: a Transport that plays scripted turns without a socket.

The bytes are exactly those the loopback server would send (`body_actions`), and they go
through the same SSE decoder, provider decoder and gate as live traffic.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from ..errors import OpenFailure
from ..scripted.renderer import Renderer
from ..scripted.script import Turn, body_actions, play
from ..transport import ByteStream, Transport


class ScriptedStream:
    def __init__(self, turn: Turn, protocol: Renderer, paused: asyncio.Event) -> None:
        self._turn = turn
        self._protocol = protocol
        self._paused = paused
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        async for piece in play(body_actions(self._turn, self._protocol), self._paused.set):
            yield piece

    async def aclose(self) -> None:
        self.closed = True


class InstrumentedTransport:
    """Wraps any transport for the lab: records whether each acquired stream was closed,
    and makes the streams opened by the attempts numbered in `close_fails` (0-based) raise on
    close (after really closing). A client-side fault, so it works the same over both
    transports."""

    def __init__(self, inner: Transport, close_fails: frozenset[int] = frozenset()) -> None:
        self._inner = inner
        self._fails = close_fails
        self.opens = 0
        self.streams: list[TrackedStream] = []

    async def open(self, request: Mapping[str, Any], *, attempt: int = 0) -> ByteStream:
        index = self.opens
        self.opens += 1
        inner = await self._inner.open(request, attempt=attempt)
        fails = index in self._fails
        stream = TrackedStream(inner, close_fails=fails)
        self.streams.append(stream)
        return stream

    async def aclose(self) -> None:
        await self._inner.aclose()


class TrackedStream:
    def __init__(self, inner: ByteStream, *, close_fails: bool) -> None:
        self._inner = inner
        self._close_fails = close_fails
        self.closed = False

    def __aiter__(self) -> AsyncIterator[bytes]:
        return self._inner.__aiter__()

    async def aclose(self) -> None:
        await self._inner.aclose()
        self.closed = True
        if self._close_fails:
            raise OSError("simulated failure while closing the stream")


class ReplayTransport:
    """Serves one scripted turn per `open`, rendered in `provider`'s protocol and its
    failed openings classified by that provider's rules; the script running out fails the
    opening."""

    def __init__(self, turns: Sequence[Turn], provider: str | None = None) -> None:
        from ..providers.variants import lab_entry

        entry = lab_entry(provider)
        self.protocol = entry.render()
        self._classify = entry.classify_error
        self._turns = list(turns)
        self.requests: list[Mapping[str, Any]] = []
        self.streams: list[ScriptedStream] = []
        self.paused = asyncio.Event()  # set when a stream goes silent (`end="hang"`)

    async def open(self, request: Mapping[str, Any], *, attempt: int = 0) -> ScriptedStream:
        self.requests.append(request)
        if not self._turns:
            raise OpenFailure("replay script exhausted: no turn for this request", retryable=False)
        turn = self._turns.pop(0)
        await asyncio.sleep(0)
        if turn.connection_error:
            raise OpenFailure("connection failed: simulated connection reset", retryable=True)
        error = turn.opening_error(self.protocol)
        if error is not None:
            status, body, headers = error
            raise self._classify(status, body, headers)
        stream = ScriptedStream(turn, self.protocol, self.paused)
        self.streams.append(stream)
        return stream

    async def aclose(self) -> None:
        """Nothing to release: there is no connection."""
