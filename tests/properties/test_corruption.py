"""Corruption, for every protocol: a tool runs only from a complete, valid response.

Under drops, duplicates, reorderings, truncations, mutations and resets of a generated
reply's frames, a tool runs only when the protocol's own terminal success was delivered;
every call that runs is valid against its schema with a unique id; a stream merely cut short
never releases a batch other than the one the model sent; and (Responses) what runs is
exactly the terminal snapshot's batch, whose arguments are the ones streamed.
"""

from __future__ import annotations

import asyncio
from collections.abc import Mapping, Sequence
from typing import Any

import pytest
from hypothesis import HealthCheck, event, given, settings
from hypothesis import strategies as st

from lockgate.errors import ResponseFailure
from lockgate.fixture import ALL_TOOLS
from lockgate.loop import run_agent
from lockgate.scripted.renderer import Frame
from lockgate.scripted.reply import Reply
from lockgate.scripted.script import Faults, Turn

from .strategies import (
    PROTOCOLS,
    SCHEMAS,
    CountingExecutor,
    client_for,
    fragment_sizes,
    frames_of,
    mutate,
    replies,
    sent_arguments,
)

EXAMPLES = 500  # per protocol
KINDS = ["drop", "duplicate", "swap", "truncate", "mutate", "reset", "none"]
REPLACEMENTS = ["", "x", "call_0", "fc_0", "0", "shell", "{", "{}", "resp_other", "failed", "stop"]


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
    if provider == "bedrock":  # messageStop with a stop reason that releases calls or text
        return any(
            f.get("type") == "messageStop" and f.get("stopReason") in ("tool_use", "end_turn")
            for f in frames
        )
    if provider == "gemini":  # a candidate's STOP (the end of the body is the end)
        return any(
            isinstance(candidate, dict) and candidate.get("finishReason") == "STOP"
            for f in frames
            for candidate in (f.get("candidates") or [])
        )
    # chat: a finish_reason that releases calls or text.
    return any(
        isinstance(choice, dict) and choice.get("finish_reason") in ("stop", "tool_calls")
        for f in frames
        for choice in (f.get("choices") or [])
    )


def responses_terminal_batch(frames: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """The function calls of the first `response.completed` snapshot delivered."""
    terminal = next(f for f in frames if f.get("type") == "response.completed")
    return [item for item in terminal["response"]["output"] if item.get("type") == "function_call"]


def streamed_arguments(frames: Sequence[Mapping[str, Any]], item_id: str) -> str:
    return "".join(
        str(f.get("delta", ""))
        for f in frames
        if f.get("type") == "response.function_call_arguments.delta" and f.get("item_id") == item_id
    )


@st.composite
def corrupted(draw: st.DrawFn, provider: str) -> tuple[Reply, str, list[Frame], Turn]:
    """(the reply, the corruption, the frames delivered before any reset, the turn)."""
    reply = draw(replies())
    frames = frames_of(reply, provider)
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
        frames[index] = mutate(frames[index], draw(st.integers(0, 50)), replacement)
    elif kind == "reset":
        faults = Faults(fragment_sizes=faults.fragment_sizes, reset_after=index + 1)
    delivered = frames[: faults.reset_after] if faults.reset_after else frames
    return reply, kind, delivered, Turn(events=tuple(frames), faults=faults)


@pytest.mark.parametrize("provider", PROTOCOLS)
def test_tools_run_only_from_a_complete_valid_response(provider: str) -> None:
    @settings(max_examples=EXAMPLES, deadline=None, suppress_health_check=list(HealthCheck))
    @given(corrupted(provider))
    def check(case: tuple[Reply, str, list[Frame], Turn]) -> None:
        reply, kind, delivered, turn = case
        client, transport = client_for(turn, provider)
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
        # Every stream is closed; one request only, since the opening succeeded.
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
                (c.call_id, c.name, sent_arguments(provider, c.argument_text)) for c in reply.calls
            ]
        if provider == "responses":
            # The whole batch that ran is exactly the terminal snapshot's, as streamed.
            batch = responses_terminal_batch(delivered)
            assert [(c.id, c.name, c.arguments_json) for c in executor.executed] == [
                (item["call_id"], item["name"], item["arguments"]) for item in batch
            ]
            for item in batch:
                assert streamed_arguments(delivered, item["id"]) == item["arguments"]

    check()
