"""The Anthropic Messages provider's own lab scenarios: the rules and quirks only this protocol has,
beside the neutral scenarios every protocol runs (`lockgate.lab.scenarios`)."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...errors import FailureKind
from ...scripted.reply import (
    Call,
    OpeningError,
    ProviderTool,
    Reply,
    Say,
    Think,
)
from ...scripted.scenario import (
    EDIT_FIX,
    Expectation,
    LabOptions,
    Observation,
    Scenario,
    answered,
    failure,
    finished,
    own,
    result_of,
    text_turn,
    waited,
)
from ...scripted.script import Turn
from .options import AnthropicOptions
from .render import (
    MessageBuilder,
    _has_tool_use,
    web_search_result,
)

# --- Anthropic-only scenarios ----------------------------------------------------------------

THINKING_BUDGET = 2048
THOUGHT = 'Look at the files first — the README names the bug; "add" may subtract.'
SIGNATURE = "EuYBCkQIBxgCKkCf+/Zq9w==sig-lab-thinking-replay"
REDACTED = (
    "EmwKAhgBEgy3va3pzix/LafPsn4aDFIT2Xlxh0L5L8rLVyIwxtE3rAFBa8cr3qpP+redacted==",
    "EqgBCkYIBxgCKkBxN2vNq/0oXh+second-redacted-block-do-not-touch==",
)
SEARCH_QUERY = "python add function subtracts"


def _message(request: Mapping[str, Any], call_id: str) -> list[dict[str, Any]]:
    """The content of the assistant message with `call_id`'s tool_use."""
    for message in request.get("messages", []):
        if message.get("role") == "assistant" and _has_tool_use(message, call_id):
            return list(message["content"])
    raise KeyError(f"no assistant message with tool_use {call_id}")


def _exact(block: object) -> str:
    return json.dumps(block, ensure_ascii=False, separators=(",", ":"))


def _thinking_turns() -> list[Turn]:
    first = Reply("msg_think_1", (Think(THOUGHT, SIGNATURE, 4), Call("call_1", "discover", {})))
    return [Turn(reply=first), text_turn("msg_think_2", "The bug is in add.")]


def check_thinking_replay(observation: Observation) -> list[str]:
    problems = []
    first, second = observation.requests[0], observation.requests[1]
    if first.get("thinking") != {"type": "enabled", "budget_tokens": THINKING_BUDGET}:
        problems.append(f"the first request asked for thinking {first.get('thinking')}")
    if first.get("max_tokens") != THINKING_BUDGET + 2048:
        problems.append("max_tokens must be the thinking budget plus the output limit")
    content = _message(second, "call_1")
    expected = {"type": "thinking", "thinking": THOUGHT, "signature": SIGNATURE}
    thinking = [block for block in content if block.get("type") == "thinking"]
    if len(thinking) != 1 or _exact(thinking[0]) != _exact(expected):
        problems.append("the thinking block was not replayed exactly once, byte for byte")
    if content[0].get("type") != "thinking":
        problems.append("the thinking block is not first in the assistant message")
    elif content[1].get("id") != "call_1":
        problems.append("the thinking block does not immediately precede its tool_use")
    return problems


def _redacted_turns() -> list[Turn]:
    builder = MessageBuilder("msg_redacted_1").start()
    for data in REDACTED:
        builder.redacted_thinking(data)
    builder.tool_use("call_1", "discover", {}).finish("tool_use")
    return [builder.turn(), text_turn("msg_redacted_2", "Done.")]


def check_redacted_replay(observation: Observation) -> list[str]:
    content = _message(observation.requests[1], "call_1")
    expected = [{"type": "redacted_thinking", "data": data} for data in REDACTED]
    if [_exact(block) for block in content[:2]] != [_exact(block) for block in expected]:
        return ["the redacted_thinking blocks were not replayed unchanged, first, in order"]
    if content[2].get("id") != "call_1":
        return ["the redacted_thinking blocks do not precede their tool_use"]
    return []


INTERLEAVED = (
    Think("Read the README first.", "EuYBsig-interleaved-1=="),
    Call("call_1", "read", {"path": "README.md"}),
    Think("Now the implementation.", "EuYBsig-interleaved-2=="),
    Call("call_2", "read", {"path": "calculator.py"}),
)


def _interleaved_turns() -> list[Turn]:
    return [
        Turn(reply=Reply("msg_interleaved_1", INTERLEAVED)),
        text_turn("msg_interleaved_2", "add subtracts."),
    ]


def check_interleaved(observation: Observation) -> list[str]:
    second = observation.requests[1]
    content = _message(second, "call_1")
    expected = [
        {"type": "thinking", "thinking": part.text, "signature": part.opaque}
        if isinstance(part, Think)
        else {"type": "tool_use", "id": part.call_id, "name": part.name, "input": part.arguments}
        for part in INTERLEAVED
        if isinstance(part, Think | Call)
    ]
    problems = []
    if [_exact(block) for block in content] != [_exact(block) for block in expected]:
        problems.append("the interleaved thinking blocks were not replayed in place, unchanged")
    for call_id in ("call_1", "call_2"):
        if not result_of(observation, 1, call_id):
            problems.append(f"{call_id}'s result is not first in the next user message")
    return problems


def _parallel_turns() -> list[Turn]:
    reply = Reply(
        "msg_parallel_1",
        (
            Say("Reading both files."),
            Call("call_1", "read", {"path": "README.md"}),
            Call("call_2", "read", {"path": "calculator.py"}),
        ),
    )
    return [Turn(reply=reply), text_turn("msg_parallel_2", "Both read.")]


def check_parallel(observation: Observation) -> list[str]:
    messages = list(observation.requests[1]["messages"])
    if messages[-2].get("role") != "assistant" or messages[-1].get("role") != "user":
        return ["the results do not follow the assistant message in one user message"]
    content = messages[-1]["content"]
    kinds = [(block.get("type"), block.get("tool_use_id")) for block in content]
    if kinds != [("tool_result", "call_1"), ("tool_result", "call_2")]:
        return [f"the user message after the calls holds {kinds}"]
    if any(block.get("is_error") for block in content):
        return ["a successful result is marked is_error"]
    return []


def _overload_start(message_id: str) -> Turn:
    return MessageBuilder(message_id).start().ping().error().turn()


def _overload_turns() -> list[Turn]:
    return [_overload_start("msg_overload_1"), text_turn("msg_never", "No.")]


def _overload_retried_turns() -> list[Turn]:
    answer = Reply("msg_overload_2", (Say("Answered after the overload."),))
    return [_overload_start("msg_overload_1"), Turn(reply=answer)]


def _overload_after_text_turns() -> list[Turn]:
    reply = Reply("msg_overload_text", (Say("Starting the fix."),), "error")
    return [Turn(reply=reply), text_turn("msg_never", "No.")]


def _max_tokens_turns() -> list[Turn]:
    reply = Reply(
        "msg_max_tokens",
        (Say("Editing."), Call("call_1", "edit", EDIT_FIX, cut=True)),
        "truncated",
    )
    return [Turn(reply=reply)]


def check_max_tokens(observation: Observation) -> list[str]:
    if "max_tokens" not in observation.stopped:
        return [f"the stop does not name max_tokens: {observation.stopped!r}"]
    return []


def _tool_use_without_call_turns() -> list[Turn]:
    builder = MessageBuilder("msg_no_call").start().text("I'll call a tool.")
    return [builder.finish("tool_use").turn()]


def _end_turn_with_call_turns() -> list[Turn]:
    builder = MessageBuilder("msg_end_turn_call").start().text("Editing.")
    builder.tool_use("call_1", "edit", EDIT_FIX)
    return [builder.finish("end_turn").turn()]


PAUSED_TEXT = "Searching the web first."


def _pause_turns() -> list[Turn]:
    paused = Reply("msg_paused_1", (Say(PAUSED_TEXT), ProviderTool(SEARCH_QUERY)), "paused")
    answer = Reply("msg_paused_2", (Say("The search agrees: add must add."),))
    return [Turn(reply=paused), Turn(reply=answer)]


def check_pause(observation: Observation) -> list[str]:
    first, second = observation.requests
    last = second["messages"][-1]
    tool_id = "srvtoolu_msg_paused_1_2"
    search = {"query": SEARCH_QUERY}
    expected = [
        {"type": "text", "text": PAUSED_TEXT},
        {"type": "server_tool_use", "id": tool_id, "name": "web_search", "input": search},
        web_search_result(tool_id, SEARCH_QUERY),
    ]
    problems = []
    if last.get("role") != "assistant":
        problems.append("the request after pause_turn does not end with the paused message")
    elif [_exact(b) for b in last.get("content", [])] != [_exact(b) for b in expected]:
        problems.append("the paused response was not sent back unchanged")
    if second["messages"][:-1] != first["messages"]:
        problems.append("the continuation changed the history before the paused message")
    return problems


REFUSAL_EXPLANATION = "This request was declined by the safety system."


def _refusal_turns() -> list[Turn]:
    builder = MessageBuilder("msg_refusal").start().text("I'll edit the file.")
    builder.tool_use("call_1", "edit", EDIT_FIX)
    details = {"type": "refusal", "category": "cyber", "explanation": REFUSAL_EXPLANATION}
    return [builder.finish("refusal", details).turn()]


def check_refusal(observation: Observation) -> list[str]:
    if REFUSAL_EXPLANATION not in observation.stopped:
        return [f"the stop does not carry the refusal explanation: {observation.stopped!r}"]
    return []


def _missing_stop_turns() -> list[Turn]:
    builder = MessageBuilder("msg_no_stop").start().text("Editing.")
    builder.tool_use("call_1", "edit", EDIT_FIX)
    return [builder.finish("tool_use", message_stop=False).turn()]


def _data_only_frames_turns() -> list[Turn]:
    # Frames without an `event:` line, which the official SDK never reads: a message_delta
    # that would contradict the tool_use, an argument fragment, a second message_stop.
    builder = MessageBuilder("msg_data_only").start().text("Editing.")
    builder.tool_use("call_1", "edit", EDIT_FIX)
    contradicting = {"type": "message_delta", "delta": {"stop_reason": "end_turn"}, "usage": {}}
    builder.raw(f"data: {json.dumps(contradicting)}\n\n")
    fragment = {"type": "input_json_delta", "partial_json": ', "path": "README.md"'}
    builder.raw(
        f"data: {json.dumps({'type': 'content_block_delta', 'index': 1, 'delta': fragment})}\n\n"
    )
    builder.finish("tool_use")
    return [builder.turn(), text_turn("msg_data_only_2", "Fixed.")]


def _stop_reason_changed_turns() -> list[Turn]:
    builder = MessageBuilder("msg_two_reasons").start().tool_use("call_1", "edit", EDIT_FIX)
    builder.finish("tool_use", message_stop=False).finish("end_turn")
    return [builder.turn()]


def _message_delta_first_turns() -> list[Turn]:
    # A message_delta before the blocks it describes.
    builder = MessageBuilder("msg_delta_first").start().finish("tool_use", message_stop=False)
    builder.tool_use("call_1", "edit", EDIT_FIX).emit({"type": "message_stop"})
    return [builder.turn()]


def _empty_delta_tool_use(
    message_id: str, name: str, start_input: dict[str, object], *, ping: bool = False
) -> MessageBuilder:
    """A message whose one `tool_use` starts with `start_input`, then gets one empty
    `input_json_delta`, then stops."""
    builder = MessageBuilder(message_id).start()
    block = {"type": "tool_use", "id": "call_1", "name": name, "input": start_input}
    builder.emit({"type": "content_block_start", "index": 0, "content_block": block})
    if ping:
        builder.ping()
    builder.emit(
        {
            "type": "content_block_delta",
            "index": 0,
            "delta": {"type": "input_json_delta", "partial_json": ""},
        }
    )
    builder.emit({"type": "content_block_stop", "index": 0})
    builder.calls = 1
    builder.content.append(block)
    return builder


def _empty_input_turns() -> list[Turn]:
    builder = _empty_delta_tool_use("msg_empty_input", "discover", {}, ping=True)
    return [
        builder.finish("tool_use").turn(),
        text_turn("msg_empty_input_2", "Listed."),
    ]


def _start_input_turns() -> list[Turn]:
    # A tool_use that starts with its input instead of `input: {}`, then one empty delta:
    # anthropic-python reads the start input, @anthropic-ai/sdk and litellm `{}`.
    builder = _empty_delta_tool_use("msg_start_input", "read", {"path": "README.md"})
    return [builder.finish("tool_use").turn()]


def check_empty_input(observation: Observation) -> list[str]:
    content = _message(observation.requests[1], "call_1")
    uses = [block for block in content if block.get("type") == "tool_use"]
    if [block.get("input") for block in uses] != [{}]:
        return [f"the no-parameter call was replayed with input {uses}"]
    if not result_of(observation, 1, "call_1"):
        return ["the no-parameter call has no result"]
    return []


def _server_tool_turns() -> list[Turn]:
    first = Reply("msg_search_1", (ProviderTool(SEARCH_QUERY), Call("call_1", "edit", EDIT_FIX)))
    return [Turn(reply=first), text_turn("msg_search_2", "Fixed.")]


def check_server_tool(observation: Observation) -> list[str]:
    content = _message(observation.requests[1], "call_1")
    tool_id = "srvtoolu_msg_search_1_1"
    expected = [
        {
            "type": "server_tool_use",
            "id": tool_id,
            "name": "web_search",
            "input": {"query": SEARCH_QUERY},
        },
        web_search_result(tool_id, SEARCH_QUERY),
    ]
    if [_exact(b) for b in content[:2]] != [_exact(b) for b in expected]:
        return ["the provider-executed blocks were not replayed unchanged before the call"]
    if content[2].get("id") != "call_1":
        return ["the call lost its place after the provider blocks"]
    return []


def _overloaded_529_turns() -> list[Turn]:
    error = OpeningError(529, "overloaded", "Overloaded")
    answer = Reply("msg_after_529", (Say("Answered after the overload."),))
    return [Turn(error=error, headers={"retry-after": "3"}), Turn(reply=answer)]


def _billing_turns() -> list[Turn]:
    error = OpeningError(
        402, "quota", "Your credit balance is too low to access the Anthropic API."
    )
    return [Turn(error=error), text_turn("msg_never", "No.")]


_THINKING = LabOptions(provider_options=AnthropicOptions(thinking_budget=THINKING_BUDGET))

SCENARIOS: tuple[Scenario, ...] = own(
    "anthropic",
    Scenario(
        "anthropic-thinking-replay",
        "thinking (with signature) + call: replayed byte for byte, first, before its tool_use",
        finished(2, 1),
        _thinking_turns,
        options=_THINKING,
        check=check_thinking_replay,
    ),
    Scenario(
        "anthropic-redacted-thinking",
        "two redacted_thinking blocks + call: replayed unchanged, in order, before it",
        finished(2, 1),
        _redacted_turns,
        options=_THINKING,
        check=check_redacted_replay,
    ),
    Scenario(
        "anthropic-interleaved-thinking",
        "thinking, call, thinking, call: each thinking block replayed in place",
        finished(2, 2),
        _interleaved_turns,
        options=_THINKING,
        check=check_interleaved,
    ),
    Scenario(
        "anthropic-parallel-results",
        "two calls in one response: both tool_results first, in one user message",
        finished(2, 2),
        _parallel_turns,
        check=check_parallel,
    ),
    Scenario(
        "anthropic-overload-before-content",
        "event: error overloaded_error before any content: fails, no second request",
        failure(FailureKind.PROVIDER_ERROR, closed_early=0),
        _overload_turns,
    ),
    Scenario(
        "anthropic-overload-retry-unstarted",
        "the same overload with retry_unstarted: retried once, then answered",
        answered(2, "Answered after the overload."),
        _overload_retried_turns,
        options=LabOptions(retry_unstarted=True),
    ),
    Scenario(
        "anthropic-overload-after-text",
        "an overload after a text delta, retry_unstarted on: content arrived, never retried",
        failure(FailureKind.PROVIDER_ERROR, closed_early=0),
        _overload_after_text_turns,
        options=LabOptions(retry_unstarted=True),
    ),
    Scenario(
        "anthropic-max-tokens-in-tool-use",
        "stop_reason max_tokens inside a tool_use's input: nothing runs",
        failure(FailureKind.RESPONSE_INCOMPLETE, closed_early=0),
        _max_tokens_turns,
        check=check_max_tokens,
    ),
    Scenario(
        "anthropic-tool-use-without-call",
        "stop_reason tool_use, but no tool_use block",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        _tool_use_without_call_turns,
    ),
    Scenario(
        "anthropic-end-turn-with-call",
        "stop_reason end_turn, but a tool_use block: the call does not run",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        _end_turn_with_call_turns,
    ),
    Scenario(
        "anthropic-pause-turn",
        "pause_turn after a web search: sent back unchanged as the last message, nothing runs",
        answered(2, "The search agrees: add must add."),
        _pause_turns,
        check=check_pause,
    ),
    Scenario(
        "anthropic-refusal",
        "stop_reason refusal with stop_details after a complete tool_use: no call runs",
        Expectation("model_refused", attempts=1, tools_executed=0, closed_early=0),
        _refusal_turns,
        check=check_refusal,
    ),
    Scenario(
        "anthropic-missing-message-stop",
        "message_delta tool_use, then the body ends without message_stop",
        failure(FailureKind.STREAM_ENDED, closed_early=0),
        _missing_stop_turns,
    ),
    Scenario(
        "anthropic-data-only-frames",
        "frames without an event: line (a contradicting message_delta, an argument "
        "fragment): skipped, as the SDK skips them; the call runs as streamed",
        finished(2, 1, fixed=True),
        _data_only_frames_turns,
    ),
    Scenario(
        "anthropic-stop-reason-changed",
        "message_delta tool_use, then a second message_delta end_turn: not silently replaced",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        _stop_reason_changed_turns,
    ),
    Scenario(
        "anthropic-message-delta-first",
        "a message_delta before the blocks it describes",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        _message_delta_first_turns,
    ),
    Scenario(
        "anthropic-empty-input",
        'a no-parameter tool whose only partial_json is "": runs with {}',
        finished(2, 1),
        _empty_input_turns,
        check=check_empty_input,
    ),
    Scenario(
        "anthropic-start-input",
        "a tool_use that starts with a non-empty input, then an empty partial_json: the "
        "readers disagree, refused",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        _start_input_turns,
    ),
    Scenario(
        "anthropic-server-tool-blocks",
        "server_tool_use + web_search_tool_result before a call: replayed, never executed",
        finished(2, 1, fixed=True),
        _server_tool_turns,
        check=check_server_tool,
    ),
    Scenario(
        "anthropic-529-retry-after",
        "529 overloaded_error with retry-after: 3 while opening: retried after that wait",
        answered(2, "Answered after the overload."),
        _overloaded_529_turns,
        check=waited(3.0),
    ),
    Scenario(
        "anthropic-billing-error",
        "402 billing_error: the quota is exhausted, one request",
        failure(FailureKind.QUOTA_EXHAUSTED, closed_early=0),
        _billing_turns,
    ),
)
