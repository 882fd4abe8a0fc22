"""Differential fuzz: mutated real streams through the gating engine, the output read by every
client's rules (`readers.py`).

    .venv/bin/python -m tests.proxy.differential --budget N --seed S [--corpus DIR] [--show K]

Each of the N runs takes a recording of a protocol with a gateway (Responses, Chat
Completions, Anthropic Messages, Gemini; a 2xx answer, from `../shared/real-streams`, never
copied here), applies one to three mutations (`MUTATIONS`: framing that readers disagree on,
most of it hiding a call the gate never sees; events dropped, duplicated or swapped; a cut;
a flipped byte; a Responses `.done` item altered; a call in a start snapshot; a Gemini call
spelled `function_call` beside a part's text; …), feeds it to
`GatingStream` in random reads with the recording's own request (time is virtual), and
reads the output with every reader of the protocol. A naive client that sees a call the
decision did not release (any call, in a refused stream) is a leak.

It prints the totals (streams, mutations run, accepted, refused, per reader the outputs and
calls leaked, the outputs on which the readers disagree, per mutation the runs and leaks)
and the first leaks, and exits 1 if any call was read that the gate did not release (or the
engine raised), 0 otherwise; with no recordings it says so and exits 0. Bad arguments: one
line and exit 2.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import random
import re
import sys
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, NoReturn

from lockgate.proxy import Accepted, GatingOptions
from lockgate.sse import SSEFramer

from .readers import EVIL, READERS, audit, evil_data
from .support import gate_stream, options, run

__all__ = [
    "CORPUS",
    "MUTATIONS",
    "Arguments",
    "Recording",
    "load",
    "main",
    "recordings_or_exit",
    "report_head",
]

CORPUS = Path(__file__).resolve().parents[3] / "shared" / "real-streams"
GATED = ("responses", "chat", "anthropic", "gemini")
BOM = b"\xef\xbb\xbf"
SEPARATORS = (
    b"\x0b",
    b"\x0c",
    b"\x1c",
    b"\x1d",
    b"\x1e",
    b"\xc2\x85",
    b"\xe2\x80\xa8",
    b"\xe2\x80\xa9",
)
_LINE_END = re.compile(rb"\r\n|\r|\n")
FLIPS = (b"\r", b"\n", b":", b" ", BOM, b"\xc2\x85", b"\xe2\x80\xa8", b"\x0b", b"\xff", b"}")


@dataclass(frozen=True, slots=True)
class Recording:
    name: str
    protocol: str
    request: dict[str, Any]
    body: bytes


def load(corpus: Path) -> list[Recording]:
    """The 2xx recordings of the gated protocols, by name."""
    found = []
    for path in sorted(corpus.glob("*.json")):
        if path.name.split("-", 1)[0] not in GATED:
            continue
        try:
            recording = json.loads(path.read_text(encoding="utf-8"))
            body = recording.get("body")
            if not 200 <= int(recording.get("status", 0)) < 300 or not isinstance(body, str):
                continue
            request = recording.get("request")
            protocol = recording["protocol"]
        except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
            raise ValueError(f"{path.name}: {type(exc).__name__}: {exc}") from None
        if protocol not in GATED:
            continue
        found.append(
            Recording(
                path.name,
                protocol,
                request if isinstance(request, dict) else {},
                body.encode("utf-8"),
            )
        )
    return found


# --- the mutations: (random, protocol, body) → body, or None where one does not apply ------

Mutation = Callable[[random.Random, str, bytes], bytes | None]


def _frames(body: bytes) -> list[bytes]:
    """The body's raw frames, then its unterminated tail (joined, they are the body)."""
    framer = SSEFramer(1 << 30)
    frames = [frame.raw for frame in framer.feed(body)]
    frames.extend(frame.raw for frame in framer.finish())
    return [*frames, framer.tail]


def _insert_frame(rng: random.Random, body: bytes, frame: bytes) -> bytes:
    frames = _frames(body)
    frames.insert(rng.randint(0, len(frames) - 1), frame)
    return b"".join(frames)


def _named(protocol: str) -> bytes:
    name = EVIL[protocol][0]
    return b"" if name is None else b"event: " + name.encode() + b"\n"


def bom_data_line(rng: random.Random, protocol: str, body: bytes) -> bytes:
    return _insert_frame(
        rng, body, _named(protocol) + BOM + b"data: " + evil_data(protocol) + b"\n\n"
    )


def bom_body_start(rng: random.Random, protocol: str, body: bytes) -> bytes:
    if rng.random() < 0.5:
        return BOM + body
    return BOM + b"data: " + evil_data(protocol) + b"\n\n" + body


def bom_line_prefix(rng: random.Random, protocol: str, body: bytes) -> bytes | None:
    starts = [0, *(i + 1 for i, byte in enumerate(body) if byte == 10)]
    starts = [start for start in starts if start < len(body)]
    if not starts:
        return None
    at = rng.choice(starts)
    return body[:at] + BOM + body[at:]


def separator_comment(rng: random.Random, protocol: str, body: bytes) -> bytes:
    line = b": ping" + rng.choice(SEPARATORS) + b"data: " + evil_data(protocol)
    return _insert_frame(rng, body, line + b"\n\n")


def separator_in_frame(rng: random.Random, protocol: str, body: bytes) -> bytes | None:
    frames = _frames(body)
    whole = [index for index, frame in enumerate(frames[:-1]) if frame.endswith(b"\n\n")]
    if not whole:
        return None
    index = rng.choice(whole)
    line = b":" + rng.choice(SEPARATORS) + b"data: " + evil_data(protocol) + b"\n"
    frames[index] = line + frames[index]
    return b"".join(frames)


def data_only_call(rng: random.Random, protocol: str, body: bytes) -> bytes:
    return _insert_frame(rng, body, b"data: " + evil_data(protocol) + b"\n\n")


def event_only_frames(rng: random.Random, protocol: str, body: bytes) -> bytes:
    name = EVIL[protocol][0] or "message"
    return _insert_frame(rng, body, b"event: " + name.encode() + b"\n\n")


def tail_call(rng: random.Random, protocol: str, body: bytes) -> bytes:
    return body + rng.choice([b"", _named(protocol)]) + b"data: " + evil_data(protocol)


def unknown_fields(rng: random.Random, protocol: str, body: bytes) -> bytes:
    lines = [b"id: 7\n", b"retry: 3000\n", b"x-trace: 1\n", b"DATA: " + evil_data(protocol) + b"\n"]
    frames = _frames(body)
    for _ in range(rng.randint(1, 4)):
        index = rng.randrange(len(frames))
        frames[index] = rng.choice(lines) + frames[index]
    return b"".join(frames)


def line_ends(rng: random.Random, protocol: str, body: bytes) -> bytes:
    lines = body.split(b"\n")
    if rng.random() < 0.5:
        end = rng.choice([b"\r", b"\r\n"])
        return end.join(lines)
    out = [lines[0]]
    for line in lines[1:]:
        out.append(rng.choice([b"\n", b"\r", b"\r\n"]))
        out.append(line)
    return b"".join(out)


def multi_line_data(rng: random.Random, protocol: str, body: bytes) -> bytes | None:
    frames = _frames(body)
    candidates = [i for i, frame in enumerate(frames) if b"\ndata: {" in b"\n" + frame]
    if not candidates:
        return None
    for index in rng.sample(candidates, min(len(candidates), rng.randint(1, 5))):
        lines = frames[index].split(b"\n")
        for place, line in enumerate(lines):
            if line.startswith(b"data: "):
                try:
                    value = json.loads(line[6:])
                except ValueError:
                    break
                dumped = json.dumps(value, indent=1, ensure_ascii=False).split("\n")
                lines[place : place + 1] = [b"data: " + text.encode() for text in dumped]
                break
        frames[index] = b"\n".join(lines)
    return b"".join(frames)


def drop_event_lines(rng: random.Random, protocol: str, body: bytes) -> bytes | None:
    frames = _frames(body)
    named = [i for i, frame in enumerate(frames) if frame.startswith(b"event:")]
    if not named:
        return None
    index = rng.choice(named)
    lines = _LINE_END.split(frames[index], maxsplit=1)
    frames[index] = lines[1] if len(lines) > 1 else b""
    return b"".join(frames)


def drop_frame(rng: random.Random, protocol: str, body: bytes) -> bytes | None:
    frames = _frames(body)
    if len(frames) < 2:
        return None
    del frames[rng.randrange(len(frames) - 1)]
    return b"".join(frames)


def duplicate_frame(rng: random.Random, protocol: str, body: bytes) -> bytes | None:
    frames = _frames(body)
    if len(frames) < 2:
        return None
    index = rng.randrange(len(frames) - 1)
    frames.insert(index, frames[index])
    return b"".join(frames)


def swap_frames(rng: random.Random, protocol: str, body: bytes) -> bytes | None:
    frames = _frames(body)
    if len(frames) < 3:
        return None
    index = rng.randrange(len(frames) - 2)
    frames[index], frames[index + 1] = frames[index + 1], frames[index]
    return b"".join(frames)


def cut(rng: random.Random, protocol: str, body: bytes) -> bytes:
    return body[: rng.randint(0, len(body))]


def flip_byte(rng: random.Random, protocol: str, body: bytes) -> bytes | None:
    if not body:
        return None
    at = rng.randrange(len(body))
    return body[:at] + rng.choice(FLIPS) + body[at + 1 :]


def _rewrite(
    body: bytes, change: Callable[[dict[str, Any]], list[dict[str, Any]] | None]
) -> bytes | None:
    """Rewrite the first event `change` changes (it returns the events in its place)."""
    frames = _frames(body)
    for index, frame in enumerate(frames):
        head, marker, data = frame.partition(b"data: ")
        if not marker:
            continue
        try:
            payload = json.loads(data)
        except ValueError:
            continue
        if not isinstance(payload, dict):
            continue
        replaced = change(payload)
        if replaced is None:
            continue
        frames[index] = b"".join(_event_frame(head, item) for item in replaced)
        return b"".join(frames)
    return None


def _event_frame(head: bytes, payload: dict[str, Any]) -> bytes:
    name = payload.get("type")
    if head.startswith(b"event:") and isinstance(name, str):
        head = b"event: " + name.encode() + b"\n"
    return head + b"data: " + json.dumps(payload, separators=(",", ":")).encode() + b"\n\n"


def alter_done_item(rng: random.Random, protocol: str, body: bytes) -> bytes | None:
    """Responses: a function call's `output_item.done` carries other arguments, another
    call id or name, or is followed by an extra `local_shell_call` item."""
    if protocol != "responses":
        return None
    how = rng.choice(["arguments", "call_id", "name", "extra item"])

    def change(payload: dict[str, Any]) -> list[dict[str, Any]] | None:
        item = payload.get("item")
        if payload.get("type") != "response.output_item.done" or not isinstance(item, dict):
            return None
        if item.get("type") != "function_call":
            return None
        if how == "extra item":
            shell = {
                "type": "local_shell_call",
                "id": "lsh_evil",
                "call_id": "call_shell",
                "status": "completed",
                "action": {"type": "exec", "command": ["rm", "-rf", "~"]},
            }
            extra = {**payload, "output_index": 90, "item": shell}
            return [payload, extra]
        altered = dict(item)
        altered[how] = {
            "arguments": json.dumps({"path": "/etc/passwd", "old": "", "new": "x"}),
            "call_id": "call_other",
            "name": "shell",
        }[how]
        return [{**payload, "item": altered}]

    return _rewrite(body, change)


def call_in_start(rng: random.Random, protocol: str, body: bytes) -> bytes | None:
    """A call in the snapshot a stream starts with: Responses' `response.created` output,
    Anthropic's `message_start` content."""
    if protocol == "chat":
        return None

    def change(payload: dict[str, Any]) -> list[dict[str, Any]] | None:
        if protocol == "responses" and payload.get("type") == "response.created":
            response = payload.get("response")
            if not isinstance(response, dict):
                return None
            item = dict(EVIL["responses"][1]["item"])
            return [{**payload, "response": {**response, "output": [item]}}]
        if protocol == "anthropic" and payload.get("type") == "message_start":
            message = payload.get("message")
            if not isinstance(message, dict):
                return None
            block = dict(EVIL["anthropic"][1]["content_block"])
            return [{**payload, "message": {**message, "content": [block]}}]
        return None

    return _rewrite(body, change)


def snake_case_call(rng: random.Random, protocol: str, body: bytes) -> bytes | None:
    """Gemini: a text part also carries a call spelled `function_call`, which google-genai
    reads as the part's call (and lockgate's decoder, as the text)."""
    if protocol != "gemini":
        return None
    evil = EVIL["gemini"][1]["candidates"][0]["content"]["parts"][0]["functionCall"]

    def change(payload: dict[str, Any]) -> list[dict[str, Any]] | None:
        candidates = payload.get("candidates")
        if not isinstance(candidates, list) or not candidates:
            return None
        candidate = candidates[0]
        if not isinstance(candidate, dict) or not isinstance(candidate.get("content"), dict):
            return None
        content: dict[str, Any] = candidate["content"]
        parts = content.get("parts")
        if not isinstance(parts, list) or not parts or not isinstance(parts[0], dict):
            return None
        if "text" not in parts[0]:
            return None
        part = {**parts[0], "function_call": evil}
        altered = {**candidate, "content": {**content, "parts": [part, *parts[1:]]}}
        return [{**payload, "candidates": [altered, *candidates[1:]]}]

    return _rewrite(body, change)


def judged_call(rng: random.Random, protocol: str, body: bytes) -> bytes:
    """The call in plain sight (a frame the gate reads): it must refuse it."""
    return _insert_frame(rng, body, _named(protocol) + b"data: " + evil_data(protocol) + b"\n\n")


MUTATIONS: dict[str, Mutation] = {
    "bom data line": bom_data_line,
    "bom body start": bom_body_start,
    "bom line prefix": bom_line_prefix,
    "separator comment": separator_comment,
    "separator in frame": separator_in_frame,
    "data-only call": data_only_call,
    "event-only frame": event_only_frames,
    "tail call": tail_call,
    "unknown fields": unknown_fields,
    "line ends": line_ends,
    "multi-line data": multi_line_data,
    "drop event line": drop_event_lines,
    "drop frame": drop_frame,
    "duplicate frame": duplicate_frame,
    "swap frames": swap_frames,
    "cut": cut,
    "flip byte": flip_byte,
    "alter done item": alter_done_item,
    "call in start snapshot": call_in_start,
    "snake-case call": snake_case_call,
    "judged call": judged_call,
}


# --- running ---------------------------------------------------------------------------------


@dataclass(slots=True)
class Totals:
    """What the runs came to."""

    runs: int = 0
    accepted: int = 0
    refused: int = 0
    disagreeing: int = 0  # outputs some reader reads otherwise than lockgate
    errors: int = 0  # the engine (it refuses, it never raises) or a mutation raised: a bug
    leaked_outputs: Counter[str] = field(default_factory=Counter)  # per reader
    leaked_calls: Counter[str] = field(default_factory=Counter)  # per reader
    by_mutation: Counter[str] = field(default_factory=Counter)
    leaks_by_mutation: Counter[str] = field(default_factory=Counter)
    examples: list[str] = field(default_factory=list)


def _reads(rng: random.Random, body: bytes) -> list[bytes]:
    if rng.random() < 0.3 or not body:
        return [body]
    pieces, position = [], 0
    high = rng.choice([8, 64, 4096])
    while position < len(body):
        size = rng.randint(1, high)
        pieces.append(body[position : position + size])
        position += size
    return pieces


async def _fuzz(
    recordings: Sequence[Recording], budget: int, seed: int, show: int, gating: GatingOptions
) -> Totals:
    rng = random.Random(seed)
    totals = Totals()
    names = sorted(MUTATIONS)
    while totals.runs < budget:
        recording = rng.choice(recordings)
        body: bytes = recording.body
        applied = []
        broke = None
        for _ in range(rng.choice([1, 1, 1, 2, 3])):
            name = rng.choice(names)
            try:
                mutated = MUTATIONS[name](rng, recording.protocol, body)
            except Exception as exc:  # a bug of the fuzz's own: reported, never a traceback
                broke = f"error: {recording.name} [{name}]: the mutation raised {exc!r}"
                break
            if mutated is not None:
                body = mutated
                applied.append(name)
        if broke is not None:
            totals.runs += 1
            totals.errors += 1
            if len(totals.examples) < show:
                totals.examples.append(broke)
            continue
        if not applied:
            continue
        totals.runs += 1
        label = " + ".join(applied)
        for name in set(applied):
            totals.by_mutation[name] += 1
        try:
            gated = await gate_stream(
                recording.protocol, recording.request, _Reads(_reads(rng, body)), gating
            )
        except Exception as exc:
            totals.errors += 1
            if len(totals.examples) < show:
                totals.examples.append(
                    f"error: {recording.name} [{label}]: the engine raised {exc!r}"
                )
            continue
        outcome = gated.outcome
        released = None
        if isinstance(outcome, Accepted):
            totals.accepted += 1
            released = outcome.decision.message.tool_calls
        else:
            totals.refused += 1
        found = audit(recording.protocol, gated.pieces, released)
        if found.disagreements:
            totals.disagreeing += 1
        leaked = found.leaked
        if leaked:
            for name in set(applied):
                totals.leaks_by_mutation[name] += 1
        for reader, calls in leaked.items():
            totals.leaked_outputs[reader] += 1
            totals.leaked_calls[reader] += len(calls)
            if len(totals.examples) < show:
                verdict = "accepted" if released is not None else "refused"
                call = calls[0]
                totals.examples.append(
                    f"leak: {recording.name} [{label}] {verdict}: {reader} saw "
                    f"{call.name!r} ({call.id!r}, at {call.where})"
                )
    return totals


class _Reads:
    """A body in given reads, then a clean end."""

    def __init__(self, pieces: list[bytes]) -> None:
        self.pieces = pieces

    async def __aiter__(self) -> Any:
        for piece in self.pieces:
            await asyncio.sleep(0)
            yield piece

    async def aclose(self) -> None:
        pass


def report_head(title: str, seed: int, budget: int, recordings: Sequence[Recording]) -> list[str]:
    """A differential report's first lines: what ran, on how many recordings of each protocol."""
    per_protocol = Counter(recording.protocol for recording in recordings)
    streams = ", ".join(f"{name} {per_protocol[name]}" for name in GATED)
    return [f"{title}: seed {seed}, budget {budget}", f"streams: {len(recordings)} ({streams})"]


def _report(totals: Totals, recordings: Sequence[Recording], seed: int, budget: int) -> None:
    for line in report_head("differential fuzz", seed, budget, recordings):
        print(line)
    print(f"mutations run: {totals.runs}")
    print(f"accepted: {totals.accepted}")
    print(f"refused: {totals.refused}")
    if totals.errors:
        print(f"runs that raised (the engine or a mutation; see below): {totals.errors}")
    print("calls read that the gate did not release (per reader: outputs, calls):")
    for reader in READERS:
        outputs = totals.leaked_outputs[reader.name]
        calls = totals.leaked_calls[reader.name]
        print(f"  {reader.name}: {outputs} outputs, {calls} calls")
    total = sum(totals.leaked_calls.values())
    print(f"calls read that the gate did not release, all readers: {total}")
    print(f"outputs the readers read differently: {totals.disagreeing}")
    print("per mutation (runs, outputs with a call not released):")
    for name in sorted(MUTATIONS):
        runs = totals.by_mutation[name]
        print(f"  {name}: {runs}, {totals.leaks_by_mutation[name]}")
    for example in totals.examples:
        print(example)


class Arguments(argparse.ArgumentParser):
    """A differential's command line: bad arguments are one line and exit 2."""

    def error(self, message: str) -> NoReturn:
        self.exit(2, f"{self.prog}: {message}\n")

    def common(self, budget: int, seed: int, show: int, budget_help: str, shown: str) -> None:
        """The arguments every differential takes: --budget, --seed, --corpus, --show."""
        self.add_argument("--budget", type=int, default=budget, help=budget_help)
        self.add_argument("--seed", type=int, default=seed, help="the random seed")
        self.add_argument("--corpus", type=Path, default=CORPUS, help="the recordings' folder")
        self.add_argument("--show", type=int, default=show, help=f"{shown} to print")


def recordings_or_exit(
    corpus: Path, missing: Callable[[], str | None] | None = None
) -> list[Recording] | int:
    """The gated recordings at `corpus`; or, when there are none to run, one line saying why
    and the exit status: 0 (skipped: no folder, `missing()` names what is not installed, no
    recording of a gated protocol) or 2 (a recording cannot be read)."""
    if not corpus.is_dir():
        print(f"skipped: no real recordings at {corpus}")
        return 0
    absent = missing() if missing is not None else None
    if absent is not None:
        print(f"skipped: {absent} is not installed")
        return 0
    try:
        recordings = load(corpus)
    except (OSError, ValueError) as exc:
        print(f"error: a recording at {corpus} cannot be read ({exc})")
        return 2
    if not recordings:
        print(f"skipped: no recording of {', '.join(GATED)} at {corpus}")
        return 0
    return recordings


def main(argv: Sequence[str] | None = None) -> int:
    parser = Arguments(
        prog="python -m tests.proxy.differential",
        description="Mutated real streams through the gating engine, read by every reader.",
    )
    parser.common(500, 0, 10, "mutated streams to run", "leaks")
    args = parser.parse_args(argv)
    if args.budget < 0 or args.show < 0:
        parser.error("--budget and --show must not be negative")
    recordings = recordings_or_exit(args.corpus)
    if isinstance(recordings, int):
        return recordings
    gating = options(validate_schemas=True, keepalive_interval=3600.0, deadline=3600.0)
    totals = run(_fuzz(recordings, args.budget, args.seed, args.show, gating))
    _report(totals, recordings, args.seed, args.budget)
    return 1 if totals.errors or sum(totals.leaked_calls.values()) else 0


if __name__ == "__main__":
    sys.exit(main())
