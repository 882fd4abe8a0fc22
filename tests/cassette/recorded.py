"""Small cassettes built in the test from a scripted reply, rendered in the protocol's own
frames (`renderer.events` + `renderer.frame`), cut into reads at given sizes."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from lockgate.cassette.format import Cassette, Ending, Read
from lockgate.providers import provider
from lockgate.scripted.reply import Call, Reply, Say
from lockgate.scripted.script import fragments

CHAT_REQUEST: dict[str, Any] = {
    "model": "lab-model",
    "stream": True,
    "messages": [{"role": "user", "content": "fix it"}],
}
EDIT = {"path": "calc.py", "old": "a - b", "new": "a + b"}


def edit_reply(text: str = "Fixing — naïve café ✓.") -> Reply:
    """A reply with text (multi-byte characters in it) and one complete tool call."""
    return Reply("resp_rec", (Say(text, pieces=2), Call("call_1", "edit", EDIT)))


def native_frames(protocol: str, reply: Reply) -> list[bytes]:
    renderer = provider(protocol).render()
    return [renderer.frame(event) for event in renderer.events(reply)]


def recorded(
    protocol: str = "chat",
    reply: Reply | None = None,
    *,
    sizes: Sequence[int] = (50, 7, 120),
    frames: Sequence[bytes] | None = None,
    request: Any = None,
    end: Ending = "clean",
    step: float = 0.25,
    source: str = "recorded.cassette.jsonl",
) -> Cassette:
    """A streamed cassette of `frames` (default: the reply's native frames), its reads cut
    at `sizes` (cycled), `step` seconds apart."""
    chosen = native_frames(protocol, reply or edit_reply()) if frames is None else frames
    body = b"".join(chosen)
    reads = tuple(
        Read(round(index * step, 6), piece)
        for index, piece in enumerate(fragments(body, tuple(sizes)))
    )
    return Cassette(
        protocol=protocol,
        base_url="https://api.example.test/v1",
        method="POST",
        path=provider(protocol).render().path,
        request=CHAT_REQUEST if request is None else request,
        status=200,
        headers=(
            ("content-type", "text/event-stream; charset=utf-8"),
            ("content-length", "999"),
            ("x-request-id", "req_rec"),
        ),
        recorded_at="2025-01-01T00:00:00Z",
        reads=reads,
        end=end,
        source=source,
    )


def json_exchange(protocol: str = "chat") -> Cassette:
    """A non-streamed exchange: a whole JSON body in two reads."""
    body = b'{"id": "x", "object": "chat.completion", "choices": []}'
    return Cassette(
        protocol=protocol,
        base_url="https://api.example.test/v1",
        method="POST",
        path=provider(protocol).render().path,
        request={"model": "lab-model", "messages": []},
        status=200,
        headers=(("content-type", "application/json"),),
        recorded_at="2025-01-01T00:00:00Z",
        reads=(Read(0.0, body[:10]), Read(0.1, body[10:])),
        source="json.cassette.jsonl",
    )
