"""Issue 27 through the proxy's engine: whatever the gate releases, every common reader
(openai-python, openai-node, anthropic-python, @anthropic-ai/sdk, the AI SDK, litellm) reads
as the same calls with the same arguments. The call shapes below were each read differently
by two of those readers (docs/wire/chat.md §5, anthropic.md, responses.md), so the engine
withholds them: the client receives no call, only the protocol's refusal. The same bytes
through `lockgate run`'s own client (the oracle) fail the same way. The shapes every reader
reads alike (Mistral's index-less whole calls in one array, a `tool_use` that starts with
`input: {}`) still pass."""

from __future__ import annotations

import json
from typing import Any

import pytest

from lockgate.proxy import Accepted, Refused

from .support import (
    Chunks,
    ends_with_refusal,
    gate_stream,
    oracle_chunks,
    request_for,
    run,
    tool_events,
)

READ = '{"path": "README.md"}'


def _refused(provider: str, body: list[bytes], kind: str) -> None:
    gated = run(gate_stream(provider, request_for(provider), Chunks(body)))
    assert isinstance(gated.outcome, Refused), gated.outcome
    assert gated.outcome.refusal.kind == kind
    assert tool_events(gated.output) == []  # no call reached the client
    assert ends_with_refusal(gated.output, provider)
    verdict = run(oracle_chunks(provider, body))
    assert (verdict.accepted, verdict.kind) == (False, kind)


def _released(provider: str, body: list[bytes], calls: int) -> None:
    gated = run(gate_stream(provider, request_for(provider), Chunks(body)))
    assert isinstance(gated.outcome, Accepted), gated.outcome
    assert len(gated.outcome.decision.message.tool_calls) == calls
    verdict = run(oracle_chunks(provider, body))
    assert verdict.accepted


# --- Chat Completions ------------------------------------------------------------------------


def _chat(*fragments: list[dict[str, Any]], finish: str = "tool_calls") -> list[bytes]:
    """One chunk per list of tool-call fragments, then the finish and [DONE]."""
    frames = [{"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {"role": "assistant"}}]}]
    for entries in fragments:
        delta = {"tool_calls": entries}
        frames.append({"id": "chatcmpl-1", "choices": [{"index": 0, "delta": delta}]})
    frames.append(
        {"id": "chatcmpl-1", "choices": [{"index": 0, "delta": {}, "finish_reason": finish}]}
    )
    body = [f"data: {json.dumps(frame)}\n\n".encode() for frame in frames]
    return [*body, b"data: [DONE]\n\n"]


def _call(index: object, call_id: str | None, name: str | None, arguments: str) -> dict[str, Any]:
    entry: dict[str, Any] = {} if index == "absent" else {"index": index}
    if call_id is not None:
        entry.update(id=call_id, type="function")
    function: dict[str, Any] = {"arguments": arguments}
    if name is not None:
        function["name"] = name
    entry["function"] = function
    return entry


@pytest.mark.parametrize("index", [None, "absent"])
def test_chat_an_index_less_fragment_beside_indexed_ones_is_withheld(index: object) -> None:
    # openai-node and the AI SDK drop the fragment: they read `{"path": "READ`.
    body = _chat([_call(0, "call_1", "read", READ[:14])], [_call(index, None, None, READ[14:])])
    _refused("chat", body, "lifecycle")


def test_chat_a_new_id_at_an_index_in_use_is_withheld() -> None:
    # openai-python, openai-node and litellm read one call with both arguments run together.
    body = _chat([_call(0, "call_a", "read", READ)], [_call(0, "call_b", "discover", "{}")])
    _refused("chat", body, "lifecycle")


def test_chat_index_less_calls_in_two_chunks_are_withheld() -> None:
    # litellm reads one call with both arguments run together.
    body = _chat(
        [_call("absent", "call_a", "read", READ)], [_call("absent", "call_b", "discover", "{}")]
    )
    _refused("chat", body, "lifecycle")


@pytest.mark.parametrize("indexes", [(0, 2), (1, 0), (1,), (-1,), (2**32,)])
def test_chat_indexes_the_sdks_cannot_read_are_withheld(indexes: tuple[int, ...]) -> None:
    body = _chat(*([_call(i, f"call_{n}", "discover", "{}")] for n, i in enumerate(indexes)))
    _refused("chat", body, "lifecycle")


def test_chat_mistral_index_less_whole_calls_in_one_array_still_pass() -> None:
    body = _chat(
        [_call("absent", "QAw0JBXkB", "read", READ), _call("absent", "HlyhI5zAI", "discover", "{}")]
    )
    _released("chat", body, 2)
