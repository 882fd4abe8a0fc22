"""Property-based conformance: valid conversations, arbitrary byte fragmentation and random
corruptions, checked against the invariants the gate promises.

Example counts are fixed per property (see EXAMPLES); together they are the number of
generated cases CI checks on every run.
"""

from __future__ import annotations

import asyncio
import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from lockgate.conversation import CallPart, Message, NativeItem, ToolCall
from lockgate.errors import ResponseFailure
from lockgate.fixture import ALL_TOOLS, FIXTURE_FILES
from lockgate.loop import run_agent
from lockgate.providers.responses.render import ResponseBuilder
from lockgate.scripted.script import Faults, Turn
from lockgate.tools import ToolError

from .helpers import replay_client

EXAMPLES = {"fragmentation": 300, "corruption": 800, "opening": 400}
SCHEMAS = {tool.name: Draft202012Validator(dict(tool.parameters)) for tool in ALL_TOOLS}
HISTORY = [Message("user", "go")]

texts = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=40)
paths = st.sampled_from(sorted(FIXTURE_FILES))


@st.composite
def call_arguments(draw: st.DrawFn) -> tuple[str, dict[str, str]]:
    name = draw(st.sampled_from(["discover", "read", "edit", "test"]))
    if name in {"discover", "test"}:
        return name, {}
    if name == "read":
        return name, {"path": draw(paths)}
    return name, {"path": draw(paths), "old": draw(texts), "new": draw(texts)}


@dataclass(frozen=True)
class Conversation:
    events: tuple[Mapping[str, Any], ...]
    calls: tuple[tuple[str, str, str], ...]  # (call id, name, argument text)
    text: str
    reasoning: tuple[tuple[str, dict[str, Any]], ...] = ()  # (call id it precedes, item)


@st.composite
def conversations(draw: st.DrawFn) -> Conversation:
    builder = ResponseBuilder(f"resp_{draw(st.integers(0, 10**6))}").created()
    text = ""
    calls = []
    reasoning: list[tuple[str, dict[str, Any]]] = []
    for index in range(draw(st.integers(0, 3))):
        if draw(st.booleans()):
            piece = draw(texts)
            builder.text(f"msg_{index}", piece, draw(st.integers(1, 6)))
            text += piece
        name, arguments = draw(call_arguments())
        encoded = json.dumps(arguments, ensure_ascii=draw(st.booleans()))
        call_id = f"call_{index}"
        if draw(st.booleans()):  # reasoning items precede calls on reasoning models
            summary = [{"type": "summary_text", "text": draw(texts)}]
            item = {
                "id": f"rs_{index}",
                "type": "reasoning",
                "summary": summary,
                "encrypted_content": "e",
            }
            builder.reasoning(item, draw(st.integers(1, 4)))
            reasoning.append((call_id, item))
        builder.call(f"fc_{index}", call_id, name, encoded, draw(st.integers(1, 8)))
        calls.append((call_id, name, encoded))
    if not calls or draw(st.booleans()):
        piece = draw(texts)
        builder.text("msg_last", piece, draw(st.integers(1, 6)))
        text += piece
    builder.completed()
    return Conversation(tuple(builder.events), tuple(calls), text, tuple(reasoning))


fragment_sizes = st.lists(st.integers(1, 97), min_size=1, max_size=12).map(tuple)
framings = st.builds(
    Faults,
    fragment_sizes=fragment_sizes,
    line_ending=st.sampled_from(["lf", "crlf", "cr"]),
    keepalive_every=st.none() | st.integers(1, 5),
    done_sentinel=st.booleans(),
)


def decide(turn: Turn) -> Message | ResponseFailure:
    client, transport, _ = replay_client([turn])

    async def complete() -> Message:
        return await client.complete(HISTORY, ALL_TOOLS)

    try:
        return asyncio.run(complete())
    except ResponseFailure as failure:
        return failure
    finally:
        assert all(stream.closed for stream in transport.streams)


@settings(
    max_examples=EXAMPLES["fragmentation"],
    deadline=None,
    suppress_health_check=list(HealthCheck),
)
@given(conversations(), framings)
def test_valid_stream_decodes_identically_however_fragmented(
    conversation: Conversation, faults: Faults
) -> None:
    reference = decide(Turn(events=conversation.events, faults=Faults(fragment_sizes=(1 << 20,))))
    fragmented = decide(Turn(events=conversation.events, faults=faults))
    assert isinstance(reference, Message), reference
    assert fragmented == reference
    assert reference.content == conversation.text
    assert [(c.id, c.name, c.arguments_json) for c in reference.tool_calls] == list(
        conversation.calls
    )
    assert reasoning_before_calls(reference) == list(conversation.reasoning)


def reasoning_before_calls(message: Message) -> list[tuple[str, dict[str, Any]]]:
    """(id of the call that follows, item) for each reasoning item of the output."""
    found: list[tuple[str, dict[str, Any]]] = []
    waiting: list[dict[str, Any]] = []
    for part in message.output:
        if isinstance(part, NativeItem) and part.kind == "reasoning":
            waiting.append(dict(part.item))
        elif isinstance(part, CallPart):
            found.extend((part.call_id, item) for item in waiting)
            waiting = []
    return found


# --- corruptions ---------------------------------------------------------------------------


def _mutate(event: Mapping[str, Any], field_choice: int, replacement: str) -> dict[str, Any]:
    mutated: dict[str, Any] = json.loads(json.dumps(event))
    targets: list[tuple[dict[str, Any], str]] = []

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in {
                    "id",
                    "call_id",
                    "name",
                    "arguments",
                    "delta",
                    "item_id",
                    "type",
                    "status",
                } and isinstance(value, str):
                    targets.append((node, key))
                collect(value)
        elif isinstance(node, list):
            for item in node:
                collect(item)

    collect(mutated)
    if targets:
        node, key = targets[field_choice % len(targets)]
        node[key] = replacement
    return mutated


@st.composite
def corrupted(draw: st.DrawFn) -> tuple[Conversation, Turn]:
    conversation = draw(conversations())
    events = list(conversation.events)
    faults = Faults(fragment_sizes=draw(fragment_sizes))
    kind = draw(
        st.sampled_from(["drop", "duplicate", "swap", "truncate", "mutate", "reset", "none"])
    )
    index = draw(st.integers(0, len(events) - 1))
    if kind == "drop":
        del events[index]
    elif kind == "duplicate":
        events.insert(index, events[index])
    elif kind == "swap":
        other = draw(st.integers(0, len(events) - 1))
        events[index], events[other] = events[other], events[index]
    elif kind == "truncate":
        events = events[:index]
    elif kind == "mutate":
        replacement = draw(
            st.sampled_from(["", "x", "call_0", "fc_0", "shell", "{", "{}", "resp_other", "failed"])
        )
        events[index] = _mutate(events[index], draw(st.integers(0, 50)), replacement)
    elif kind == "reset":
        faults = Faults(fragment_sizes=faults.fragment_sizes, reset_after=index + 1)
    delivered = events[: faults.reset_after] if faults.reset_after else events
    return Conversation(tuple(delivered), conversation.calls, conversation.text), Turn(
        events=tuple(events), faults=faults
    )


class CountingExecutor:
    def __init__(self) -> None:
        self.executed: list[ToolCall] = []

    async def execute(self, call: ToolCall) -> str:
        self.executed.append(call)
        raise ToolError("not really run")


def streamed_arguments(events: Sequence[Mapping[str, Any]], item_id: str) -> str:
    return "".join(
        str(e.get("delta", ""))
        for e in events
        if e.get("type") == "response.function_call_arguments.delta" and e.get("item_id") == item_id
    )


@settings(
    max_examples=EXAMPLES["corruption"], deadline=None, suppress_health_check=list(HealthCheck)
)
@given(corrupted())
def test_tools_run_only_from_a_complete_validated_response(case: tuple[Conversation, Turn]) -> None:
    delivered, turn = case
    client, transport, _ = replay_client([turn])
    executor = CountingExecutor()

    async def one_turn() -> None:
        await run_agent("go", client, ALL_TOOLS, executor, instructions="s", max_turns=1)

    try:
        asyncio.run(one_turn())
    except ResponseFailure as failure:
        event(f"rejected: {failure.kind}")
        assert executor.executed == []
    else:
        event("executed" if executor.executed else "accepted without calls")
    # Every stream is closed; one request only, since the opening succeeded.
    assert all(stream.closed for stream in transport.streams)
    assert len(transport.requests) == 1
    if not executor.executed:
        return
    # Something ran: its response's terminal success event arrived ...
    terminal = [e for e in delivered.events if e.get("type") == "response.completed"]
    assert terminal, "a tool ran without response.completed"
    response = terminal[0]["response"]
    assert response["status"] == "completed"
    output_calls = [item for item in response["output"] if item.get("type") == "function_call"]
    # ... and the whole batch that ran is exactly the terminal batch, validated.
    assert [(c.id, c.name, c.arguments_json) for c in executor.executed] == [
        (item["call_id"], item["name"], item["arguments"]) for item in output_calls
    ]
    assert len({c.id for c in executor.executed}) == len(executor.executed)
    for call, item in zip(executor.executed, output_calls, strict=True):
        assert call.id
        assert not list(SCHEMAS[call.name].iter_errors(json.loads(call.arguments_json)))
        assert streamed_arguments(delivered.events, item["id"]) == item["arguments"]


# --- opening ---------------------------------------------------------------------------------

OPENING_STEPS: dict[str, Turn | None] = {
    "ok": None,
    "drop": Turn(connection_error=True),
    "429-quota": Turn(status=429, body={"error": {"code": "insufficient_quota", "message": "q"}}),
    "503-no-retry": Turn(status=503, headers={"x-should-retry": "false"}),
    "400-retry": Turn(status=400, headers={"x-should-retry": "true"}),
    "503-after-1s": Turn(status=503, headers={"retry-after": "1"}),
    "429-after-3600s": Turn(status=429, headers={"retry-after": "3600"}),
    **{
        str(status): Turn(status=status, body={"error": {"message": str(status)}})
        for status in (400, 401, 403, 404, 408, 409, 422, 429, 500, 502, 503, 529)
    },
}
RETRYABLE_STEPS = {
    "drop",
    "400-retry",
    "503-after-1s",
    "408",
    "409",
    "429",
    "500",
    "502",
    "503",
    "529",
}

openings = st.lists(st.sampled_from(sorted(OPENING_STEPS)), min_size=1, max_size=5)


@settings(max_examples=EXAMPLES["opening"], deadline=None, suppress_health_check=list(HealthCheck))
@given(openings)
def test_only_opening_is_retried_and_at_most_three_times(plan: list[str]) -> None:
    plan = [*plan, "401"]  # the provider's last word, should the client still be asking
    answer = ResponseBuilder("resp_ok").created().text("m", "fine").completed().turn()
    turns = [OPENING_STEPS[step] or answer for step in plan]
    client, transport, recorder = replay_client(turns)

    async def complete() -> Message:
        return await client.complete(HISTORY, ALL_TOOLS)

    try:
        asyncio.run(complete())
        succeeded = True
    except ResponseFailure:
        succeeded = False
    attempts = len(transport.requests)
    assert attempts <= 3
    # The expected attempts and waits follow from the plan alone.
    expected = 0
    for step in plan[:3]:
        expected += 1
        if step not in RETRYABLE_STEPS:
            break
    assert attempts == expected
    assert succeeded == (plan[expected - 1] == "ok")
    assert len(recorder.sleeps) == expected - 1
    for step, slept in zip(plan, recorder.sleeps, strict=False):
        if step == "503-after-1s":
            assert slept == 1.0  # the server's instruction wins over backoff
        else:
            assert 0 < slept < 1.0  # jittered backoff 0.25·2ⁿ
    assert len(transport.streams) == (1 if succeeded else 0)
