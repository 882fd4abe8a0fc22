"""What every provider's decoder shares: typed reads of decoded event fields (a field of
the wrong type is a malformed event, never a `KeyError` or `TypeError` deep in a decoder),
the constant event tuples they return, the in-stream error message, and compact JSON (which
the Chat encoder writes too)."""

from __future__ import annotations

import json
from typing import Any

from ..errors import FailureKind, ResponseFailure
from ..events import ResponseProgress, StreamEvent

NOTHING: tuple[StreamEvent, ...] = ()
# Anything after the terminal event reaches the gate, which refuses it.
AFTER_END: tuple[StreamEvent, ...] = (ResponseProgress(),)
# Output began that is kept but not shown (encrypted reasoning, redacted thinking, a tool
# the provider runs itself): the response is no longer a stream that never started.
CONTENT_BEGAN: tuple[StreamEvent, ...] = (ResponseProgress(content=True),)

# `json.dumps(value, ensure_ascii=False, separators=(",", ":"))`, without building an
# encoder per call.
compact_json = json.JSONEncoder(ensure_ascii=False, separators=(",", ":")).encode


def malformed(message: str) -> ResponseFailure:
    return ResponseFailure(FailureKind.MALFORMED_EVENT, message)


def provider_error_message(message: object) -> str:
    """The text of an in-stream provider error: `provider error: <message>`, or `no message`
    when it is not a non-empty string."""
    return f"provider error: {message if type(message) is str and message else 'no message'}"


def string_field(value: object, what: str) -> str:
    if type(value) is not str:
        raise malformed(f"{what} must be a string")
    return value


def optional_string_field(value: object, what: str) -> str:
    """A string, or `""` where the field is absent or null."""
    return "" if value is None else string_field(value, what)


def object_field(value: object, what: str) -> dict[str, Any]:
    if type(value) is not dict:
        raise malformed(f"{what} must be an object")
    return value


def token_count(value: object) -> int:
    """A usage count: a non-negative integer, anything else 0."""
    return value if type(value) is int and value >= 0 else 0
