"""The lab's scenarios: the neutral ones, described once as replies and played on every
protocol, then each protocol's own (its quirks and rules), from its lab renderer."""

from __future__ import annotations

import dataclasses

from ..conversation import Usage
from ..errors import FailureKind
from ..scripted.reply import Broken, Call, OpeningError, Refuse, Reply, ReplyUsage, Say, Think
from ..scripted.scenario import (
    EDIT_FIX,
    FIXED_SOURCE,
    HTTP_ONLY,
    Expectation,
    LabOptions,
    Observation,
    Scenario,
    answered,
    call_turn,
    failure,
    finished,
    reply_turn,
    result_of,
    text_turn,
    waited,
)
from ..scripted.script import Faults, Turn

__all__ = [
    "EDIT_FIX",
    "FIXED_SOURCE",
    "NEUTRAL_SCENARIOS",
    "SCENARIOS",
    "SCENARIOS_BY_NAME",
    "runs_on",
]

UNICODE_ANSWER = "Ünïcödé ✓ — 修正済み: `add` now adds. 🎉"
TRUNCATED_EDIT = '{"path": "calculator.py", "old": "return a - b", "new": "return a +'


def repair_turns() -> list[Turn]:
    """The full conversation: discover → read README → test → read → edit → test → answer."""
    answer = "Fixed: `add` subtracted its arguments; it now returns `a + b` and both tests pass."
    return [
        call_turn(1, "discover", {}, "I'll start by looking at the project files."),
        call_turn(2, "read", {"path": "README.md"}),
        call_turn(3, "test", {}, "Let me reproduce the failure."),
        call_turn(4, "read", {"path": "calculator.py"}),
        call_turn(5, "edit", EDIT_FIX, "`add` uses `-`; replacing it with `+`."),
        call_turn(6, "test", {}),
        text_turn("resp_repair_7", answer, 6),
    ]


FIXING = Say("I'll fix the bug now.")


def edit_reply(response_id: str, *calls: Call, ending: str = "complete") -> Reply:
    return Reply(response_id, (FIXING, *calls), ending)  # type: ignore[arg-type]


def cut_edit(call_id: str = "call_1") -> Call:
    return Call(call_id, "edit", EDIT_FIX, cut=True)


def retry_turns() -> list[Turn]:
    return [
        Turn(error=OpeningError(503, "overloaded", "The server is overloaded.")),
        Turn(connection_error=True),
        text_turn("resp_retry", "The bug is in `add`: it subtracts."),
    ]


def disconnect_turns() -> list[Turn]:
    # Every call fragment arrives (item-level done events too), then the connection ends
    # before the terminal event.
    return [
        reply_turn(edit_reply("resp_disconnect", Call("call_1", "edit", EDIT_FIX), ending="open"))
    ]


def malformed_turns() -> list[Turn]:
    return [reply_turn(edit_reply("resp_malformed", Call("call_1", "edit", TRUNCATED_EDIT)))]


def output_limit_turns() -> list[Turn]:
    return [reply_turn(edit_reply("resp_output_limit", cut_edit(), ending="truncated"))]


def unknown_tool_turns() -> list[Turn]:
    shell = Call("call_1", "shell", {"command": "rm -rf ."})
    return [reply_turn(edit_reply("resp_unknown_tool", shell))]


def second_call_invalid_turns() -> list[Turn]:
    first = Call("call_1", "edit", EDIT_FIX)
    second = Call("call_2", "edit", {"path": "calculator.py", "old": "a - b"})
    return [reply_turn(edit_reply("resp_second_invalid", first, second))]


def reasoning_item_turns() -> list[Turn]:
    thought = Reply(
        "resp_reasoning",
        (Think("The add function subtracts."), Call("call_1", "edit", EDIT_FIX)),
    )
    return [reply_turn(thought), text_turn("resp_reasoning_2", "Fixed.")]


def provider_error_turns() -> list[Turn]:
    return [reply_turn(edit_reply("resp_error", cut_edit(), ending="error"))]


def cleanup_failure_turns() -> list[Turn]:
    reply = edit_reply("resp_cleanup", Call("call_1", "edit", EDIT_FIX))
    return [reply_turn(reply)]


def cancellation_turns() -> list[Turn]:
    return [reply_turn(edit_reply("resp_cancel", cut_edit(), ending="open"), Faults(end="hang"))]


def framing_variants_turns() -> list[Turn]:
    reply = Reply("resp_framing", (Say("CRLF line ends and keep-alives are fine."),))
    return [reply_turn(reply, Faults(line_ending="crlf", keepalive_every=2, fragment_sizes=(2, 9)))]


def _partial_edit(response_id: str) -> Reply:
    return edit_reply(response_id, cut_edit(), ending="open")


def reset_mid_stream_turns() -> list[Turn]:
    return [reply_turn(_partial_edit("resp_reset"), Faults(reset_after=4))]


def clean_eof_turns() -> list[Turn]:
    return [reply_turn(_partial_edit("resp_eof"))]


def stall_turns() -> list[Turn]:
    return [reply_turn(_partial_edit("resp_stall"), Faults(stall_after=4, stall_seconds=30.0))]


def slow_drip_turns() -> list[Turn]:
    reply = Reply("resp_drip", (Say("Slow but steady: the bug is in add.", 8),))
    return [reply_turn(reply, Faults(drip_ms=15, fragment_sizes=(48,)))]


def giant_frame_turns() -> list[Turn]:
    reply = Reply("resp_giant", (FIXING,), "open")
    return [reply_turn(reply, Faults(giant_frame_bytes=64 * 1024 * 1024, fragment_sizes=(4096,)))]


def malformed_json_turns() -> list[Turn]:
    return [reply_turn(Reply("resp_bad_json", (FIXING, Broken())))]


def http_401_turns() -> list[Turn]:
    error = OpeningError(401, "auth", "Incorrect API key provided.")
    return [Turn(error=error), text_turn("resp_never")]


def quota_turns() -> list[Turn]:
    error = OpeningError(429, "quota", "You exceeded your current quota.")
    return [Turn(error=error), text_turn("resp_never")]


def http_503_then_ok_turns() -> list[Turn]:
    error = OpeningError(503, "unavailable", "Service unavailable.")
    return [Turn(error=error, headers={"retry-after": "0"}), text_turn("resp_after_503")]


def utf8_split_turns() -> list[Turn]:
    reply = Reply("resp_utf8", (Say(UNICODE_ANSWER, 3),))
    return [reply_turn(reply, Faults(fragment_sizes=(1, 2, 3, 5)))]


def _rate_limited(headers: dict[str, str]) -> Turn:
    error = OpeningError(429, "rate_limit", "Rate limit reached. Please try again in 2s.")
    return Turn(error=error, headers=headers)


def rate_limit_retry_after_turns() -> list[Turn]:
    return [_rate_limited({"retry-after": "2"}), text_turn("resp_after_429")]


RESET_SECONDS = 1.5


def rate_limit_reset_header_turns() -> list[Turn]:
    # The protocol writes its own reset headers (OpenAI `x-ratelimit-reset-*` durations,
    # Anthropic `anthropic-ratelimit-*-reset` timestamps).
    error = OpeningError(
        429, "rate_limit", "Rate limit reached for requests.", reset_seconds=RESET_SECONDS
    )
    return [Turn(error=error), text_turn("resp_reset")]


def retry_after_too_long_turns() -> list[Turn]:
    return [_rate_limited({"retry-after": "3600"}), text_turn("resp_never")]


def x_should_retry_false_turns() -> list[Turn]:
    error = OpeningError(503, "unavailable", "Service unavailable.")
    return [Turn(error=error, headers={"x-should-retry": "false"}), text_turn("resp_never")]


USAGE_PER_TURN = (
    ReplyUsage(input_tokens=1200, cached_input_tokens=1024, output_tokens=80, reasoning_tokens=64),
    ReplyUsage(input_tokens=1400, cached_input_tokens=1152, output_tokens=30),
)
USAGE_TOTAL = Usage(2600, 2176, 110, 64, 2710)


def usage_turns() -> list[Turn]:
    first = Reply("resp_usage_1", (Call("call_1", "discover", {}),), usage=USAGE_PER_TURN[0])
    second = Reply("resp_usage_2", (Say("Counted."),), usage=USAGE_PER_TURN[1])
    return [reply_turn(first), reply_turn(second)]


def check_usage(observation: Observation) -> list[str]:
    if observation.usage != USAGE_TOTAL:
        return [f"usage {observation.usage}, expected {USAGE_TOTAL}"]
    return []


def recover_malformed_turns() -> list[Turn]:
    return [
        reply_turn(edit_reply("resp_bad", Call("call_1", "edit", TRUNCATED_EDIT))),
        call_turn(2, "edit", EDIT_FIX, "Reissuing the edit with complete arguments."),
        call_turn(3, "test", {}),
        text_turn("resp_done", "Fixed and verified."),
    ]


def check_recover_malformed(observation: Observation) -> list[str]:
    output = result_of(observation, 1, "call_1")
    if not output.startswith("error: call rejected, not executed: arguments are not valid JSON"):
        return [f"call_1 was not answered with its validation error, got {output!r}"]
    return []


def recover_truncated_turns() -> list[Turn]:
    cut = Call("call_1", "edit", TRUNCATED_EDIT, cut=True)
    return [
        reply_turn(edit_reply("resp_cut", cut, ending="truncated")),
        call_turn(2, "edit", EDIT_FIX, "Reissuing a smaller edit."),
        text_turn("resp_done", "Fixed."),
    ]


def check_recover_truncated(observation: Observation) -> list[str]:
    output = result_of(observation, 1, "call_1")
    if not output.startswith("error: the response was truncated by the output limit"):
        return [f"call_1 was not answered with the truncation error, got {output!r}"]
    return []


def recovery_budget_turns() -> list[Turn]:
    return [
        reply_turn(edit_reply(f"resp_bad_{n}", Call(f"call_{n}", "edit", TRUNCATED_EDIT)))
        for n in range(1, 5)
    ]


def check_recovery_budget(observation: Observation) -> list[str]:
    if "recovery budget of 2 spent" not in observation.stopped:
        return [f"the stop does not name the spent recovery budget: {observation.stopped!r}"]
    return []


def refusal_turns() -> list[Turn]:
    return [reply_turn(Reply("resp_refusal", (Refuse("I can't help with that."),)))]


def check_refusal(observation: Observation) -> list[str]:
    if "I can't help with that." not in observation.stopped:
        return [f"the stop does not carry the refusal: {observation.stopped!r}"]
    return []


NEUTRAL_SCENARIOS: tuple[Scenario, ...] = (
    Scenario(
        "repair",
        "discover, read, test, read, edit, test, answer: the bug is fixed",
        finished(7, 6, fixed=True),
        repair_turns,
    ),
    Scenario(
        "retry",
        "503, then a connection error while opening, then success",
        answered(3),
        retry_turns,
    ),
    Scenario(
        "disconnect",
        "every fragment of an edit, then EOF before the terminal event",
        failure(FailureKind.STREAM_ENDED, closed_early=0),
        disconnect_turns,
    ),
    Scenario(
        "malformed",
        "a completed response whose edit arguments are cut-off JSON",
        failure(FailureKind.INVALID_BATCH, closed_early=0),
        malformed_turns,
    ),
    Scenario(
        "output-limit",
        "the output-token limit cuts the response mid-arguments",
        failure(FailureKind.RESPONSE_INCOMPLETE, closed_early=0),
        output_limit_turns,
    ),
    Scenario(
        "unknown-tool",
        "a call to a tool that was never exposed",
        failure(FailureKind.INVALID_BATCH, closed_early=0),
        unknown_tool_turns,
    ),
    Scenario(
        "second-call-invalid",
        "valid edit, then an edit missing an argument",
        failure(FailureKind.INVALID_BATCH, closed_early=0),
        second_call_invalid_turns,
    ),
    Scenario(
        "reasoning-item",
        "reasoning before an edit: accepted (replayable), the edit runs",
        finished(2, 1, fixed=True),
        reasoning_item_turns,
    ),
    Scenario(
        "provider-error",
        "the provider's in-stream error event mid-arguments",
        failure(FailureKind.PROVIDER_ERROR, closed_early=0),
        provider_error_turns,
    ),
    Scenario(
        "cleanup-failure",
        "a valid edit, but closing the stream fails",
        failure(FailureKind.CLEANUP, closed_early=0),
        cleanup_failure_turns,
        options=LabOptions(close_fails=frozenset({0})),
    ),
    Scenario(
        "cancellation",
        "the run is cancelled while arguments stream",
        failure("interrupted", closed_early=1),
        cancellation_turns,
    ),
    Scenario(
        "framing-variants",
        "CRLF line ends and keep-alive comments",
        answered(answer="CRLF line ends and keep-alives are fine."),
        framing_variants_turns,
    ),
    Scenario(
        "refusal",
        "the model refuses: no call runs, the run stops as refused",
        Expectation("model_refused", attempts=1, tools_executed=0, closed_early=0),
        refusal_turns,
        check=check_refusal,
    ),
    Scenario(
        "reset-mid-stream",
        "TCP reset while arguments stream",
        failure(FailureKind.TRANSPORT, closed_early=0),
        reset_mid_stream_turns,
        HTTP_ONLY,
    ),
    Scenario(
        "clean-eof",
        "the body ends cleanly mid-arguments, no terminal event",
        failure(FailureKind.STREAM_ENDED, closed_early=0),
        clean_eof_turns,
        HTTP_ONLY,
    ),
    Scenario(
        "stall",
        "no bytes for 30 s mid-arguments (lab idle timeout 1 s)",
        failure(FailureKind.IDLE_TIMEOUT, closed_early=1),
        stall_turns,
        HTTP_ONLY,
    ),
    Scenario(
        "slow-drip",
        "every fragment 15 ms apart: slow, never idle",
        answered(answer="Slow but steady: the bug is in add."),
        slow_drip_turns,
        HTTP_ONLY,
    ),
    Scenario(
        "giant-frame",
        "a 64 MiB frame that never ends (bound: 4 MiB)",
        failure(FailureKind.BOUND_EXCEEDED, closed_early=1),
        giant_frame_turns,
        HTTP_ONLY,
    ),
    Scenario(
        "malformed-json",
        "a frame whose JSON is cut off",
        failure(FailureKind.MALFORMED_EVENT),
        malformed_json_turns,
        HTTP_ONLY,
    ),
    Scenario(
        "http-401",
        "401 (invalid key) while opening: not retried",
        failure(FailureKind.OPENING, closed_early=0),
        http_401_turns,
        HTTP_ONLY,
    ),
    Scenario(
        "http-429-quota",
        "429 whose error code says the quota is exhausted: not retried",
        failure(FailureKind.QUOTA_EXHAUSTED, closed_early=0),
        quota_turns,
        HTTP_ONLY,
    ),
    Scenario(
        "http-503-then-ok",
        "503 while opening, then a streamed answer",
        answered(2, "The bug is in add."),
        http_503_then_ok_turns,
        HTTP_ONLY,
    ),
    Scenario(
        "utf8-split",
        "multi-byte UTF-8 text cut inside characters",
        answered(answer=UNICODE_ANSWER),
        utf8_split_turns,
        HTTP_ONLY,
    ),
    Scenario(
        "rate-limit-retry-after",
        "429 rate limit with retry-after: 2, then an answer",
        answered(2),
        rate_limit_retry_after_turns,
        check=waited(2.0),
    ),
    Scenario(
        "rate-limit-reset-header",
        "429 with the provider's reset header: requests exhausted for 1.5 s, tokens not",
        answered(2),
        rate_limit_reset_header_turns,
        check=waited(RESET_SECONDS, tolerance=0.25),
    ),
    Scenario(
        "quota-exhausted",
        "429 quota exhausted: terminal, one request",
        failure(FailureKind.QUOTA_EXHAUSTED, closed_early=0),
        quota_turns,
        check=lambda o: (
            []
            if "quota exhausted" in o.stopped
            else ["the stop does not say the quota is exhausted"]
        ),
    ),
    Scenario(
        "retry-after-too-long",
        "429 with retry-after: 3600 (the maximum wait is 60 s): fails at once",
        failure(FailureKind.RETRY_WAIT_TOO_LONG, closed_early=0),
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
        failure(FailureKind.OPENING, closed_early=0),
        x_should_retry_false_turns,
    ),
    Scenario(
        "usage",
        "typed usage per response, summed per run (each protocol's own usage fields)",
        finished(2, 1),
        usage_turns,
        check=check_usage,
    ),
    Scenario(
        "recover-malformed",
        "--recover: a malformed edit gets an error observation; the model reissues it",
        finished(4, 2, fixed=True),
        recover_malformed_turns,
        options=LabOptions(recovery_budget=2),
        check=check_recover_malformed,
    ),
    Scenario(
        "recover-truncated",
        "--recover: a call cut off by the output limit is answered, not run; reissued",
        finished(3, 1, fixed=True),
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
)


def _all_scenarios() -> tuple[Scenario, ...]:
    """The neutral scenarios, then each registered protocol's own."""
    from ..providers import PROVIDERS

    own = [scenario for entry in PROVIDERS.values() for scenario in entry.scenarios()]
    names = [scenario.name for scenario in (*NEUTRAL_SCENARIOS, *own)]
    duplicates = sorted({name for name in names if names.count(name) > 1})
    if duplicates:
        raise RuntimeError(f"scenario names used twice: {', '.join(duplicates)}")
    unplayable = {
        name: set(entry.unplayable()) if entry.unplayable is not None else set()
        for name, entry in PROVIDERS.items()
    }
    neutral = [
        dataclasses.replace(
            scenario,
            protocols=frozenset(
                p for p, skipped in unplayable.items() if scenario.name not in skipped
            ),
        )
        if any(scenario.name in skipped for skipped in unplayable.values())
        else scenario
        for scenario in NEUTRAL_SCENARIOS
    ]
    return (*neutral, *own)


SCENARIOS: tuple[Scenario, ...] = _all_scenarios()
SCENARIOS_BY_NAME = {scenario.name: scenario for scenario in SCENARIOS}


def runs_on(scenario: Scenario, name: str) -> bool:
    """Whether the lab runs `scenario` on `name`: a registered provider as the scenario
    says (`Scenario.runs_on`); a variant, a neutral scenario its provider runs that its own
    wire can play."""
    from ..providers.variants import lab_entry, server_provider

    server = server_provider(name)
    if server is None or server == name:
        return scenario.runs_on(name)
    entry = lab_entry(name)
    unplayable = entry.unplayable() if entry.unplayable is not None else {}
    neutral = any(scenario.name == each.name for each in NEUTRAL_SCENARIOS)
    return neutral and scenario.runs_on(server) and scenario.name not in unplayable
