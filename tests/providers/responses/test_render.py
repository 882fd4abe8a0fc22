"""The Responses lab renderer: what `lockgate serve` sends, the official SDK accepts."""

from __future__ import annotations

from typing import Any

import openai
from openai.types.responses import (
    ResponseCompactionItem,
    ResponseCustomToolCall,
    ResponseFunctionShellToolCall,
    ResponseFunctionToolCall,
)

from lockgate.lab.server import serve_script
from lockgate.providers.responses.render import RENDERER
from lockgate.providers.responses.scenarios import check_compaction
from lockgate.scripted.renderer import Frame
from lockgate.scripted.reply import Call, Compaction, CustomCall, Reply, Say, ShellCall
from lockgate.scripted.scenario import Observation, reply_turn


async def test_sdk_stream_helper_drives_the_repair_scenario(served_repair: str) -> None:
    client = openai.AsyncOpenAI(api_key="sk-test-serve", base_url=served_repair, max_retries=0)
    outputs: list[list[str]] = []
    try:
        for _ in range(7):
            async with client.responses.stream(model="any", input="fix the bug") as stream:
                async for _event in stream:
                    pass
                final = await stream.get_final_response()
            assert final.status == "completed"
            outputs.append([item.type for item in final.output])
    finally:
        await client.close()
    assert outputs[0] == ["message", "function_call"]
    assert outputs[-1] == ["message"]
    assert sum(kinds.count("function_call") for kinds in outputs) == 6


# --- the shapes a client other than lockgate may run (issue 23) ---------------------------------

EXEC_INPUT = "sed -i 's/return a - b/return a + b/' calculator.py"
FIX = {"path": "calculator.py", "old": "return a - b", "new": "return a + b"}


def _of_type(events: list[Frame], kind: str) -> list[dict[str, Any]]:
    return [dict(event) for event in events if event.get("type") == kind]


def test_a_custom_call_streams_its_input_in_deltas_then_states_it_whole() -> None:
    reply = Reply("resp_custom", (CustomCall("call_exec", "exec", EXEC_INPUT, 3, namespace="ns"),))
    events = RENDERER.events(reply)
    [added] = _of_type(events, "response.output_item.added")
    assert added["item"] == {
        "id": "ctc_custom_1",
        "type": "custom_tool_call",
        "call_id": "call_exec",
        "name": "exec",
        "namespace": "ns",
        "status": "in_progress",
        "input": "",
    }
    deltas = _of_type(events, "response.custom_tool_call_input.delta")
    assert len(deltas) == 3
    assert "".join(delta["delta"] for delta in deltas) == EXEC_INPUT
    [stated] = _of_type(events, "response.custom_tool_call_input.done")
    assert stated["input"] == EXEC_INPUT
    [done] = _of_type(events, "response.output_item.done")
    whole = {**added["item"], "status": "completed", "input": EXEC_INPUT}
    assert done["item"] == whole
    assert events[-1]["type"] == "response.completed"
    assert events[-1]["response"]["output"] == [whole]
    assert RENDERER.completion(reply)["output"] == [whole]


def test_a_cut_custom_call_stops_inside_its_input_and_the_whole_answer_says_so() -> None:
    call = CustomCall("call_exec", "exec", EXEC_INPUT, 4, cut=True)
    reply = Reply("resp_cut", (call, Say("never sent")), "open")
    events = RENDERER.events(reply)
    sent = "".join(e["delta"] for e in _of_type(events, "response.custom_tool_call_input.delta"))
    assert sent == call.sent_input
    assert 0 < len(sent) < len(EXEC_INPUT)
    assert EXEC_INPUT.startswith(sent)
    assert events[-1]["type"] == "response.custom_tool_call_input.delta"  # nothing after
    assert not _of_type(events, "response.output_text.delta")
    [item] = RENDERER.completion(reply)["output"]
    assert item == {
        "id": "ctc_cut_1",
        "type": "custom_tool_call",
        "call_id": "call_exec",
        "name": "exec",
        "input": sent,
        "status": "incomplete",
    }


def test_a_namespaced_call_names_its_namespace_wherever_it_is_stated() -> None:
    call = Call("call_1", "edit", FIX, namespace="files")
    reply = Reply("resp_ns", (call,))
    events = RENDERER.events(reply)
    items = [e["item"] for e in _of_type(events, "response.output_item.added")]
    items += [e["item"] for e in _of_type(events, "response.output_item.done")]
    items += events[-1]["response"]["output"]
    assert [(item["name"], item["namespace"]) for item in items] == [("edit", "files")] * 3
    # A call in no namespace has no `namespace` field at all, as the API sends it.
    plain = RENDERER.events(Reply("resp_plain", (Call("call_1", "edit", FIX),)))
    assert all("namespace" not in e["item"] for e in _of_type(plain, "response.output_item.done"))
    cut = Reply("resp_ns_cut", (Call("call_1", "edit", FIX, namespace="files", cut=True),), "open")
    [item] = RENDERER.completion(cut)["output"]
    assert (item["namespace"], item["status"]) == ("files", "incomplete")


def test_a_shell_call_and_a_compaction_are_whole_items() -> None:
    reply = Reply("resp_items", (Compaction("opaque-1"), ShellCall("call_sh", ("ls", "pwd"))))
    events = RENDERER.events(reply)
    output = events[-1]["response"]["output"]
    assert output == [
        {"id": "cmp_items_1", "type": "compaction", "encrypted_content": "opaque-1"},
        {
            "id": "sh_items_2",
            "type": "shell_call",
            "call_id": "call_sh",
            "status": "completed",
            "action": {"commands": ["ls", "pwd"], "timeout_ms": None, "max_output_length": None},
        },
    ]
    commands = _of_type(events, "response.shell_call_command.added")
    assert [(e["command_index"], e["command"]) for e in commands] == [(0, "ls"), (1, "pwd")]
    assert [e["item"] for e in _of_type(events, "response.output_item.done")] == output


async def test_the_sdk_reads_every_new_shape_as_the_api_types_it() -> None:
    parts = (
        Compaction(),
        Say("Fixing."),
        CustomCall("call_exec", "exec", EXEC_INPUT, namespace="functions"),
        Call("call_edit", "edit", FIX, namespace="files"),
        ShellCall("call_sh", ("ls",)),
    )
    turns = [reply_turn(Reply("resp_all", parts)), reply_turn(Reply("resp_all_2", parts))]
    async with serve_script(turns, provider="responses") as server:
        client = openai.AsyncOpenAI(api_key="sk-test", base_url=server.base_url, max_retries=0)
        try:
            async with client.responses.stream(model="m", input="fix it") as stream:
                streamed = await stream.get_final_response()
            whole = await client.responses.create(model="m", input="fix it")
        finally:
            await client.close()
    for response in (streamed, whole):
        kinds = [item.type for item in response.output]
        assert kinds == ["compaction", "message", "custom_tool_call", "function_call", "shell_call"]
        compaction, _, custom, function, shell = response.output
        assert isinstance(compaction, ResponseCompactionItem)  # typed, not a loose object
        assert isinstance(custom, ResponseCustomToolCall)
        assert isinstance(function, ResponseFunctionToolCall)
        assert isinstance(shell, ResponseFunctionShellToolCall)
        assert compaction.encrypted_content == Compaction().opaque
        assert (custom.name, custom.namespace, custom.input) == ("exec", "functions", EXEC_INPUT)
        assert (function.name, function.namespace) == ("edit", "files")
        assert shell.action.commands == ["ls"]


def test_the_compaction_check_notices_a_broken_replay() -> None:
    call = {"type": "function_call", "call_id": "call_edit", "name": "edit", "arguments": "{}"}
    compaction = {"id": "cmp_1", "type": "compaction", "encrypted_content": Compaction().opaque}

    def seen(*items: dict[str, Any]) -> list[str]:
        second = {"input": [{"role": "user", "content": "fix it"}, *items]}
        return check_compaction(Observation(({}, second), (), None, "model_finished", RENDERER))

    assert seen(compaction, call) == []
    assert seen(call) == ["the compaction item was not replayed"]
    changed = {**compaction, "encrypted_content": "tampered"}
    assert seen(changed, call) == ["the compaction item was not replayed unchanged"]
    assert seen(call, compaction) == ["the compaction item lost its place before the call"]
