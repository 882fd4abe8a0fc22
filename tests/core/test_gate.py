"""The response gate (`gate.py`): lifecycle, bounds, batch validation, finishes, recovery."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence
from typing import Any

import pytest

from lockgate.conversation import CallPart, Message, NativeItem, TextPart, ToolSpec, Usage
from lockgate.display import MAX_REASONING_CHARS, REASONING_TRUNCATED
from lockgate.errors import FailureKind, ResponseFailure
from lockgate.events import (
    FINISH_PAUSED,
    FINISH_REFUSED,
    Event,
    OutputCall,
    OutputNative,
    OutputText,
    ProviderReportedFailure,
    ReasoningDelta,
    RefusalDelta,
    ResponseCompleted,
    ResponseProgress,
    ResponseStarted,
    StreamEvent,
    TextDelta,
    ToolArgumentProgress,
    ToolArgumentsDelta,
    ToolCallStarted,
    UnsupportedOutput,
    UsageReported,
    ignore_event,
)
from lockgate.fixture import ALL_TOOLS, READ_ONLY_TOOLS
from lockgate.gate import Decision, GateLimits, InvalidBatch, ResponseGate
from lockgate.providers.responses.codec import ResponsesCodec
from lockgate.providers.responses.render import ResponseBuilder
from lockgate.scripted.script import Faults, Turn

from ..helpers import CLI, KEY, failed_as, final_record, json_records, serve, stderr_lines

EDIT_ARGS = '{"path": "calculator.py", "old": "return a - b", "new": "return a + b"}'
START = ResponseStarted(response_id="r1")


def call_events(item: str, call: str, name: str, arguments: str) -> list[StreamEvent]:
    half = len(arguments) // 2
    return [
        ToolCallStarted(item, call, name),
        ToolArgumentsDelta(item, arguments[:half]),
        ToolArgumentsDelta(item, arguments[half:]),
    ]


def completed(
    *items: OutputCall | OutputText | UnsupportedOutput, response_id: str = "r1"
) -> ResponseCompleted:
    """A terminal success with an output snapshot (the Responses shape)."""
    return ResponseCompleted(None, None, tuple(items), response_id=response_id)


def feed(
    events: Sequence[StreamEvent],
    tools: Sequence[ToolSpec] = ALL_TOOLS,
    limits: GateLimits | None = None,
) -> tuple[Message | None, list[Event]]:
    seen: list[Event] = []
    gate = ResponseGate(tools, seen.append, limits)
    decision = None
    for event in events:
        decision = gate.accept(event)
    return (decision.message if decision else None), seen


def failure_of(
    events: Sequence[StreamEvent],
    tools: Sequence[ToolSpec] = ALL_TOOLS,
    limits: GateLimits | None = None,
) -> ResponseFailure:
    with pytest.raises(ResponseFailure) as caught:
        feed(events, tools, limits)
    return caught.value


def test_valid_call_batch_becomes_a_decision() -> None:
    events = [START, TextDelta("Fixing."), *call_events("fc_1", "call_1", "edit", EDIT_ARGS)]
    decision, seen = feed(
        [*events, completed(OutputText("Fixing."), OutputCall("fc_1", "call_1", "edit", EDIT_ARGS))]
    )
    assert decision is not None
    assert decision.content == "Fixing."
    assert [(c.id, c.name, dict(c.arguments), c.arguments_json) for c in decision.tool_calls] == [
        (
            "call_1",
            "edit",
            {"path": "calculator.py", "old": "return a - b", "new": "return a + b"},
            EDIT_ARGS,
        )
    ]
    assert TextDelta("Fixing.") in seen
    assert ToolArgumentProgress("call_1", "edit", len(EDIT_ARGS)) in seen


def test_progress_without_completion_never_decides() -> None:
    decision, _ = feed([START, *call_events("fc_1", "call_1", "edit", EDIT_ARGS)])
    assert decision is None


def test_start_must_come_first_once_with_an_id() -> None:
    assert failure_of([TextDelta("x")]).kind is FailureKind.LIFECYCLE
    assert failure_of([START, START]).kind is FailureKind.LIFECYCLE
    assert failure_of([ResponseStarted(response_id="")]).kind is FailureKind.LIFECYCLE


def test_response_identity_must_match() -> None:
    assert failure_of([START, ResponseProgress(response_id="r2")]).kind is FailureKind.LIFECYCLE
    assert failure_of([START, completed(response_id="r2")]).kind is FailureKind.LIFECYCLE


@pytest.mark.parametrize(
    "kind",
    [FailureKind.PROVIDER_ERROR, FailureKind.RESPONSE_FAILED, FailureKind.RESPONSE_INCOMPLETE],
)
def test_provider_failures_discard_buffered_calls(kind: FailureKind) -> None:
    events = [
        START,
        *call_events("fc_1", "call_1", "edit", EDIT_ARGS),
        ProviderReportedFailure(kind, "bad", "code_x"),
    ]
    failure = failure_of(events)
    assert failure.kind is kind
    assert "discarded" in failure.message
    assert "code_x" in failure.message


def test_nothing_after_a_terminal_event() -> None:
    seen: list[Event] = []
    gate = ResponseGate(ALL_TOOLS, seen.append)
    gate.accept(START)
    assert gate.accept(completed(OutputText("done"))) is not None
    with pytest.raises(ResponseFailure, match="after the terminal"):
        gate.accept(TextDelta("late"))


def test_text_preview_bound() -> None:
    limits = GateLimits(max_text_chars=10)
    assert feed([START, TextDelta("x" * 10)], limits=limits)[0] is None
    assert (
        failure_of([START, TextDelta("x" * 10), TextDelta("y")], limits=limits).kind
        is FailureKind.BOUND_EXCEEDED
    )


def test_call_count_and_argument_bounds() -> None:
    limits = GateLimits(max_calls=2, max_argument_chars=8)
    many = [START, *[ToolCallStarted(f"fc_{i}", f"c{i}", "discover") for i in range(3)]]
    assert failure_of(many, limits=limits).kind is FailureKind.BOUND_EXCEEDED
    long_args = [START, ToolCallStarted("fc_1", "c1", "read"), ToolArgumentsDelta("fc_1", "x" * 9)]
    assert failure_of(long_args, limits=limits).kind is FailureKind.BOUND_EXCEEDED
    initial = [START, ToolCallStarted("fc_1", "c1", "read", "x" * 9)]
    assert failure_of(initial, limits=limits).kind is FailureKind.BOUND_EXCEEDED


def test_default_bounds_match_the_specification() -> None:
    assert GateLimits() == GateLimits(max_text_chars=64_000, max_calls=8, max_argument_chars=16_000)


def test_duplicate_item_and_unknown_item_delta() -> None:
    assert (
        failure_of(
            [
                START,
                ToolCallStarted("fc_1", "a", "discover"),
                ToolCallStarted("fc_1", "b", "discover"),
            ]
        ).kind
        is FailureKind.LIFECYCLE
    )
    assert failure_of([START, ToolArgumentsDelta("fc_9", "{}")]).kind is FailureKind.LIFECYCLE


def test_terminal_call_must_equal_streamed_call() -> None:
    streamed = [START, *call_events("fc_1", "call_1", "edit", EDIT_ARGS)]
    for changed in (
        OutputCall("fc_1", "call_X", "edit", EDIT_ARGS),
        OutputCall("fc_1", "call_1", "read", EDIT_ARGS),
        OutputCall("fc_1", "call_1", "edit", EDIT_ARGS.replace("a + b", "0")),
    ):
        assert failure_of([*streamed, completed(changed)]).kind is FailureKind.CALL_MISMATCH


def test_terminal_call_not_streamed_or_streamed_call_omitted() -> None:
    assert (
        failure_of([START, completed(OutputCall("fc_1", "c", "discover", "{}"))]).kind
        is FailureKind.CALL_MISMATCH
    )
    streamed = [
        START,
        *call_events("fc_1", "c1", "discover", "{}"),
        *call_events("fc_2", "c2", "discover", "{}"),
    ]
    assert (
        failure_of([*streamed, completed(OutputCall("fc_1", "c1", "discover", "{}"))]).kind
        is FailureKind.CALL_MISMATCH
    )
    twice = OutputCall("fc_1", "c1", "discover", "{}")
    assert failure_of([*streamed[:4], completed(twice, twice)]).kind is FailureKind.CALL_MISMATCH


def batch_failure(
    *calls: tuple[str, str, str, str], tools: Sequence[ToolSpec] = ALL_TOOLS
) -> InvalidBatch:
    events: list[StreamEvent] = [START]
    for item, call, name, arguments in calls:
        events += call_events(item, call, name, arguments)
    failure = failure_of([*events, completed(*(OutputCall(*c) for c in calls))], tools=tools)
    assert isinstance(failure, InvalidBatch)
    return failure


def test_one_invalid_call_rejects_the_whole_batch() -> None:
    failure = batch_failure(
        ("fc_1", "c1", "edit", EDIT_ARGS), ("fc_2", "c2", "edit", '{"path": "calculator.py"}')
    )
    assert [p.call_id for p in failure.problems] == ["c2"]
    assert "required" in failure.problems[0].problem


@pytest.mark.parametrize(
    ("arguments", "needle"),
    [
        ('{"path": "calculator.py"', "not valid JSON"),
        ('["calculator.py"]', "not a JSON object"),
        ('{"path": 7}', "schema"),
        ('{"path": "a", "extra": "b"}', "schema"),
    ],
)
def test_arguments_must_parse_to_a_matching_object(arguments: str, needle: str) -> None:
    failure = batch_failure(("fc_1", "c1", "read", arguments))
    assert needle in failure.problems[0].problem


@pytest.mark.parametrize(
    ("constant", "needle"),
    [
        ("NaN", "NaN is not JSON"),
        ("Infinity", "Infinity is not JSON"),
        ("-Infinity", "Infinity is not JSON"),
        ("1e999", "1e999 is out of range"),
        ("-1e400", "-1e400 is out of range"),
    ],
)
def test_non_finite_numbers_are_not_json_arguments(constant: str, needle: str) -> None:
    # Python's parser accepts them; JSON does not, and a number schema would let them by.
    measure = ToolSpec(
        "measure",
        "Measure.",
        {"type": "object", "properties": {"x": {"type": "number"}}, "required": ["x"]},
    )
    failure = batch_failure(("fc_1", "c1", "measure", f'{{"x": {constant}}}'), tools=[measure])
    assert needle in failure.problems[0].problem
    message, _ = feed(
        [
            START,
            *call_events("fc_1", "c1", "measure", '{"x": 1.5e3}'),
            completed(OutputCall("fc_1", "c1", "measure", '{"x": 1.5e3}')),
        ],
        tools=[measure],
    )
    assert message is not None
    assert dict(message.tool_calls[0].arguments) == {"x": 1500.0}


def test_call_ids_non_empty_unique_and_tools_exposed() -> None:
    assert "empty call id" in batch_failure(("fc_1", "", "discover", "{}")).message
    assert (
        "duplicate call id"
        in batch_failure(("fc_1", "c1", "discover", "{}"), ("fc_2", "c1", "discover", "{}")).message
    )
    assert (
        "not exposed"
        in batch_failure(("fc_1", "c1", "edit", EDIT_ARGS), tools=READ_ONLY_TOOLS).message
    )


def test_unsupported_output_item_fails_closed() -> None:
    assert (
        failure_of([START, completed(UnsupportedOutput("reasoning"))]).kind
        is FailureKind.UNSUPPORTED_OUTPUT
    )


def test_final_text_bound() -> None:
    limits = GateLimits(max_text_chars=5)
    assert (
        failure_of([START, completed(OutputText("123456"))], limits=limits).kind
        is FailureKind.BOUND_EXCEEDED
    )


# --- failures before the start, refusals, content that is kept but not shown ------------


@pytest.mark.parametrize("transient", [True, False])
def test_a_provider_failure_before_the_start_keeps_its_kind_and_transience(
    transient: bool,
) -> None:
    # An error as a provider's very first event is that error, not a lifecycle failure:
    # its transience decides whether `retry_unstarted` may retry it.
    failure = failure_of(
        [ProviderReportedFailure(FailureKind.PROVIDER_ERROR, "overloaded", transient=transient)]
    )
    assert failure.kind is FailureKind.PROVIDER_ERROR
    assert failure.transient is transient


def test_other_data_before_the_start_is_still_a_lifecycle_failure() -> None:
    assert failure_of([TextDelta("early")]).kind is FailureKind.LIFECYCLE


def decide(events: Sequence[StreamEvent]) -> Decision:
    """The decision a gate releases from `events` (the last one that produced one)."""
    gate = ResponseGate(ALL_TOOLS, ignore_event)
    decision = None
    for event in events:
        decision = gate.accept(event) or decision
    assert decision is not None
    return decision


REFUSAL = RefusalDelta("I can't help with that.")
EDIT_CALL = call_events("fc_1", "call_1", "edit", EDIT_ARGS)


@pytest.mark.parametrize(
    ("events", "expected"),
    [
        ([REFUSAL, *EDIT_CALL, ResponseCompleted(None)], FINISH_REFUSED),
        ([REFUSAL, *EDIT_CALL, ResponseCompleted("tool_calls")], FINISH_REFUSED),
        ([REFUSAL, *EDIT_CALL, ResponseCompleted("stop")], FINISH_REFUSED),
        ([REFUSAL, *EDIT_CALL, ResponseCompleted("refusal")], FINISH_REFUSED),
        ([REFUSAL, ResponseCompleted("tool_calls")], FINISH_REFUSED),  # claims calls, has none
        ([REFUSAL, ResponseCompleted(FINISH_PAUSED)], FINISH_PAUSED),  # a pause stays a pause
    ],
    ids=["no-finish", "tool_calls", "stop", "refusal", "tool_calls-without-calls", "paused"],
)
def test_refusal_text_makes_a_refusal_that_releases_no_call(
    events: list[StreamEvent], expected: str
) -> None:
    decision = decide([START, *events])
    assert decision.finish_reason == expected
    assert decision.message.tool_calls == ()
    assert decision.message.refusal == REFUSAL.text


def test_refusal_text_does_not_turn_an_unknown_finish_into_a_success() -> None:
    events = [START, RefusalDelta("No."), ResponseCompleted("made_up")]
    assert failure_of(events).kind is FailureKind.LIFECYCLE


def test_content_kept_but_not_shown_counts_as_started_content() -> None:
    gate = ResponseGate(ALL_TOOLS, lambda event: None)
    gate.accept(START)
    gate.accept(ResponseProgress())
    assert not gate.content_started  # a heartbeat is not content
    gate.accept(ResponseProgress(content=True))
    assert gate.content_started


# --- reasoning, finish reasons and recovery contracts --------------------------------------

RS_1 = {"id": "rs_1", "type": "reasoning", "summary": [], "encrypted_content": "enc-1"}
RS_2 = {"id": "rs_2", "type": "reasoning", "summary": [], "encrypted_content": "enc-2"}
USAGE = Usage(100, 60, 20, 12, 120)


def run_gate(events: Sequence[StreamEvent]) -> tuple[Decision | None, list[Event]]:
    seen: list[Event] = []
    gate = ResponseGate(ALL_TOOLS, seen.append)
    decision = None
    for event in events:
        decision = gate.accept(event)
    return decision, seen


def streamed(item: str, call: str, name: str, arguments: str) -> list[StreamEvent]:
    return [ToolCallStarted(item, call, name), ToolArgumentsDelta(item, arguments)]


def test_reasoning_attaches_to_the_call_it_preceded_and_trailing_reasoning_is_dropped() -> None:
    events = [
        START,
        ReasoningDelta("thinking about it", "summary"),
        *streamed("fc_1", "call_1", "discover", "{}"),
        ResponseCompleted(
            None,
            USAGE,
            (
                OutputNative("reasoning", RS_1),
                OutputText("Looking.", "msg_1"),
                OutputCall("fc_1", "call_1", "discover", "{}"),
                OutputNative("reasoning", RS_2),
            ),
            response_id="r1",
        ),
    ]
    decision, seen = run_gate(events)
    assert decision is not None
    # The output keeps its original order; the encoder drops the trailing reasoning item.
    assert decision.message.output == (
        NativeItem("reasoning", RS_1),
        TextPart("Looking.", "msg_1"),
        CallPart("call_1", "fc_1"),
        NativeItem("reasoning", RS_2),
    )
    codec = ResponsesCodec("o4-mini")
    replayed = codec.encode(
        [
            Message("user", "go"),
            dataclasses.replace(decision.message, producer=codec.producer),
            Message("tool", "files", tool_call_id="call_1"),
        ],
        ALL_TOOLS,
    )["input"]
    assert [item.get("id") for item in replayed] == [None, "rs_1", "msg_1", "fc_1", None]
    assert decision.message.usage == USAGE
    assert decision.usage == USAGE
    assert decision.finish_reason == "tool_calls"
    assert ReasoningDelta("thinking about it", "summary") in seen
    assert UsageReported(USAGE) in seen


@pytest.mark.parametrize(
    ("stated", "calls", "ok"),
    [
        ("stop", False, True),
        ("tool_calls", True, True),
        ("stop", True, False),
        ("tool_calls", False, False),
        ("length", False, False),
        ("end_turn", False, False),  # native reasons must be translated by the decoder
    ],
)
def test_finish_reason_must_agree_with_the_calls(stated: str, calls: bool, ok: bool) -> None:
    events: list[StreamEvent] = [START]
    output: tuple[Any, ...] = (OutputText("hi"),)
    if calls:
        events += streamed("fc_1", "call_1", "discover", "{}")
        output = (OutputCall("fc_1", "call_1", "discover", "{}"),)
    events.append(ResponseCompleted(stated, None, output, response_id="r1"))
    if ok:
        decision, _ = run_gate(events)
        assert decision is not None
        assert decision.finish_reason == stated
    else:
        with pytest.raises(ResponseFailure) as caught:
            run_gate(events)
        assert caught.value.kind is FailureKind.LIFECYCLE


def test_invalid_batch_carries_a_paired_recovery() -> None:
    bad = '{"path": "calculator.py"'
    events = [
        START,
        *streamed("fc_1", "call_1", "read", '{"path": "README.md"}'),
        *streamed("fc_2", "call_2", "edit", bad),
        ResponseCompleted(
            None,
            None,
            (
                OutputCall("fc_1", "call_1", "read", '{"path": "README.md"}'),
                OutputCall("fc_2", "call_2", "edit", bad),
            ),
            response_id="r1",
        ),
    ]
    with pytest.raises(InvalidBatch) as caught:
        run_gate(events)
    recovery = caught.value.recovery
    assert recovery is not None
    assert [c.id for c in recovery.message.tool_calls] == ["call_1", "call_2"]
    assert recovery.message.tool_calls[1].arguments_json == bad
    first, second = recovery.observations
    assert first.startswith(
        "error: not executed because another call in the same response was invalid (call_2)"
    )
    assert second.startswith("error: call rejected, not executed: arguments are not valid JSON")


def test_unpairable_batches_are_not_recoverable() -> None:
    events = [
        START,
        *streamed("fc_1", "", "read", "{}"),
        ResponseCompleted(None, None, (OutputCall("fc_1", "", "read", "{}"),), response_id="r1"),
    ]
    with pytest.raises(InvalidBatch) as caught:
        run_gate(events)
    assert caught.value.recovery is None


def test_truncation_with_buffered_calls_is_recoverable_other_failures_are_not() -> None:
    cut = [START, *streamed("fc_1", "call_1", "edit", '{"path": "calc')]
    with pytest.raises(ResponseFailure) as caught:
        run_gate(
            [
                *cut,
                ProviderReportedFailure(
                    FailureKind.RESPONSE_INCOMPLETE,
                    "response incomplete: max_output_tokens",
                    "max_output_tokens",
                    USAGE,
                    truncated=True,
                ),
            ]
        )
    recovery = caught.value.recovery
    assert recovery is not None
    assert recovery.message.tool_calls[0].arguments_json == '{"path": "calc'
    assert recovery.observations[0].startswith(
        "error: the response was truncated by the output limit"
    )
    for failure in (
        ProviderReportedFailure(
            FailureKind.RESPONSE_INCOMPLETE, "response incomplete: content_filter", "content_filter"
        ),
        ProviderReportedFailure(FailureKind.RESPONSE_FAILED, "response failed", "server_error"),
    ):
        with pytest.raises(ResponseFailure) as other:
            run_gate([*cut, failure])
        assert other.value.recovery is None
    with pytest.raises(ResponseFailure) as text_only:
        run_gate(
            [
                START,
                ProviderReportedFailure(
                    FailureKind.RESPONSE_INCOMPLETE, "cut", "x", truncated=True
                ),
            ]
        )
    assert text_only.value.recovery is None


# --- reasoning output is bounded, end to end ---------------------------------------------


def reasoning_flood_turn(total_chars: int = 6_000_000, piece: int = 10_000) -> Turn:
    builder = ResponseBuilder("resp_think").created()
    builder.raw(
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"id": "rs_1", "type": "reasoning", "summary": []},
        }
    )
    delta = "ponder " * (piece // 7)
    for _ in range(total_chars // len(delta)):
        builder.raw(
            {
                "type": "response.reasoning_summary_text.delta",
                "item_id": "rs_1",
                "output_index": 0,
                "summary_index": 0,
                "delta": delta,
            }
        )
    return builder.completed().turn(faults=Faults(fragment_sizes=(65536,)))


@pytest.mark.parametrize("json_lines", [False, True], ids=["human", "json"])
def test_reasoning_is_bounded(cli: CLI, json_lines: bool) -> None:
    with serve([reasoning_flood_turn()]) as server:
        result = cli("run", "--base-url", server.base_url, *(["--json"] * json_lines), key=KEY)
    assert result.code == 1
    if json_lines:
        records = json_records(result.out)
        shown = sum(len(r["text"]) for r in records if r["event"] == "reasoning_delta")
        assert [r for r in records if r["event"] == "reasoning_truncated"] == [
            {
                "event": "reasoning_truncated",
                "limit": MAX_REASONING_CHARS,
                "message": REASONING_TRUNCATED,
            }
        ]
        stopped = final_record(result.out)["stopped"]
        assert len(result.out) < 3 * MAX_REASONING_CHARS
    else:
        stopped = failed_as(result, FailureKind.BOUND_EXCEEDED).stopped
        shown = len(result.err.split("thinking (summary): ", 1)[1].split("\n", 1)[0])
        assert stderr_lines(result.err, "thinking: ") == [REASONING_TRUNCATED]
        assert len(result.err) < MAX_REASONING_CHARS + 10_000
    limit = GateLimits().max_reasoning_chars
    assert stopped == f"provider_failure (bound_exceeded: reasoning exceeded {limit} characters)"
    assert MAX_REASONING_CHARS - 10_000 < shown <= MAX_REASONING_CHARS
