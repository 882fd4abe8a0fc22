"""Tool-call indexes in a Chat Completions stream (issue 27): shapes the common readers would
read as different calls are refused before anything is released."""

from __future__ import annotations

from typing import Any

import pytest

from lockgate.errors import FailureKind

from .streams import DONE, READ_JSON, calls, chunk, fragment, run


def test_calls_in_index_order_are_released_in_that_order() -> None:
    outcome = run(
        calls(fragment(0, "call_a", "discover", "")),
        calls(fragment(1, "call_b", "read", READ_JSON[:5])),
        calls(fragment(0, arguments="{}")),
        calls(fragment(1, arguments=READ_JSON[5:])),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert [call[0] for call in outcome.calls()] == ["call_a", "call_b"]
    parts = outcome.decision.message.output
    assert [getattr(p, "call_id", None) for p in parts] == ["call_a", "call_b"]


# Issue 27: what the gate releases, every common reader must read as the same calls. The
# official SDKs key a call by `index` as a list position (openai-python inserts at it and
# concatenates every string field, openai-node assigns `tool_calls[index]` and replaces id
# and name), the AI SDK by index and id, litellm by index (absent: 0). Each shape below was
# run through all of them (docs/wire/chat.md §5): they read it as different calls, so the
# gate refuses it before anything is released.

AMOUNT = ['{"path": "1', '00"}']


@pytest.mark.parametrize("index", [None, "absent"])
def test_a_fragment_without_index_beside_indexed_ones_is_refused(index: object) -> None:
    # The gate joined it to the call; openai-node and the AI SDK dropped it and read
    # `{"path": "1` (the AI SDK executed it).
    tail: dict[str, Any] = {"function": {"arguments": AMOUNT[1]}}
    if index is None:
        tail["index"] = None
    outcome = run(
        calls(fragment(0, "call_1", "read", AMOUNT[0])), calls(tail), chunk({}, "tool_calls"), DONE
    )
    assert outcome.failure.kind is FailureKind.LIFECYCLE
    assert "beside indexed fragments" in outcome.failure.message
    # And an indexed fragment after index-less calls.
    outcome = run(
        calls({"id": "c1", "function": {"name": "read", "arguments": READ_JSON}}),
        calls(fragment(0, arguments="")),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.failure.kind is FailureKind.LIFECYCLE


def test_a_new_id_or_name_at_an_index_in_use_is_refused() -> None:
    # Ollama 0.20 and LiteLLM's ollama_chat sent every call at index 0: openai-python read
    # one call `c1c2` `readread` with `{"path": "README.md"}{"path": "calculator.py"}`,
    # openai-node and litellm one call `c2` with those arguments, the AI SDK two calls.
    outcome = run(
        calls(fragment(0, "call_a", "read", READ_JSON)),
        calls(fragment(0, "call_b", "read", '{"path": "calculator.py"}')),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.failure.kind is FailureKind.LIFECYCLE
    assert "a new call id 'call_b' at index 0" in outcome.failure.message
    # Both in one array, too.
    outcome = run(
        calls(fragment(0, "call_a", "read", READ_JSON), fragment(0, "call_b", "discover", "{}")),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.failure.kind is FailureKind.LIFECYCLE
    # Without ids, a new name: openai-python read `discovertest`, the AI SDK two calls.
    outcome = run(
        calls(fragment(0, None, "discover", "{}")),
        calls(fragment(0, None, "test", "")),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.failure.kind is FailureKind.LIFECYCLE
    assert "a new name 'test' at index 0" in outcome.failure.message


def test_index_less_calls_in_two_chunks_are_refused() -> None:
    # litellm merged them into one call `c2` with both arguments concatenated.
    outcome = run(
        calls({"id": "c1", "function": {"name": "read", "arguments": READ_JSON}}),
        calls({"id": "c2", "function": {"name": "read", "arguments": READ_JSON}}),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.failure.kind is FailureKind.LIFECYCLE
    assert "in more than one chunk" in outcome.failure.message
    # A continuation without index, also in one array: litellm read `{"path":` only.
    outcome = run(
        calls(
            {"id": "c1", "function": {"name": "read", "arguments": READ_JSON[:9]}},
            {"function": {"arguments": READ_JSON[9:]}},
        ),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.failure.kind is FailureKind.LIFECYCLE
    assert "without a name" in outcome.failure.message


@pytest.mark.parametrize(
    ("indexes", "problem"),
    [
        ((0, 2), "tool-call index 2 where at most 1 was due"),  # a gap
        ((1, 0), "tool-call index 1 where 0 was due"),  # reversed
        ((1,), "tool-call index 1 where 0 was due"),  # alone at 1
        ((-1,), "tool-call index -1 where 0 was due"),
        ((2**32,), "tool-call index 4294967296 where 0 was due"),
        ((3, 7), "tool-call index 3 where 0 was due"),  # sglang's tool positions
    ],
)
def test_indexes_out_of_order_are_refused(indexes: tuple[int, ...], problem: str) -> None:
    # openai-python raised IndexError (it inserts at the index and then looks it up);
    # openai-node read a sparse list (a hole it cannot finalize) or, at -1 and 2**32, no
    # call at all, while the AI SDK and litellm read the calls.
    names = ["read", "discover"]
    opened = [calls(fragment(i, f"call_{n}", names[n], "")) for n, i in enumerate(indexes)]
    rest = [
        calls(fragment(i, arguments=READ_JSON if n == 0 else "{}")) for n, i in enumerate(indexes)
    ]
    outcome = run(*opened, *rest, chunk({}, "tool_calls"), DONE)
    assert outcome.failure.kind is FailureKind.LIFECYCLE
    assert problem in outcome.failure.message


@pytest.mark.parametrize("index", [0.0, 1.5, "0", True])
def test_an_index_that_is_not_an_integer_is_malformed(index: object) -> None:
    outcome = run(
        calls({"index": index, "id": "c", "function": {"name": "discover", "arguments": "{}"}}),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.failure.kind is FailureKind.MALFORMED_EVENT
