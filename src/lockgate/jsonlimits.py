"""JSON from the network, parsed with bounds: no recursion error, no unbounded nesting.

Every provider decoder parses event data with `parse_event`; the gate parses tool arguments
with `parse_arguments`. Both fail with `ValueError` (a clear message) for invalid JSON, for
data nested deeper than the limit, and for text that is not UTF-8, so that hostile nesting is
a malformed event or an invalid call, never an internal error.

`parse_document` parses a large document from a client (the proxy's request bodies) at a
bounded cost: `check_document` first counts its values and measures its depth with a few
passes of C code over its bytes (no Python object per value), and refuses one over either
bound (`TooComplex`) before a parser builds anything.
"""

from __future__ import annotations

import gc
import itertools
import json
import math
from collections.abc import Callable
from typing import Any


def _jiter() -> Callable[..., Any] | None:
    """jiter's `from_json` (it ships with both official SDKs); without it the standard
    library decides alone."""
    try:
        from jiter import from_json
    except ImportError:  # pragma: no cover
        return None
    return from_json


_jiter_loads = _jiter()

MAX_EVENT_DEPTH = 64
MAX_ARGUMENT_DEPTH = 32


def _not_json(constant: str) -> object:
    raise ValueError(f"{constant} is not JSON")


def _finite(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):  # 1e999: JSON, but no number a tool can be handed
        raise ValueError(f"{literal} is out of range for a number")
    return value


_DECODER = json.JSONDecoder()
# Tool arguments are strict JSON with finite numbers: NaN and Infinity (which Python's parser
# accepts) and numbers beyond a float's range (1e999, which it reads as infinity) are not
# values a tool should be handed.
_STRICT_DECODER = json.JSONDecoder(parse_constant=_not_json, parse_float=_finite)
_WHITESPACE = " \t\n\r"


def _loads(text: str, decoder: json.JSONDecoder = _DECODER) -> object:
    """`json.loads` without its per-call overheads (the hot path of every decoder)."""
    try:
        try:
            value, end = decoder.scan_once(text, 0)  # type: ignore[attr-defined]
        except StopIteration:  # leading whitespace, or nothing valid: the full decoder decides
            return decoder.decode(text)
    except RecursionError:
        raise ValueError("JSON nested too deeply") from None
    if end != len(text) and text[end:].strip(_WHITESPACE):
        raise ValueError("extra data after the JSON value")
    return value


def too_deep(value: object, max_depth: int) -> bool:
    """Whether `value` nests containers deeper than `max_depth` (iterative: no recursion)."""
    stack: list[tuple[object, int]] = [(value, 1)]
    while stack:
        current, depth = stack.pop()
        if isinstance(current, dict):
            children: object = current.values()
        elif isinstance(current, list):
            children = current
        else:
            continue
        if depth > max_depth:
            return True
        stack.extend((child, depth + 1) for child in children)  # type: ignore[attr-defined]
    return False


def _openers(text: str) -> int:
    return text.count("{") + text.count("[")


def parse_json(text: str, max_depth: int, *, strict: bool = False) -> object:
    """Parse `text`; ValueError if it is not JSON or nests deeper than `max_depth`
    (`strict`: NaN and Infinity refused too).

    The depth walk runs only when the text holds more brackets than the limit, which an
    ordinary event or argument object never does."""
    value = _loads(text, _STRICT_DECODER if strict else _DECODER)
    if _openers(text) > max_depth and too_deep(value, max_depth):
        raise ValueError(f"JSON nested deeper than {max_depth} levels")
    return value


def parse_event(data: bytes, max_depth: int = MAX_EVENT_DEPTH) -> object:
    """One SSE event's data: UTF-8 JSON within the nesting bound.

    The hot path of every decoder. jiter first: about twice as fast as the standard
    scanner and, where it accepts the input, the same value (it validates UTF-8 itself);
    what it refuses (invalid JSON, lone surrogate escapes, nesting past its own limit) goes
    to the standard library (`parse_json`), which gives the canonical answer or error."""
    if _jiter_loads is not None:
        try:
            value = _jiter_loads(data, cache_mode="keys")
        except Exception:
            pass
        else:
            # Nesting deeper than the bound needs more openers than the bound (one scan).
            if (
                len(data) > 2 * max_depth
                and len(data) - len(data.translate(None, b"{[")) > max_depth
                and too_deep(value, max_depth)
            ):
                raise ValueError(f"JSON nested deeper than {max_depth} levels")
            return value
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("event data is not UTF-8") from None
    return parse_json(text, max_depth)


def parse_arguments(text: str, max_depth: int = MAX_ARGUMENT_DEPTH) -> object:
    """A tool call's argument text: strict JSON with finite numbers (no NaN, Infinity or
    1e999) within the nesting bound."""
    return parse_json(text, max_depth, strict=True)


# --- a large document, at a bounded cost -------------------------------------------------


class TooComplex(ValueError):
    """A JSON document over a bound (its values or its depth), refused before parsing; the
    message is a predicate (`holds more than N JSON values`, `nests deeper than N levels`)."""


_STRUCTURE = b'"[]{},:'
_WHITESPACE_BYTES = b" \t\n\r"
# Every byte but the structure and JSON's whitespace becomes `x`: a number or a literal is
# then a run of `x`, and so is what a string holds.
_MARKS = bytes(
    byte if byte in _STRUCTURE or byte in _WHITESPACE_BYTES else ord("x") for byte in range(256)
)
_NESTING_STEPS = bytes.maketrans(b"[{]}", b"\x01\x01\xff\xff")  # +1, -1 as signed bytes


def check_document(data: bytes, max_depth: int, max_values: int) -> None:
    """Raise `TooComplex` when the JSON text `data` holds more than `max_values` values
    (object keys counted: `{"a": [1]}` holds four) or nests containers deeper than
    `max_depth`.

    Exact for JSON; for other text the counts are estimates and the parser decides. The cost
    is a few passes of C code over the bytes, whatever their shape: escaped backslashes and
    quotes are removed (no quote inside a string is left escaped); whitespace is dropped and
    every byte but quotes, brackets, commas and colons becomes `x`; each string shrinks to
    one quote. Then the values are one more than the commas and colons, plus the containers
    that are not empty, and the depth is the largest running sum of +1 per opening and -1
    per closing bracket. The strings are counted first, so that shrinking them makes at
    most `2 * max_values + 1` pieces."""
    text = data.replace(b"\\\\", b"").replace(b'\\"', b"")
    marked = text.translate(_MARKS, _WHITESPACE_BYTES)
    if marked.count(b'"') // 2 > max_values:
        raise TooComplex(f"holds more than {max_values} JSON values")
    outside = b'"'.join(marked.split(b'"')[::2])  # a string: one quote
    containers = outside.count(b"[") + outside.count(b"{")
    empty = outside.count(b"[]") + outside.count(b"{}")
    values = 1 + outside.count(b",") + outside.count(b":") + containers - empty
    if values > max_values:
        raise TooComplex(f"holds more than {max_values} JSON values")
    steps = memoryview(outside.translate(_NESTING_STEPS, b',:x"')).cast("b")
    if max(itertools.accumulate(steps), default=0) > max_depth:
        raise TooComplex(f"nests deeper than {max_depth} levels")


def parse_document(data: bytes, max_depth: int, max_values: int) -> object:
    """A JSON document from a client: `check_document`'s bounds first (`TooComplex`), then
    jiter (C speed, UTF-8 checked) and, for what it refuses, the standard library, which
    gives the canonical answer or error (`ValueError`; not UTF-8 included). The cyclic
    garbage collector is paused while the parser builds the value: its containers are all
    new and alive, and collecting among them as they are made cost several times the parse
    itself in a process with many live objects."""
    check_document(data, max_depth, max_values)
    collecting = gc.isenabled()
    gc.disable()
    try:
        if _jiter_loads is not None:
            try:
                return _jiter_loads(data, cache_mode="keys")
            except Exception:
                pass
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError:
            raise ValueError("the document is not UTF-8") from None
        return _loads(text)
    finally:
        if collecting:
            gc.enable()
