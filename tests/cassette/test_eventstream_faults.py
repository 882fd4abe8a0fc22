"""Cassettes of binary event-stream bodies (Bedrock): recorded reads kept byte for byte as
base64, frames found at the lengths the preludes state, every fault frame-aware (a cut at a
frame or a byte, a bad CRC, an injected exception, a corrupt last payload), and the judge's
verdict on each: what lockgate's own client decides on the played bytes."""

from __future__ import annotations

import asyncio
import json
import signal
import subprocess
from dataclasses import replace
from pathlib import Path

import pytest

from lockgate.cassette import judge as judging
from lockgate.cassette.eventstream_frames import UNREADABLE, frames
from lockgate.cassette.faults import Fault, fault_points, parse_fault, playback
from lockgate.cassette.format import Cassette, Read, dumps, loads, save
from lockgate.eventstream import MEDIA_TYPE, EventStreamCorrupt, EventStreamDecoder
from lockgate.scripted.script import Reset, fragments

from ..helpers import CLI, finish, read_serving_line, usage_error_line
from .recorded import edit_reply, native_frames, recorded
from .test_serve_cassette import SERVE, post

EDIT_SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "old": {"type": "string"},
        "new": {"type": "string"},
    },
    "required": ["path", "old", "new"],
}
REQUEST = {
    "messages": [{"role": "user", "content": [{"text": "fix it"}]}],
    "toolConfig": {
        "tools": [
            {
                "toolSpec": {
                    "name": "edit",
                    "description": "edit",
                    "inputSchema": {"json": EDIT_SCHEMA},
                }
            }
        ]
    },
}


def bedrock(sizes: tuple[int, ...] = (50, 7, 120)) -> Cassette:
    """A recorded ConverseStream exchange: text, one complete edit call, messageStop,
    metadata; its reads cut at `sizes` (cycled), across frame boundaries."""
    body = b"".join(native_frames("bedrock", edit_reply()))
    reads = tuple(
        Read(round(index * 0.1, 6), piece) for index, piece in enumerate(fragments(body, sizes))
    )
    return Cassette(
        protocol="bedrock",
        base_url="https://bedrock-runtime.us-east-1.amazonaws.com",
        method="POST",
        path="/model/us.anthropic.claude-sonnet-4-5-20250929-v1%3A0/converse-stream",
        request=REQUEST,
        status=200,
        headers=(("content-type", MEDIA_TYPE), ("x-amzn-requestid", "req-1")),
        recorded_at="2026-01-01T00:00:00Z",
        reads=reads,
        source="bedrock.cassette.jsonl",
    )


def played(cassette: Cassette, *specs: str) -> bytes:
    steps = playback(cassette, [parse_fault(spec) for spec in specs]).steps
    return b"".join(step for step in steps if isinstance(step, bytes))


def decided(cassette: Cassette, *specs: str) -> judging.Judgement:
    faults = [parse_fault(spec) for spec in specs]
    result: judging.Judgement = asyncio.run(judging.judge(cassette, faults))
    return result


def test_binary_reads_are_written_as_base64_and_read_back_byte_for_byte() -> None:
    cassette = bedrock()
    text = dumps(cassette)
    lines = [json.loads(line) for line in text.splitlines()[1:]]
    assert lines
    assert all("base64" in line and "text" not in line for line in lines)
    again = loads(text, cassette.source)
    assert again == cassette
    assert again.body == cassette.body


def test_an_sse_cassette_still_writes_text_reads() -> None:
    cassette = recorded("chat")
    lines = [json.loads(line) for line in dumps(cassette).splitlines()[1:]]
    assert all("text" in line for line in lines)


def test_frames_are_the_messages_the_preludes_state() -> None:
    native = native_frames("bedrock", edit_reply())
    cassette = bedrock()
    found, tail = cassette.frames()
    assert [frame.raw for frame in found] == native
    assert tail == b""
    names = [frame.event.event for frame in found if frame.event is not None]
    assert names[0] == "messageStart"
    assert names[-2:] == ["messageStop", "metadata"]


def test_a_cut_last_message_is_the_tail_and_a_bad_crc_frame_is_still_a_frame() -> None:
    native = native_frames("bedrock", edit_reply())
    broken = bytearray(native[1])
    broken[-1] ^= 1
    found, tail = frames(b"".join([native[0], bytes(broken), native[2][:20]]))
    assert [frame.raw for frame in found] == [native[0], bytes(broken)]
    assert found[1].event is not None
    assert found[1].event.event == UNREADABLE
    assert tail == native[2][:20]


def test_the_unfaulted_exchange_is_accepted_with_its_call() -> None:
    got = decided(bedrock())
    assert got.accepted, got.detail
    assert got.decision is not None
    assert [name for name, _ in got.decision.calls] == ["edit"]


def test_faults_keep_the_read_boundaries_where_they_can() -> None:
    cassette = bedrock()
    steps = playback(cassette, [parse_fault("split:bytes=1")]).steps
    assert b"".join(s for s in steps if isinstance(s, bytes)) == cassette.body
    assert played(cassette) == cassette.body


@pytest.mark.parametrize("where", ["after", "inside"])
def test_a_cut_at_every_frame_is_refused(where: str) -> None:
    cassette = bedrock()
    count = len(cassette.frames()[0])
    metadata = count  # cut after the last frame (metadata) leaves the stream whole
    for number in range(1, count + 1):
        if where == "after" and number >= metadata - 1:
            continue  # after messageStop: complete (the metadata is optional)
        got = decided(cassette, f"cut:{where}={number}")
        assert not got.accepted, (where, number)
        assert got.kind == "stream_ended", (where, number, got.kind)


def test_a_cut_at_any_byte_inside_a_frame_is_stream_ended() -> None:
    cassette = bedrock()
    native = native_frames("bedrock", edit_reply())
    stop_start = sum(len(frame) for frame in native[:-2])  # messageStop's first byte
    for offset in range(stop_start + 1, stop_start + len(native[-2]), 5):
        body = played(cassette, f"cut:byte={offset}")
        assert body == cassette.body[:offset]
        assert decided(cassette, f"cut:byte={offset}").kind == "stream_ended", offset
    steps = playback(cassette, [parse_fault(f"reset:byte={stop_start + 3}")]).steps
    assert isinstance(steps[-1], Reset)


def test_a_bad_crc_on_any_frame_is_malformed() -> None:
    cassette = bedrock()
    native = native_frames("bedrock", edit_reply())
    for number in range(1, len(native) + 1):
        body = played(cassette, f"bad-crc:{number}")
        assert len(body) == len(cassette.body)
        decoder = EventStreamDecoder()
        with pytest.raises(EventStreamCorrupt):
            decoder.feed(body)
        assert decided(cassette, f"bad-crc:{number}").kind == "malformed_event", number


def test_an_injected_exception_frame_is_a_provider_error() -> None:
    cassette = bedrock()
    count = len(cassette.frames()[0])
    for number in range(1, count + 1):
        got = decided(cassette, f"exception:{number}:type=throttlingException")
        assert not got.accepted, number
        assert got.kind in ("provider_error", "rate_limited"), (number, got.kind)
    body = played(cassette, "exception:2")
    found, _ = frames(body)
    assert found[1].event is not None
    assert found[1].event.event == ":exception:internalServerException"
    assert len(found) == count + 1


def test_corrupt_terminal_breaks_the_last_json_payload_with_right_crcs() -> None:
    cassette = bedrock()
    body = played(cassette, "corrupt-terminal")
    messages = EventStreamDecoder().feed(body)  # every CRC is right
    assert len(messages) == len(cassette.frames()[0])
    with pytest.raises(ValueError, match="Expecting"):
        json.loads(messages[-1].payload)
    assert not decided(cassette, "corrupt-terminal").accepted


def test_event_stream_faults_do_not_fit_an_sse_exchange() -> None:
    for spec in ("bad-crc:1", "exception:1"):
        with pytest.raises(ValueError, match="event-stream frames"):
            playback(recorded("chat"), [parse_fault(spec)])


def test_a_byte_past_the_body_does_not_fit() -> None:
    cassette = bedrock()
    with pytest.raises(ValueError, match="addresses byte"):
        playback(cassette, [Fault("cut", offset=len(cassette.body))])


def test_fault_points_break_every_frame_and_the_lab_finds_no_violation() -> None:
    cassette = bedrock()
    count = len(cassette.frames()[0])
    points = fault_points(cassette)
    assert {f.event for f in points if f.kind == "bad-crc"} == set(range(1, count + 1))
    assert {f.event for f in points if f.kind == "exception"} == set(range(1, count + 1))
    report = judging.lab([cassette])
    assert report.runs == len(points) + 1
    assert not report.violations, [str(v) for v in report.violations]


def test_the_cli_serves_a_bedrock_cassette_with_an_event_stream_fault(tmp_path: Path) -> None:
    """`lockgate serve --cassette` on a Bedrock cassette, in a process of its own: it says
    the fault it applies and sends exactly the faulted bytes, chunk for chunk."""
    cassette = bedrock()
    save(replace(cassette, source=""), tmp_path / "b.cassette.jsonl")
    process = subprocess.Popen(
        [*SERVE, "--cassette", str(tmp_path), "--fault", "bad-crc:2"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stderr is not None
        line = process.stderr.readline().strip()
        base_url = read_serving_line(process)
        port = int(base_url.split(":")[2].split("/")[0])
        answer = post(port, REQUEST, cassette.path)
    finally:
        process.send_signal(signal.SIGINT)
        code, _, err = finish(process)
    assert code == 0, err
    assert line == "lockgate serve: exchange 1 (bedrock, b.cassette.jsonl): bad-crc:2"
    assert answer.status == 200
    assert answer.header("content-type") == MEDIA_TYPE
    steps = playback(cassette, [parse_fault("bad-crc:2")]).steps
    assert answer.chunks == [step for step in steps if isinstance(step, bytes)]
    assert b"".join(answer.chunks) != cassette.body


def test_bad_input_for_a_bedrock_cassette_is_one_line(cli: CLI, tmp_path: Path) -> None:
    (tmp_path / "b.cassette.jsonl").write_text(dumps(bedrock()))
    result = cli("serve", "--cassette", str(tmp_path), "--fault", "drop:999")
    assert "addresses event 999" in usage_error_line(result)
    result = cli("serve", "--cassette", str(tmp_path), "--fault", "exception:3:type=no such")
    assert "invalid --fault" in usage_error_line(result)
