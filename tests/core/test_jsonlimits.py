"""JSON limits (`jsonlimits.py`): `parse_event` agrees with the stdlib; deep nesting fails."""

from __future__ import annotations

import json

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.errors import FailureKind
from lockgate.fixture import CALCULATOR
from lockgate.jsonlimits import MAX_ARGUMENT_DEPTH, MAX_EVENT_DEPTH, parse_event, parse_json
from lockgate.providers.responses.render import ResponseBuilder
from lockgate.scripted.script import Turn

from ..helpers import (
    CLI,
    KEY,
    ascii_frames,
    assert_closing_lines,
    call_turn,
    failed_as,
    final_record,
    function_outputs,
    raw_event,
    requests_of,
    serve,
    text_turn,
)


def reference_parse(data: bytes) -> tuple[str, str]:
    """The standard library's answer (the behaviour before jiter): value repr or error."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return ("error", "")
    try:
        return ("value", repr(parse_json(text, 64)))
    except ValueError:
        return ("error", "")


def our_parse(data: bytes) -> tuple[str, str]:
    try:
        return ("value", repr(parse_event(data)))
    except ValueError:
        return ("error", "")


JSON_VALUES = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(), inner, max_size=4),
    max_leaves=20,
)
JSON_BYTES = st.sampled_from(list(b'{}[]",:0123456789.eE+-truefalsnNaI \t\n\r\\u\x00\xa0\xff\xc3'))


@settings(max_examples=600, deadline=None)
@given(
    st.one_of(
        JSON_VALUES.map(lambda value: json.dumps(value).encode()),
        JSON_VALUES.map(
            lambda value: json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
        ),
        st.lists(JSON_BYTES, max_size=40).map(bytes),
        st.binary(max_size=40),
    )
)
def test_parse_event_gives_the_standard_librarys_answer(data: bytes) -> None:
    assert our_parse(data) == reference_parse(data)


@pytest.mark.parametrize(
    "data",
    [
        b'"\\ud800"',  # a lone surrogate escape: jiter refuses, the standard library accepts
        b"[" * 65 + b"]" * 65,  # one level past the bound
        b"[" * 64 + b"]" * 64,
        b"[" * 300 + b"]" * 300,  # past jiter's own recursion limit
        b'{"a": 1}  \n',
        b'\n {"a": 1}',
        b"NaN",
        b"1" * 5000,
        b'{"a":"\xed\xa0\x80"}',
        b'{"a":1,"b":2,"a":3}',  # a duplicate key: the last wins, in first-seen order
    ],
)
def test_parse_event_edge_cases_match_the_standard_library(data: bytes) -> None:
    assert our_parse(data) == reference_parse(data)


# --- deep nesting, end to end --------------------------------------------------------------


def deep_event_turn(levels: int) -> Turn:
    nested = "[" * levels + "]" * levels
    data = f'{{"type":"response.output_text.delta","item_id":"m","delta":"x","n":{nested}}}'
    created = ascii_frames(ResponseBuilder("resp_deep").created())
    return Turn(events=(*created, raw_event(data)))


@pytest.mark.parametrize("json_lines", [False, True], ids=["human", "json"])
@pytest.mark.parametrize("levels", [100, 5_000, 100_000])
def test_a_deeply_nested_event_is_malformed(cli: CLI, levels: int, json_lines: bool) -> None:
    with serve([deep_event_turn(levels)]) as server:
        result = cli("run", "--base-url", server.base_url, *(["--json"] * json_lines), key=KEY)
    if json_lines:
        assert result.code == 1
        final = final_record(result.out)
        assert (final["executed_tools"], final["source"]) == (0, CALCULATOR)
        assert "Recursion" not in result.output
        stopped = final["stopped"]
    else:
        stopped = failed_as(result, FailureKind.MALFORMED_EVENT).stopped
    # Past the interpreter's recursion limit the standard library says "too deeply".
    deeper = f"JSON nested deeper than {MAX_EVENT_DEPTH} levels"
    said = {f"provider_failure (malformed_event: event data is not valid JSON ({why}))"
            for why in (deeper, "JSON nested too deeply")}  # fmt: skip
    assert stopped in said
    if levels <= 100:
        assert stopped.endswith(f"({deeper}))")


def deep_arguments(levels: int) -> str:
    return (
        '{"path": "calculator.py", "old": '
        + "[" * levels
        + '"return a - b"'
        + "]" * levels
        + ', "new": "return a + b"}'
    )


def test_deeply_nested_arguments_are_an_invalid_batch(cli: CLI) -> None:
    with serve([call_turn("edit", deep_arguments(500))]) as server:
        result = cli("run", "--base-url", server.base_url, "--allow-execution", key=KEY)
    ending = failed_as(result, FailureKind.INVALID_BATCH)
    assert ending.stopped == (
        "provider_failure (invalid_batch: batch rejected, nothing executed: edit (call_1): "
        f"arguments are not valid JSON (JSON nested deeper than {MAX_ARGUMENT_DEPTH} levels))"
    )


def test_deeply_nested_arguments_are_recoverable(cli: CLI) -> None:
    turns = [call_turn("edit", deep_arguments(500)), text_turn("Gave up.")]
    with serve(turns) as server:
        result = cli(
            "run", "--base-url", server.base_url, "--allow-execution", "--recover", key=KEY
        )
        requests = requests_of(server)
    assert result.code == 0, result.output
    ending = assert_closing_lines(result)
    assert (ending.stopped, ending.executed_tools) == ("model_finished", 0)
    assert len(requests) == 2
    [observation] = function_outputs(requests[1])
    assert observation.startswith("error: call rejected, not executed:")
    assert "nested deeper than" in observation
