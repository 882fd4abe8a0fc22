"""Fragmentation, for every protocol: any split of the bytes gives the reply's decision.

A generated reply rendered as the protocol streams it, split at any byte (any line ending,
keep-alive comments, a gateway's trailing `[DONE]`), is the same decision as the whole
stream, and exactly the reply's text, calls and reasoning (each reasoning item where it was
sent, its sealed part unchanged).
"""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings

from lockgate.conversation import CallPart, Message, NativeItem
from lockgate.scripted.reply import Call, Reply, Say, Think
from lockgate.scripted.script import Faults, Turn

from .strategies import (
    PROTOCOLS,
    REASONING_ITEMS,
    decide,
    frames_of,
    framings,
    replies,
    sent_arguments,
)

EXAMPLES = 200  # per protocol


def strings_in(value: Any) -> set[str]:
    """Every string anywhere in a JSON-like value."""
    if isinstance(value, str):
        return {value}
    if isinstance(value, dict):
        return set().union(*map(strings_in, value.values())) if value else set()
    if isinstance(value, list | tuple):
        return set().union(*map(strings_in, value)) if value else set()
    return set()


def reasoning_and_calls(message: Message) -> list[tuple[str, frozenset[str]]]:
    """The decision's reasoning items and calls in output order: ("call", {call id}) or
    ("reasoning", every string the item holds)."""
    found: list[tuple[str, frozenset[str]]] = []
    for part in message.output:
        if isinstance(part, CallPart):
            found.append(("call", frozenset({part.call_id})))
        elif isinstance(part, NativeItem) and part.kind == "reasoning":
            found.append(("reasoning", frozenset(strings_in(dict(part.item)))))
    return found


def sent_reasoning_and_calls(reply: Reply) -> list[tuple[str, frozenset[str]]]:
    """What the reply sent, in order: each call's id, each reasoning part's text and sealed
    part (which must come back unchanged, right where they were)."""
    return [
        ("call", frozenset({part.call_id}))
        if isinstance(part, Call)
        else ("reasoning", frozenset({part.text, part.opaque}))
        for part in reply.parts
        if isinstance(part, Call | Think)
    ]


NAMELESS = frozenset({"bedrock"})


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_any_fragmentation_gives_the_replys_own_decision(provider: str) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
    @given(replies(), framings(provider))
    def check(reply: Reply, faults: Faults) -> None:
        frames = tuple(frames_of(reply, provider))
        whole = decide(Turn(events=frames, faults=Faults(fragment_sizes=(1 << 20,))), provider)
        cut = decide(Turn(events=frames, faults=faults), provider)
        assert isinstance(whole, Message), whole
        if provider in NAMELESS and isinstance(cut, Message):
            # The protocol names no response: each decoding makes an id of its own.
            cut = dataclasses.replace(cut, response_id=whole.response_id)
        assert cut == whole  # the whole decision: text, calls, output items, usage
        assert whole.content == "".join(p.text for p in reply.parts if isinstance(p, Say))
        assert [(c.id, c.name, c.arguments_json) for c in whole.tool_calls] == [
            (c.call_id, c.name, sent_arguments(provider, c.argument_text)) for c in reply.calls
        ]
        if provider in REASONING_ITEMS:
            decided = reasoning_and_calls(whole)
            sent = sent_reasoning_and_calls(reply)
            assert [kind for kind, _ in decided] == [kind for kind, _ in sent]
            for (_, held), (_, parts) in zip(decided, sent, strict=True):
                assert parts <= held

    check()
