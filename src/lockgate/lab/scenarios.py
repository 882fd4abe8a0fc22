"""The lab's authored scenarios and what each must show."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from ..errors import FailureKind
from .script import Faults, ResponseBuilder, Turn

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
    answer: str | None = None  # the final assistant text, when it matters
    closed_early: int | None = None  # over HTTP: streams the client left early (None: racy)

    @property
    def is_failure(self) -> bool:
        return self.outcome not in {"model_finished", "turn_limit"}


BOTH: frozenset[str] = frozenset({"inprocess", "http"})
HTTP_ONLY: frozenset[str] = frozenset({"http"})


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    summary: str
    expect: Expectation
    turns: Callable[[], list[Turn]]
    transports: frozenset[str] = BOTH


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
    return [builder.completed().turn(faults=Faults(close_fails=True))]


def cancellation_turns() -> list[Turn]:
    builder = _edit_stream("resp_cancel")
    builder.call(
        "fc_1", "call_1", "edit", '{"path": "calculator.py", "old": "return a - b", ', finish=False
    )
    return [builder.turn(faults=Faults(end="hang"))]


UNICODE_ANSWER = "Ünïcödé ✓ — 修正済み: `add` now adds. 🎉"


def _partial_edit(response_id: str) -> ResponseBuilder:
    builder = _edit_stream(response_id)
    return builder.call("fc_1", "call_1", "edit", EDIT_FIX, finish=False)


def reset_mid_stream_turns() -> list[Turn]:
    builder = _partial_edit("resp_reset")
    return [builder.turn(faults=Faults(reset_after=len(builder.events) - 2))]


def clean_eof_turns() -> list[Turn]:
    return [_partial_edit("resp_eof").turn()]


def stall_turns() -> list[Turn]:
    builder = _partial_edit("resp_stall")
    return [builder.turn(faults=Faults(stall_after=4, stall_seconds=30.0))]


def slow_drip_turns() -> list[Turn]:
    builder = (
        ResponseBuilder("resp_drip")
        .created()
        .text("msg_1", "Slow but steady: the bug is in add.", 8)
    )
    return [builder.completed().turn(faults=Faults(drip_ms=15, fragment_sizes=(48,)))]


def giant_frame_turns() -> list[Turn]:
    builder = _edit_stream("resp_giant")
    return [builder.turn(faults=Faults(giant_frame_bytes=64 * 1024 * 1024, fragment_sizes=(4096,)))]


def malformed_json_turns() -> list[Turn]:
    builder = _edit_stream("resp_bad_json")
    broken = '{"type": "response.output_text.delta", "item_id": "msg_1", "delta": "unterminated'
    builder.raw({"raw": f"event: response.output_text.delta\ndata: {broken}\n\n"})
    return [builder.completed().turn()]


def http_401_turns() -> list[Turn]:
    body = {
        "error": {
            "message": "Incorrect API key provided.",
            "type": "invalid_request_error",
            "code": "invalid_api_key",
        }
    }
    return [Turn(status=401, body=body), text_turn_for("resp_never")]


def http_429_quota_turns() -> list[Turn]:
    body = {
        "error": {
            "message": "You exceeded your current quota.",
            "type": "insufficient_quota",
            "code": "insufficient_quota",
        }
    }
    return [Turn(status=429, body=body), text_turn_for("resp_never")]


def http_503_then_ok_turns() -> list[Turn]:
    body = {
        "error": {"message": "Service unavailable.", "type": "server_error", "code": "server_error"}
    }
    return [
        Turn(status=503, body=body, headers={"retry-after": "0"}),
        text_turn_for("resp_after_503"),
    ]


def utf8_split_turns() -> list[Turn]:
    builder = ResponseBuilder("resp_utf8").created().text("msg_1", UNICODE_ANSWER, 3)
    return [builder.completed().turn(faults=Faults(fragment_sizes=(1, 2, 3, 5)))]


def framing_variants_turns() -> list[Turn]:
    builder = (
        ResponseBuilder("resp_framing")
        .created()
        .text("msg_1", "CRLF, keep-alives and [DONE] are fine.")
    )
    faults = Faults(
        line_ending="crlf", keepalive_every=2, done_sentinel=True, fragment_sizes=(2, 9)
    )
    return [builder.completed().turn(faults=faults)]


def text_turn_for(response_id: str) -> Turn:
    return (
        ResponseBuilder(response_id)
        .created()
        .text("msg_1", "The bug is in add.")
        .completed()
        .turn()
    )


def _failure(kind: FailureKind | str, *, closed_early: int | None = None) -> Expectation:
    return Expectation(str(kind), attempts=1, tools_executed=0, closed_early=closed_early)


def _answered(attempts: int = 1, answer: str | None = None) -> Expectation:
    return Expectation(
        "model_finished", attempts=attempts, tools_executed=0, answer=answer, closed_early=0
    )


SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "repair",
        "discover, read, test, read, edit, test, answer: the bug is fixed",
        Expectation("model_finished", attempts=7, tools_executed=6, fixed=True, closed_early=0),
        repair_turns,
    ),
    Scenario(
        "retry",
        "503, then a connection error while opening, then success",
        _answered(3),
        retry_turns,
    ),
    Scenario(
        "disconnect",
        "item .done events, then EOF before response.completed",
        _failure(FailureKind.STREAM_ENDED, closed_early=0),
        disconnect_turns,
    ),
    Scenario(
        "malformed",
        "completed response whose edit arguments are cut-off JSON",
        _failure(FailureKind.INVALID_BATCH, closed_early=0),
        malformed_turns,
    ),
    Scenario(
        "output-limit",
        "response.incomplete (max_output_tokens) mid-arguments",
        _failure(FailureKind.RESPONSE_INCOMPLETE, closed_early=0),
        output_limit_turns,
    ),
    Scenario(
        "unknown-tool",
        "a call to a tool that was never exposed",
        _failure(FailureKind.INVALID_BATCH, closed_early=0),
        unknown_tool_turns,
    ),
    Scenario(
        "second-call-invalid",
        "valid edit, then an edit missing an argument",
        _failure(FailureKind.INVALID_BATCH, closed_early=0),
        second_call_invalid_turns,
    ),
    Scenario(
        "changed-call",
        "terminal arguments differ from the streamed ones",
        _failure(FailureKind.CALL_MISMATCH, closed_early=0),
        changed_call_turns,
    ),
    Scenario(
        "missing-call",
        "terminal output omits a streamed call",
        _failure(FailureKind.CALL_MISMATCH, closed_early=0),
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
        _failure(FailureKind.LIFECYCLE, closed_early=0),
        wrong_response_id_turns,
    ),
    Scenario(
        "reasoning-item",
        "a reasoning output item this adapter cannot replay",
        _failure(FailureKind.UNSUPPORTED_OUTPUT, closed_early=0),
        reasoning_item_turns,
    ),
    Scenario(
        "cleanup-failure",
        "a valid edit, but closing the stream fails",
        _failure(FailureKind.CLEANUP, closed_early=0),
        cleanup_failure_turns,
    ),
    Scenario(
        "cancellation",
        "the run is cancelled while arguments stream",
        _failure("interrupted", closed_early=1),
        cancellation_turns,
    ),
    Scenario(
        "framing-variants",
        "CRLF line ends, keep-alive comments, a trailing [DONE]",
        _answered(answer="CRLF, keep-alives and [DONE] are fine."),
        framing_variants_turns,
    ),
    Scenario(
        "reset-mid-stream",
        "TCP reset while arguments stream",
        _failure(FailureKind.TRANSPORT, closed_early=0),
        reset_mid_stream_turns,
        HTTP_ONLY,
    ),
    Scenario(
        "clean-eof",
        "the body ends cleanly mid-arguments, no terminal event",
        _failure(FailureKind.STREAM_ENDED, closed_early=0),
        clean_eof_turns,
        HTTP_ONLY,
    ),
    Scenario(
        "stall",
        "no bytes for 30 s mid-arguments (lab idle timeout 1 s)",
        _failure(FailureKind.IDLE_TIMEOUT, closed_early=1),
        stall_turns,
        HTTP_ONLY,
    ),
    Scenario(
        "slow-drip",
        "every fragment 15 ms apart: slow, never idle",
        _answered(answer="Slow but steady: the bug is in add."),
        slow_drip_turns,
        HTTP_ONLY,
    ),
    Scenario(
        "giant-frame",
        "a 64 MiB frame that never ends (bound: 4 MiB)",
        _failure(FailureKind.BOUND_EXCEEDED, closed_early=1),
        giant_frame_turns,
        HTTP_ONLY,
    ),
    Scenario(
        "malformed-json",
        "a frame whose JSON is cut off",
        _failure(FailureKind.MALFORMED_EVENT),
        malformed_json_turns,
        HTTP_ONLY,
    ),
    Scenario(
        "http-401",
        "401 invalid_api_key while opening: not retried",
        _failure(FailureKind.OPENING, closed_early=0),
        http_401_turns,
        HTTP_ONLY,
    ),
    Scenario(
        "http-429-quota",
        "429 insufficient_quota while opening: not retried",
        _failure(FailureKind.OPENING, closed_early=0),
        http_429_quota_turns,
        HTTP_ONLY,
    ),
    Scenario(
        "http-503-then-ok",
        "503 while opening, then a streamed answer",
        _answered(2, "The bug is in add."),
        http_503_then_ok_turns,
        HTTP_ONLY,
    ),
    Scenario(
        "utf8-split",
        "multi-byte UTF-8 text cut inside characters",
        _answered(answer=UNICODE_ANSWER),
        utf8_split_turns,
        HTTP_ONLY,
    ),
)

SCENARIOS_BY_NAME = {scenario.name: scenario for scenario in SCENARIOS}
