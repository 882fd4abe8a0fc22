"""Tool-call fragments in a Chat Completions stream: ids, names and arguments assembled into
calls, and the same decision however the arguments are split."""

from __future__ import annotations

import hashlib
import json
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from lockgate.conversation import Usage
from lockgate.errors import FailureKind
from lockgate.events import ResponseCompleted, ToolCallIdentified
from lockgate.providers.decoding import synthesized_call_id

from .streams import (
    DONE,
    EDIT,
    EDIT_JSON,
    READ_JSON,
    Chunk,
    calls,
    chunk,
    decode_all,
    fragment,
    run,
    text,
    usage_chunk,
)

# --- tool-call fragments --------------------------------------------------------------------------


def test_repeated_ids_and_names_are_set_not_concatenated() -> None:
    # DeepSeek, sglang: id and name on every fragment.
    pieces = [EDIT_JSON[:10], EDIT_JSON[10:30], EDIT_JSON[30:]]
    outcome = run(
        *(calls(fragment(0, "call_1", "edit", piece)) for piece in pieces),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.calls() == [("call_1", "edit", EDIT)]


def test_empty_and_null_ids_and_names_on_continuations_mean_absent() -> None:
    # Writer: id/type/name null; vLLM: id ""; LM Studio: name "".
    outcome = run(
        calls(
            {
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": "edit", "arguments": None},
            }
        ),
        calls(
            {
                "index": 0,
                "id": None,
                "type": None,
                "function": {"name": None, "arguments": EDIT_JSON[:20]},
            }
        ),
        calls({"index": 0, "id": "", "function": {"name": "", "arguments": EDIT_JSON[20:]}}),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.calls() == [("call_1", "edit", EDIT)]


def test_fragments_without_index_mistral_two_calls_in_one_array() -> None:
    outcome = run(
        calls(
            {"id": "QAw0JBXkB", "function": {"name": "read", "arguments": READ_JSON}},
            {"id": "HlyhI5zAI", "function": {"name": "discover", "arguments": "{}"}},
            finish="tool_calls",
        ),
        DONE,
    )
    assert outcome.calls() == [
        ("QAw0JBXkB", "read", {"path": "README.md"}),
        ("HlyhI5zAI", "discover", {}),
    ]


def test_gemini_call_without_index_and_with_empty_id_gets_a_synthesized_id() -> None:
    gemini = {
        "choices": [
            {
                "delta": {
                    "role": "assistant",
                    "tool_calls": [
                        {
                            "function": {"arguments": READ_JSON, "name": "read"},
                            "id": "",
                            "type": "function",
                        }
                    ],
                },
                "finish_reason": "stop",
                "index": 0,
            }
        ],
        "model": "gemini-2.0-flash",
        "object": "chat.completion.chunk",
    }
    outcome = run(gemini, DONE)
    ((call_id, name, arguments),) = outcome.calls()
    assert (name, arguments) == ("read", {"path": "README.md"})
    response_id = outcome.decision.message.response_id
    assert response_id is not None
    assert call_id == "call_" + hashlib.sha256(f"{response_id}:0".encode()).hexdigest()[:24]


def test_name_may_arrive_after_arguments() -> None:
    events = decode_all(
        calls(fragment(0, "call_1", "", EDIT_JSON[:12])),
        calls(fragment(0, None, "edit", EDIT_JSON[12:])),
    )
    assert ToolCallIdentified("0", "", "edit") in events
    outcome = run(
        calls(fragment(0, "call_1", "", EDIT_JSON[:12])),
        calls(fragment(0, None, "edit", EDIT_JSON[12:])),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.calls() == [("call_1", "edit", EDIT)]


def test_id_may_arrive_later() -> None:
    events = decode_all(
        calls(fragment(0, None, "read", READ_JSON[:4])),
        calls(fragment(0, "call_late", None, READ_JSON[4:])),
    )
    assert ToolCallIdentified("0", "call_late", "") in events
    outcome = run(
        calls(fragment(0, None, "read", READ_JSON[:4])),
        calls(fragment(0, "call_late", None, READ_JSON[4:])),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.calls() == [("call_late", "read", {"path": "README.md"})]


def test_same_tool_twice_at_index_zero_without_ids_merges_and_fails_closed() -> None:
    outcome = run(
        calls(fragment(0, None, "read", READ_JSON)),
        calls(fragment(0, None, "read", READ_JSON)),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.failure.kind is FailureKind.INVALID_BATCH


def test_arguments_as_a_json_object_are_serialized_once() -> None:
    # llama.cpp, MiniMax.
    outcome = run(
        calls(
            fragment(
                0,
                "call_1",
                "edit",
                {"path": "calculator.py", "old": "return a - b", "new": "return a + b"},
            )
        ),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.calls() == [("call_1", "edit", EDIT)]
    assert outcome.decision.message.tool_calls[0].arguments_json == json.dumps(
        EDIT, separators=(",", ":")
    )


@pytest.mark.parametrize("arguments", [None, ""])
@pytest.mark.parametrize("tool", ["discover", "test"])
def test_null_or_empty_arguments_for_a_tool_without_parameters(
    arguments: str | None, tool: str
) -> None:
    entry = {
        "index": 0,
        "id": "call_1",
        "type": "function",
        "function": {"name": tool, "arguments": arguments},
    }
    outcome = run(
        calls(entry),
        calls({"index": 0, "function": {"arguments": arguments}}),
        chunk({}, "tool_calls"),
        DONE,
    )
    assert outcome.calls() == [("call_1", tool, {})]


def test_null_arguments_for_a_tool_with_parameters_fail() -> None:
    outcome = run(calls(fragment(0, "call_1", "read", None)), chunk({}, "tool_calls"), DONE)
    assert outcome.failure.kind is FailureKind.INVALID_BATCH


def test_no_id_at_all_gets_a_stable_synthesized_id() -> None:
    stream: list[Chunk] = [
        calls(fragment(0, None, "read", READ_JSON), chunk_id="chatcmpl-x"),
        calls(fragment(1, None, "discover", "{}"), chunk_id="chatcmpl-x"),
        chunk({}, "tool_calls"),
        DONE,
    ]
    first, second = run(*stream), run(*stream)
    ids = [call_id for call_id, _, _ in first.calls()]
    assert ids == [synthesized_call_id("chatcmpl-x", "0"), synthesized_call_id("chatcmpl-x", "1")]
    assert ids == [call_id for call_id, _, _ in second.calls()]  # same response id and key
    assert ids[0] == "call_" + hashlib.sha256(b"chatcmpl-x:0").hexdigest()[:24]
    assert len(set(ids)) == 2
    assert synthesized_call_id("chatcmpl-y", "0") != ids[0]
    events = decode_all(*stream)
    assert isinstance(events[-2], ToolCallIdentified)
    assert isinstance(events[-1], ResponseCompleted)


def test_cut_off_arguments_with_finish_tool_calls_reject_the_batch() -> None:
    # vLLM: a call cut by the token limit, finished as tool_calls.
    outcome = run(
        calls(fragment(0, "call_1", "edit", EDIT_JSON[:30])), chunk({}, "tool_calls"), DONE
    )
    assert outcome.failure.kind is FailureKind.INVALID_BATCH


def test_text_and_a_call_in_one_response_keep_their_order() -> None:
    outcome = run(
        text("Reading."),
        calls(fragment(0, "call_1", "read", READ_JSON)),
        chunk({"content": "", "tool_calls": [fragment(0, arguments="")]}, "tool_calls"),
        DONE,
    )
    assert outcome.decision.message.content == "Reading."
    assert outcome.calls() == [("call_1", "read", {"path": "README.md"})]


# --- property: however the arguments are split, the same decision ---------------------------------

_ARGUMENT_VALUES = st.text(alphabet=st.characters(codec="utf-8"), max_size=12)


@st.composite
def responses(draw: st.DrawFn) -> tuple[str, list[tuple[str, str, str]], list[Chunk]]:
    """Text plus N read/edit calls, each call's argument text split at random points, the
    fragments of different calls interleaved, ids on the first fragment only."""
    answer = draw(st.text(alphabet="abc xyz", max_size=20))
    count = draw(st.integers(min_value=0, max_value=3))
    planned: list[tuple[str, str, str]] = []
    pieces: list[list[dict[str, Any]]] = []
    for index in range(count):
        name = draw(st.sampled_from(["read", "edit"]))
        keys = ["path"] if name == "read" else ["path", "old", "new"]
        arguments = json.dumps({key: draw(_ARGUMENT_VALUES) for key in keys}, ensure_ascii=False)
        cuts = sorted(draw(st.sets(st.integers(0, len(arguments)), max_size=6)))
        parts = [arguments[a:b] for a, b in zip([0, *cuts], [*cuts, len(arguments)], strict=True)]
        call_id = f"call_{index}"
        planned.append((call_id, name, arguments))
        first = fragment(index, call_id, name, parts[0])
        pieces.append([first, *(fragment(index, arguments=part) for part in parts[1:])])
    stream: list[Chunk] = [chunk({"role": "assistant", "content": ""})]
    if answer:
        split = draw(st.integers(0, len(answer)))
        stream += [text(answer[:split]), text(answer[split:])]
    # Interleave calls whose first fragments come in index order (indexes are keys).
    queues = [list(p) for p in pieces]
    opened = 0
    while any(queues):
        candidates = [i for i, q in enumerate(queues) if q and i <= opened]
        chosen = draw(st.sampled_from(candidates))
        if chosen == opened:
            opened += 1
        stream.append(calls(queues[chosen].pop(0)))
    stream += [chunk({}, "tool_calls" if count else "stop"), usage_chunk(), DONE]
    return answer, planned, stream


@settings(max_examples=150, deadline=None, suppress_health_check=list(HealthCheck))
@given(responses())
def test_any_split_of_the_arguments_gives_the_same_decision(
    case: tuple[str, list[tuple[str, str, str]], list[Chunk]],
) -> None:
    answer, planned, stream = case
    decision = run(*stream).decision
    assert decision.message.content == answer
    assert [(c.id, c.name, c.arguments_json) for c in decision.message.tool_calls] == planned
    assert [dict(c.arguments) for c in decision.message.tool_calls] == [
        json.loads(arguments) for _, _, arguments in planned
    ]
    assert decision.usage == Usage(10, 0, 5, 0, 15)
    assert decision.finish_reason == ("tool_calls" if planned else "stop")
