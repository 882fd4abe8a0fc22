"""In-process replay: a Transport that serves scripted turns as SSE bytes.

The bytes go through the same SSE decoder, provider decoder and gate as live traffic; only
the socket is missing. It records every request and whether each stream was closed.
"""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping, Sequence
from typing import Any

from ..errors import OpenFailure
from ..retry import classify_http_failure
from .script import Turn, fragments, sse_bytes


class ScriptedStream:
    def __init__(self, turn: Turn, paused: asyncio.Event) -> None:
        self._turn = turn
        self._paused = paused
        self.close_calls = 0

    @property
    def closed(self) -> bool:
        return self.close_calls > 0

    async def __aiter__(self) -> AsyncIterator[bytes]:
        payload = b"".join(sse_bytes(event) for event in self._turn.events)
        for chunk in fragments(payload):
            await asyncio.sleep(0)  # a real stream yields to the loop between reads
            yield chunk
        if self._turn.end == "hang":
            self._paused.set()
            await asyncio.Event().wait()  # silent until cancelled

    async def aclose(self) -> None:
        self.close_calls += 1
        if self._turn.close_fails:
            raise OSError("simulated failure while closing the stream")


class ReplayTransport:
    """Serves one scripted turn per `open`; the script running out is a test error."""

    def __init__(self, turns: Sequence[Turn]) -> None:
        self._turns = list(turns)
        self.requests: list[Mapping[str, Any]] = []
        self.streams: list[ScriptedStream] = []
        self.paused = asyncio.Event()  # set when a stream goes silent (`end="hang"`)
        self.closed = False

    async def open(self, request: Mapping[str, Any]) -> ScriptedStream:
        self.requests.append(request)
        if not self._turns:
            raise OpenFailure("replay script exhausted: no turn for this request", retryable=False)
        turn = self._turns.pop(0)
        await asyncio.sleep(0)
        if turn.connection_error:
            raise OpenFailure("connection failed: simulated connection reset", retryable=True)
        if turn.status != 200:
            raise classify_http_failure(turn.status, turn.body)
        stream = ScriptedStream(turn, self.paused)
        self.streams.append(stream)
        return stream

    async def aclose(self) -> None:
        self.closed = True
