r"""JSON from the network, parsed with bounds and read the same way by every common reader.

Every provider decoder parses event data with `parse_event`; the gate parses tool arguments
with `parse_arguments`. Both fail with `ValueError` (a clear message) for invalid JSON, for
data nested deeper than the limit, for text that is not UTF-8, and for JSON that two common
readers would read differently: whatever the gate releases, every client reads as the same
calls with the same arguments. What the readers did with each case when it was tried (node's
`JSON.parse`, the AI SDK 6's `safeParseJSON` (secure-json-parse) and zod 4, Python's `json`,
jiter and pydantic_core; what Rust's serde_json, which Codex reads with, does is from its
documentation, not run here):

- `NaN`, `Infinity`, `-Infinity`: JSON.parse and the AI SDK fail (the SDK skips the chunk and
  runs the call built from the rest); Python json, jiter and pydantic_core read nan, inf.
  Refused.
- `1e400`, a 400-digit integer: JavaScript reads Infinity, which zod 4's `z.number()` (the AI
  SDK's chunk schemas) rejects, skipping the chunk; Python reads inf (or the exact integer);
  serde_json fails. Refused.
- An integer beyond +-(2^53-1) (`9007199254740993`): JavaScript rounds it (...992), Python,
  jiter and pydantic_core keep it exact. Refused in arguments; kept elsewhere in an event (an
  OpenAI-compatible `seed` is one), since a protocol that carries arguments as an object in
  the event (Gemini `args`, Anthropic `input`) hands them on as text to `parse_arguments`.
- A duplicate key (`{"a":1,"a":2}`, at any depth, also spelt `"\u0061"`): JavaScript,
  Python, jiter and pydantic_core keep the last, serde_json's derived structs (Codex) fail.
  Refused.
- A lone surrogate escape (`"\ud800"`, `"\udc00\ud800"`), in a key or a value: JavaScript and
  Python keep it, jiter and pydantic_core (and serde_json) fail. Refused.
- Invalid UTF-8 (`FF`, an overlong `C0 AF`, a surrogate's `ED A0 80`, a cut sequence):
  TextDecoder (every JavaScript client) reads U+FFFD, Python, jiter and pydantic_core fail
  (though `json.loads(bytes)` reads `ED A0 80` as a surrogate). Refused.
- A `__proto__` key (also `"\u005f_proto__"`) or `"constructor": {"prototype": ...}`: JSON.parse
  makes an own property, the AI SDK (secure-json-parse) fails; Python and jiter read a key.
  Refused.
- A leading BOM: JSON.parse fails (a TextDecoder strips one only at a stream's start), Python
  fails on text and skips it in bytes, jiter fails. Refused.
- Form feed, vertical tab or NBSP as whitespace, a trailing comma, `01`, `+1`, `.5`, `1.`,
  `0x10`, a bad escape, a raw control character in a string, a comment, two values: every
  reader fails. Refused.
- `-0`, `1.0`, `1e-400`, `9007199254740993.0`, `"\u0000"`, `"\/"`, a raw DEL or U+2028 in a
  string: every reader reads the same number or string. Accepted.

`parse_event` runs on every event, so the common case costs one jiter call (`allow_inf_nan`
off, `catch_duplicate_keys` on, lone surrogates refused by jiter itself) and one translation
of the bytes with a search or two (`_EVENT_MARKS`); only data that could hold a prototype key
or a number out of range is walked (`_disputed`), and whatever jiter or the walk refuses is
parsed again by the standard library with strict hooks, which gives the canonical message.
Tool arguments (once per call) are always walked.

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
# The largest integer every reader holds exactly: JavaScript reads numbers as doubles.
MAX_SAFE_INTEGER = 2**53 - 1


def _shown(literal: str) -> str:
    return literal if len(literal) <= 40 else f"{literal[:20]}…({len(literal)} characters)"


def _not_json(constant: str) -> object:
    raise ValueError(f"{constant} is not JSON")


def _finite(literal: str) -> float:
    value = float(literal)
    if not math.isfinite(value):  # 1e999: JSON, but a double reader reads infinity
        raise ValueError(f"{_shown(literal)} is out of range for a number")
    return value


def _double_int(literal: str) -> int:
    """An integer a double reader reads as a number (rounded, perhaps), not as infinity."""
    value = int(literal)
    try:
        float(value)
    except OverflowError:
        raise ValueError(f"{_shown(literal)} is out of range for a number") from None
    return value


def _safe_int(literal: str) -> int:
    """An integer every reader holds exactly."""
    value = int(literal)
    if not -MAX_SAFE_INTEGER <= value <= MAX_SAFE_INTEGER:
        raise ValueError(
            f"{_shown(literal)} is beyond ±(2^53-1): JavaScript readers would round it"
        )
    return value


def _object(pairs: list[tuple[str, Any]]) -> dict[str, Any]:
    """An object with unique keys and no key a prototype-safe reader refuses."""
    value = dict(pairs)
    if len(value) != len(pairs):
        seen: set[str] = set()
        for key, _ in pairs:
            if key in seen:
                raise ValueError(f"duplicate key {key!r}: readers differ on which value counts")
            seen.add(key)
    if _prototype_key(value):
        raise ValueError(
            "a __proto__ key, or constructor.prototype: JavaScript's secure parsers refuse it"
        )
    return value


def _prototype_key(value: dict[str, Any]) -> bool:
    """What secure-json-parse (the AI SDK's parser) refuses: an own `__proto__`, or an own
    `constructor` object with an own `prototype`."""
    if "__proto__" in value:
        return True
    constructor = value.get("constructor")
    return type(constructor) is dict and "prototype" in constructor


def _decoder(parse_int: Callable[[str], int]) -> json.JSONDecoder:
    return json.JSONDecoder(
        parse_constant=_not_json,
        parse_float=_finite,
        parse_int=parse_int,
        object_pairs_hook=_object,
    )


# The reference for every refusal: the standard library with hooks for what it accepts but
# readers disagree on. Event data keeps integers a double reader only rounds (a `seed`); tool
# arguments hold only integers every reader holds exactly.
_EVENT_DECODER = _decoder(_double_int)
_ARGUMENT_DECODER = _decoder(_safe_int)
# A client's own request (`parse_document`) is read as Python reads it.
_PLAIN_DECODER = json.JSONDecoder()
_WHITESPACE = " \t\n\r"


def _loads(text: str, decoder: json.JSONDecoder) -> object:
    """`json.loads` without its per-call overheads."""
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


def _disputed(value: object, safe_integers: bool) -> bool:
    """Whether a parsed value holds what readers read differently: a number out of a double's
    range (or, with `safe_integers`, an integer beyond ±(2^53-1)), or a prototype key
    (iterative). Duplicate keys, NaN and lone surrogates jiter refuses itself."""
    stack = [value]
    while stack:
        node = stack.pop()
        if type(node) is dict:
            if _prototype_key(node):
                return True
            stack.extend(node.values())
        elif type(node) is list:
            stack.extend(node)
        elif type(node) is float:
            if not math.isfinite(node):
                return True
        elif type(node) is int:
            if safe_integers:
                if not -MAX_SAFE_INTEGER <= node <= MAX_SAFE_INTEGER:
                    return True
            else:
                try:
                    float(node)
                except OverflowError:
                    return True
    return False


# The event marks: one translation of the data that serves two pre-scans. Nesting deeper than the
# bound needs more openers (`{`, `[`, marked `{`) than the bound. A prototype key is spelt
# with `proto` or with a `\u00` escape, and a number a double reader reads as infinity has an
# exponent of three digits (`1e400`, `1E+0400`) or, with two at most, more than 200 digits
# before it: each of these spellings has `e000` (or 200 zeros) in the marks, where digits,
# `u`, `r`, `o` and `t` become `0`, and `e`, `E`, `+`, `p` and `\` become `e`. Event data
# without it (most events) is not walked; data with it (an id such as `9c4b16f37c27e605`,
# English such as `report`) is, and the walk decides.
_EVENT_MARKS = bytes(
    ord("{") if chr(byte) in "{[" else
    ord("0") if chr(byte) in "0123456789urot" else
    ord("e") if chr(byte) in "eE+p\\" else
    ord("x")
    for byte in range(256)
)  # fmt: skip
_LONG_DIGITS = b"0" * 200


def _reference(data: bytes, max_depth: int, safe_integers: bool) -> object:
    """The standard library's strict reading of `data`: the canonical value or error."""
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise ValueError("event data is not UTF-8") from None
    value = _loads(text, _ARGUMENT_DECODER if safe_integers else _EVENT_DECODER)
    if _openers(text) > max_depth and too_deep(value, max_depth):
        raise ValueError(f"JSON nested deeper than {max_depth} levels")
    if "\\u" in text:
        try:  # a lone surrogate escape, anywhere (keys too): no UTF-8 for it
            json.dumps(value, ensure_ascii=False).encode("utf-8")
        except UnicodeEncodeError:
            raise ValueError(
                "a lone surrogate escape: readers keep, replace or refuse it"
            ) from None
    return value


def _openers(text: str) -> int:
    return text.count("{") + text.count("[")


def _parse(data: bytes, max_depth: int, safe_integers: bool) -> object:
    """jiter first: about twice as fast as the standard scanner and, where it accepts the
    input and the check finds nothing, the same value. Whatever jiter refuses, or the check
    disputes, the standard library parses with its strict hooks, which raise the canonical
    error; if it accepts what jiter refused, the readers disagree: refused too. Arguments
    (once per call) are always walked; event data only when its marks could hold something
    to check (`_EVENT_MARKS`)."""
    if _jiter_loads is None:  # pragma: no cover
        return _reference(data, max_depth, safe_integers)
    try:
        value = _jiter_loads(
            data, allow_inf_nan=False, catch_duplicate_keys=True, cache_mode="keys"
        )
    except ValueError as exc:
        _reference(data, max_depth, safe_integers)
        raise ValueError(f"JSON that readers would read differently ({exc})") from None
    marked = data.translate(_EVENT_MARKS)
    if len(data) > 2 * max_depth and marked.count(b"{") > max_depth and too_deep(value, max_depth):
        raise ValueError(f"JSON nested deeper than {max_depth} levels")
    if (
        safe_integers
        or marked.find(b"e000") >= 0
        or (len(data) >= 200 and marked.find(_LONG_DIGITS) >= 0)
    ) and _disputed(value, safe_integers):
        _reference(data, max_depth, safe_integers)
        raise ValueError("JSON that readers would read differently")  # pragma: no cover
    return value


def parse_json(text: str, max_depth: int, *, strict: bool = False) -> object:
    """Parse `text`; ValueError if it is not JSON, nests deeper than `max_depth`, or holds
    what readers would read differently (`strict`: also an integer beyond ±(2^53-1))."""
    try:
        data = text.encode("utf-8")
    except UnicodeEncodeError:
        raise ValueError("JSON text holds a lone surrogate") from None
    return _parse(data, max_depth, strict)


def parse_event(data: bytes, max_depth: int = MAX_EVENT_DEPTH) -> object:
    """One SSE event's data: UTF-8 JSON within the nesting bound that every common reader
    reads the same (integers a double reader rounds are kept: they are no call's arguments
    here; where a protocol carries arguments as an object, its decoder hands them on as
    text and `parse_arguments` decides). The hot path of every decoder."""
    return _parse(data, max_depth, False)


def parse_arguments(text: str, max_depth: int = MAX_ARGUMENT_DEPTH) -> object:
    """A tool call's argument text: what `parse_json` refuses, and any integer beyond
    ±(2^53-1) (JavaScript readers round it), within the nesting bound."""
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
        return _loads(text, _PLAIN_DECODER)
    finally:
        if collecting:
            gc.enable()
