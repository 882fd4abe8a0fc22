"""The decoding kit every provider's decoder is written with, so that each decoder holds only
its own event mapping:

- `typed_event`: the prologue of a protocol whose events name their `type` (parse within the
  nesting bound, an object, a string `type`, the SSE `event:` name agreeing with it);
- typed reads of event fields (a field of the wrong type is a malformed event, never a
  `KeyError` or `TypeError` deep in a decoder);
- `read_error`: an in-stream error object of any protocol, with ONE transience rule;
- `usage_from`: native usage through a provider's field table (`UsageFields`);
- `finish_event`: a native finish reason through a provider's table (`Finish`);
- `synthesized_call_id`: the stable id of a call a server sent without one;
- the constant event tuples decoders return, and compact JSON (which encoders write too).
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from ..conversation import Usage
from ..errors import FailureKind, ResponseFailure
from ..events import (
    FINISH_WITHOUT_CALLS,
    ProviderReportedFailure,
    ResponseCompleted,
    ResponseProgress,
    StreamEvent,
)
from ..jsonlimits import parse_event
from ..sse import ServerSentEvent

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


def typed_event(event: ServerSentEvent) -> tuple[dict[str, Any], str]:
    """The JSON object of an event that names its `type` (Responses, Anthropic), and that
    type: malformed when the data is not JSON within the nesting bound, not an object,
    without a string `type`, or when the SSE `event:` name says another type."""
    try:
        payload = parse_event(event.data)
    except ValueError as exc:
        raise malformed(f"event data is not valid JSON ({exc})") from None
    if type(payload) is not dict:
        raise malformed("event data is not a JSON object")
    kind = payload.get("type")
    if type(kind) is not str:
        raise malformed("event has no string 'type'")
    if event.event is not None and event.event != kind:
        raise malformed(f"SSE event name {event.event!r} disagrees with type {kind!r}")
    return payload, kind


# --- in-stream errors ----------------------------------------------------------------------

# The error codes, types and statuses (compared in lower case) after which a new request
# may succeed, for every protocol alike: the server was overloaded, rate-limited, timed out
# or failed on its side. Anything else (an invalid request, a refusal, a quota) is not.
TRANSIENT_ERRORS = frozenset(
    {
        "server_error",  # OpenAI
        "api_error",  # Anthropic
        "overloaded_error",
        "rate_limit_exceeded",
        "rate_limit_error",
        "timeout",
        "timeout_error",
        "service_unavailable",
        "internal",  # Google RPC statuses
        "unavailable",
        "deadline_exceeded",
    }
)


@dataclass(frozen=True, slots=True)
class ErrorReading:
    """An in-stream error object in neutral terms: its `code` (the code, as text when a
    number, else its type, else its status), its message, and whether a retry may help."""

    code: str | None
    message: str
    transient: bool


def read_error(error: object) -> ErrorReading:
    """Any protocol's error object (`{"error": {...}}` is unwrapped): `code`, `type` and
    `status` are read in that order; transient when any of them is in `TRANSIENT_ERRORS`, or
    the code is a number >= 500 or 429 (a rate limit)."""
    if type(error) is dict:
        nested = error.get("error")
        if type(nested) is dict:
            error = nested
    if type(error) is str:
        return ErrorReading(None, error, False)
    if type(error) is not dict:
        return ErrorReading(None, "", False)
    names = [error.get(field) for field in ("code", "type", "status")]
    code = next(
        (str(name) for name in names if (type(name) is str and name) or type(name) is int),
        None,
    )
    number = names[0] if type(names[0]) is int else None
    transient = any(type(name) is str and name.lower() in TRANSIENT_ERRORS for name in names) or (
        number is not None and (number >= 500 or number == 429)
    )
    message = error.get("message")
    return ErrorReading(code, message if type(message) is str else "", transient)


def provider_error(
    error: object, usage: Usage | None = None, *, response_id: str | None = None
) -> ProviderReportedFailure:
    """The `provider_error` failure of an in-stream error object."""
    reading = read_error(error)
    return ProviderReportedFailure(
        FailureKind.PROVIDER_ERROR,
        provider_error_message(reading.message),
        reading.code,
        usage,
        transient=reading.transient,
        response_id=response_id,
    )


# --- usage ---------------------------------------------------------------------------------

Path = tuple[str, ...]  # keys into nested objects


@dataclass(frozen=True, slots=True)
class UsageFields:
    """Where each `conversation.Usage` count sits in one provider's usage object: the
    fields summed into it (each a path of keys into nested objects). An empty `total`, or
    a total the object does not state, means input + output."""

    input: tuple[Path, ...]
    output: tuple[Path, ...]
    cached: tuple[Path, ...] = ()
    reasoning: tuple[Path, ...] = ()
    cache_write: tuple[Path, ...] = ()
    total: tuple[Path, ...] = ()


def _count_at(raw: Mapping[str, Any], path: Path) -> int:
    value: object = raw
    for key in path:
        if type(value) is not dict:
            return 0
        value = value.get(key)
    return token_count(value)


def usage_from(raw: object, fields: UsageFields) -> Usage | None:
    """`raw` (a provider's usage object) in lockgate's terms; None when it is no object
    (usage "not reported", never zero). Missing or odd counts are 0."""
    if type(raw) is not dict:
        return None

    def total(paths: tuple[Path, ...]) -> int:
        return sum(_count_at(raw, path) for path in paths)

    input_tokens = total(fields.input)
    output_tokens = total(fields.output)
    return Usage(
        input_tokens=input_tokens,
        cached_input_tokens=total(fields.cached),
        output_tokens=output_tokens,
        reasoning_tokens=total(fields.reasoning),
        total_tokens=total(fields.total) or input_tokens + output_tokens,
        cache_write_tokens=total(fields.cache_write),
    )


# --- finish reasons ------------------------------------------------------------------------

IMPLIED = "implied"  # `Finish.completed`: a success whose calls say whether it has calls


@dataclass(frozen=True, slots=True)
class Finish:
    """What one native finish reason means: a success (`completed`: a normalized finish,
    `events.FINISH_*`, or `IMPLIED`), or a failure of `failure` kind with `message`
    (`truncated`: cut by the output-token limit, so buffered calls may be answered)."""

    completed: str | None = None
    failure: FailureKind | None = None
    message: str = ""
    truncated: bool = False


# The two truncations every provider names: its output-token limit, its context window.
OUTPUT_LIMIT = Finish(
    failure=FailureKind.RESPONSE_INCOMPLETE,
    message="response incomplete: the output-token limit cut it off",
    truncated=True,
)
CONTEXT_WINDOW = Finish(
    failure=FailureKind.RESPONSE_INCOMPLETE,
    message="response incomplete: the context window was exceeded",
    truncated=True,
)


def finish_event(
    table: Mapping[str, Finish],
    reason: str,
    usage: Usage | None,
    *,
    otherwise: str,
    has_calls: bool = False,
    call_order: tuple[str, ...] | None = None,
    refusal_detail: str = "",
) -> ResponseCompleted | ProviderReportedFailure:
    """The terminal event for a native finish `reason` through a provider's `table`; a
    reason the table does not know is `lifecycle`, `otherwise` saying why (`{reason!r}` is
    filled in). An `IMPLIED` success states no finish when calls streamed (the gate takes
    the one they imply) and `stop` when none did."""
    finish = table.get(reason)
    if finish is None:
        return ProviderReportedFailure(
            FailureKind.LIFECYCLE, otherwise.format(reason=reason), reason, usage
        )
    if finish.failure is not None:
        return ProviderReportedFailure(
            finish.failure, finish.message, reason, usage, truncated=finish.truncated
        )
    stated = finish.completed
    if stated == IMPLIED:
        stated = None if has_calls else FINISH_WITHOUT_CALLS
    return ResponseCompleted(stated, usage, call_order=call_order, refusal_detail=refusal_detail)


def synthesized_call_id(response_id: str, key: str) -> str:
    """The stable id of a call the server sent without one: the same response and call
    key always give the same id, which history replays."""
    return "call_" + hashlib.sha256(f"{response_id}:{key}".encode()).hexdigest()[:24]
