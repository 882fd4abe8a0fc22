"""The lab's authored scenarios and what each must show."""

from __future__ import annotations

import json
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from typing import Any, Literal

from ..conversation import Usage
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
class LabOptions:
    """How the client is configured for a scenario."""

    model: str = "lab-model"
    provider: Literal["responses", "custom"] = "responses"
    continuation: Literal["stateless", "native"] = "stateless"
    encrypted_reasoning: bool | None = None
    recovery_budget: int = 0  # 0: recovery off (stop on a rejected batch)


@dataclass(frozen=True, slots=True)
class Observation:
    """What a run showed beyond its outcome, for scenario-specific checks."""

    requests: tuple[Mapping[str, Any], ...]  # request bodies, in order
    delays: tuple[float, ...]  # opening delays requested (the lab does not sleep them)
    usage: Usage  # summed over every response that reported usage
    stopped: str


Check = Callable[[Observation], list[str]]


def _no_check(observation: Observation) -> list[str]:
    return []


@dataclass(frozen=True, slots=True)
class Scenario:
    name: str
    summary: str
    expect: Expectation
    turns: Callable[[], list[Turn]]
    transports: frozenset[str] = BOTH
    options: LabOptions = LabOptions()
    check: Check = _no_check


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


def _error_body(message: str, error_type: str, code: str) -> dict[str, Any]:
    """An OpenAI error body: `{"error": {message, type, param, code}}`."""
    return {"error": {"message": message, "type": error_type, "param": None, "code": code}}


def _edit_stream(response_id: str) -> ResponseBuilder:
    return ResponseBuilder(response_id).created().text("msg_1", "I'll fix the bug now.")


def retry_turns() -> list[Turn]:
    overloaded = _error_body("The server is overloaded.", "server_error", "server_is_overloaded")
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
    builder.reasoning(_reasoning_item("rs_1", "The add function subtracts."))
    builder.call("fc_1", "call_1", "edit", EDIT_FIX)
    answer = ResponseBuilder("resp_reasoning_2").created().text("msg_1", "Fixed.")
    return [builder.completed().turn(), answer.completed().turn()]


def unsupported_item_turns() -> list[Turn]:
    builder = ResponseBuilder("resp_unsupported").created()
    builder.output_item(
        {
            "id": "cu_1",
            "type": "computer_call",
            "call_id": "call_cu",
            "action": {"type": "screenshot"},
            "pending_safety_checks": [],
            "status": "completed",
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
    body = _error_body("Incorrect API key provided.", "invalid_request_error", "invalid_api_key")
    return [Turn(status=401, body=body), text_turn_for("resp_never")]


def http_429_quota_turns() -> list[Turn]:
    body = _error_body(
        "You exceeded your current quota.", "insufficient_quota", "insufficient_quota"
    )
    return [Turn(status=429, body=body), text_turn_for("resp_never")]


def http_503_then_ok_turns() -> list[Turn]:
    body = _error_body("Service unavailable.", "server_error", "server_error")
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


def provider_error_turns() -> list[Turn]:
    builder = _partial_edit("resp_error").error(
        "server_error", "The server had an error.", nested=True
    )
    return [builder.turn()]


def response_failed_turns() -> list[Turn]:
    builder = _partial_edit("resp_failed").failed("server_error", "Something went wrong.")
    return [builder.turn()]


def _rate_limited(headers: dict[str, str]) -> Turn:
    body = _error_body(
        "Rate limit reached. Please try again in 2s.", "requests", "rate_limit_exceeded"
    )
    return Turn(status=429, body=body, headers=headers)


def rate_limit_retry_after_turns() -> list[Turn]:
    return [_rate_limited({"retry-after": "2"}), text_turn_for("resp_after_429")]


def rate_limit_reset_header_turns() -> list[Turn]:
    headers = {
        "x-ratelimit-limit-requests": "500",
        "x-ratelimit-remaining-requests": "0",
        "x-ratelimit-reset-requests": "1.5s",
        "x-ratelimit-remaining-tokens": "39000",
        "x-ratelimit-reset-tokens": "6m0s",
    }
    return [_rate_limited(headers), text_turn_for("resp_after_reset")]


def retry_after_too_long_turns() -> list[Turn]:
    return [_rate_limited({"retry-after": "3600"}), text_turn_for("resp_never")]


def x_should_retry_false_turns() -> list[Turn]:
    body = _error_body("Service unavailable.", "server_error", "server_error")
    return [
        Turn(status=503, body=body, headers={"x-should-retry": "false"}),
        text_turn_for("resp_never"),
    ]


REASONING_MODEL = "o4-mini"


def _reasoning_item(item_id: str, text: str) -> dict[str, Any]:
    return {
        "id": item_id,
        "type": "reasoning",
        "summary": [{"type": "summary_text", "text": text}],
        "encrypted_content": f"gAAAAB-opaque-{item_id}-do-not-touch==",
    }


def reasoning_replay_turns() -> list[Turn]:
    first = ResponseBuilder("resp_reason_1", REASONING_MODEL).created()
    first.reasoning(_reasoning_item("rs_1", "Look at the files first."))
    first.call("fc_1", "call_1", "discover", {})
    answer = (
        ResponseBuilder("resp_reason_2", REASONING_MODEL)
        .created()
        .text("msg_1", "The bug is in add.")
    )
    return [first.completed().turn(), answer.completed().turn()]


def reasoning_orphan_guard_turns() -> list[Turn]:
    first = ResponseBuilder("resp_orphan_1", REASONING_MODEL).created()
    first.reasoning(_reasoning_item("rs_1", "Discover first."))
    first.call("fc_1", "call_1", "discover", {})
    first.reasoning(_reasoning_item("rs_2", "A trailing thought with no call after it."))
    answer = ResponseBuilder("resp_orphan_2", REASONING_MODEL).created().text("msg_1", "Done.")
    return [first.completed().turn(), answer.completed().turn()]


def _input_types(request: Mapping[str, Any]) -> list[str]:
    return [str(item.get("type") or item.get("role")) for item in request.get("input", [])]


def check_reasoning_replay(observation: Observation) -> list[str]:
    problems = []
    first, second = observation.requests[0], observation.requests[1]
    if first.get("include") != ["reasoning.encrypted_content"] or first.get("store") is not False:
        problems.append("the first request must ask for encrypted reasoning with store: false")
    items = list(second.get("input", []))
    expected = _reasoning_item("rs_1", "Look at the files first.")
    positions = [i for i, item in enumerate(items) if item.get("type") == "reasoning"]
    if len(positions) != 1 or items[positions[0]] != expected:
        problems.append("the reasoning item was not replayed exactly once, unchanged")
    elif items[positions[0] + 1].get("call_id") != "call_1":
        problems.append("the reasoning item does not immediately precede its call")
    return problems


def check_orphan_guard(observation: Observation) -> list[str]:
    items = list(observation.requests[1].get("input", []))
    reasoning = [item.get("id") for item in items if item.get("type") == "reasoning"]
    problems = (
        [] if reasoning == ["rs_1"] else [f"replayed reasoning {reasoning}, expected ['rs_1']"]
    )
    for index, item in enumerate(items):
        following = items[index + 1] if index + 1 < len(items) else {}
        if item.get("type") == "reasoning" and following.get("type") != "function_call":
            problems.append(f"orphan reasoning item {item.get('id')} was sent")
    return problems


def native_continuation_turns() -> list[Turn]:
    return [
        _call_turn(1, "discover", {}),
        _call_turn(2, "read", {"path": "README.md"}),
        ResponseBuilder("resp_repair_3")
        .created()
        .text("msg_3", "The bug is in add.")
        .completed()
        .turn(),
    ]


def check_native_continuation(observation: Observation) -> list[str]:
    problems = []
    first, second, third = observation.requests
    if first.get("store") is not True or "previous_response_id" in first:
        problems.append("the first request must store and carry no previous_response_id")
    if len(first.get("input", [])) != 2:
        problems.append("the first request must carry the full history (system + user)")
    for request, previous, call_id in (
        (second, "resp_repair_1", "call_repair_1"),
        (third, "resp_repair_2", "call_repair_2"),
    ):
        if request.get("previous_response_id") != previous:
            got = request.get("previous_response_id")
            problems.append(f"expected previous_response_id {previous}, got {got}")
        items = list(request.get("input", []))
        if [(i.get("type"), i.get("call_id")) for i in items] != [
            ("function_call_output", call_id)
        ]:
            problems.append(
                f"a continued request must carry only the new output, got {_input_types(request)}"
            )
    return problems


USAGE_PER_TURN = (
    {
        "input_tokens": 1200,
        "input_tokens_details": {"cached_tokens": 1024},
        "output_tokens": 80,
        "output_tokens_details": {"reasoning_tokens": 64},
        "total_tokens": 1280,
    },
    {
        "input_tokens": 1400,
        "input_tokens_details": {"cached_tokens": 1152},
        "output_tokens": 30,
        "output_tokens_details": {"reasoning_tokens": 0},
        "total_tokens": 1430,
    },
)
USAGE_TOTAL = Usage(2600, 2176, 110, 64, 2710)


def usage_turns() -> list[Turn]:
    first = ResponseBuilder("resp_usage_1").created().call("fc_1", "call_1", "discover", {})
    second = ResponseBuilder("resp_usage_2").created().text("msg_1", "Counted.")
    return [
        first.completed(usage=USAGE_PER_TURN[0]).turn(),
        second.completed(usage=USAGE_PER_TURN[1]).turn(),
    ]


def check_usage(observation: Observation) -> list[str]:
    if observation.usage != USAGE_TOTAL:
        return [f"usage {observation.usage}, expected {USAGE_TOTAL}"]
    return []


TRUNCATED_EDIT = '{"path": "calculator.py", "old": "return a - b", "new": "return a +'


def recover_malformed_turns() -> list[Turn]:
    bad = _edit_stream("resp_bad").call("fc_1", "call_1", "edit", TRUNCATED_EDIT).completed().turn()
    return [
        bad,
        _call_turn(2, "edit", EDIT_FIX, "Reissuing the edit with complete arguments."),
        _call_turn(3, "test", {}),
        ResponseBuilder("resp_done")
        .created()
        .text("msg_done", "Fixed and verified.")
        .completed()
        .turn(),
    ]


def _error_observation(request: Mapping[str, Any], call_id: str) -> str:
    items = list(request.get("input", []))
    for index, item in enumerate(items):
        if item.get("type") == "function_call" and item.get("call_id") == call_id:
            following = items[index + 1] if index + 1 < len(items) else {}
            if (
                following.get("type") == "function_call_output"
                and following.get("call_id") == call_id
            ):
                return str(following.get("output", ""))
    return ""


def check_recover_malformed(observation: Observation) -> list[str]:
    output = _error_observation(observation.requests[1], "call_1")
    if not output.startswith("error: call rejected, not executed: arguments are not valid JSON"):
        return [f"call_1 was not answered with its validation error, got {output!r}"]
    return []


def recover_truncated_turns() -> list[Turn]:
    cut = _edit_stream("resp_cut").call("fc_1", "call_1", "edit", TRUNCATED_EDIT, finish=False)
    return [
        cut.incomplete("max_output_tokens").turn(),
        _call_turn(2, "edit", EDIT_FIX, "Reissuing a smaller edit."),
        ResponseBuilder("resp_done").created().text("msg_done", "Fixed.").completed().turn(),
    ]


def check_recover_truncated(observation: Observation) -> list[str]:
    output = _error_observation(observation.requests[1], "call_1")
    if not output.startswith("error: the response was truncated by the output limit"):
        return [f"call_1 was not answered with the truncation error, got {output!r}"]
    return []


def recovery_budget_turns() -> list[Turn]:
    return [
        _edit_stream(f"resp_bad_{n}")
        .call(f"fc_{n}", f"call_{n}", "edit", TRUNCATED_EDIT)
        .completed()
        .turn()
        for n in range(1, 5)
    ]


def check_recovery_budget(observation: Observation) -> list[str]:
    if "recovery budget of 2 spent" not in observation.stopped:
        return [f"the stop does not name the spent recovery budget: {observation.stopped!r}"]
    return []


def lifecycle_violation_turns() -> list[Turn]:
    # A custom provider streams a read, then claims success with a different call list.
    events: list[Mapping[str, Any]] = [
        {"type": "started", "response_id": "cr_1"},
        {"type": "text", "delta": "Reading the README."},
        {"type": "call", "item_id": "it_1", "call_id": "call_1", "name": "read"},
        {"type": "arguments", "item_id": "it_1", "delta": '{"path": "README.md"}'},
        {
            "type": "completed",
            "response_id": "cr_1",
            "finish_reason": "tool_calls",
            "text": "Reading the README.",
            "calls": [
                {
                    "item_id": "it_2",
                    "call_id": "call_2",
                    "name": "edit",
                    "arguments": json.dumps(EDIT_FIX),
                }
            ],
        },
    ]
    return [Turn(events=tuple(events))]


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
        "a reasoning item before an edit: accepted (replayable), the edit runs",
        Expectation("model_finished", attempts=2, tools_executed=1, fixed=True, closed_early=0),
        reasoning_item_turns,
    ),
    Scenario(
        "unsupported-item",
        "an output item asking for a client action lockgate cannot run (computer_call)",
        _failure(FailureKind.UNSUPPORTED_OUTPUT, closed_early=0),
        unsupported_item_turns,
    ),
    Scenario(
        "provider-error",
        "a nested `error` event mid-arguments",
        _failure(FailureKind.PROVIDER_ERROR, closed_early=0),
        provider_error_turns,
    ),
    Scenario(
        "response-failed",
        "response.failed mid-arguments",
        _failure(FailureKind.RESPONSE_FAILED, closed_early=0),
        response_failed_turns,
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
        _failure(FailureKind.QUOTA_EXHAUSTED, closed_early=0),
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
    Scenario(
        "rate-limit-retry-after",
        "429 rate_limit_exceeded with retry-after: 2, then an answer",
        _answered(2),
        rate_limit_retry_after_turns,
        check=lambda o: [] if o.delays == (2.0,) else [f"waited {o.delays}, expected (2.0,)"],
    ),
    Scenario(
        "rate-limit-reset-header",
        "429 with x-ratelimit-reset-requests: 1.5s (requests exhausted, tokens not)",
        _answered(2),
        rate_limit_reset_header_turns,
        check=lambda o: [] if o.delays == (1.5,) else [f"waited {o.delays}, expected (1.5,)"],
    ),
    Scenario(
        "quota-exhausted",
        "429 insufficient_quota: terminal, one request",
        _failure(FailureKind.QUOTA_EXHAUSTED, closed_early=0),
        http_429_quota_turns,
        check=lambda o: (
            []
            if "quota exhausted" in o.stopped
            else ["the stop does not say the quota is exhausted"]
        ),
    ),
    Scenario(
        "retry-after-too-long",
        "429 with retry-after: 3600 (the maximum wait is 60 s): fails at once",
        _failure(FailureKind.RETRY_WAIT_TOO_LONG, closed_early=0),
        retry_after_too_long_turns,
        check=lambda o: (
            []
            if "wait 3600 s" in o.stopped and not o.delays
            else ["the stop does not name the 3600 s wait"]
        ),
    ),
    Scenario(
        "x-should-retry-false",
        "503 with x-should-retry: false: not retried",
        _failure(FailureKind.OPENING, closed_early=0),
        x_should_retry_false_turns,
    ),
    Scenario(
        "reasoning-replay",
        "reasoning item + call, then an answer: the item is replayed before its call",
        Expectation("model_finished", attempts=2, tools_executed=1, closed_early=0),
        reasoning_replay_turns,
        options=LabOptions(model=REASONING_MODEL),
        check=check_reasoning_replay,
    ),
    Scenario(
        "reasoning-orphan-guard",
        "a trailing reasoning item with no call after it is never sent",
        Expectation("model_finished", attempts=2, tools_executed=1, closed_early=0),
        reasoning_orphan_guard_turns,
        options=LabOptions(model=REASONING_MODEL),
        check=check_orphan_guard,
    ),
    Scenario(
        "native-continuation",
        "store: true; continued requests carry previous_response_id and only new items",
        Expectation("model_finished", attempts=3, tools_executed=2, closed_early=0),
        native_continuation_turns,
        options=LabOptions(continuation="native"),
        check=check_native_continuation,
    ),
    Scenario(
        "usage",
        "typed usage per response, summed per run",
        Expectation("model_finished", attempts=2, tools_executed=1, closed_early=0),
        usage_turns,
        check=check_usage,
    ),
    Scenario(
        "recover-malformed",
        "--recover: a malformed edit gets an error observation; the model reissues it",
        Expectation("model_finished", attempts=4, tools_executed=2, fixed=True, closed_early=0),
        recover_malformed_turns,
        options=LabOptions(recovery_budget=2),
        check=check_recover_malformed,
    ),
    Scenario(
        "recover-truncated",
        "--recover: a call cut off by max_output_tokens is answered, not run; reissued",
        Expectation("model_finished", attempts=3, tools_executed=1, fixed=True, closed_early=0),
        recover_truncated_turns,
        options=LabOptions(recovery_budget=2),
        check=check_recover_truncated,
    ),
    Scenario(
        "recovery-budget",
        "--recover with budget 2: a third consecutive malformed batch stops the run",
        Expectation("invalid_batch", attempts=3, tools_executed=0, closed_early=0),
        recovery_budget_turns,
        options=LabOptions(recovery_budget=2),
        check=check_recovery_budget,
    ),
    Scenario(
        "lifecycle-violation",
        "a custom provider reports success with a call list other than it streamed",
        _failure(FailureKind.CALL_MISMATCH, closed_early=0),
        lifecycle_violation_turns,
        options=LabOptions(provider="custom"),
    ),
)

SCENARIOS_BY_NAME = {scenario.name: scenario for scenario in SCENARIOS}
