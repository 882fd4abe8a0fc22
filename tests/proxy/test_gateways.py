"""Each provider's gateway: the tools a native request exposes, whether it asks for a
stream, the events it holds from, its keep-alive, and its refusal frame, read back by the
official SDK's own parser and by lockgate's decoder."""

from __future__ import annotations

import json
import threading
from typing import Any

import pytest

from lockgate import gateway as gateway_module
from lockgate.conversation import ToolSpec
from lockgate.errors import FailureKind, ResponseFailure
from lockgate.fixture import ALL_TOOLS
from lockgate.gate import ResponseGate
from lockgate.gateway import DeclaredTool, Gateway, ProtocolTarget, Refusal, declared_tool
from lockgate.providers import provider as registry_entry
from lockgate.sse import ServerSentEvent, SSEDecoder

from .support import PROTOCOLS, request_for, run, sdk_raises

SCHEMA = {
    "type": "object",
    "properties": {"path": {"type": "string"}, "count": {"type": "integer"}},
    "required": ["path"],
}


def gateway_of(provider: str) -> Gateway:
    factory = registry_entry(provider).gateway
    assert factory is not None
    return factory()


def _declared(provider: str, name: str, schema: Any) -> dict[str, Any]:
    if provider == "gemini":  # one tool entry per declaration here; several is the usual
        declaration = {"name": name, "description": "d"}
        if schema is not None:
            declaration["parametersJsonSchema"] = schema
        return {"functionDeclarations": [declaration]}
    if provider == "responses":
        return {"type": "function", "name": name, "description": "d", "parameters": schema}
    if provider == "chat":
        function = {"name": name, "description": "d"}
        if schema is not None:
            function["parameters"] = schema
        return {"type": "function", "function": function}
    return {"name": name, "description": "d", "input_schema": schema}


def _provider_tool(provider: str) -> dict[str, Any]:
    if provider == "gemini":
        return {"googleSearch": {}}
    if provider == "responses":
        return {"type": "web_search"}
    if provider == "chat":
        return {"type": "custom", "custom": {"name": "grammar"}}
    return {"type": "web_search_20250305", "name": "web_search", "max_uses": 3}


def verdict(tools: tuple[ToolSpec, ...], name: str, arguments: str) -> str:
    """Whether the gate accepts one call to `name` with `arguments` under `tools`."""
    from lockgate.events import (
        FINISH_WITH_CALLS,
        ResponseCompleted,
        ResponseStarted,
        ToolCallStarted,
    )

    gate = ResponseGate(tools, lambda event: None)
    gate.accept(ResponseStarted(response_id="r"))
    gate.accept(ToolCallStarted("k", "call_1", name, arguments))
    try:
        gate.accept(ResponseCompleted(FINISH_WITH_CALLS))
    except ResponseFailure as failure:
        return str(failure.kind)
    return "accepted"


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_the_tools_are_the_requests_own_function_tools(provider: str) -> None:
    gateway = gateway_of(provider)
    request = {
        "stream": True,
        "tools": [
            _declared(provider, "read_file", SCHEMA),
            _provider_tool(provider),
            _declared(provider, "mcp.server.tool", None if provider == "chat" else {}),
            "not a tool",
            _declared(provider, "", SCHEMA),  # no name: skipped
        ],
    }
    tools = gateway.tools(request)
    assert [tool.name for tool in tools] == ["read_file", "mcp.server.tool"]  # any name
    assert all(isinstance(tool, DeclaredTool) for tool in tools)
    assert gateway.tools({"stream": True}) == ()
    assert gateway.tools({"tools": "nonsense"}) == ()
    # The codec's own request exposes exactly lockgate's tools, with their schemas.
    own = gateway.tools(request_for(provider), validate_schemas=True)
    assert [(t.name, dict(t.parameters)) for t in own] == [
        (t.name, dict(t.parameters)) for t in ALL_TOOLS
    ]


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_schemas_are_applied_only_when_asked(provider: str) -> None:
    gateway = gateway_of(provider)
    request = {"tools": [_declared(provider, "read_file", SCHEMA)]}
    permissive = gateway.tools(request)
    strict = gateway.tools(request, validate_schemas=True)
    assert verdict(permissive, "read_file", '{"count": "x"}') == "accepted"
    assert verdict(strict, "read_file", '{"count": "x"}') == "invalid_batch"
    assert verdict(strict, "read_file", '{"path": "a", "count": 2}') == "accepted"
    for tools in (permissive, strict):
        assert verdict(tools, "other", "{}") == "invalid_batch"
        assert verdict(tools, "read_file", "[1]") == "invalid_batch"
        assert verdict(tools, "read_file", '{"path": ') == "invalid_batch"
        # A tool with parameters takes no empty arguments; one without does.
        assert verdict(tools, "read_file", "") == "invalid_batch"


def test_a_schema_the_gate_cannot_use_falls_back_to_the_permissive_check() -> None:
    broken = {"type": "object", "properties": {"a": {"type": 12}}}
    tool = declared_tool("t", None, broken, validate_schemas=True)
    assert tool is not None
    assert verdict((tool,), "t", '{"a": "anything"}') == "accepted"
    assert verdict((tool,), "t", "") == "invalid_batch"  # it still has parameters
    no_parameters = declared_tool("t", "", None, validate_schemas=True)
    assert no_parameters is not None
    assert no_parameters.takes_no_arguments
    assert verdict((no_parameters,), "t", "") == "accepted"
    not_an_object = declared_tool("t", "", {"type": "array"}, validate_schemas=True)
    assert not_an_object is not None
    assert dict(not_an_object.parameters) == {"type": "object"}
    assert declared_tool(7, "", {}, validate_schemas=False) is None
    # Each says why, for the log (a tool without a schema has nothing to say).
    assert isinstance(tool, DeclaredTool)
    assert tool.schema_problem is not None
    assert tool.schema_problem.startswith("not a valid JSON Schema (")
    assert isinstance(not_an_object, DeclaredTool)
    assert not_an_object.schema_problem == "the schema does not describe an object"
    assert isinstance(no_parameters, DeclaredTool)
    assert no_parameters.schema_problem is None


def test_a_schema_is_checked_once_however_often_it_is_declared(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Checking a schema against the metaschema costs ~2 ms; clients send the same tools
    with every request. The answer is kept per schema, whatever the order of its keys,
    and a broken schema's problem is kept as well as a good schema's None."""
    checked: list[object] = []
    real = gateway_module._check_schema

    def counting(schema: Any) -> str | None:
        checked.append(schema)
        return real(schema)

    monkeypatch.setattr(gateway_module, "_check_schema", counting)
    monkeypatch.setattr(gateway_module, "_schema_problems", {})
    good = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    same = {"required": ["path"], "properties": {"path": {"type": "string"}}, "type": "object"}
    broken = {"type": "object", "properties": {"a": {"type": 12}}}
    answers = [gateway_module.schema_problem(s) for s in (good, same, broken, good, broken)]
    assert [answers[0], answers[1], answers[3]] == [None, None, None]
    assert answers[2] is not None
    assert answers[2] == answers[4]
    assert checked == [good, broken]
    # Another schema is another check; one too large to keep is checked every time.
    huge = {"type": "object", "description": "x" * (gateway_module._SCHEMA_KEY_CHARS + 1)}
    assert gateway_module.schema_problem(huge) is None
    assert gateway_module.schema_problem(huge) is None
    assert len(checked) == 4
    # The kept answers are bounded.
    for number in range(gateway_module._SCHEMA_PROBLEMS_KEPT + 10):
        gateway_module.schema_problem({"type": "object", "title": str(number)})
    assert len(gateway_module._schema_problems) == gateway_module._SCHEMA_PROBLEMS_KEPT


def test_a_kept_answer_depends_on_the_schema_alone(monkeypatch: pytest.MonkeyPatch) -> None:
    # A tuple is a JSON array in the key, and no array to jsonschema: checked as the key
    # reads back, the list and the tuple get one answer, whichever came first.
    monkeypatch.setattr(gateway_module, "_schema_problems", {})
    as_tuple = {"type": "object", "required": ("a",)}
    as_list = {"type": "object", "required": ["a"]}
    assert gateway_module.schema_problem(as_tuple) is None
    assert gateway_module.schema_problem(as_list) is None


def test_the_kept_answers_hold_across_threads(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(gateway_module, "_check_schema", lambda schema: None)  # contention
    monkeypatch.setattr(gateway_module, "_schema_problems", {})
    errors: list[BaseException] = []

    def judge(thread: int) -> None:
        try:
            for number in range(3_000):
                gateway_module.schema_problem({"type": "object", "title": f"{thread}-{number}"})
        except BaseException as exc:  # what a thread raises would be lost otherwise
            errors.append(exc)

    threads = [threading.Thread(target=judge, args=(thread,)) for thread in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert errors == []
    assert len(gateway_module._schema_problems) == gateway_module._SCHEMA_PROBLEMS_KEPT


BODY = ProtocolTarget()  # the body's `stream` decides


@pytest.mark.parametrize("provider", [p for p in PROTOCOLS if p != "gemini"])
def test_a_request_asks_for_a_stream_with_stream_true(provider: str) -> None:
    # Gemini's path asks, never its body (test_gemini_gateway.py).
    gateway = gateway_of(provider)
    assert gateway.wants_stream({"stream": True}, BODY)
    assert not gateway.wants_stream({"stream": False}, BODY)
    assert not gateway.wants_stream({}, BODY)
    assert not gateway.wants_stream({"stream": "true"}, BODY)


def _event(name: str | None, payload: dict[str, Any]) -> ServerSentEvent:
    return ServerSentEvent(name, json.dumps(payload).encode())


def test_responses_holds_from_every_output_item_but_messages_and_reasoning() -> None:
    gateway = gateway_of("responses")
    for named in (True, False):
        for kind, holds in [
            ("function_call", True),
            ("web_search_call", True),
            ("computer_call", True),
            ("mcp_approval_request", True),
            ("message", False),
            ("reasoning", False),
        ]:
            for event_type in ("response.output_item.added", "response.output_item.done"):
                payload = {"type": event_type, "item": {"type": kind}}
                event = _event(event_type if named else None, payload)
                assert gateway.begins_hold(event) is holds, (named, kind, event_type)
    text = {"type": "response.output_text.delta", "delta": "output_item function_call"}
    assert not gateway.begins_hold(_event("response.output_text.delta", text))
    assert not gateway.begins_hold(_event(None, text))


def test_chat_holds_from_the_finish_and_refuses_a_legacy_function_call() -> None:
    gateway = gateway_of("chat")

    def chunk(delta: dict[str, Any], finish: str | None = None) -> ServerSentEvent:
        choice = {"index": 0, "delta": delta, "finish_reason": finish}
        return _event(None, {"id": "c", "choices": [choice]})

    assert not gateway.begins_hold(chunk({"content": "hi"}))
    assert not gateway.begins_hold(chunk({"content": '"finish_reason": "stop"'}))
    assert gateway.begins_hold(chunk({}, "stop"))
    assert gateway.begins_hold(chunk({}, "tool_calls"))
    spaced = ServerSentEvent(None, b'{"choices":[{"finish_reason" : "length"}]}')
    assert gateway.begins_hold(spaced)
    # A key spelled with escapes is no way around the hold.
    escaped = ServerSentEvent(None, b'{"choices":[{"finish\\u005freason":"stop"}]}')
    assert gateway.begins_hold(escaped)
    assert gateway.is_finish(escaped)
    # The legacy functions API: refused, however it is spelled.
    legacy = chunk({"function_call": {"name": "f", "arguments": "{}"}})
    assert gateway.unreadable_action(legacy) is not None
    legacy_escaped = ServerSentEvent(
        None, b'{"choices":[{"delta":{"function\\u005fcall":{"name":"rm_rf"}}}]}'
    )
    assert gateway.unreadable_action(legacy_escaped) is not None
    whole = _event(None, {"choices": [{"message": {"function_call": {"name": "f"}}}]})
    assert gateway.unreadable_action(whole) is not None
    assert gateway.unreadable_action(chunk({"function_call": None})) is None
    assert gateway.unreadable_action(chunk({"content": "function_call"})) is None


def test_responses_holds_from_any_event_but_the_previews() -> None:
    gateway = gateway_of("responses")
    for name in (
        "response.function_call_arguments.done",
        "response.custom_tool_call_input.delta",
        "response.web_search_call.in_progress",
        "response.some_future_event",
        "response.completed",
    ):
        assert gateway.begins_hold(_event(name, {"type": name})), name
        assert gateway.begins_hold(_event(None, {"type": name})), name
    escaped = ServerSentEvent(
        None,
        b'{"type":"response.\\u006futput_item.done","item":{"type":"function_call"}}',
    )
    assert gateway.begins_hold(escaped)
    for name in ("response.created", "response.output_text.delta", "response.refusal.delta"):
        assert not gateway.begins_hold(_event(name, {"type": name})), name


def test_anthropic_holds_from_action_blocks_and_the_message_delta() -> None:
    gateway = gateway_of("anthropic")

    def start(kind: str) -> ServerSentEvent:
        payload = {"type": "content_block_start", "index": 0, "content_block": {"type": kind}}
        return _event("content_block_start", payload)

    for kind in ("tool_use", "server_tool_use", "mcp_tool_use", "web_search_tool_result"):
        assert gateway.begins_hold(start(kind))
    for kind in ("text", "thinking", "redacted_thinking"):
        assert not gateway.begins_hold(start(kind))
    assert gateway.begins_hold(_event("message_delta", {"type": "message_delta"}))
    assert not gateway.begins_hold(_event("ping", {"type": "ping"}))
    # Any event it does not know, and an unnamed frame, hold too.
    assert gateway.begins_hold(_event("some_future_event", {"type": "some_future_event"}))
    assert gateway.begins_hold(_event(None, {"type": "content_block_delta"}))
    assert gateway.is_keepalive(_event("ping", {"type": "ping"}))
    assert not gateway.is_keepalive(_event("message_stop", {"type": "message_stop"}))


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_the_keepalive_is_nothing_to_the_decoder(provider: str) -> None:
    gateway = gateway_of(provider)
    events = SSEDecoder().feed(gateway.keepalive())
    decoder = gateway.new_decoder()
    assert all(type(e).__name__ == "ResponseProgress" for ev in events for e in decoder.decode(ev))
    if provider == "anthropic":
        assert [gateway.is_keepalive(event) for event in events] == [True]
    else:
        assert events == []  # a comment; Gemini's, a blank line


@pytest.mark.parametrize("provider", PROTOCOLS)
@pytest.mark.parametrize("transient", [True, False])
def test_the_refusal_frame_is_the_protocols_stream_error(provider: str, transient: bool) -> None:
    gateway = gateway_of(provider)
    refusal = Refusal(
        "invalid_batch", "lockgate withheld 2 tool calls: \ud800 \x1b é", transient, 2
    )
    frame = gateway.refusal_frame(refusal, None)
    frame.decode("utf-8")  # a lone surrogate travels as its JSON escape
    events = SSEDecoder().feed(frame)
    if provider == "responses":  # `error`, then `response.failed` (what Codex reads)
        event, failed = events
        response = json.loads(failed.data)["response"]
        assert (failed.event, response["status"]) == ("response.failed", "failed")
        assert response["error"]["message"] == refusal.message
        assert "sequence_number" not in json.loads(failed.data)
    else:
        (event,) = events
    payload = json.loads(event.data)
    error = payload["error"]
    assert error["message"] == refusal.message
    if provider == "chat":
        assert event.event is None
        assert set(payload) == {"error"}
        assert error["type"] == ("server_error" if transient else "lockgate_refused")
    elif provider == "gemini":  # Google's error object; its code says transient or not
        assert event.event is None
        assert set(payload) == {"error"}
        assert (error["code"], error["status"]) == (
            (503, "UNAVAILABLE") if transient else (400, "FAILED_PRECONDITION")
        )
    elif provider == "responses":
        assert event.event == "error"
        assert payload["type"] == "error"
        assert "sequence_number" not in payload  # nothing was forwarded
        assert error["code"] == "lockgate_invalid_batch"
    else:
        assert event.event == "error"
        assert payload["type"] == "error"
        assert error["type"] == ("overloaded_error" if transient else "api_error")
    assert run(sdk_raises(provider, frame)) == []
    # lockgate's own decoder reads it as the provider's error, in any position.
    with pytest.raises(ResponseFailure) as caught:
        _judge_alone(gateway, event)
    assert caught.value.kind is FailureKind.PROVIDER_ERROR
    if provider != "anthropic":
        assert caught.value.transient is transient


def _judge_alone(gateway: Gateway, event: ServerSentEvent) -> None:
    gate = ResponseGate((), lambda e: None)
    for decoded in gateway.new_decoder().decode(event):
        gate.accept(decoded)


def test_the_responses_refusal_numbers_itself_after_the_last_event() -> None:
    gateway = gateway_of("responses")
    refusal = Refusal("stream_ended", "lockgate refused the response", True, 0)
    last = _event("response.output_text.delta", {"type": "x", "sequence_number": 41})
    payload = json.loads(SSEDecoder().feed(gateway.refusal_frame(refusal, last))[0].data)
    assert payload["sequence_number"] == 42
    unnumbered = _event(None, {"type": "x"})
    assert "sequence_number" not in json.loads(
        SSEDecoder().feed(gateway.refusal_frame(refusal, unnumbered))[0].data
    )
