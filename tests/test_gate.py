from __future__ import annotations

from collections.abc import Sequence

import pytest

from lockgate.conversation import Message, ToolSpec
from lockgate.errors import FailureKind, ResponseFailure
from lockgate.events import (
    FINISH_PAUSED,
    FINISH_REFUSED,
    Event,
    OutputCall,
    OutputText,
    ProviderReportedFailure,
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
    ignore_event,
)
from lockgate.fixture import ALL_TOOLS, READ_ONLY_TOOLS
from lockgate.gate import Decision, GateLimits, InvalidBatch, ResponseGate

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
