"""The lab's authored scenarios and what each must show."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import FailureKind
from .script import ResponseBuilder, Turn

EDIT_FIX = {"path": "calculator.py", "old": "return a - b", "new": "return a + b"}
FIXED_SOURCE = "def add(a, b):\n    return a + b\n"


@dataclass(frozen=True, slots=True)
class Expectation:
    """What a scenario must show. `outcome` is `model_finished`, `turn_limit`,
    `interrupted` or a failure kind (a provider failure)."""

    outcome: str
    attempts: int
    tools_executed: int
    fixed: bool = False

    @property
    def is_failure(self) -> bool:
        return self.outcome not in {"model_finished", "turn_limit"}


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    summary: str
    expect: Expectation
    turns: Callable[[], list[Turn]]


def _call_turn(number: int, name: str, arguments: dict[str, str], text: str = "") -> Turn:
    builder = ResponseBuilder(f"resp_repair_{number}").created()
    if text:
        builder.text(f"msg_repair_{number}", text)
    builder.call(f"fc_repair_{number}", f"call_repair_{number}", name, arguments)
    return builder.completed().turn()


def repair_turns() -> list[Turn]:
    """The full conversation: discover → read README → test → read → edit → test → answer."""
    answer = "Fixed: `add` subtracted its arguments; it now returns `a + b` and both tests pass."
    return [
        _call_turn(1, "discover", {}, "I'll start by looking at the project files."),
        _call_turn(2, "read", {"path": "README.md"}),
        _call_turn(3, "test", {}, "Let me reproduce the failure."),
        _call_turn(4, "read", {"path": "calculator.py"}),
        _call_turn(5, "edit", EDIT_FIX, "`add` uses `-`; replacing it with `+`."),
        _call_turn(6, "test", {}),
        ResponseBuilder("resp_repair_7")
        .created()
        .text("msg_repair_7", answer, 6)
        .completed()
        .turn(),
    ]


def _edit_stream(response_id: str) -> ResponseBuilder:
    return ResponseBuilder(response_id).created().text("msg_1", "I'll fix the bug now.")


def retry_turns() -> list[Turn]:
    overloaded = {
        "error": {
            "message": "The server is overloaded.",
            "type": "server_error",
            "code": "server_is_overloaded",
        }
    }
    answer = (
        ResponseBuilder("resp_retry").created().text("msg_1", "The bug is in `add`: it subtracts.")
    )
    return [
        Turn(status=503, body=overloaded),
        Turn(connection_error=True),
        answer.completed().turn(),
    ]


def disconnect_turns() -> list[Turn]:
    # Item-level `.done` events arrive, then the connection ends before response.completed.
    return [_edit_stream("resp_disconnect").call("fc_1", "call_1", "edit", EDIT_FIX).turn()]


def malformed_turns() -> list[Turn]:
    truncated = '{"path": "calculator.py", "old": "return a - b", "new": "return a +'
    return [
        _edit_stream("resp_malformed").call("fc_1", "call_1", "edit", truncated).completed().turn()
    ]


def output_limit_turns() -> list[Turn]:
    builder = _edit_stream("resp_output_limit")
    builder.call(
        "fc_1", "call_1", "edit", '{"path": "calculator.py", "old": "return a', finish=False
    )
    return [builder.incomplete("max_output_tokens").turn()]


def unknown_tool_turns() -> list[Turn]:
    builder = _edit_stream("resp_unknown_tool").call(
        "fc_1", "call_1", "shell", {"command": "rm -rf ."}
    )
    return [builder.completed().turn()]


def second_call_invalid_turns() -> list[Turn]:
    builder = _edit_stream("resp_second_invalid")
    builder.call("fc_1", "call_1", "edit", EDIT_FIX)
    builder.call("fc_2", "call_2", "edit", {"path": "calculator.py", "old": "a - b"})
    return [builder.completed().turn()]


def changed_call_turns() -> list[Turn]:
    builder = _edit_stream("resp_changed").call("fc_1", "call_1", "edit", EDIT_FIX)
    changed = [dict(item) for item in builder.output]
    changed[-1]["arguments"] = '{"path": "calculator.py", "old": "return a - b", "new": "return 0"}'
    return [builder.completed(output=changed).turn()]


def missing_call_turns() -> list[Turn]:
    builder = _edit_stream("resp_missing")
    builder.call("fc_1", "call_1", "read", {"path": "calculator.py"})
    builder.call("fc_2", "call_2", "edit", EDIT_FIX)
    return [builder.completed(output=builder.output[:-1]).turn()]


def duplicate_start_turns() -> list[Turn]:
    builder = ResponseBuilder("resp_dup").created().created()
    builder.call("fc_1", "call_1", "edit", EDIT_FIX)
    return [builder.completed().turn()]


def wrong_response_id_turns() -> list[Turn]:
    builder = _edit_stream("resp_right").call("fc_1", "call_1", "edit", EDIT_FIX)
    return [builder.completed(response_id="resp_other").turn()]


def reasoning_item_turns() -> list[Turn]:
    builder = ResponseBuilder("resp_reasoning").created()
    builder.output_item(
        {
            "id": "rs_1",
            "type": "reasoning",
            "summary": [{"type": "summary_text", "text": "The add function subtracts."}],
            "encrypted_content": "gAAAA-opaque",
        }
    )
    builder.call("fc_1", "call_1", "edit", EDIT_FIX)
    return [builder.completed().turn()]


def cleanup_failure_turns() -> list[Turn]:
    builder = _edit_stream("resp_cleanup").call("fc_1", "call_1", "edit", EDIT_FIX)
    return [builder.completed().turn(close_fails=True)]


def cancellation_turns() -> list[Turn]:
    builder = _edit_stream("resp_cancel")
    builder.call(
        "fc_1", "call_1", "edit", '{"path": "calculator.py", "old": "return a - b", ', finish=False
    )
    return [builder.turn(end="hang")]


def _failure(kind: FailureKind | str) -> Expectation:
    return Expectation(str(kind), attempts=1, tools_executed=0)


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "repair",
        "discover, read, test, read, edit, test, answer: the bug is fixed",
        Expectation("model_finished", attempts=7, tools_executed=6, fixed=True),
        repair_turns,
    ),
    Scenario(
        "retry",
        "503, then a connection error while opening, then success",
        Expectation("model_finished", attempts=3, tools_executed=0),
        retry_turns,
    ),
    Scenario(
        "disconnect",
        "item .done events, then EOF before response.completed",
        _failure(FailureKind.STREAM_ENDED),
        disconnect_turns,
    ),
    Scenario(
        "malformed",
        "completed response whose edit arguments are cut-off JSON",
        _failure(FailureKind.INVALID_BATCH),
        malformed_turns,
    ),
    Scenario(
        "output-limit",
        "response.incomplete (max_output_tokens) mid-arguments",
        _failure(FailureKind.RESPONSE_INCOMPLETE),
        output_limit_turns,
    ),
    Scenario(
        "unknown-tool",
        "a call to a tool that was never exposed",
        _failure(FailureKind.INVALID_BATCH),
        unknown_tool_turns,
    ),
    Scenario(
        "second-call-invalid",
        "valid edit, then an edit missing an argument",
        _failure(FailureKind.INVALID_BATCH),
        second_call_invalid_turns,
    ),
    Scenario(
        "changed-call",
        "terminal arguments differ from the streamed ones",
        _failure(FailureKind.CALL_MISMATCH),
        changed_call_turns,
    ),
    Scenario(
        "missing-call",
        "terminal output omits a streamed call",
        _failure(FailureKind.CALL_MISMATCH),
        missing_call_turns,
    ),
    Scenario(
        "duplicate-start",
        "response.created twice",
        _failure(FailureKind.LIFECYCLE),
        duplicate_start_turns,
    ),
    Scenario(
        "wrong-response-id",
        "response.completed names another response",
        _failure(FailureKind.LIFECYCLE),
        wrong_response_id_turns,
    ),
    Scenario(
        "reasoning-item",
        "a reasoning output item this adapter cannot replay",
        _failure(FailureKind.UNSUPPORTED_OUTPUT),
        reasoning_item_turns,
    ),
    Scenario(
        "cleanup-failure",
        "a valid edit, but closing the stream fails",
        _failure(FailureKind.CLEANUP),
        cleanup_failure_turns,
    ),
    Scenario(
        "cancellation",
        "the run is cancelled while arguments stream",
        _failure("interrupted"),
        cancellation_turns,
    ),
)

SCENARIOS_BY_NAME = {scenario.name: scenario for scenario in SCENARIOS}
