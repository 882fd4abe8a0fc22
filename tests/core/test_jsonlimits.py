"""JSON limits (`jsonlimits.py`): `parse_event` and `parse_arguments` give the standard
library's value for JSON every common reader reads the same, and refuse the rest (what two
readers read differently: the table in the module docstring); deep nesting fails."""

from __future__ import annotations

import json
import math

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from lockgate.errors import FailureKind
from lockgate.fixture import CALCULATOR
from lockgate.jsonlimits import (
    MAX_ARGUMENT_DEPTH,
    MAX_EVENT_DEPTH,
    parse_arguments,
    parse_event,
    parse_json,
    too_deep,
)
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

SAFE = 2**53 - 1


def _unique(pairs: list[tuple[str, object]]) -> dict[str, object]:
    value = dict(pairs)
    if len(value) != len(pairs):
        raise ValueError("duplicate key")
    return value


def _readers_disagree(value: object, arguments: bool) -> bool:
    """An independent statement of what the gate refuses in a value the standard library
    read (duplicate keys are refused while reading)."""
    stack = [value]
    while stack:
        node = stack.pop()
        if isinstance(node, dict):
            constructor = node.get("constructor")
            if "__proto__" in node or (
                isinstance(constructor, dict) and "prototype" in constructor
            ):
                return True
            stack.extend(node)  # keys: a lone surrogate in a key counts too
            stack.extend(node.values())
        elif isinstance(node, list):
            stack.extend(node)
        elif isinstance(node, str):
            if any(0xD800 <= ord(c) <= 0xDFFF for c in node):
                return True
        elif isinstance(node, float):
            if not math.isfinite(node):
                return True
        elif isinstance(node, int) and not isinstance(node, bool):
            if arguments and abs(node) > SAFE:
                return True
            if not arguments and abs(node) >= 2**1024:  # a double reader's infinity
                return True
    return False


def reference_parse(data: bytes, *, arguments: bool = False) -> tuple[str, str]:
    """The standard library's answer, refused where readers disagree: value repr or error."""
    try:
        text = data.decode("utf-8")
        value = json.loads(text, object_pairs_hook=_unique)
    except (ValueError, RecursionError):
        return ("error", "")
    if _readers_disagree(value, arguments) or too_deep(value, MAX_EVENT_DEPTH):
        return ("error", "")
    return ("value", repr(value))


def our_parse(data: bytes) -> tuple[str, str]:
    try:
        return ("value", repr(parse_event(data)))
    except ValueError:
        return ("error", "")


def our_arguments(data: bytes) -> tuple[str, str]:
    try:
        return ("value", repr(parse_arguments(data.decode("utf-8"))))
    except ValueError:
        return ("error", "")


JSON_VALUES = st.recursive(
    st.none()
    | st.booleans()
    | st.integers()
    | st.integers(min_value=SAFE - 2, max_value=SAFE + 2)
    | st.floats()
    | st.text()
    | st.sampled_from(["__proto__", "constructor", "prototype", "\ud800", "\udfff"]),
    lambda inner: (
        st.lists(inner, max_size=4)
        | st.dictionaries(
            st.text() | st.sampled_from(["__proto__", "constructor", "prototype", "\udc00"]),
            inner,
            max_size=4,
        )
    ),
    max_leaves=20,
)
JSON_BYTES = st.sampled_from(
    list(b'{}[]",:0123456789.eE+-truefalsnNaI \t\n\r\\u\x00\xa0\xff\xc3\xefd8')
)
JSON_DATA = st.one_of(
    JSON_VALUES.map(lambda value: json.dumps(value).encode()),
    JSON_VALUES.map(
        lambda value: json.dumps(value, ensure_ascii=False).encode("utf-8", "surrogatepass")
    ),
    st.lists(JSON_BYTES, max_size=40).map(bytes),
    st.binary(max_size=40),
)


@settings(max_examples=600, deadline=None)
@given(JSON_DATA)
def test_parse_event_gives_the_standard_librarys_answer_where_readers_agree(data: bytes) -> None:
    assert our_parse(data) == reference_parse(data)


@settings(max_examples=300, deadline=None)
@given(JSON_DATA.filter(lambda data: data.isascii()))
def test_parse_arguments_gives_the_standard_librarys_answer_where_readers_agree(
    data: bytes,
) -> None:
    assert our_arguments(data) == reference_parse(data, arguments=True)


@pytest.mark.parametrize(
    "data",
    [
        b"[" * 65 + b"]" * 65,  # one level past the bound
        b"[" * 64 + b"]" * 64,
        b"[" * 300 + b"]" * 300,  # past jiter's own recursion limit
        b'{"a": 1}  \n',
        b'\n {"a": 1}',
        b"1" * 5000,
        b'"\\ud83d\\ude00"',  # a surrogate pair: one character
        b'{"a": -0, "b": 1.0, "c": 1e-400, "d": 9007199254740993.0, "e": "\\u0000\\/\x7f"}',
        b'{"a": 9007199254740993, "seed": -2151581269210956000}',  # an event keeps them
        b'{"constructor": "x", "prototype": {}, "proto": 1, "__proto": 2}',
        b'{"a": "e400 1e40 \\\\u0041"}',  # what the pre-scan looks for, in a string
        # What the pre-scan marks as worth a walk, in strings and keys: the walk finds nothing.
        b'{"id": "fc_9c4b16f37c27e605", "report": "a protocol, caf\\u00e9, 1e400"}',
        b"[" + b"9" * 199 + b', "' + b"1" * 300 + b'"]',
    ],
)
def test_parse_event_edge_cases_match_the_standard_library(data: bytes) -> None:
    assert our_parse(data) == reference_parse(data)


# What two common readers read differently (node's JSON.parse, the AI SDK's safeParseJSON,
# Python's json, jiter, pydantic_core; serde_json): refused in event data and in arguments.
DISPUTED = {
    "NaN": (b'{"a": NaN}', "NaN is not JSON"),
    "Infinity": (b'{"a": Infinity}', "Infinity is not JSON"),
    "-Infinity": (b"[-Infinity]", "-Infinity is not JSON"),
    "1e400": (b'{"a": 1e400}', "1e400 is out of range for a number"),
    "-1E+0400": (b'{"a": -1E+0400}', r"-1E\+0400 is out of range for a number"),
    "mantissa past the range": (b"[" + b"9" * 300 + b"e10]", "is out of range for a number"),
    "400-digit integer": (b'{"a": ' + b"9" * 400 + b"}", "out of range|beyond"),
    "duplicate key": (b'{"a": 1, "b": 2, "a": 3}', "duplicate key 'a'"),
    "nested duplicate key": (b'{"x": [{"y": {"a": 1, "a": 1}}]}', "duplicate key 'a'"),
    "escaped duplicate key": (b'{"a": 1, "\\u0061": 2}', "duplicate key 'a'"),
    "lone high surrogate": (b'{"a": "\\ud800"}', "lone surrogate"),
    "lone low surrogate": (b'["x\\uDC00y"]', "lone surrogate"),
    "reversed pair": (b'"\\udc00\\ud800"', "lone surrogate"),
    "lone surrogate in a key": (b'{"\\ud800": 1}', "lone surrogate"),
    "__proto__": (b'{"a": {"__proto__": {"x": 1}}}', "__proto__"),
    "escaped __proto__": (b'{"\\u005f_proto__": 1}', "__proto__"),
    "constructor.prototype": (b'[{"constructor": {"prototype": {}}}]', "__proto__"),
    "invalid UTF-8": (b'{"a": "\xff"}', "not UTF-8"),
    "UTF-8 of a surrogate": (b'{"a": "\xed\xa0\x80"}', "not UTF-8"),
    "overlong UTF-8": (b'{"a": "\xc0\xaf"}', "not UTF-8"),
    "leading BOM": (b'\xef\xbb\xbf{"a": 1}', "Expecting value"),
    "form feed": (b'\x0c{"a": 1}', "Expecting value"),
    "no-break space": (b'\xc2\xa0{"a": 1}', "Expecting value"),
    "trailing comma": (b'{"a": 1,}', "Expecting property name"),
    "leading zero": (b'{"a": 01}', "Expecting ',' delimiter"),
    "raw control character": (b'{"a": "\t"}', "Invalid control character"),
}


@pytest.mark.parametrize(("data", "message"), DISPUTED.values(), ids=DISPUTED.keys())
def test_event_data_readers_would_read_differently_is_refused(data: bytes, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_event(data)


@pytest.mark.parametrize(("data", "message"), DISPUTED.values(), ids=DISPUTED.keys())
def test_arguments_readers_would_read_differently_are_refused(data: bytes, message: str) -> None:
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        return  # arguments are text: the event that carried them was refused
    with pytest.raises(ValueError, match=message):
        parse_arguments(text)


@pytest.mark.parametrize(
    "number", [2**53, -(2**53), 9007199254740993, 18446744073709551617, 10**30 + 1]
)
def test_an_integer_javascript_rounds_is_refused_in_arguments(number: int) -> None:
    text = f'{{"n": {number}}}'
    assert parse_event(text.encode()) == {"n": number}  # elsewhere in an event: kept
    with pytest.raises(ValueError, match=r"beyond ±\(2\^53-1\): JavaScript readers"):
        parse_arguments(text)


@pytest.mark.parametrize("number", [2**53 - 1, -(2**53 - 1), 0, 9007199254740993.0])
def test_an_integer_every_reader_holds_is_accepted_in_arguments(number: float) -> None:
    assert parse_arguments(f'{{"n": {number}}}') == {"n": number}


def test_text_holding_a_lone_surrogate_is_refused() -> None:
    with pytest.raises(ValueError, match="lone surrogate"):
        parse_json('{"a": "\ud800"}', MAX_EVENT_DEPTH)


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
