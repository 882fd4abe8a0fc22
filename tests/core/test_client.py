"""The streaming client (`client.py`): decisions, failures, bounds, reading to the end, closing."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Mapping
from typing import Any

import pytest

from lockgate.client import StreamingModelClient
from lockgate.conversation import Message
from lockgate.errors import FailureKind, ResponseFailure, StreamInterrupted
from lockgate.events import DecisionReady, ResponseFailed
from lockgate.fixture import ALL_TOOLS
from lockgate.lab.replay import ReplayTransport
from lockgate.providers import PROVIDERS
from lockgate.providers.base import CodecOptions
from lockgate.providers.openai.transport import OpenAITransport
from lockgate.providers.responses.codec import ResponsesCodec
from lockgate.providers.responses.render import ResponseBuilder, sse_bytes
from lockgate.scripted.reply import Call, Reply, Say
from lockgate.scripted.script import Faults, Turn
from lockgate.transport import TransportOptions

from ..helpers import (
    CLI,
    EDIT,
    HISTORY,
    KEY,
    Recorder,
    edit_turn,
    failed_as,
    replay_client,
    serve,
    text_turn,
)


async def test_success_returns_validated_decision_and_closes_stream() -> None:
    client, transport, recorder = replay_client([edit_turn()])
    decision = await client.complete(HISTORY, ALL_TOOLS)
    assert [call.name for call in decision.tool_calls] == ["edit"]
    assert dict(decision.tool_calls[0].arguments) == EDIT
    assert transport.streams[0].closed
    assert isinstance(recorder.events[-1], DecisionReady)


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


# --- reading to the end of the body ------------------------------------------------------


def completed_then(extra: dict[str, Any]) -> Turn:
    """A valid edit, then `response.completed` and `extra` in one frame: one chunk."""
    builder = ResponseBuilder("resp_after").created().call("fc_1", "call_1", "edit", EDIT)
    completed = builder.completed().events[-1]
    both = {"raw": (sse_bytes(completed) + sse_bytes(extra)).decode()}
    events = (*builder.events[:-1], both)
    return Turn(events=events, faults=Faults(fragment_sizes=(1 << 20,)))


AFTER_TERMINAL: dict[str, dict[str, Any]] = {
    "error": {"type": "error", "code": "late", "message": "after the end"},
    "text": {"type": "response.output_text.delta", "item_id": "m", "delta": "late"},
    "second-completed": {
        "type": "response.completed",
        "response": {"id": "resp_after", "status": "completed", "output": []},
    },
}


@pytest.mark.parametrize("extra", list(AFTER_TERMINAL.values()), ids=list(AFTER_TERMINAL))
async def test_an_event_after_the_terminal_event_in_the_same_read_fails(
    extra: dict[str, Any],
) -> None:
    client, transport, _ = replay_client([completed_then(extra)])
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.kind is FailureKind.LIFECYCLE
    assert "after the terminal event" in caught.value.message
    assert transport.streams[0].closed


def test_an_error_after_completed_in_one_chunk_runs_nothing(cli: CLI) -> None:
    with serve([completed_then(AFTER_TERMINAL["error"])]) as server:
        result = cli("run", "--base-url", server.base_url, "--allow-execution", key=KEY)
    ending = failed_as(result, FailureKind.LIFECYCLE)
    assert ending.stopped == "provider_failure (lifecycle: event after the terminal event)"


def completed_then_later(extra: dict[str, Any]) -> Turn:
    """A valid edit and `response.completed`, then `extra` in a LATER read (audit 3, L1)."""
    builder = ResponseBuilder("resp_after").created().call("fc_1", "call_1", "edit", EDIT)
    frames = [*builder.completed().events, extra]
    # One read per frame: the client must read on past the terminal event to see `extra`.
    sizes = tuple(len(sse_bytes(frame)) for frame in frames)
    return Turn(events=tuple(frames), faults=Faults(fragment_sizes=sizes))


@pytest.mark.parametrize("extra", list(AFTER_TERMINAL.values()), ids=list(AFTER_TERMINAL))
async def test_an_event_in_a_later_read_after_the_terminal_event_fails(
    extra: dict[str, Any],
) -> None:
    client, transport, _ = replay_client([completed_then_later(extra)])
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.kind is FailureKind.LIFECYCLE
    assert "after the terminal event" in caught.value.message
    assert transport.streams[0].closed


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_every_provider_reads_to_the_end_of_the_body(provider: str) -> None:
    """After each protocol's terminal event, a text event in a later read fails the
    response; without it the same stream is a decision."""
    entry = PROVIDERS[provider]
    lab = entry.render()
    reply = Reply("resp_tail", (Say("Done."),))
    late = lab.events(Reply("resp_late", (Say("late"),), ending="open"))[-1]
    for tail, accepted in (((), True), ((late,), False)):
        frames = [*lab.events(reply), *tail]
        sizes = tuple(len(lab.frame(frame)) for frame in frames)
        turn = Turn(events=tuple(frames), faults=Faults(fragment_sizes=sizes))
        client = StreamingModelClient(
            entry.make_codec(CodecOptions("m")), ReplayTransport([turn], provider)
        )
        if accepted:
            assert (await client.complete(HISTORY, ALL_TOOLS)).content == "Done."
            continue
        with pytest.raises(ResponseFailure) as caught:
            await client.complete(HISTORY, ALL_TOOLS)
        assert caught.value.kind is FailureKind.LIFECYCLE, caught.value


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_a_body_that_ends_inside_an_event_was_cut(provider: str) -> None:
    """Audit 3, L2: a complete reply, then the body ends cleanly inside a frame: a pending
    partial frame at the end of the body is evidence of a cut, for every protocol (Chat
    without [DONE] included, whose end of body is otherwise its end marker)."""
    entry = PROVIDERS[provider]
    lab = entry.render()
    frames = [
        f
        for f in lab.events(Reply("resp_cut", (Call("call_1", "edit", EDIT),)))
        if f != {"raw": "data: [DONE]\n\n"}
    ]
    binary = provider == "bedrock"  # an event stream: the cut is a message's first bytes
    cut: bytes | str = lab.frame(frames[-1])[:9] if binary else 'data: {"type": "x", "cut'
    turn = Turn(events=(*frames, {"raw": cut}))
    client = StreamingModelClient(
        entry.make_codec(CodecOptions("m")), ReplayTransport([turn], provider)
    )
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.kind is FailureKind.STREAM_ENDED
    inside = "ended inside an event-stream prelude" if binary else "ended inside an SSE event"
    assert inside in caught.value.message


# --- closed clients, refused histories ---------------------------------------------------


async def test_complete_after_aclose_is_an_opening_failure_without_a_request() -> None:
    client, transport, recorder = replay_client([text_turn()])
    await client.aclose()
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.kind is FailureKind.OPENING
    assert transport.requests == []
    assert any(isinstance(e, ResponseFailed) for e in recorder.events)


async def test_complete_after_aclose_of_the_sdk_transport_is_an_opening_failure() -> None:
    transport = OpenAITransport(
        TransportOptions(api_key=KEY, base_url="http://127.0.0.1:9/v1"), "responses"
    )
    client = StreamingModelClient(ResponsesCodec("m"), transport)
    await client.aclose()
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.kind is FailureKind.OPENING
    with pytest.raises(ResponseFailure):  # the transport on its own too
        await transport.open({"model": "m"})


async def test_a_history_the_codec_refuses_is_a_response_failure() -> None:
    class Refusing(ResponsesCodec):
        def encode(self, history: Any, tools: Any) -> dict[str, Any]:
            raise ValueError("refusing to send a reasoning item without its following item")

    client, transport, _ = replay_client([text_turn()])
    client.codec = Refusing("m")
    with pytest.raises(ResponseFailure) as caught:
        await client.complete([Message("user", "go")], ALL_TOOLS)
    assert caught.value.kind is FailureKind.OPENING
    assert transport.requests == []  # no request was made
