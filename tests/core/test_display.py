"""Display is an observer: it renders, throttles and redacts, and decides nothing."""

from __future__ import annotations

import dataclasses
import io
import json
from typing import Any

import pytest

from lockgate.conversation import Message, ToolCall, Usage
from lockgate.display import (
    MAX_REASONING_CHARS,
    REASONING_TRUNCATED,
    HumanDisplay,
    JsonLinesDisplay,
    Redactor,
    event_record,
    visible,
)
from lockgate.errors import FailureKind
from lockgate.events import (
    DecisionReady,
    Event,
    ReasoningDelta,
    RefusalDelta,
    ResponseFailed,
    ResponseStarted,
    Retrying,
    TextDelta,
    ToolArgumentProgress,
    ToolCallStarted,
    ToolFinished,
    ToolStarted,
    UsageReported,
)
from lockgate.providers.responses.render import ResponseBuilder
from lockgate.scripted.script import Turn

from ..helpers import (
    CLI,
    EDIT,
    ascii_frames,
    assert_closing_lines,
    call_turn,
    failed_as,
    final_record,
    json_records,
    serve,
    text_turn,
)


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def test_argument_progress_is_throttled_per_call() -> None:
    out, err, clock = io.StringIO(), io.StringIO(), Clock()
    display = HumanDisplay(out, err, clock=clock)
    for chars in range(1, 5001):
        display(ToolArgumentProgress("call_1", "edit", chars))
    clock.now = 0.3
    display(ToolArgumentProgress("call_1", "edit", 5001))
    display(ToolArgumentProgress("call_2", "read", 7))
    assert err.getvalue().splitlines() == [
        "arguments buffered: edit (1 chars)",
        "arguments buffered: edit (5001 chars)",
        "arguments buffered: read (7 chars)",
    ]


def test_text_to_stdout_reasoning_and_status_to_stderr() -> None:
    out, err = io.StringIO(), io.StringIO()
    display = HumanDisplay(out, err)
    display(ReasoningDelta("plan", "summary"))
    display(TextDelta("Hello"))
    display(TextDelta(" world"))
    display(Retrying(2, 3, 0.4, "HTTP 429"))
    assert out.getvalue() == "  Hello world\n"
    assert (
        err.getvalue()
        == "thinking (summary): plan\nretry opening: attempt 2/3 in 0.40 s (HTTP 429)\n"
    )


def test_secrets_are_redacted_everywhere() -> None:
    redact = Redactor(["sk-secret-123"])
    out, err = io.StringIO(), io.StringIO()
    HumanDisplay(out, err, redact=redact)(TextDelta("key sk-secret-123"))
    JsonLinesDisplay(out, redact=redact)(Retrying(2, 3, 1.0, "echo sk-secret-123"))
    assert "sk-secret-123" not in out.getvalue() + err.getvalue()
    assert out.getvalue().count("[redacted]") == 2


def test_json_records_carry_every_field() -> None:
    call = ToolCall("call_1", "read", {"path": "README.md"}, '{"path": "README.md"}')
    usage = Usage(10, 5, 3, 1, 13)
    record = event_record(DecisionReady(Message("assistant", "x", (call,)), "tool_calls", usage))
    assert record["event"] == "decision_ready"
    assert record["finish_reason"] == "tool_calls"
    assert record["usage"] == dataclasses.asdict(usage)  # every field, whatever Usage holds
    assert {
        "input_tokens": 10,
        "cached_input_tokens": 5,
        "output_tokens": 3,
        "reasoning_tokens": 1,
        "total_tokens": 13,
    }.items() <= record["usage"].items()
    assert record["message"]["tool_calls"][0]["arguments"] == {"path": "README.md"}
    out = io.StringIO()
    JsonLinesDisplay(out)(UsageReported(usage))
    assert json.loads(out.getvalue()) == {"event": "usage_reported", "usage": record["usage"]}


# --- hostile server text ------------------------------------------------------------------

KEY = "sk-proj-LOCKGATE-SECRET-4d6f2a9b7c1e"
ESCAPES = ("\x1b]0;title\x07", "\x1b[2K\r", "\x1b[1A")
HOSTILE = "".join(ESCAPES)
RAW_CONTROLS = ("\x1b", "\x07", "\r", "\x9b", "\u202e")


def strict_utf8() -> io.TextIOWrapper:
    return io.TextIOWrapper(io.BytesIO(), encoding="utf-8", errors="strict")


def written(stream: io.TextIOWrapper) -> str:
    stream.flush()
    buffer = stream.buffer
    assert isinstance(buffer, io.BytesIO)
    return buffer.getvalue().decode("utf-8", errors="strict")


def human(*events: Event, redact: Redactor | None = None) -> tuple[str, str]:
    out, err = io.StringIO(), io.StringIO()
    display = HumanDisplay(out, err, redact=redact)
    for event in events:
        display(event)
    display.close()
    return out.getvalue(), err.getvalue()


def json_lines(*events: Event, redact: Redactor | None = None) -> list[dict[str, Any]]:
    out = io.StringIO()
    display = JsonLinesDisplay(out, redact=redact)
    for event in events:
        display(event)
    display.close()
    return [json.loads(line) for line in out.getvalue().splitlines()]


def hostile_call(text: str) -> ToolCall:
    return ToolCall(f"call_{text}", f"read{text}", {"path": text}, "")


HOSTILE_EVENTS: dict[str, Event] = {
    "text": TextDelta(f"hi {HOSTILE} there"),
    "refusal": RefusalDelta(f"no {HOSTILE}"),
    "reasoning": ReasoningDelta(f"plan {HOSTILE}"),
    "response_failed": ResponseFailed("provider_error", f"bad {HOSTILE}", ""),
    "tool_call_started": ToolCallStarted(key="fc_1", call_id=f"c{HOSTILE}", name=f"n{HOSTILE}"),
    "argument_progress": ToolArgumentProgress(f"c{HOSTILE}", f"n{HOSTILE}", 3),
    "retrying": Retrying(2, 3, 0.5, f"HTTP 503 {HOSTILE}"),
    "decision_ready": DecisionReady(
        Message("assistant", "", (hostile_call(HOSTILE),)), "tool_calls", None
    ),
    "tool_started": ToolStarted(hostile_call(HOSTILE)),
    "tool_finished": ToolFinished(f"c{HOSTILE}", f"n{HOSTILE}", f"out {HOSTILE}"),
}


@pytest.mark.parametrize("event", HOSTILE_EVENTS.values(), ids=HOSTILE_EVENTS.keys())
def test_escape_sequences_never_reach_the_terminal_raw(event: Event) -> None:
    out, err = human(event)
    for control in RAW_CONTROLS:
        assert control not in out + err
    assert "\\x1b]0;title\\x07" in out + err
    assert "\\x1b[2K\\r" in out + err


def test_json_lines_escape_esc_themselves() -> None:
    records = io.StringIO()
    JsonLinesDisplay(records)(TextDelta(HOSTILE))
    assert "\\u001b" in records.getvalue()
    assert "\x1b" not in records.getvalue()
    assert json.loads(records.getvalue())["text"] == HOSTILE


def test_visible_escapes_every_control_and_keeps_ordinary_text() -> None:
    ordinary = "héllo wörld 😀 中文 👩‍👩‍👧 naïve «ok» ½"  # the family emoji joins with U+200D
    assert visible(ordinary, multiline=True) == ordinary
    assert visible(ordinary, multiline=False) == ordinary
    assert visible("a\nb\tc\rd", multiline=True) == "a\nb\tc\\rd"
    assert visible("a\nb\tc\rd", multiline=False) == "a\\nb\\tc\\rd"
    assert visible("\x1b[31m\x00\x7f\x85\x9b", multiline=True) == "\\x1b[31m\\x00\\x7f\\x85\\x9b"
    assert visible("\u202e\u2066\u200f\u061c\u2028\ud800", multiline=True) == (
        "\\u202e\\u2066\\u200f\\u061c\\u2028\\ud800"
    )
    unsafe = [chr(c) for c in (*range(0x20), *range(0x7F, 0xA0), 0x61C, 0x200E, 0x200F)]
    unsafe += [chr(c) for c in (*range(0x202A, 0x202F), *range(0x2066, 0x206A), 0x2028, 0x2029)]
    unsafe += [chr(c) for c in range(0xD800, 0xE000)]
    # Every character of the BMP (where all of them live) and two astral ones: the unsafe
    # ones become printable ASCII escapes, every other character is left exactly as it was.
    for multiline, kept in ((True, {"\n", "\t"}), (False, set())):
        escaped = set(unsafe) - kept
        for char in [*map(chr, range(0x10000)), "😀", "\U0001d54f"]:
            shown = visible(char, multiline=multiline)
            if char in escaped:
                assert shown.startswith("\\")
                assert shown.isascii()
                assert shown.isprintable()
            else:
                assert shown == char


def test_model_text_cannot_forge_lockgate_lines() -> None:
    forged = "\nstopped: model_finished\nexecuted tools: 9\nusage: input=0\n"
    out, err = human(
        TextDelta("done"),
        TextDelta(forged),
        TextDelta("\rstopped: model_finished"),
        TextDelta("x\n"),
        TextDelta("stop"),
        TextDelta("ped: split across deltas\n"),
        RefusalDelta(forged),
        ReasoningDelta(forged),
    )
    for line in (out + err).splitlines():
        assert not line.startswith(("stopped:", "executed tools:", "usage:")), line
    assert "  stopped: model_finished" in out.splitlines()
    assert "\r" not in out + err


def test_model_lines_are_indented_and_a_refusal_is_marked() -> None:
    out, err = human(
        TextDelta("Hello\nsecond"),
        TextDelta(" line\n\nfourth\n"),
        RefusalDelta("I can't\ndo that"),
        ReasoningDelta("first\nsecond"),
    )
    assert out == "  Hello\n  second line\n\n  fourth\nrefusal: I can't\n  do that\n"
    assert err == "thinking (summary): first\n  second\n"


def test_key_split_across_deltas_is_never_printed_whole() -> None:
    redact = Redactor([KEY])
    halves = (KEY[:11], KEY[11:])
    out, err = human(
        TextDelta(f"here {halves[0]}"),
        TextDelta(f"{halves[1]} done"),
        RefusalDelta(KEY[:3]),
        RefusalDelta(KEY[3:20]),
        RefusalDelta(KEY[20:]),
        ReasoningDelta(f"think {halves[0]}"),
        ReasoningDelta(halves[1]),
        redact=redact,
    )
    assert KEY not in out + err
    assert out == "  here [redacted] done\nrefusal: [redacted]\n"
    assert err == "thinking (summary): think [redacted]\n"


def test_held_back_text_is_released_when_output_changes_and_on_close() -> None:
    out, err = io.StringIO(), io.StringIO()
    display = HumanDisplay(out, err, redact=Redactor([KEY]))
    display(TextDelta("ends with sk-pro"))
    assert out.getvalue() == "  ends with "  # "sk-pro" may be the start of the key
    display(Retrying(2, 3, 0.5, "HTTP 503"))
    assert out.getvalue() == "  ends with sk-pro\n"
    display(ReasoningDelta("and sk-"))
    display.close()
    assert err.getvalue().endswith("thinking (summary): and sk-\n")


def test_status_preview_is_redacted_before_it_is_cut() -> None:
    output = "x" * 395 + KEY
    _, err = human(ToolFinished("call_1", "read", output), redact=Redactor([KEY]))
    assert KEY[:5] not in err
    assert err.startswith("result read: " + "x" * 395)


def test_json_key_split_across_deltas_is_never_whole_in_a_record() -> None:
    redact = Redactor([KEY])
    out = io.StringIO()
    display = JsonLinesDisplay(out, redact=redact)
    display(TextDelta(f"here {KEY[:11]}"))
    display(TextDelta(f"{KEY[11:]} done"))
    display(ReasoningDelta(KEY[:7]))
    display(ReasoningDelta(KEY[7:]))
    display(TextDelta("tail sk-pr"))
    display.emit({"event": "final", "source": f"# {KEY}"})
    assert KEY not in out.getvalue()
    records = [json.loads(line) for line in out.getvalue().splitlines()]
    assert [(r["event"], r.get("text")) for r in records] == [
        ("text_delta", "here "),
        ("text_delta", "[redacted] done"),
        ("reasoning_delta", ""),
        ("reasoning_delta", "[redacted]"),
        ("text_delta", "tail "),
        ("text_delta", "sk-pr"),  # held back, released before the final record
        ("final", None),
    ]
    assert records[3]["kind"] == "summary"
    assert records[-1]["source"] == "# [redacted]"


def test_json_key_containing_a_quote_is_redacted() -> None:
    key = 'sk-"quoted"\\key'
    records = json_lines(
        TextDelta(f"echo {key}"),
        Retrying(2, 3, 1.0, f"said {key}"),
        ToolStarted(ToolCall("call_1", "read", {key: key}, "")),
        redact=Redactor([key]),
    )
    encoded = json.dumps(records)
    assert key not in encoded
    assert json.dumps(key)[1:-1] not in encoded
    assert records[0]["text"] == "echo [redacted]"
    assert records[2]["call"]["arguments"] == {"[redacted]": "[redacted]"}


def test_lone_surrogates_are_written_to_strict_utf8_streams() -> None:
    out, err = strict_utf8(), strict_utf8()
    display = HumanDisplay(out, err)
    display(TextDelta("a\ud800b"))
    display(ReasoningDelta("r\udfff"))
    display(ToolFinished("call_1", "read", "o\udc80"))
    display.close()
    assert written(out) == "  a\\ud800b\n"
    assert "r\\udfff" in written(err)
    assert "o\\udc80" in written(err)

    lines = strict_utf8()
    machine = JsonLinesDisplay(lines)
    machine(TextDelta("a\ud800b"))
    machine(ToolFinished("call_1", "read\udfff", "é"))
    machine.close()
    records = [json.loads(line) for line in written(lines).splitlines()]
    assert records[0]["text"] == "a\ud800b"
    assert records[1]["name"] == "read\udfff"
    assert records[1]["output"] == "é"  # ordinary non-ASCII text stays unescaped
    assert "é" in written(lines)


def test_reasoning_is_cut_at_its_bound_with_one_note() -> None:
    chunk = "x" * 40_000
    out, err = human(
        ReasoningDelta(chunk),
        ReasoningDelta(chunk),
        ReasoningDelta(chunk),
        TextDelta("answer"),
        ResponseStarted(),
        ReasoningDelta("again"),
    )
    assert err.count("x") == MAX_REASONING_CHARS
    assert err.count(REASONING_TRUNCATED) == 1
    assert REASONING_TRUNCATED == ("thinking: … (reasoning output truncated at 64000 characters)")
    assert err.splitlines()[1] == REASONING_TRUNCATED
    assert err.endswith("thinking (summary): again\n")
    assert out == "  answer\n"

    records = json_lines(
        ReasoningDelta(chunk),
        ReasoningDelta(chunk),
        ReasoningDelta(chunk),
        ResponseStarted(),
        ReasoningDelta("again"),
    )
    shown = "".join(r["text"] for r in records if r["event"] == "reasoning_delta")
    assert shown == "x" * MAX_REASONING_CHARS + "again"
    notes = [r for r in records if r["event"] == "reasoning_truncated"]
    assert notes == [
        {"event": "reasoning_truncated", "limit": 64000, "message": REASONING_TRUNCATED}
    ]


def test_redactor_is_still_importable_from_display() -> None:
    from lockgate import credentials

    assert Redactor is credentials.Redactor


# --- end to end: terminal injection, lone surrogates -------------------------------------


INJECT = "\x1b]0;pwned\x07\x1b[2K\r\x1b[1A"

FORGED = "\nstopped: model_finished\nexecuted tools: 99\nusage: input=0\n"


def injection_turns(case: str) -> list[Turn]:
    if case == "answer-text":
        builder = ResponseBuilder("resp_i").created()
        builder.text("msg", f"Done.{INJECT}{FORGED}{INJECT}tail", pieces=5)
        return [builder.completed().turn()]
    if case == "reasoning":
        builder = ResponseBuilder("resp_i").created()
        builder.reasoning(
            {
                "id": "rs_1",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": f"think{INJECT}{FORGED}"}],
            }
        )
        return [builder.text("msg", "ok").completed().turn()]
    if case == "tool-name":
        return [call_turn(f"edit{INJECT}{FORGED}", EDIT)]
    if case == "call-id":
        builder = ResponseBuilder("resp_i").created()
        builder.call("fc_1", f"call{INJECT}{FORGED}", "read", {"path": "README.md"})
        return [builder.completed().turn(), text_turn()]
    if case == "error-event":
        builder = ResponseBuilder("resp_i").created().text("msg", "x")
        return [builder.error(f"code{INJECT}", f"boom{INJECT}{FORGED}").turn()]
    if case == "response-failed":
        builder = ResponseBuilder("resp_i").created()
        return [builder.failed(f"code{INJECT}", f"failed{INJECT}{FORGED}").turn()]
    assert case == "http-error"
    body = {"error": {"message": f"denied{INJECT}{FORGED}", "code": f"c{INJECT}"}}
    return [Turn(status=400, body=body)]


INJECTION_CASES = [
    "answer-text",
    "reasoning",
    "tool-name",
    "call-id",
    "error-event",
    "response-failed",
    "http-error",
]


@pytest.mark.parametrize("case", INJECTION_CASES)
def test_escape_sequences_never_reach_the_terminal(cli: CLI, case: str) -> None:
    with serve(injection_turns(case)) as server:
        result = cli("run", "--base-url", server.base_url, "--allow-execution", key=KEY)
    for stream in (result.out, result.err):
        for raw in ("\x1b", "\x07", "\r"):
            assert raw not in stream, (case, stream[-1500:])
    stops = [line for line in result.output.splitlines() if line.startswith("stopped:")]
    for own in ("executed tools:", "usage:"):
        assert sum(line.startswith(own) for line in result.out.splitlines()) == 1
    ending = assert_closing_lines(result)
    assert stops == [f"stopped: {ending.stopped}"]  # the one stop line is lockgate's own


def test_escape_sequences_in_json_mode_are_json_escapes(cli: CLI) -> None:
    with serve(injection_turns("answer-text")) as server:
        result = cli("run", "--base-url", server.base_url, "--json", key=KEY)
    assert result.code == 0
    assert "\x1b" not in result.output
    records = json_records(result.out)
    shown = "".join(r["text"] for r in records if r["event"] == "text_delta")
    assert shown == f"Done.{INJECT}{FORGED}{INJECT}tail"  # faithful, yet escaped on the wire
    assert final_record(result.out)["stopped"] == "model_finished"


@pytest.mark.parametrize("json_lines", [False, True], ids=["human", "json"])
def test_a_lone_surrogate_in_text_is_a_malformed_event(cli: CLI, json_lines: bool) -> None:
    # JavaScript and Python readers keep a lone surrogate escape, jiter and serde_json refuse
    # it: readers disagree, so the event is refused (`jsonlimits`), cleanly.
    builder = ResponseBuilder("resp_sur").created().text("msg", "odd \ud800 text", pieces=3)
    builder.call("fc_1", "call_1", "discover", {})
    with serve([Turn(events=ascii_frames(builder.completed()))]) as server:
        result = cli("run", "--base-url", server.base_url, *(["--json"] * json_lines), key=KEY)
    assert "internal error" not in result.output
    if json_lines:
        assert result.code == 1
        stopped = final_record(result.out)["stopped"]
    else:
        stopped = failed_as(result, FailureKind.MALFORMED_EVENT).stopped
    assert "malformed_event" in stopped
    assert "lone surrogate" in stopped
