"""The `Framing` seam (`proxy/framing/`): the gate drives a framing the target names, never a
branch; SSE is the one wire today, and each gateway's event forms (`refusal_events`,
`keepalive_event`) are what its SSE bytes (`refusal_frame`, `keepalive`) frame."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from lockgate.gateway import Refusal
from lockgate.providers import provider as registry_entry
from lockgate.proxy import Accepted, GatingStream, Refused
from lockgate.proxy import framing as framing_module
from lockgate.proxy.framing import Framing, SSEFraming, framing_for
from lockgate.scripted.script import Turn
from lockgate.sse import RawFrame, ServerSentEvent, SSEFramer, canonical_frame

from .support import options, request_for, turn_bytes
from .test_server import ACCEPTED, INVALID_SECOND

PROVIDERS = ("anthropic", "chat", "gemini", "responses")
LAST = ServerSentEvent("response.created", b'{"type":"response.created","sequence_number":4}')


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("transient", [True, False])
def test_each_refusal_frame_is_its_events_in_canonical_sse(provider: str, transient: bool) -> None:
    gateway = registry_entry(provider).gateway()  # type: ignore[misc]
    refusal = Refusal(
        "invalid_batch", "lockgate refused the response: 2 calls withheld", transient, 2
    )
    events = gateway.refusal_events(refusal, LAST)
    assert events
    framing = framing_for("sse", gateway)
    written = b"".join(framing.frame(event) for event in events)
    assert written == gateway.refusal_frame(refusal, LAST)
    assert framing.refusal(refusal, LAST) == gateway.refusal_frame(refusal, LAST)


@pytest.mark.parametrize("provider", PROVIDERS)
def test_a_keepalive_event_is_the_keepalive_framed_or_none(provider: str) -> None:
    gateway = registry_entry(provider).gateway()  # type: ignore[misc]
    event = gateway.keepalive_event()
    if event is None:  # the framing's own: no event of the protocol
        assert not [frame for frame in SSEFramer().feed(gateway.keepalive()) if frame.event]
    else:
        assert canonical_frame(event) == gateway.keepalive()
    assert framing_for("sse", gateway).keepalive() == gateway.keepalive()


def test_the_sse_framing_is_the_default_wire() -> None:
    gateway = registry_entry("chat").gateway()  # type: ignore[misc]
    framing = framing_for("sse", gateway)
    assert isinstance(framing, SSEFraming)
    assert framing.media_type == "text/event-stream"
    frames = framing.feed(b'data: {"a":1}\n\n: comment\n\ndata: {"b"')
    assert [frame.event for frame in frames] == [ServerSentEvent(None, b'{"a":1}'), None]
    assert framing.finish() == []
    assert framing.cut


class _Counting:
    """A framing of the test's own: SSE underneath, each unit it is fed counted, and no
    keep-alive (as a wire that has none)."""

    media_type = "text/event-stream"

    def __init__(self, gateway: object, max_event_bytes: int) -> None:
        self.inner = SSEFraming(gateway, max_event_bytes)  # type: ignore[arg-type]
        self.units = 0
        made.append(self)

    @property
    def cut(self) -> bool:
        return self.inner.cut

    def feed(self, unit: bytes) -> list[RawFrame]:
        self.units += 1
        return self.inner.feed(unit)

    def finish(self) -> list[RawFrame]:
        return self.inner.finish()

    def encode(self, frame: RawFrame) -> bytes:
        return self.inner.encode(frame)

    def frame(self, event: ServerSentEvent) -> bytes:
        return self.inner.frame(event)

    def keepalive(self) -> bytes | None:
        return None

    def refusal(self, refusal: Refusal, last: ServerSentEvent | None) -> bytes:
        return b"REFUSED"


made: list[_Counting] = []


async def test_the_gate_drives_the_framing_its_caller_names(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    monkeypatch.setitem(framing_module.FRAMINGS, "counting", _Counting)
    made.clear()
    entry, request = registry_entry("chat"), request_for("chat")

    async def gated(turn: Turn, framing: str) -> tuple[bytes, object]:
        async def body() -> AsyncIterator[bytes]:
            yield turn_bytes(turn, "chat")

        stream = GatingStream(entry, request, body(), options(), framing=framing)
        return b"".join([piece async for piece in stream]), stream.outcome

    data, outcome = await gated(ACCEPTED, "counting")
    assert isinstance(outcome, Accepted)
    assert (data, outcome) == await gated(ACCEPTED, "sse")  # the same events, the same bytes
    [used] = made
    assert used.units == 1
    out, refused = await gated(INVALID_SECOND, "counting")
    assert isinstance(refused, Refused)
    assert out.endswith(b"REFUSED")  # the framing writes the refusal


def test_a_framing_is_a_protocol_the_sse_one_meets() -> None:
    gateway = registry_entry("chat").gateway()  # type: ignore[misc]
    framing: Framing = SSEFraming(gateway, 1024)
    assert framing.frame(ServerSentEvent("x", b"{}")) == b"event: x\ndata: {}\n\n"
