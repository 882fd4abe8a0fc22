"""Typed reads of decoded event fields, shared by every provider's decoder: a field of the
wrong type is a malformed event (never a `KeyError` or `TypeError` deep in a decoder)."""

from __future__ import annotations

from typing import Any

from ..errors import FailureKind, ResponseFailure


def malformed(message: str) -> ResponseFailure:
    return ResponseFailure(FailureKind.MALFORMED_EVENT, message)


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
