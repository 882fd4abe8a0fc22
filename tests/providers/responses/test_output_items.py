"""Every Responses output item a client can read is the item the gate judged (issue 22, H2).

A Responses stream states each item up to three times: `response.output_item.added` (with
its deltas), `response.output_item.done` (Codex starts each tool there) and the terminal
snapshot (`response.completed`'s `output`, which lockgate releases); a call's arguments a
fourth time in `response.function_call_arguments.done`. The gate compares the snapshot's
calls with the streamed ones; these tests hold the rest to them: a `.done` item or
`arguments.done` that differs, an item outside the snapshot, a snapshot item that never
streamed. Each is refused by `lockgate run`'s client and by the gating engine alike (the
same decoder and gate), with no tool event reaching the engine's client.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Callable
from typing import Any

import pytest

from lockgate.errors import FailureKind
from lockgate.providers.responses.decoder import MAX_OUTPUT_ITEMS
from lockgate.providers.responses.render import ResponseBuilder, reasoning_item
from lockgate.proxy import Accepted, Refused
from lockgate.scripted.scenario import EDIT_FIX
from lockgate.scripted.script import Turn

from ...proxy.support import (
    ends_with_refusal,
    gate_turn,
    oracle_turn,
    request_for,
    run,
    tool_events,
)

Events = list[dict[str, Any]]
PASSWD = {"path": "/etc/passwd", "old": "root", "new": "toor"}


def _stream() -> ResponseBuilder:
    """Text, then one edit call: the stream every mutation below starts from."""
    builder = ResponseBuilder("resp_items").created().text("msg_1", "Fixing add.")
    return builder.call("fc_1", "call_1", "edit", EDIT_FIX)


def _completed(builder: ResponseBuilder) -> Events:
    return [copy.deepcopy(event) for event in builder.completed().events]


def _where(events: Events, kind: str, item_type: str | None = None) -> int:
    for place, event in enumerate(events):
        if event.get("type") == kind and (
            item_type is None or event.get("item", {}).get("type") == item_type
        ):
            return place
    raise AssertionError(f"no {kind} {item_type or ''}")


def _done_call(events: Events) -> dict[str, Any]:
    item: dict[str, Any] = events[_where(events, "response.output_item.done", "function_call")][
        "item"
    ]
    return item


def _terminal(events: Events) -> dict[str, Any]:
    response: dict[str, Any] = events[-1]["response"]
    return response


def _verdicts(events: Events) -> tuple[tuple[bool, str], tuple[bool, str]]:
    """(accepted, kind) of `lockgate run`'s client, and of the engine, on these events."""
    turn = Turn(events=tuple(events))
    oracle = run(oracle_turn("responses", turn))
    gated = run(gate_turn("responses", turn, request_for("responses")))
    if isinstance(gated.outcome, Refused):
        assert tool_events(gated.output) == [], "a refused stream released a tool event"
        assert ends_with_refusal(gated.output, "responses")
        engine = (False, gated.outcome.refusal.kind)
    else:
        assert isinstance(gated.outcome, Accepted)
        engine = (True, "accepted")
    return (oracle.accepted, oracle.kind), engine


# --- the mutations: each returns the events of one stream ------------------------------------


def done_with_other_arguments() -> Events:
    events = _completed(_stream())
    _done_call(events)["arguments"] = json.dumps(PASSWD)
    return events


def done_with_other_call_id() -> Events:
    events = _completed(_stream())
    _done_call(events)["call_id"] = "call_other"
    return events


def done_with_other_name() -> Events:
    events = _completed(_stream())
    _done_call(events)["name"] = "test"
    return events


def done_with_other_item_id() -> Events:
    events = _completed(_stream())
    _done_call(events)["id"] = "fc_other"
    return events


def done_of_another_type() -> Events:
    events = _completed(_stream())
    done = events[_where(events, "response.output_item.done", "function_call")]
    done["item"] = {
        "type": "local_shell_call",
        "id": "fc_1",
        "call_id": "call_1",
        "action": {"type": "exec", "command": ["rm", "-rf", "/"], "env": {}},
        "status": "completed",
    }
    return events


def _local_shell(place: int) -> dict[str, Any]:
    item = {
        "type": "local_shell_call",
        "id": "lsh_1",
        "call_id": "call_shell",
        "action": {"type": "exec", "command": ["cat", "/etc/passwd"], "env": {}},
        "status": "completed",
    }
    return {"type": "response.output_item.done", "output_index": place, "item": item}


def extra_done_never_added() -> Events:
    events = _completed(_stream())
    events.insert(len(events) - 1, _local_shell(2))
    return events


def extra_item_outside_the_snapshot() -> Events:
    events = _completed(_stream())
    done = _local_shell(2)
    added = {**done, "type": "response.output_item.added"}
    events[len(events) - 1 : len(events) - 1] = [added, done]
    return events


def extra_done_at_the_same_place() -> Events:
    events = _completed(_stream())
    place = _where(events, "response.output_item.done", "function_call")
    events.insert(place + 1, copy.deepcopy(events[place]))
    return events


def snapshot_item_never_streamed() -> Events:
    events = _completed(_stream())
    unseen = {"type": "output_text", "text": "unseen", "annotations": []}
    message = {"type": "message", "id": "msg_9", "role": "assistant", "content": [unseen]}
    _terminal(events)["output"].append(message)
    return events


def snapshot_item_of_another_type() -> Events:
    events = _completed(_stream())
    message = _terminal(events)["output"][0]
    _terminal(events)["output"][0] = {**message, "type": "web_search_call"}
    return events


def snapshot_item_with_another_id() -> Events:
    events = _completed(_stream())
    _terminal(events)["output"][0]["id"] = "msg_other"
    return events


def snapshot_reordered() -> Events:
    events = _completed(_stream())
    output = _terminal(events)["output"]
    output.reverse()
    return events


def arguments_done_with_other_arguments() -> Events:
    events = _completed(_stream())
    events[_where(events, "response.function_call_arguments.done")]["arguments"] = json.dumps(
        PASSWD
    )
    return events


def arguments_done_with_other_name() -> Events:
    events = _completed(_stream())
    events[_where(events, "response.function_call_arguments.done")]["name"] = "test"
    return events


def arguments_done_for_an_unknown_item() -> Events:
    events = _completed(_stream())
    events[_where(events, "response.function_call_arguments.done")]["item_id"] = "fc_9"
    return events


def arguments_delta_at_another_place() -> Events:
    events = _completed(_stream())
    events[_where(events, "response.function_call_arguments.delta")]["output_index"] = 0
    return events


def output_in_the_start() -> Events:
    events = _completed(_stream())
    events[0]["response"]["output"] = [_done_call(events)]
    return events


# `call_mismatch` where a function call is stated differently (or stated in one place and
# not another), as the gate names a snapshot call that differs from the streamed one;
# `lifecycle` for the order and identity of every other item. A `local_shell_call` is a call
# only in front of a client that may run it (the engine): there it is `call_mismatch`
# (`ENGINE_KINDS`); lockgate's own loop, which never runs one, calls it `lifecycle`.
REFUSED: dict[str, tuple[Callable[[], Events], FailureKind]] = {
    "done-other-arguments": (done_with_other_arguments, FailureKind.CALL_MISMATCH),
    "done-other-call-id": (done_with_other_call_id, FailureKind.CALL_MISMATCH),
    "done-other-name": (done_with_other_name, FailureKind.CALL_MISMATCH),
    "done-other-item-id": (done_with_other_item_id, FailureKind.CALL_MISMATCH),
    "done-other-type": (done_of_another_type, FailureKind.CALL_MISMATCH),
    "extra-done-never-added": (extra_done_never_added, FailureKind.LIFECYCLE),
    "extra-item-outside-snapshot": (extra_item_outside_the_snapshot, FailureKind.LIFECYCLE),
    "done-twice": (extra_done_at_the_same_place, FailureKind.LIFECYCLE),
    "snapshot-item-never-streamed": (snapshot_item_never_streamed, FailureKind.LIFECYCLE),
    "snapshot-item-other-type": (snapshot_item_of_another_type, FailureKind.LIFECYCLE),
    "snapshot-item-other-id": (snapshot_item_with_another_id, FailureKind.LIFECYCLE),
    "snapshot-reordered": (snapshot_reordered, FailureKind.CALL_MISMATCH),
    "arguments-done-other-arguments": (
        arguments_done_with_other_arguments,
        FailureKind.CALL_MISMATCH,
    ),
    "arguments-done-other-name": (arguments_done_with_other_name, FailureKind.CALL_MISMATCH),
    "arguments-done-unknown-item": (arguments_done_for_an_unknown_item, FailureKind.LIFECYCLE),
    "arguments-delta-other-place": (arguments_delta_at_another_place, FailureKind.LIFECYCLE),
    "output-in-the-start": (output_in_the_start, FailureKind.LIFECYCLE),
}


def test_the_unmutated_stream_is_accepted() -> None:
    assert _verdicts(_completed(_stream())) == ((True, "accepted"), (True, "accepted"))


ENGINE_KINDS = {
    "extra-done-never-added": FailureKind.CALL_MISMATCH,
    "extra-item-outside-snapshot": FailureKind.CALL_MISMATCH,
}


@pytest.mark.parametrize("name", sorted(REFUSED))
def test_an_item_a_client_reads_that_the_gate_did_not_judge_is_refused(name: str) -> None:
    mutate, kind = REFUSED[name]
    engine = ENGINE_KINDS.get(name, kind)
    assert _verdicts(mutate()) == ((False, str(kind)), (False, str(engine)))


# --- what real traffic does, which stays accepted ---------------------------------------------


def test_a_gateway_that_mints_a_new_reasoning_id_for_the_snapshot_is_accepted() -> None:
    # OpenRouter (`responses-pydantic-ai-20`): the snapshot's reasoning item has another
    # `rs_tmp_` id than the streamed one, and the `.done` events come out of order. A
    # reasoning item asks for nothing and is replayed from the snapshot: its type and place
    # must agree, its id may not.
    builder = ResponseBuilder("resp_openrouter").created()
    builder.reasoning(reasoning_item("rs_tmp_streamed", "Read the file first."))
    builder.call("fc_1", "call_1", "edit", EDIT_FIX)
    events = _completed(builder)
    _terminal(events)["output"][0]["id"] = "rs_tmp_minted"
    done = events.pop(_where(events, "response.output_item.done", "reasoning"))
    events.insert(len(events) - 1, done)  # the reasoning item is done after the call
    assert _verdicts(events) == ((True, "accepted"), (True, "accepted"))


def test_reencrypted_reasoning_in_the_snapshot_is_accepted() -> None:
    # OpenAI re-encrypts reasoning for the snapshot: `encrypted_content` differs between
    # the `.done` item and the snapshot (12 recordings). Only type and id are compared.
    builder = ResponseBuilder("resp_reencrypted").created()
    builder.reasoning(reasoning_item("rs_1", "Read the file first.", "gAAAA-done"))
    builder.call("fc_1", "call_1", "edit", EDIT_FIX)
    events = _completed(builder)
    _terminal(events)["output"][0]["encrypted_content"] = "gAAAA-snapshot"
    assert _verdicts(events) == ((True, "accepted"), (True, "accepted"))


def test_events_without_output_index_are_placed_in_order() -> None:
    events = _completed(_stream())
    for event in events:
        event.pop("output_index", None)
    assert _verdicts(events) == ((True, "accepted"), (True, "accepted"))


def test_output_items_are_bounded() -> None:
    builder = ResponseBuilder("resp_many").created()
    for number in range(MAX_OUTPUT_ITEMS + 1):
        item = {"type": "message", "id": f"m{number}", "role": "assistant", "content": []}
        builder.raw({"type": "response.output_item.added", "output_index": number, "item": item})
    events = _completed(builder)
    expected = (False, str(FailureKind.BOUND_EXCEEDED))
    assert _verdicts(events) == (expected, expected)
