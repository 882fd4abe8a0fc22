"""What the property tests share: generated neutral replies (rendered by any protocol), byte
framings, a client on the in-process replay, an executor that only counts, frame mutations."""

from __future__ import annotations

import asyncio
import json
import random
from typing import Any

from hypothesis import strategies as st
from jsonschema import Draft202012Validator

from lockgate.client import StreamingModelClient
from lockgate.conversation import Message, ToolCall
from lockgate.errors import ResponseFailure
from lockgate.fixture import ALL_TOOLS, FIXTURE_FILES
from lockgate.lab.replay import ReplayTransport
from lockgate.providers import PROVIDERS
from lockgate.providers.base import CodecOptions
from lockgate.providers.decoding import compact_json
from lockgate.scripted.renderer import Frame
from lockgate.scripted.reply import Call, Reply, Say, Think
from lockgate.scripted.script import Faults, Turn
from lockgate.tools import ToolError

PROTOCOLS = sorted(PROVIDERS)
SCHEMAS = {tool.name: Draft202012Validator(dict(tool.parameters)) for tool in ALL_TOOLS}
# Protocols whose reasoning is one output item per reasoning part, kept where it was sent
# (Chat's reasoning is one field of the message).
REASONING_ITEMS = {"responses", "anthropic"}
# Protocols whose gateways may send a trailing `data: [DONE]` that must be tolerated.
DONE_SENTINEL = {"responses"}

texts = st.text(st.characters(codec="utf-8", exclude_categories=["Cs"]), min_size=1, max_size=30)
paths = st.sampled_from(sorted(FIXTURE_FILES))
fragment_sizes = st.lists(st.integers(1, 97), min_size=1, max_size=12).map(tuple)


BINARY = frozenset({"bedrock"})  # bodies that are not SSE


def framings(provider: str) -> st.SearchStrategy[Faults]:
    """Any fragmentation, line ending and keep-alive comments (and, where the protocol's
    gateways send one, a trailing `[DONE]`). A binary body (Bedrock's event stream) has
    no lines and no comments: only its fragmentation varies."""
    if provider in BINARY:
        return st.builds(Faults, fragment_sizes=fragment_sizes)
    return st.builds(
        Faults,
        fragment_sizes=fragment_sizes,
        line_ending=st.sampled_from(["lf", "crlf", "cr"]),
        keepalive_every=st.none() | st.integers(1, 5),
        done_sentinel=st.booleans() if provider in DONE_SENTINEL else st.just(False),
    )


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
    """Answer text, reasoning and up to three calls, in any order (never a reply with neither
    text nor a call). Each reasoning part's sealed part is its own."""
    parts: list[Say | Think | Call] = []
    sent = 0
    for _ in range(draw(st.integers(1, 7))):
        kind = draw(st.sampled_from(["say", "think", "call"]))
        if kind == "call" and sent < 3:
            parts.append(draw(calls(sent)))
            sent += 1
        elif kind == "think":
            parts.append(Think(draw(texts), f"sealed-{len(parts)}", draw(st.integers(1, 4))))
        else:
            parts.append(Say(draw(texts), draw(st.integers(1, 6))))
    if not any(isinstance(part, Say | Call) for part in parts):
        parts.append(Say(draw(texts), draw(st.integers(1, 6))))
    return Reply(f"resp_{draw(st.integers(0, 10**6))}", tuple(parts))


def frames_of(reply: Reply, provider: str) -> list[Frame]:
    return list(PROVIDERS[provider].render().events(reply))


def client_for(turn: Turn, provider: str) -> tuple[StreamingModelClient, ReplayTransport]:
    transport = ReplayTransport([turn], provider)
    codec = PROVIDERS[provider].make_codec(CodecOptions("property-model"))
    return StreamingModelClient(codec, transport, rng=random.Random(0)), transport


def decide(turn: Turn, provider: str) -> Message | ResponseFailure:
    """The decision one response becomes (or its failure); its stream is always closed."""
    client, transport = client_for(turn, provider)

    async def complete() -> Message:
        return await client.complete([Message("user", "go")], ALL_TOOLS)

    try:
        return asyncio.run(complete())
    except ResponseFailure as failure:
        return failure
    finally:
        assert all(stream.closed for stream in transport.streams)


class CountingExecutor:
    """Records every call it is asked to run, and runs none."""

    def __init__(self) -> None:
        self.executed: list[ToolCall] = []

    async def execute(self, call: ToolCall) -> str:
        self.executed.append(call)
        raise ToolError("not really run")


MUTABLE = {"id", "call_id", "name", "arguments", "delta", "item_id", "type", "status",
           "partial_json", "content", "finish_reason", "stop_reason", "text"}  # fmt: skip


def mutate(frame: Frame, choice: int, replacement: str) -> Frame:
    """`frame` with one of its mutable string fields (the `choice`th, cyclically, at any
    depth) replaced."""
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


def sent_arguments(provider: str, text: str) -> str:
    """The argument bytes the protocol carries for a call the reply makes: as written,
    except on Gemini, which sends arguments as a JSON object (lockgate keeps its compact
    JSON)."""
    return compact_json(json.loads(text)) if provider == "gemini" else text
