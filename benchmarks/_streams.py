"""The streams every benchmark uses, rendered by the lab's own protocol renderers, so that
each client (lockgate, the floors, the SDKs' typed paths, a naive client) reads exactly
the same native bytes.

A stream is named by a spec string, `<protocol>.<shape>.<text deltas>.<argument deltas>.
<rate>.<gap µs>`: `text deltas` 4-character answer-text deltas, then (when `argument deltas` > 0)
one `edit` call whose argument JSON arrives in `argument deltas` 8-character pieces, then
the protocol's terminal success. `shape` is how the server sends it (`_server.py`).
"""

from __future__ import annotations

import json
from dataclasses import dataclass

from lockgate.providers import PROVIDERS
from lockgate.scripted.reply import Call, Part, Reply, Say

PROTOCOLS = ("responses", "chat", "anthropic")
SHAPES = ("chunks", "bulk", "paced", "tiny")
PLACEHOLDER = b"@" * 18  # a text delta the paced server replaces with its send time
TEXT_PIECE = 4
ARGUMENT_PIECE = 8


@dataclass(frozen=True, slots=True)
class StreamSpec:
    protocol: str
    shape: str
    text: int = 1500
    arguments: int = 500
    rate: int = 50  # paced: events per second
    gap_us: int = 0  # chunks: the server sleeps this long after each event (one read each)

    def __post_init__(self) -> None:
        if self.protocol not in PROTOCOLS or self.shape not in SHAPES:
            raise ValueError(f"bad stream spec {self}")

    @property
    def name(self) -> str:
        if self.shape == "tiny":
            return f"{self.protocol}.tiny"
        return (
            f"{self.protocol}.{self.shape}.{self.text}.{self.arguments}.{self.rate}.{self.gap_us}"
        )


def parse_spec(text: str) -> StreamSpec:
    parts = text.split(".")
    if len(parts) == 2:
        return StreamSpec(parts[0], parts[1])
    protocol, shape, deltas, arguments, rate, gap = parts
    return StreamSpec(protocol, shape, int(deltas), int(arguments), int(rate), int(gap))


def edit_arguments(length: int) -> str:
    """Edit-call arguments of exactly `length` characters (a JSON object)."""
    skeleton = json.dumps({"path": "calculator.py", "old": "", "new": "return a + b"})
    filler = "x" * max(0, length - len(skeleton))
    text = json.dumps({"path": "calculator.py", "old": filler, "new": "return a + b"})
    assert len(text) == max(length, len(skeleton))
    return text


def reply(spec: StreamSpec) -> Reply:
    if spec.shape == "tiny":
        return Reply("resp_tiny", (Say("Done.", 2),))
    parts: list[Part] = []
    if spec.text:
        if spec.shape == "paced":
            text = PLACEHOLDER.decode() * spec.text
            parts.append(Say(text, spec.text))
        else:
            text = "".join(f"w{i % 10}x " for i in range(spec.text))
            parts.append(Say(text, spec.text))
    if spec.arguments:
        arguments = edit_arguments(spec.arguments * ARGUMENT_PIECE)
        parts.append(Call("call_bench_1", "edit", arguments, pieces=spec.arguments))
    return Reply("resp_bench", tuple(parts))


def stream_frames(spec: StreamSpec) -> list[bytes]:
    """The native SSE frames of the spec's stream, one per event."""
    lab = PROVIDERS[spec.protocol].render()
    frames = [lab.frame(event) for event in lab.events(reply(spec))]
    if spec.protocol == "chat" and frames[-1] != b"data: [DONE]\n\n":
        frames.append(b"data: [DONE]\n\n")  # as OpenAI ends a Chat stream
    return frames


def stream_body(spec: StreamSpec) -> bytes:
    return b"".join(stream_frames(spec))
