"""Custom tools' grammars through the gating engine and the proxy (issue 27, finding 5):
Codex's default model acts only through its custom `exec` tool, whose Lark grammar needs at
least one character. A complete response whose batch is a valid `exec` call and an empty
one used to be released whole (and Codex ran the first); now the batch is invalid and the
client reads no call. A grammar the gate cannot use is said once, and that tool's input is
then any text."""

from __future__ import annotations

import copy
from typing import Any

from lockgate.providers import provider as registry_entry
from lockgate.providers.responses.render import ResponseBuilder
from lockgate.proxy import Accepted, Refused
from lockgate.proxy.server import ProxyConfig, serving
from lockgate.scripted.script import Turn

from ..codex_grammars import APPLY_PATCH_TOOL, EXEC_TOOL, custom_tool
from .support import ends_with_refusal, gate_turn, options, run
from .test_server import gating
from .test_server_protocols import post, recording_upstream
from .test_server_routes import request

COMMAND = "await tools.exec_command({cmd: 'touch /tmp/lockgate-marker'})"
PATCH = "*** Begin Patch\n*** Add File: notes.txt\n+hello\n*** End Patch\n"


def codex_request(*tools: dict[str, Any]) -> dict[str, Any]:
    """A request as Codex 0.171's default model sends it: its tools in an
    `additional_tools` input item."""
    return {
        "model": "lab-model",
        "stream": True,
        "tools": [],
        "input": [
            {"type": "additional_tools", "role": "developer", "tools": list(tools)},
            {"role": "user", "content": [{"type": "input_text", "text": "fix the bug"}]},
        ],
    }


def calls(*inputs: tuple[str, str]) -> Turn:
    """A complete response whose batch is a custom call per (tool, input)."""
    builder = ResponseBuilder("resp_grammar").created().text("msg_1", "Running it.")
    for number, (name, text) in enumerate(inputs):
        builder.custom_call(f"ctc_{number}", f"call_{number}", name, text)
    return Turn(events=tuple(copy.deepcopy(event) for event in builder.completed().events))


def test_a_valid_exec_call_beside_an_empty_one_reaches_the_client_as_no_call() -> None:
    request = codex_request(EXEC_TOOL, APPLY_PATCH_TOOL)
    accepted = run(gate_turn("responses", calls(("exec", COMMAND)), request))
    assert isinstance(accepted.outcome, Accepted)
    assert b"custom_tool_call" in accepted.output
    gated = run(gate_turn("responses", calls(("exec", COMMAND), ("exec", "")), request))
    assert isinstance(gated.outcome, Refused)
    refusal = gated.outcome.refusal
    assert refusal.kind == "invalid_batch"
    assert refusal.withheld == 2
    assert "exec (call_1): custom tool 'exec' input does not match its lark grammar" in (
        refusal.message
    )
    assert b"custom_tool_call" not in gated.output  # not even the valid first one
    assert b"tools.exec_command" not in gated.output
    assert ends_with_refusal(gated.output, "responses")


def test_a_broken_patch_withholds_the_whole_batch_and_a_valid_one_passes() -> None:
    request = codex_request(EXEC_TOOL, APPLY_PATCH_TOOL)
    good = calls(("exec", COMMAND), ("apply_patch", PATCH))
    assert isinstance(run(gate_turn("responses", good, request)).outcome, Accepted)
    broken = calls(("exec", COMMAND), ("apply_patch", PATCH.replace("+hello", "hello")))
    gated = run(gate_turn("responses", broken, request))
    assert isinstance(gated.outcome, Refused)
    assert "custom tool 'apply_patch' input does not match its lark grammar" in (
        gated.outcome.refusal.message
    )
    assert b"custom_tool_call" not in gated.output


def test_a_regex_format_is_checked_and_validate_schemas_false_checks_names_only() -> None:
    request = codex_request(custom_tool("pick", "regex", "(red|green|blue)"))
    assert isinstance(
        run(gate_turn("responses", calls(("pick", "green")), request)).outcome, Accepted
    )
    gated = run(gate_turn("responses", calls(("pick", "purple")), request))
    assert isinstance(gated.outcome, Refused)
    assert "custom tool 'pick' input does not match its regex grammar" in (
        gated.outcome.refusal.message
    )
    unchecked = options(validate_schemas=False)
    gated = run(gate_turn("responses", calls(("pick", "purple")), request, unchecked))
    assert isinstance(gated.outcome, Accepted)


def test_the_gateway_reads_each_custom_tools_grammar() -> None:
    gateway = registry_entry("responses").gateway
    assert gateway is not None
    namespace = {"type": "namespace", "name": "crm", "tools": [EXEC_TOOL]}
    text = {"type": "custom", "name": "note", "format": {"type": "text"}}
    tools = gateway().tools(codex_request(EXEC_TOOL, namespace, text), validate_schemas=True)
    read = {(tool.namespace, tool.name): getattr(tool, "grammar", None) for tool in tools}
    exec_format: Any = EXEC_TOOL["format"]
    assert read[("", "exec")] is not None
    assert read[("", "exec")].definition == exec_format["definition"]
    assert read[("crm", "exec")] == read[("", "exec")]
    assert read[("", "note")] is None


async def test_a_grammar_the_gate_cannot_use_is_said_once_and_its_input_is_any_text() -> None:
    said: list[str] = []
    unusable = custom_tool("exec", "lark", "start: undefined_rule")
    renderer = registry_entry("responses").render()
    turn = calls(("exec", ""))
    assert turn.events is not None
    body = b"".join(renderer.frame(event) for event in turn.events)
    async with (
        recording_upstream(body) as (upstream, _, _),
        serving(ProxyConfig(upstream, gating=gating()), warn=said.append) as running,
    ):
        for _ in range(2):
            status, answer = await post(running.url + "/v1/responses", codex_request(unusable))
            assert status == 200
            assert b"custom_tool_call" in answer  # any text: released
        _, _, metrics = await request("GET", running.url + "/metrics")
    # said once, counted for every request that declared it
    assert b'lockgate_proxy_unusable_tools_total{protocol="responses",route="default"} 2.0' in (
        metrics
    ), metrics.decode()
    assert len(said) == 1
    assert said[0].startswith(
        "lockgate proxy: the input format of custom tool 'exec' is not one the gate can check "
        "with (llguidance cannot use the lark grammar ("
    )
    assert said[0].endswith("its input is accepted as any text")
