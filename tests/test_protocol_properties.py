"""Property tests per protocol: generated neutral replies, rendered by every registered
protocol, then fragmented and corrupted.

- Fragmentation at any byte (and any line ending, keep-alive comments) gives the same
  decision, and it is exactly the reply's text and calls.
- Under drops, duplicates, reorderings, truncations, mutations and resets, a tool runs only
  from a complete response (the protocol's own terminal success was delivered), every call
  that runs is valid against its schema with a unique id, and a stream that was merely cut
  short can never release a batch other than the one the model sent.
"""

from __future__ import annotations

import asyncio
import json
import random
from collections.abc import Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from lockgate.client import StreamingModelClient
from lockgate.conversation import Message, ToolCall
from lockgate.errors import ResponseFailure
from lockgate.fixture import ALL_TOOLS, FIXTURE_FILES
from lockgate.lab.replay import ReplayTransport
from lockgate.loop import run_agent
from lockgate.providers import PROVIDERS
from lockgate.providers.base import CodecOptions
from lockgate.scripted.renderer import Frame
from lockgate.scripted.reply import Call, Reply, Say, Think
from lockgate.scripted.script import Faults, Turn
from lockgate.tools import ToolError

FRAGMENTATION_EXAMPLES = 150
CORRUPTION_EXAMPLES = 300
SCHEMAS = {tool.name: Draft202012Validator(dict(tool.parameters)) for tool in ALL_TOOLS}
PROTOCOLS = sorted(PROVIDERS)

texts = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=30)
paths = st.sampled_from(sorted(FIXTURE_FILES))


@st.composite
def calls(draw: st.DrawFn, number: int) -> Call:
    name = draw(st.sampled_from(["discover", "read", "edit", "test"]))
    arguments: dict[str, str] = {}
    if name == "read":
        arguments = {"path": draw(paths)}
    elif name == "edit":
        arguments = {"path": draw(paths), "old": draw(texts), "new": draw(texts)}
    encoded = json.dumps(arguments, ensure_ascii=draw(st.booleans()))
    return Call(f"call_{number}", name, encoded, draw(st.integers(1, 8)))


@st.composite
def replies(draw: st.DrawFn) -> Reply:
    parts: list[Say | Think | Call] = []
    if draw(st.booleans()):
        parts.append(Think(draw(texts), pieces=draw(st.integers(1, 4))))
    if draw(st.booleans()):
        parts.append(Say(draw(texts), draw(st.integers(1, 6))))
    parts.extend(draw(calls(number)) for number in range(draw(st.integers(0, 3))))
    if not any(isinstance(p, Call) for p in parts) and not any(isinstance(p, Say) for p in parts):
        parts.append(Say(draw(texts), draw(st.integers(1, 6))))
    return Reply(f"resp_{draw(st.integers(0, 10**6))}", tuple(parts))


fragment_sizes = st.lists(st.integers(1, 97), min_size=1, max_size=12).map(tuple)
framings = st.builds(
    Faults,
    fragment_sizes=fragment_sizes,
    line_ending=st.sampled_from(["lf", "crlf", "cr"]),
    keepalive_every=st.none() | st.integers(1, 5),
)


def _client(turn: Turn, provider: str) -> tuple[StreamingModelClient, ReplayTransport]:
    transport = ReplayTransport([turn], provider)
    codec = PROVIDERS[provider].make_codec(CodecOptions("property-model"))
    return StreamingModelClient(codec, transport, rng=random.Random(0)), transport


def decide(turn: Turn, provider: str) -> Message | ResponseFailure:
    client, transport = _client(turn, provider)

    async def complete() -> Message:
        return await client.complete([Message("user", "go")], ALL_TOOLS)

    try:
        return asyncio.run(complete())
    except ResponseFailure as failure:
        return failure
    finally:
        assert all(stream.closed for stream in transport.streams)


def _frames(reply: Reply, provider: str) -> list[Frame]:
    return list(PROVIDERS[provider].render().events(reply))


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_any_fragmentation_gives_the_replys_own_decision(provider: str) -> None:
    @settings(
        max_examples=FRAGMENTATION_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck)
    )
    @given(replies(), framings)
    def check(reply: Reply, faults: Faults) -> None:
        frames = tuple(_frames(reply, provider))
        whole = decide(Turn(events=frames, faults=Faults(fragment_sizes=(1 << 20,))), provider)
        cut = decide(Turn(events=frames, faults=faults), provider)
        assert isinstance(whole, Message), whole
        assert isinstance(cut, Message), cut
        assert (cut.content, cut.tool_calls) == (whole.content, whole.tool_calls)
        assert whole.content == "".join(p.text for p in reply.parts if isinstance(p, Say))
        assert [(c.id, c.name, c.arguments_json) for c in whole.tool_calls] == [
            (c.call_id, c.name, c.argument_text) for c in reply.calls
        ]

    check()


# --- corruptions ----------------------------------------------------------------------------

MUTABLE = {"id", "call_id", "name", "arguments", "delta", "item_id", "type", "status",
           "partial_json", "content", "finish_reason", "stop_reason", "text"}  # fmt: skip


def _mutate(frame: Frame, choice: int, replacement: str) -> Frame:
    mutated: dict[str, Any] = json.loads(json.dumps(frame))
    targets: list[tuple[dict[str, Any], str]] = []

    def collect(node: Any) -> None:
        if isinstance(node, dict):
            for key, value in node.items():
                if key in MUTABLE and isinstance(value, str):
                    targets.append((node, key))
                collect(value)
        elif isinstance(node, list):
            for item in node:
                collect(item)

    collect(mutated)
    if targets:
        node, key = targets[choice % len(targets)]
        node[key] = replacement
    return mutated


def completed(provider: str, frames: Sequence[Frame]) -> bool:
    """The protocol's own terminal success is among the delivered frames (an oracle written
    from the protocol's documentation, independently of the decoders)."""
    if provider == "responses":
        return any(
            f.get("type") == "response.completed"
            and isinstance(f.get("response"), dict)
            and f["response"].get("status") == "completed"
            for f in frames
        )
    if provider == "anthropic":
        return any(f.get("type") == "message_stop" for f in frames) and any(
            f.get("type") == "message_delta" for f in frames
        )
    # chat: a finish_reason that releases calls or text.
    return any(
        isinstance(choice, dict) and choice.get("finish_reason") in ("stop", "tool_calls")
        for f in frames
        for choice in (f.get("choices") or [])
    )


class CountingExecutor:
    def __init__(self) -> None:
        self.executed: list[ToolCall] = []

    async def execute(self, call: ToolCall) -> str:
        self.executed.append(call)
        raise ToolError("not really run")


KINDS = ["drop", "duplicate", "swap", "truncate", "mutate", "reset", "none"]
REPLACEMENTS = ["", "x", "call_0", "0", "shell", "{", "{}", "resp_other", "failed", "stop"]


@st.composite
def corrupted(draw: st.DrawFn, provider: str) -> tuple[Reply, str, list[Frame], Turn]:
    reply = draw(replies())
    frames = _frames(reply, provider)
    faults = Faults(fragment_sizes=draw(fragment_sizes))
    kind = draw(st.sampled_from(KINDS))
    index = draw(st.integers(0, len(frames) - 1))
    if kind == "drop":
        del frames[index]
    elif kind == "duplicate":
        frames.insert(index, frames[index])
    elif kind == "swap":
        other = draw(st.integers(0, len(frames) - 1))
        frames[index], frames[other] = frames[other], frames[index]
    elif kind == "truncate":
        frames = frames[:index]
    elif kind == "mutate" and "raw" not in frames[index]:
        replacement = draw(st.sampled_from(REPLACEMENTS))
        frames[index] = _mutate(frames[index], draw(st.integers(0, 50)), replacement)
    elif kind == "reset":
        faults = Faults(fragment_sizes=faults.fragment_sizes, reset_after=index + 1)
    delivered = frames[: faults.reset_after] if faults.reset_after else frames
    return reply, kind, delivered, Turn(events=tuple(frames), faults=faults)


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_tools_run_only_from_a_complete_valid_response(provider: str) -> None:
    @settings(
        max_examples=CORRUPTION_EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck)
    )
    @given(corrupted(provider))
    def check(case: tuple[Reply, str, list[Frame], Turn]) -> None:
        reply, kind, delivered, turn = case
        client, transport = _client(turn, provider)
        executor = CountingExecutor()

        async def one_turn() -> None:
            await run_agent("go", client, ALL_TOOLS, executor, instructions="s", max_turns=1)

        try:
            asyncio.run(one_turn())
        except ResponseFailure as failure:
            event(f"{provider} {kind}: rejected ({failure.kind})")
            assert executor.executed == []
        else:
            event(f"{provider} {kind}: " + ("executed" if executor.executed else "no calls"))
        assert all(stream.closed for stream in transport.streams)
        assert len(transport.requests) == 1
        if not executor.executed:
            return
        assert completed(provider, delivered), "a tool ran without the terminal success"
        ids = [call.id for call in executor.executed]
        assert all(ids)
        assert len(set(ids)) == len(ids)
        for call in executor.executed:
            assert not list(SCHEMAS[call.name].iter_errors(dict(call.arguments)))
        if kind in ("truncate", "reset", "none"):
            # A stream cut short cannot release another batch than the model sent.
            assert [(c.id, c.name, c.arguments_json) for c in executor.executed] == [
                (c.call_id, c.name, c.argument_text) for c in reply.calls
            ]

    check()
