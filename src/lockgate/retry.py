"""The retry owner: policy, classification of opening failures, and the server's word.

Only opening a stream is ever retried. Which failures are retryable, and how long to wait,
is decided here from the HTTP status, the JSON error body (never its prose) and the
provider's headers; the boundary applies it.
"""

from __future__ import annotations

import email.utils
import math
import os
import random
import re
import time
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass
from datetime import datetime

from .errors import FailureKind, OpenFailure

_RANDOM = random.Random()

Sleep = Callable[[float], Awaitable[None]]

RETRYABLE_STATUSES = frozenset({408, 409, 429})
QUOTA_CODES = frozenset(
    {"insufficient_quota", "billing_hard_limit_reached", "usage_limit_reached", "billing_error"}
)
ENVIRONMENT_PREFIX = "LOCKGATE_RETRY_"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """At most `attempts` openings. Without a server instruction the delay before attempt
    n+1 is min(base·2ⁿ⁻¹, max) ± jitter; a server-requested wait longer than `max_delay`
    fails at once instead of retrying early."""

    attempts: int = 3
    base_delay: float = 0.25
    max_delay: float = 60.0
    jitter: float = 0.10

    def __post_init__(self) -> None:
        if not 1 <= self.attempts <= 100:
            raise ValueError("attempts must be between 1 and 100")
        for name in ("base_delay", "max_delay"):
            value = getattr(self, name)
            if not (math.isfinite(value) and value >= 0):
                raise ValueError(f"{name} must be a non-negative number of seconds")
        if not 0 <= self.jitter < 1:
            raise ValueError("jitter must be in [0, 1)")

    def backoff(self, failed_attempts: int, rng: random.Random | None = None) -> float:
        """Delay after `failed_attempts` (1-based) failed openings, without instructions."""
        generator = rng or _RANDOM
        delay = min(self.base_delay * 2.0 ** (failed_attempts - 1), self.max_delay)
        return delay * generator.uniform(1 - self.jitter, 1 + self.jitter)

    @classmethod
    def from_environment(
        cls, environ: Mapping[str, str] | None = None, **overrides: float | None
    ) -> RetryPolicy:
        """Defaults, then `LOCKGATE_RETRY_{ATTEMPTS,BASE_DELAY,MAX_DELAY,JITTER}`, then the
        non-None `overrides` (CLI flags). Raises ValueError with a one-line message."""
        environ = os.environ if environ is None else environ
        values: dict[str, float] = {}
        for name in ("attempts", "base_delay", "max_delay", "jitter"):
            key = ENVIRONMENT_PREFIX + name.upper()
            if key in environ:
                try:
                    values[name] = float(environ[key])
                except ValueError:
                    raise ValueError(f"{key}={environ[key]!r} is not a number") from None
            override = overrides.get(name)
            if override is not None:
                values[name] = override
        attempts = values.pop("attempts", cls().attempts)
        if attempts != int(attempts):
            raise ValueError("retry attempts must be a whole number")
        return cls(attempts=int(attempts), **values)


def _header(headers: Mapping[str, str], name: str) -> str | None:
    for key, value in headers.items():
        if key.lower() == name:
            return value.strip()
    return None


_GO_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ns|us|µs|ms|s|m|h)")
_GO_UNITS = {"ns": 1e-9, "us": 1e-6, "µs": 1e-6, "ms": 1e-3, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_go_duration(text: str) -> float | None:
    """`6m0s`, `1.2s`, `12ms`, `2m59.56s` → seconds; None if it is not such a duration."""
    text = text.strip()
    if text in {"0", ""}:
        return 0.0 if text else None
    parts = _GO_DURATION.findall(text)
    if not parts or "".join(number + unit for number, unit in parts) != text:
        return None
    return sum(float(number) * _GO_UNITS[unit] for number, unit in parts)


def _seconds_until(timestamp: datetime, now: float) -> float:
    return max(0.0, timestamp.timestamp() - now)


def _retry_after(value: str, now: float) -> float | None:
    """`retry-after`: seconds (possibly fractional) or an HTTP date."""
    try:
        seconds = float(value)
    except ValueError:
        try:
            return _seconds_until(email.utils.parsedate_to_datetime(value), now)
        except (TypeError, ValueError, IndexError):
            return None
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def _reset_headers(headers: Mapping[str, str], now: float) -> float | None:
    """OpenAI `x-ratelimit-reset-*` (Go durations) and Anthropic
    `anthropic-ratelimit-*-reset` (RFC 3339). Resets whose limit is known to have remaining
    capacity are ignored; of the others, the longest wait counts."""
    waits: list[float] = []
    lowered = {key.lower(): value.strip() for key, value in headers.items()}
    for key, value in lowered.items():
        if key.startswith("x-ratelimit-reset-"):
            limit = key.removeprefix("x-ratelimit-reset-")
            remaining = lowered.get(f"x-ratelimit-remaining-{limit}")
            wait = parse_go_duration(value)
        elif key.startswith("anthropic-ratelimit-") and key.endswith("-reset"):
            limit = key.removeprefix("anthropic-ratelimit-").removesuffix("-reset")
            remaining = lowered.get(f"anthropic-ratelimit-{limit}-remaining")
            try:
                wait = _seconds_until(datetime.fromisoformat(value), now)
            except ValueError:
                wait = None
        else:
            continue
        if wait is None or (remaining is not None and remaining != "0"):
            continue
        waits.append(wait)
    return max(waits) if waits else None


def server_requested_wait(headers: Mapping[str, str], now: float | None = None) -> float | None:
    """The wait the server asked for, in seconds: `retry-after-ms`, then `retry-after`,
    then the rate-limit reset headers. None when it said nothing usable."""
    now = time.time() if now is None else now
    milliseconds = _header(headers, "retry-after-ms")
    if milliseconds is not None:
        try:
            value = float(milliseconds) / 1000
            if math.isfinite(value) and value >= 0:
                return value
        except ValueError:
            pass
    retry_after = _header(headers, "retry-after")
    if retry_after is not None:
        seconds = _retry_after(retry_after, now)
        if seconds is not None:
            return seconds
    return _reset_headers(headers, now)


def _error_fields(body: object) -> tuple[str, str, str]:
    """(code, type, message) from an OpenAI or Anthropic JSON error body."""
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = body if isinstance(body, dict) else {}
    fields = []
    for name in ("code", "type", "message"):
        value = error.get(name)
        fields.append(value if isinstance(value, str) else "")
    return fields[0], fields[1], fields[2]


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "…"


def classify_http_failure(
    status: int,
    body: object,
    headers: Mapping[str, str] | None = None,
    *,
    now: float | None = None,
) -> OpenFailure:
    """Classify an HTTP error received while opening a stream.

    Retryable: 408, 409, 429 rate limits, 5xx (529 included). Terminal: a 429 (or 402)
    whose JSON `code`/`type` names an exhausted quota, and every other status (400, 401,
    403, 404, 422 …). `x-should-retry: true|false` overrides the status (never a quota).
    """
    headers = headers or {}
    code, kind, message = _error_fields(body)
    label = code or kind
    detail = f" {label}" if label else ""
    text = f": {_one_line(message)}" if message else ""
    summary = f"HTTP {status}{detail}{text}"
    if code in QUOTA_CODES or kind in QUOTA_CODES:
        return OpenFailure(
            f"quota exhausted, retrying cannot help ({summary})",
            retryable=False,
            status=status,
            kind=FailureKind.QUOTA_EXHAUSTED,
        )
    retryable = status in RETRYABLE_STATUSES or status >= 500
    should_retry = (_header(headers, "x-should-retry") or "").lower()
    if should_retry in {"true", "false"}:
        retryable = should_retry == "true"
        summary += f" (x-should-retry: {should_retry})"
    return OpenFailure(
        summary,
        retryable=retryable,
        status=status,
        retry_after=server_requested_wait(headers, now),
    )
