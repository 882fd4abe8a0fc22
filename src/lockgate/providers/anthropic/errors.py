"""Anthropic error responses (for the Anthropic Messages provider): the body's error type,
terminal billing errors, and the `anthropic-ratelimit-*-reset` RFC 3339 timestamps,
turned into provider-neutral `ErrorDetails`."""

from __future__ import annotations

import time
from collections.abc import Mapping

from ...errors import OpenFailure
from ...retry import ErrorDetails, classify_opening_failure, seconds_until_timestamp

QUOTA_TYPES = frozenset({"billing_error"})
_PREFIX = "anthropic-ratelimit-"


def _reset_wait(headers: Mapping[str, str], now: float) -> float | None:
    lowered = {key.lower(): value.strip() for key, value in headers.items()}
    waits = []
    for key, value in lowered.items():
        if not (key.startswith(_PREFIX) and key.endswith("-reset")):
            continue
        limit = key.removeprefix(_PREFIX).removesuffix("-reset")
        remaining = lowered.get(f"{_PREFIX}{limit}-remaining")
        wait = seconds_until_timestamp(value, now)
        if wait is not None and remaining in (None, "0"):
            waits.append(wait)
    return max(waits) if waits else None


def anthropic_error_details(body: object, headers: Mapping[str, str], now: float) -> ErrorDetails:
    error = body.get("error") if isinstance(body, dict) else None
    error = error if isinstance(error, dict) else {}
    kind = error.get("type")
    message = error.get("message")
    kind = kind if isinstance(kind, str) else ""
    return ErrorDetails(
        code=kind,
        message=message if isinstance(message, str) else "",
        quota_exhausted=kind in QUOTA_TYPES,
        reset_wait=_reset_wait(headers, now),
    )


def classify_anthropic_failure(
    status: int, body: object, headers: Mapping[str, str] | None = None, *, now: float | None = None
) -> OpenFailure:
    headers = headers or {}
    now = time.time() if now is None else now
    return classify_opening_failure(
        status, anthropic_error_details(body, headers, now), headers, now=now
    )
