"""The decoding kit (`providers/decoding.py`): errors, usage and finish tables.

One transience rule for every protocol's in-stream errors, usage field tables, finish
tables.
"""

from __future__ import annotations

import pytest

from lockgate.conversation import Usage
from lockgate.errors import FailureKind
from lockgate.events import ProviderReportedFailure, ResponseCompleted
from lockgate.providers.decoding import (
    IMPLIED,
    Finish,
    UsageFields,
    finish_event,
    read_error,
    usage_from,
)

TRANSIENT = [
    {"type": "server_error"},  # OpenAI
    {"code": "server_error"},
    {"type": "overloaded_error"},  # Anthropic
    {"type": "api_error"},
    {"type": "rate_limit_error"},
    {"code": "rate_limit_exceeded"},
    {"type": "timeout_error"},
    {"code": 503},
    {"code": 429},
    {"code": 500, "status": "INTERNAL"},  # Google RPC
    {"status": "UNAVAILABLE"},
    {"status": "DEADLINE_EXCEEDED"},
    {"error": {"type": "overloaded_error"}},  # wrapped
]
NOT_TRANSIENT = [
    {"type": "invalid_request_error"},
    {"code": "context_length_exceeded"},
    {"code": 400},
    {"status": "INVALID_ARGUMENT"},
    {"code": {"an": "object"}},
    "a bare string",
    None,
]


@pytest.mark.parametrize("error", TRANSIENT)
def test_one_transience_rule_for_every_protocol(error: object) -> None:
    assert read_error(error).transient


@pytest.mark.parametrize("error", NOT_TRANSIENT)
def test_what_a_retry_cannot_fix_is_not_transient(error: object) -> None:
    assert not read_error(error).transient


def test_the_code_is_the_code_then_the_type_then_the_status() -> None:
    assert read_error({"code": 7, "type": "t", "status": "S"}).code == "7"
    assert read_error({"type": "t", "status": "S", "message": "m"}).code == "t"
    assert read_error({"status": "S"}).code == "S"
    assert read_error({"message": "m"}) == read_error({"message": "m", "code": ""})
    assert read_error({"message": "boom"}).message == "boom"


def test_usage_fields_sum_paths_and_default_the_total() -> None:
    fields = UsageFields(
        input=(("a",), ("b", "c")),
        output=(("o",),),
        cached=(("b", "c"),),
        total=(("t",),),
    )
    assert usage_from({"a": 10, "b": {"c": 5}, "o": 3}, fields) == Usage(15, 5, 3, 0, 18)
    assert usage_from({"a": 1, "o": 1, "t": 9}, fields) == Usage(1, 0, 1, 0, 9)
    assert usage_from({"a": -4, "b": "x", "o": True}, fields) == Usage()
    assert usage_from(None, fields) is None  # not reported, never zero


def test_finish_tables() -> None:
    table = {
        "done": Finish(IMPLIED),
        "cut": Finish(failure=FailureKind.RESPONSE_INCOMPLETE, message="cut", truncated=True),
    }
    assert finish_event(table, "done", None, otherwise="", has_calls=True) == ResponseCompleted()
    assert finish_event(table, "done", None, otherwise="") == ResponseCompleted("stop")
    cut = finish_event(table, "cut", None, otherwise="")
    assert cut == ProviderReportedFailure(
        FailureKind.RESPONSE_INCOMPLETE, "cut", "cut", None, truncated=True
    )
    unknown = finish_event(table, "odd", None, otherwise="reason {reason!r} unknown")
    assert unknown == ProviderReportedFailure(
        FailureKind.LIFECYCLE, "reason 'odd' unknown", "odd", None
    )
