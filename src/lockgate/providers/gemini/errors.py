"""Google error documents (for the Gemini provider), turned into provider-neutral terms.

Google answers every failed call with `{"error": {code, message, status, details[]}}` (the
gRPC status of the call: `INVALID_ARGUMENT`, `RESOURCE_EXHAUSTED`, `UNAVAILABLE` …); the
same object can also arrive as a chunk of a 200 stream. Streams answered without `alt=sse`
(and Vertex AI) wrap it in a one-element array, which is read the same way. `details` holds
typed `google.rpc.*` messages, of which two decide a retry:

- `google.rpc.RetryInfo {retryDelay: "12s"}` (a protobuf Duration: seconds with up to nine
  fractional digits and an `s`): the wait the server asks for. Google states it in the body,
  not in a header; it becomes `ErrorDetails.reset_wait`, which `classify_opening_failure`
  honours like `retry-after` (a standard header, where a proxy adds one, still wins).
- `google.rpc.QuotaFailure {violations[{quotaId, quotaMetric, quotaValue}]}`: which quota a
  `RESOURCE_EXHAUSTED` spent. A daily quota (`…PerDay…`) or a quota whose limit is 0 (the
  model is not available on this tier) cannot come back by retrying within any sane wait:
  terminal (`quota_exhausted`). A per-minute one is an ordinary, retryable 429. The older
  form, `ErrorInfo.metadata.quota_limit` / `quota_limit_value`, is read the same way.

A `RESOURCE_EXHAUSTED` without such details (Vertex AI's shared-capacity 429) is transient.
The HTTP status decides retryability otherwise (`retry.classify_opening_failure`: 408, 409,
429 and 5xx, which is where Google maps `UNAVAILABLE`, `INTERNAL` and `DEADLINE_EXCEEDED`).
"""

from __future__ import annotations

import math
import re
import time
from collections.abc import Mapping
from dataclasses import dataclass

from ...errors import OpenFailure
from ...retry import ErrorDetails, classify_opening_failure

__all__ = [
    "GoogleError",
    "classify_gemini_failure",
    "gemini_error_details",
    "read_google_error",
]

_RETRY_INFO = "type.googleapis.com/google.rpc.RetryInfo"
_QUOTA_FAILURE = "type.googleapis.com/google.rpc.QuotaFailure"
_ERROR_INFO = "type.googleapis.com/google.rpc.ErrorInfo"
_DURATION = re.compile(r"(\d+(?:\.\d{1,9})?)s")
_DAILY = ("perday", "per_day", "daily")


@dataclass(frozen=True, slots=True)
class GoogleError:
    """What one Google error object says, read defensively (server bytes never crash)."""

    code: int | None = None  # the HTTP-like number in the body (`429`, `503` …)
    status: str = ""  # the gRPC status name (`RESOURCE_EXHAUSTED` …)
    message: str = ""
    retry_delay: float | None = None  # RetryInfo.retryDelay, in seconds
    terminal_quota: bool = False  # a daily or zero-limit quota was spent

    @property
    def label(self) -> str:
        """The status name, else the numeric code as text, else empty."""
        return self.status or ("" if self.code is None else str(self.code))


def _duration(value: object) -> float | None:
    """A protobuf Duration in its JSON form (`"12s"`, `"0.250s"`) → seconds."""
    if type(value) is not str:
        return None
    match = _DURATION.fullmatch(value.strip())
    if match is None:
        return None
    seconds = float(match.group(1))
    return seconds if math.isfinite(seconds) else None


def _daily(text: object) -> bool:
    if type(text) is not str:
        return False
    lowered = text.lower()
    return any(marker in lowered for marker in _DAILY)


def _terminal_violation(violation: Mapping[str, object]) -> bool:
    if _daily(violation.get("quotaId")) or _daily(violation.get("quotaMetric")):
        return True
    return str(violation.get("quotaValue", "")).strip() == "0"


def _details(error: Mapping[str, object]) -> tuple[float | None, bool]:
    """(RetryInfo delay, whether a terminal quota was spent) from `error.details`."""
    details = error.get("details")
    delay: float | None = None
    terminal = False
    if not isinstance(details, list):
        return delay, terminal
    for detail in details:
        if not isinstance(detail, dict):
            continue
        kind = detail.get("@type")
        if kind == _RETRY_INFO:
            delay = _duration(detail.get("retryDelay"))
        elif kind == _QUOTA_FAILURE:
            violations = detail.get("violations")
            if isinstance(violations, list):
                terminal = terminal or any(
                    isinstance(v, dict) and _terminal_violation(v) for v in violations
                )
        elif kind == _ERROR_INFO:
            metadata = detail.get("metadata")
            if isinstance(metadata, dict):
                terminal = terminal or _daily(metadata.get("quota_limit"))
                terminal = terminal or str(metadata.get("quota_limit_value", "")) == "0"
    return delay, terminal


def read_google_error(body: object) -> GoogleError:
    """The error object of a Google error document: `{"error": {...}}`, the same inside a
    one-element array, or the bare error object (as an in-stream chunk's `error` value)."""
    if isinstance(body, list) and len(body) == 1:
        body = body[0]
    if not isinstance(body, dict):
        return GoogleError(message=body if isinstance(body, str) else "")
    inner = body.get("error")
    error = inner if isinstance(inner, dict) else body
    if isinstance(inner, str):
        return GoogleError(message=inner)
    code = error.get("code")
    status = error.get("status")
    message = error.get("message")
    delay, terminal = _details(error)
    status = status if isinstance(status, str) else ""
    return GoogleError(
        code=code if type(code) is int else None,
        status=status,
        message=message if isinstance(message, str) else "",
        retry_delay=delay,
        terminal_quota=terminal and (status == "RESOURCE_EXHAUSTED" or code == 429),
    )


# What Gemini says of an input over the model's window (an `INVALID_ARGUMENT`): "The input
# token count (N) exceeds the maximum number of tokens allowed (M)."
_OVER_WINDOW = re.compile(
    r"input token count.*exceeds the maximum|exceeds the context window", re.I
)


def gemini_error_details(body: object) -> ErrorDetails:
    error = read_google_error(body)
    return ErrorDetails(
        code=error.label,
        message=error.message,
        quota_exhausted=error.terminal_quota,
        reset_wait=error.retry_delay,
        context_exceeded=error.status in ("INVALID_ARGUMENT", "")
        and _OVER_WINDOW.search(error.message) is not None,
    )


def classify_gemini_failure(
    status: int, body: object, headers: Mapping[str, str] | None = None, *, now: float | None = None
) -> OpenFailure:
    """An HTTP error while opening a Gemini stream, from its status, its error document
    and the standard headers."""
    headers = headers or {}
    return classify_opening_failure(
        status, gemini_error_details(body), headers, now=time.time() if now is None else now
    )
