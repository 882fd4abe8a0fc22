"""The Responses provider's own lab scenarios: the rules and quirks only this protocol has,
beside the neutral scenarios every protocol runs (`lockgate.lab.scenarios`).

Among them, the shapes the agents people run produce (issue 23): custom (free-form) tool
calls, calls in a tool `namespace`, client-executed `shell_call` items, `compaction` items and
a client that asks for a WebSocket first. lockgate declares none of those tools, so
`lockgate run` refuses their calls (`unsupported_output`, `invalid_batch`); each scenario
also says what a client that declares them does (`OtherClient`), which `lockgate lab --via
proxy` plays through the proxy: the call runs only when its tool is declared and its batch
is whole and valid."""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from ...errors import FailureKind
from ...fixture import EDIT
from ...scripted.renderer import Frame
from ...scripted.reply import Call, Compaction, CustomCall, Reply, Say, ShellCall
from ...scripted.scenario import (
    EDIT_FIX,
    LabOptions,
    Observation,
    OtherClient,
    Scenario,
    answered,
    failure,
    finished,
    own,
    reply_turn,
    text_turn,
)
from ...scripted.script import Faults, Turn
from .codec import encode_tool
from .options import ResponsesOptions
from .render import (
    ResponseBuilder,
    ResponsesRenderer,
    reasoning_item,
    render,
    sse_bytes,
)

# --- Responses-only scenarios ----------------------------------------------------------------


def _edit_stream(response_id: str) -> ResponseBuilder:
    return ResponseBuilder(response_id).created().text("msg_1", "I'll fix the bug now.")


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


# What Codex would run from a `.done` item: the validated edit, pointed elsewhere.
ELSEWHERE = {"path": "/etc/passwd", "old": "root:x:0:0", "new": "root::0:0"}


def _item_event(builder: ResponseBuilder, kind: str, item_type: str) -> dict[str, Any]:
    return next(
        event
        for event in builder.events
        if event["type"] == kind and event.get("item", {}).get("type") == item_type
    )


def done_item_changed_turns() -> list[Turn]:
    """The `.done` item (where Codex starts the tool) carries other arguments than the
    stream and the snapshot."""
    builder = _edit_stream("resp_done_changed").call("fc_1", "call_1", "edit", EDIT_FIX)
    done = _item_event(builder, "response.output_item.done", "function_call")
    done["item"] = {**done["item"], "arguments": json.dumps(ELSEWHERE)}
    return [builder.completed().turn()]


def done_item_unlisted_turns() -> list[Turn]:
    """A `local_shell_call` added and done, which the snapshot does not list."""
    builder = _edit_stream("resp_unlisted").call("fc_1", "call_1", "edit", EDIT_FIX)
    listed = list(builder.output)
    builder.output_item(
        {
            "type": "local_shell_call",
            "id": "lsh_1",
            "call_id": "call_shell",
            "action": {"type": "exec", "command": ["cat", "/etc/passwd"], "env": {}},
            "status": "completed",
        }
    )
    return [builder.completed(output=listed).turn()]


def arguments_done_changed_turns() -> list[Turn]:
    """`response.function_call_arguments.done` states other arguments than streamed."""
    builder = _edit_stream("resp_args_done").call("fc_1", "call_1", "edit", EDIT_FIX)
    done = next(
        event
        for event in builder.events
        if event["type"] == "response.function_call_arguments.done"
    )
    done["arguments"] = json.dumps(ELSEWHERE)
    return [builder.completed().turn()]


def reminted_reasoning_id_turns() -> list[Turn]:
    """OpenRouter's shape: the snapshot's reasoning item has another id than the streamed
    one (`rs_tmp_…`), and its `.done` comes after the next item's."""
    builder = ResponseBuilder("resp_reminted").created()
    builder.reasoning(reasoning_item("rs_tmp_streamed", "Fix add first."))
    builder.call("fc_1", "call_1", "edit", EDIT_FIX)
    done = _item_event(builder, "response.output_item.done", "reasoning")
    builder.events.remove(done)
    builder.events.append(done)
    output = [dict(item) for item in builder.output]
    output[0]["id"] = "rs_tmp_minted"
    answer = ResponseBuilder("resp_reminted_2").created().text("msg_1", "Fixed.").completed()
    return [builder.completed(output=output).turn(), answer.turn()]


def duplicate_start_turns() -> list[Turn]:
    builder = ResponseBuilder("resp_dup").created().created()
    builder.call("fc_1", "call_1", "edit", EDIT_FIX)
    return [builder.completed().turn()]


def wrong_response_id_turns() -> list[Turn]:
    builder = _edit_stream("resp_right").call("fc_1", "call_1", "edit", EDIT_FIX)
    return [builder.completed(response_id="resp_other").turn()]


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


def incomplete_call_turns() -> list[Turn]:
    builder = _edit_stream("resp_incomplete_item")
    builder.call("fc_1", "call_1", "edit", EDIT_FIX, status="incomplete")
    return [builder.completed().turn()]


def call_without_done_turns() -> list[Turn]:
    # The call's `output_item.done` never comes: the AI SDK, which emits a call only there,
    # ends with no call (finish `stop`) where the snapshot lists one.
    builder = _edit_stream("resp_call_without_done")
    builder.call("fc_1", "call_1", "edit", EDIT_FIX)
    builder.events.pop()  # the call item's `response.output_item.done`
    return [builder.completed().turn()]


def response_failed_turns() -> list[Turn]:
    builder = _edit_stream("resp_failed")
    builder.call("fc_1", "call_1", "edit", EDIT_FIX, finish=False)
    return [builder.failed("server_error", "Something went wrong.").turn()]


def done_sentinel_turns() -> list[Turn]:
    builder = ResponseBuilder("resp_done").created().text("msg_1", "A gateway's [DONE] is fine.")
    return [builder.completed().turn(faults=Faults(done_sentinel=True))]


def data_only_turns() -> list[Turn]:
    """A gateway that sends no `event:` lines and ends with `data: [DONE]` (Bedrock, OpenRouter)."""
    builder = ResponseBuilder("resp_gateway").created()
    builder.call("fc_1", "call_1", "edit", EDIT_FIX)
    builder.completed()
    frames: list[Frame] = [
        {"raw": f"data: {json.dumps(event, separators=(',', ':'))}\n\n"} for event in builder.events
    ]
    frames.append({"raw": "data: [DONE]\n\n"})
    answer = ResponseBuilder("resp_gateway_2").created().text("msg_1", "Fixed.").completed()
    return [Turn(events=tuple(frames)), answer.turn()]


def background_start_turns() -> list[Turn]:
    builder = ResponseBuilder("resp_background").queued()
    builder.call("fc_1", "call_1", "edit", EDIT_FIX)
    answer = ResponseBuilder("resp_background_2").created().text("msg_1", "Fixed.").completed()
    return [builder.completed().turn(), answer.turn()]


def provider_tool_turns() -> list[Turn]:
    builder = ResponseBuilder("resp_search").created()
    builder.web_search("ws_1", "python add function subtracts")
    builder.call("fc_1", "call_1", "edit", EDIT_FIX)
    answer = ResponseBuilder("resp_search_2").created().text("msg_1", "Fixed.").completed()
    return [builder.completed().turn(), answer.turn()]


def check_provider_tool(observation: Observation) -> list[str]:
    items = list(observation.requests[1].get("input", []))
    types = [item.get("type") for item in items]
    if "web_search_call" not in types:
        return ["the provider-executed web_search_call was not replayed"]
    searched = items[types.index("web_search_call")]
    if searched.get("action") != {"type": "search", "query": "python add function subtracts"}:
        return ["the web_search_call was not replayed unchanged"]
    if types.index("web_search_call") > types.index("function_call"):
        return ["the web_search_call lost its place before the call"]
    return []


REASONING_MODEL = "o4-mini"


def reasoning_replay_turns() -> list[Turn]:
    first = ResponseBuilder("resp_reason_1", REASONING_MODEL).created()
    first.reasoning(reasoning_item("rs_1", "Look at the files first."))
    first.call("fc_1", "call_1", "discover", {})
    answer = (
        ResponseBuilder("resp_reason_2", REASONING_MODEL)
        .created()
        .text("msg_1", "The bug is in add.")
    )
    return [first.completed().turn(), answer.completed().turn()]


def reasoning_orphan_guard_turns() -> list[Turn]:
    first = ResponseBuilder("resp_orphan_1", REASONING_MODEL).created()
    first.reasoning(reasoning_item("rs_1", "Discover first."))
    first.call("fc_1", "call_1", "discover", {})
    first.reasoning(reasoning_item("rs_2", "A trailing thought with no call after it."))
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
    expected = reasoning_item("rs_1", "Look at the files first.")
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


def _call_turn(number: int, name: str, arguments: dict[str, str]) -> Turn:
    builder = ResponseBuilder(f"resp_repair_{number}").created()
    builder.call(f"fc_repair_{number}", f"call_repair_{number}", name, arguments)
    return builder.completed().turn()


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
        if [i.get("type") for i in items] != ["function_call_output"] or items[0].get(
            "call_id"
        ) != call_id:
            problems.append(f"expected only the output of {call_id}, got {_input_types(request)}")
    return problems


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


# --- what a client other than lockgate may run ----------------------------------------------

# The fix as one command for a custom (free-form) tool: Codex's default model acts only
# through its custom tool `exec`, declared in an `additional_tools` input item.
EXEC_INPUT = "sed -i 's/return a - b/return a + b/' calculator.py"
EXEC_TOOL: dict[str, Any] = {
    "type": "custom",
    "name": "exec",
    "description": "Run a shell command in the project.",
    "format": {"type": "text"},
}
# An MCP server's tools, grouped in a namespace (as Codex sends MCP tools): lockgate's own
# edit tool, declared there.
FILES_NAMESPACE = "files"
FILES_TOOLS: dict[str, Any] = {
    "type": "namespace",
    "name": FILES_NAMESPACE,
    "description": "The project's files.",
    "tools": [encode_tool(EDIT)],
}
SHELL_TOOL: dict[str, Any] = {"type": "shell"}  # OpenAI's shell tool, run by the client
FIXING_TEXT = Say("I'll fix the bug now.")


def _answer(response_id: str) -> Turn:
    """What the model answers once the client sent its call's result."""
    return text_turn(response_id, "Fixed: `add` now adds.")


def custom_call_turns() -> list[Turn]:
    reply = Reply("resp_custom", (FIXING_TEXT, CustomCall("call_exec", "exec", EXEC_INPUT)))
    return [reply_turn(reply), _answer("resp_custom_2")]


def custom_call_cut_turns() -> list[Turn]:
    call = CustomCall("call_exec", "exec", EXEC_INPUT, cut=True)
    return [reply_turn(Reply("resp_custom_cut", (FIXING_TEXT, call), "open"))]


def namespaced_call_turns() -> list[Turn]:
    call = Call("call_files_edit", "edit", EDIT_FIX, namespace=FILES_NAMESPACE)
    return [reply_turn(Reply("resp_namespaced", (FIXING_TEXT, call))), _answer("resp_ns_2")]


def custom_beside_invalid_turns() -> list[Turn]:
    missing_new = {"path": "calculator.py", "old": "return a - b"}
    calls = (CustomCall("call_exec", "exec", EXEC_INPUT), Call("call_edit", "edit", missing_new))
    return [reply_turn(Reply("resp_custom_mixed", (FIXING_TEXT, *calls)))]


def compaction_turns() -> list[Turn]:
    reply = Reply(
        "resp_compacted", (Compaction(), FIXING_TEXT, Call("call_edit", "edit", EDIT_FIX))
    )
    return [reply_turn(reply), _answer("resp_compacted_2")]


def check_compaction(observation: Observation) -> list[str]:
    items = list(observation.requests[1].get("input", []))
    types = [item.get("type") for item in items]
    if "compaction" not in types:
        return ["the compaction item was not replayed"]
    replayed = items[types.index("compaction")]
    if replayed.get("encrypted_content") != Compaction().opaque:
        return ["the compaction item was not replayed unchanged"]
    if types.index("compaction") > types.index("function_call"):
        return ["the compaction item lost its place before the call"]
    return []


def shell_call_turns() -> list[Turn]:
    reply = Reply("resp_shell", (FIXING_TEXT, ShellCall("call_shell", (EXEC_INPUT,))))
    return [reply_turn(reply), _answer("resp_shell_2")]


def websocket_turns() -> list[Turn]:
    reply = Reply("resp_websocket", (FIXING_TEXT, Call("call_edit", "edit", EDIT_FIX)))
    return [reply_turn(reply), _answer("resp_websocket_2")]


_FIXED = finished(2, 1, fixed=True)

SCENARIOS: tuple[Scenario, ...] = own(
    "responses",
    Scenario(
        "changed-call",
        "terminal arguments differ from the streamed ones",
        failure(FailureKind.CALL_MISMATCH, closed_early=0),
        changed_call_turns,
    ),
    Scenario(
        "missing-call",
        "the terminal output omits a streamed call",
        failure(FailureKind.CALL_MISMATCH, closed_early=0),
        missing_call_turns,
    ),
    Scenario(
        "done-item-changed",
        "the output_item.done of the call carries other arguments than the stream and the snapshot",
        failure(FailureKind.CALL_MISMATCH, closed_early=0),
        done_item_changed_turns,
    ),
    Scenario(
        "done-item-unlisted",
        "a local_shell_call added and done that the snapshot does not list",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        done_item_unlisted_turns,
    ),
    Scenario(
        "arguments-done-changed",
        "function_call_arguments.done states other arguments than streamed",
        failure(FailureKind.CALL_MISMATCH, closed_early=0),
        arguments_done_changed_turns,
    ),
    Scenario(
        "reasoning-id-reminted",
        "a gateway mints a new reasoning item id for the snapshot (OpenRouter): accepted",
        _FIXED,
        reminted_reasoning_id_turns,
        options=LabOptions(model=REASONING_MODEL),
    ),
    Scenario(
        "duplicate-start",
        "response.created twice",
        failure(FailureKind.LIFECYCLE),
        duplicate_start_turns,
    ),
    Scenario(
        "wrong-response-id",
        "response.completed names another response",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        wrong_response_id_turns,
    ),
    Scenario(
        "unsupported-item",
        "an output item asking for a client action lockgate cannot run (computer_call)",
        failure(FailureKind.UNSUPPORTED_OUTPUT, closed_early=0),
        unsupported_item_turns,
    ),
    Scenario(
        "incomplete-call-item",
        "a completed response whose function_call item the provider marks incomplete",
        failure(FailureKind.RESPONSE_INCOMPLETE, closed_early=0),
        incomplete_call_turns,
    ),
    Scenario(
        "call-without-done",
        "a completed response whose function_call item never got its output_item.done",
        failure(FailureKind.LIFECYCLE, closed_early=0),
        call_without_done_turns,
    ),
    Scenario(
        "response-failed",
        "response.failed mid-arguments",
        failure(FailureKind.RESPONSE_FAILED, closed_early=0),
        response_failed_turns,
    ),
    Scenario(
        "done-sentinel",
        "a gateway's trailing data: [DONE] after response.completed",
        answered(answer="A gateway's [DONE] is fine."),
        done_sentinel_turns,
    ),
    Scenario(
        "data-only-gateway",
        "no event: lines (the type only in the JSON), then data: [DONE]",
        _FIXED,
        data_only_turns,
    ),
    Scenario(
        "background-start",
        "background mode: response.queued first, no response.created",
        _FIXED,
        background_start_turns,
    ),
    Scenario(
        "provider-tool-item",
        "a web_search_call the provider ran itself: accepted, replayed in place, never executed",
        _FIXED,
        provider_tool_turns,
        check=check_provider_tool,
    ),
    Scenario(
        "reasoning-replay",
        "reasoning item + call, then an answer: the item is replayed before its call",
        finished(2, 1),
        reasoning_replay_turns,
        options=LabOptions(model=REASONING_MODEL),
        check=check_reasoning_replay,
    ),
    Scenario(
        "reasoning-orphan-guard",
        "a trailing reasoning item with no item after it is never sent",
        finished(2, 1),
        reasoning_orphan_guard_turns,
        options=LabOptions(model=REASONING_MODEL),
        check=check_orphan_guard,
    ),
    Scenario(
        "native-continuation",
        "store: true; continued requests carry previous_response_id and only new items",
        finished(3, 2),
        native_continuation_turns,
        options=LabOptions(provider_options=ResponsesOptions(continuation="native")),
        check=check_native_continuation,
    ),
    Scenario(
        "custom-tool-call",
        "a complete custom (free-form) tool call: lockgate declares no custom tool; "
        "through the proxy it runs where the request declares it",
        failure(FailureKind.UNSUPPORTED_OUTPUT, closed_early=0),
        custom_call_turns,
        other_client=OtherClient((EXEC_TOOL,), in_input=True, executes=1),
    ),
    Scenario(
        "custom-tool-call-cut",
        "the stream ends cleanly inside a custom tool call's input: nothing runs, declared or not",
        failure(FailureKind.STREAM_ENDED, closed_early=0),
        custom_call_cut_turns,
        other_client=OtherClient((EXEC_TOOL,), in_input=True, executes=0),
    ),
    Scenario(
        "namespaced-call",
        "an edit called in a tool namespace (files.edit): not one of lockgate's tools; "
        "through the proxy it runs where the request declares that namespace",
        failure(FailureKind.INVALID_BATCH, closed_early=0),
        namespaced_call_turns,
        other_client=OtherClient((FILES_TOOLS,), in_input=True, executes=1),
    ),
    Scenario(
        "custom-call-beside-invalid-call",
        "a valid custom tool call, then an edit missing an argument: nothing runs, the "
        "custom tool declared or not",
        failure(FailureKind.UNSUPPORTED_OUTPUT, closed_early=0),
        custom_beside_invalid_turns,
        other_client=OtherClient((EXEC_TOOL,), in_input=True, executes=0),
    ),
    Scenario(
        "compaction-item",
        "a compaction item before an edit: provider output, accepted, replayed in place, "
        "never executed",
        _FIXED,
        compaction_turns,
        check=check_compaction,
    ),
    Scenario(
        "shell-call",
        "a shell_call the client executes itself: lockgate runs no shell; through the proxy "
        "it runs where the request declares the shell tool",
        failure(FailureKind.UNSUPPORTED_OUTPUT, closed_early=0),
        shell_call_turns,
        other_client=OtherClient((SHELL_TOOL,), executes=1),
    ),
    Scenario(
        "websocket-upgrade",
        "the client asks for a WebSocket first (Codex): answered 426, it falls back to "
        "HTTP; the edit runs",
        _FIXED,
        websocket_turns,
        other_client=OtherClient(websocket_first=True),
    ),
    Scenario(
        "lifecycle-violation",
        "a custom provider reports success with a call list other than it streamed",
        failure(FailureKind.CALL_MISMATCH, closed_early=0),
        lifecycle_violation_turns,
        options=LabOptions(neutral=True),
    ),
)

__all__ = ["ResponseBuilder", "ResponsesRenderer", "reasoning_item", "render", "sse_bytes"]
