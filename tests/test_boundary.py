from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from lockgate.client import StreamingModelClient
from lockgate.conversation import Message
from lockgate.errors import FailureKind, OpenFailure, ResponseFailure, StreamInterrupted
from lockgate.events import DecisionReady, ResponseFailed, Retrying
from lockgate.fixture import ALL_TOOLS
from lockgate.providers.responses.codec import ResponsesCodec
from lockgate.providers.responses.render import ResponseBuilder, sse_bytes
from lockgate.retry import RetryPolicy
from lockgate.scripted.script import Faults, Turn

from .helpers import EDIT, Recorder, edit_turn, replay_client, text_turn

HISTORY = [Message("user", "fix it")]
SERVER_ERROR = {"error": {"message": "overloaded", "code": "server_error"}}


async def test_success_returns_validated_decision_and_closes_stream() -> None:
    client, transport, recorder = replay_client([edit_turn()])
    decision = await client.complete(HISTORY, ALL_TOOLS)
    assert [call.name for call in decision.tool_calls] == ["edit"]
    assert dict(decision.tool_calls[0].arguments) == EDIT
    assert transport.streams[0].closed
    assert isinstance(recorder.events[-1], DecisionReady)


async def test_retryable_opening_failures_are_retried_three_times_at_most() -> None:
    turns = [
        Turn(status=503, body=SERVER_ERROR),
        Turn(connection_error=True),
        Turn(status=500, body=SERVER_ERROR),
    ]
    client, transport, recorder = replay_client(turns)
    with pytest.raises(OpenFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.status == 500
    assert len(transport.requests) == 3
    retries = [event for event in recorder.events if isinstance(event, Retrying)]
    assert [(r.attempt, r.max_attempts) for r in retries] == [(2, 3), (3, 3)]
    # 0.25·2ⁿ s with ±10% jitter, and the sleep was injected (no wall time).
    assert 0.225 <= recorder.sleeps[0] <= 0.275
    assert 0.45 <= recorder.sleeps[1] <= 0.55


async def test_retry_then_success() -> None:
    client, transport, _ = replay_client([Turn(status=503, body=SERVER_ERROR), text_turn()])
    decision = await client.complete(HISTORY, ALL_TOOLS)
    assert decision.content == "All done."
    assert len(transport.requests) == 2
    assert transport.requests[0] == transport.requests[1]


@pytest.mark.parametrize("status", [400, 401, 403, 404, 422])
async def test_other_statuses_are_not_retried(status: int) -> None:
    client, transport, recorder = replay_client(
        [Turn(status=status, body={"error": {"message": "no"}}), text_turn()]
    )
    with pytest.raises(OpenFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.retryable is False
    assert len(transport.requests) == 1
    assert recorder.sleeps == []


def test_backoff_schedule() -> None:
    policy = RetryPolicy(jitter=0)
    assert [policy.backoff(n) for n in (1, 2, 3)] == [0.25, 0.5, 1.0]


async def test_stream_failures_are_never_retried() -> None:
    cut = ResponseBuilder("resp_1").created().call("fc_1", "call_1", "edit", EDIT).turn()
    client, transport, recorder = replay_client([cut, edit_turn()])
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.kind is FailureKind.STREAM_ENDED
    assert len(transport.requests) == 1
    assert transport.streams[0].closed
    assert isinstance(recorder.events[-1], ResponseFailed)


async def test_empty_stream_is_a_failure_not_a_retry() -> None:
    client, transport, _ = replay_client([Turn(events=()), text_turn()])
    with pytest.raises(ResponseFailure, match="without a terminal event"):
        await client.complete(HISTORY, ALL_TOOLS)
    assert len(transport.requests) == 1


class FakeStream:
    def __init__(
        self, chunks: list[bytes], *, error_after: int | None = None, close_error: bool = False
    ) -> None:
        self.chunks = chunks
        self.error_after = error_after
        self.close_error = close_error
        self.closed = False

    async def __aiter__(self) -> AsyncIterator[bytes]:
        for index, chunk in enumerate(self.chunks):
            if index == self.error_after:
                raise StreamInterrupted("ReadError: connection reset by peer")
            yield chunk

    async def aclose(self) -> None:
        self.closed = True
        if self.close_error:
            raise OSError("close failed")


class FakeTransport:
    def __init__(self, stream: FakeStream) -> None:
        self.stream = stream
        self.opens = 0

    async def open(self, request: Mapping[str, Any], *, attempt: int = 0) -> FakeStream:
        self.opens += 1
        return self.stream

    async def aclose(self) -> None:
        pass


def edit_chunks() -> list[bytes]:
    return [
        sse_bytes(e)
        for e in ResponseBuilder("resp_1")
        .created()
        .call("fc_1", "call_1", "edit", EDIT)
        .completed()
        .events
    ]


async def test_transport_error_mid_stream_fails_without_second_request() -> None:
    stream = FakeStream(edit_chunks(), error_after=3)
    transport = FakeTransport(stream)
    client = StreamingModelClient(ResponsesCodec("m"), transport)
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.kind is FailureKind.TRANSPORT
    assert transport.opens == 1
    assert stream.closed


async def test_cleanup_failure_withholds_a_valid_decision() -> None:
    stream = FakeStream(edit_chunks(), close_error=True)
    recorder = Recorder()
    client = StreamingModelClient(ResponsesCodec("m"), FakeTransport(stream), observer=recorder)
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.kind is FailureKind.CLEANUP
    assert not any(isinstance(event, DecisionReady) for event in recorder.events)


async def test_oversized_frame_fails_the_response() -> None:
    giant = b"data: " + b"x" * 5000
    stream = FakeStream([giant[i : i + 100] for i in range(0, len(giant), 100)])
    transport = FakeTransport(stream)
    client = StreamingModelClient(ResponsesCodec("m"), transport, max_event_bytes=1024)
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.kind is FailureKind.BOUND_EXCEEDED
    assert transport.opens == 1
    assert stream.closed


async def test_cancellation_closes_the_stream() -> None:
    hang = (
        ResponseBuilder("resp_1")
        .created()
        .call("fc_1", "call_1", "edit", '{"path": ', finish=False)
        .turn(faults=Faults(end="hang"))
    )
    client, transport, _ = replay_client([hang])
    task = asyncio.create_task(client.complete(HISTORY, ALL_TOOLS))
    await asyncio.wait_for(transport.paused.wait(), 5)
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert transport.streams[0].closed
