"""The retry owner: policy, classification of opening failures, and the server's word.

Only opening a stream is ever retried. Which failures are retryable, and how long to wait,
is decided here from the HTTP status, the standard headers, and what the provider's own
module read from its error body and rate-limit headers (`ErrorDetails`); the boundary
applies it. Nothing here knows any one provider's codes or header names.
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
from datetime import UTC, datetime

from .errors import FailureKind, OpenFailure

_RANDOM = random.Random()

Sleep = Callable[[float], Awaitable[None]]

RETRYABLE_STATUSES = frozenset({408, 409, 429})
ENVIRONMENT_PREFIX = "LOCKGATE_RETRY_"


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """At most `attempts` openings. Without a server instruction the delay before attempt
    n+1 is min(base·2ⁿ⁻¹, max) ± jitter; a server-requested wait longer than `max_delay`
    fails at once instead of retrying early. `retry_unstarted` (off by default): a stream
    whose provider reported a transient error before any content event (only start, ping
    and progress) counts as a failed opening, within the same attempts and wait rules."""

    attempts: int = 3
    base_delay: float = 0.25
    max_delay: float = 60.0
    jitter: float = 0.10
    retry_unstarted: bool = False  # a stream that failed transiently before any content

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
        cls,
        environ: Mapping[str, str] | None = None,
        *,
        retry_unstarted: bool = False,
        **overrides: float | None,
    ) -> RetryPolicy:
        """Defaults, then `LOCKGATE_RETRY_{ATTEMPTS,BASE_DELAY,MAX_DELAY,JITTER}`, then the
        non-None `overrides` (CLI flags). A flag wins: an invalid environment value it
        overrides does not matter. Raises ValueError with a one-line message."""
        environ = os.environ if environ is None else environ
        values: dict[str, float] = {}
        for name in ("attempts", "base_delay", "max_delay", "jitter"):
            override = overrides.get(name)
            if override is not None:
                values[name] = override
                continue
            key = ENVIRONMENT_PREFIX + name.upper()
            if key in environ:
                text = environ[key]
                try:
                    value = float(text)
                except ValueError:
                    raise ValueError(f"{key}={text!r} is not a number") from None
                if not math.isfinite(value):
                    raise ValueError(f"{key}={text!r} is not a finite number")
                values[name] = value
        attempts = values.pop("attempts", cls().attempts)
        if attempts != int(attempts):
            raise ValueError("retry attempts must be a whole number")
        return cls(attempts=int(attempts), retry_unstarted=retry_unstarted, **values)


def header(headers: Mapping[str, str], name: str) -> str | None:
    """A header's value, whatever the case of its name."""
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


def seconds_until_timestamp(text: str, now: float) -> float | None:
    """An RFC 3339 / ISO 8601 timestamp → seconds from `now` (0 if past); one without a
    zone is UTC. None for anything else (a server's header is never trusted to parse)."""
    try:
        moment = datetime.fromisoformat(text.strip())
        if moment.tzinfo is None:
            moment = moment.replace(tzinfo=UTC)
        return max(0.0, moment.timestamp() - now)
    except (ValueError, OverflowError, OSError):
        return None


def parse_retry_after(value: str, now: float) -> float | None:
    """`retry-after`: seconds (possibly fractional) or an HTTP date."""
    try:
        seconds = float(value)
    except ValueError:
        try:
            moment = email.utils.parsedate_to_datetime(value)
        except (TypeError, ValueError, IndexError):
            return None
        return max(0.0, moment.timestamp() - now)
    return seconds if math.isfinite(seconds) and seconds >= 0 else None


def standard_wait(headers: Mapping[str, str], now: float) -> float | None:
    """The wait asked for by the headers every provider uses: `retry-after-ms`, then
    `retry-after`. None when they say nothing usable."""
    milliseconds = header(headers, "retry-after-ms")
    if milliseconds is not None:
        try:
            value = float(milliseconds) / 1000
        except ValueError:
            value = -1.0
        if math.isfinite(value) and value >= 0:
            return value
    retry_after = header(headers, "retry-after")
    return parse_retry_after(retry_after, now) if retry_after is not None else None


@dataclass(frozen=True, slots=True)
class ErrorDetails:
    """What a provider module read from an error response, in provider-neutral terms."""

    code: str = ""
    message: str = ""
    quota_exhausted: bool = False  # the body's code or type says retrying cannot help
    # the body says the request is over the model's context window (a larger model may take it)
    context_exceeded: bool = False
    reset_wait: float | None = None  # from the provider's rate-limit reset headers


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "…"


def classify_opening_failure(
    status: int,
    details: ErrorDetails,
    headers: Mapping[str, str] | None = None,
    *,
    now: float | None = None,
) -> OpenFailure:
    """Classify an HTTP error received while opening a stream.

    Retryable: 408, 409, 429, 5xx (529 included). Terminal: an exhausted quota (whatever
    the headers say) and every other status (400, 401, 403, 404, 422 …). The
    `x-should-retry: true|false` header overrides the status. The wait is the standard
    headers' (`retry-after-ms`, `retry-after`), else the provider's reset headers'.
    """
    headers = headers or {}
    now = time.time() if now is None else now
    detail = f" {details.code}" if details.code else ""
    text = f": {_one_line(details.message)}" if details.message else ""
    summary = f"HTTP {status}{detail}{text}"
    if details.quota_exhausted:
        return OpenFailure(
            f"quota exhausted, retrying cannot help ({summary})",
            retryable=False,
            status=status,
            kind=FailureKind.QUOTA_EXHAUSTED,
        )
    if details.context_exceeded and 400 <= status < 500:
        return OpenFailure(
            f"the input is over the model's context window ({summary})",
            retryable=False,
            status=status,
            kind=FailureKind.CONTEXT_WINDOW,
        )
    retryable = status in RETRYABLE_STATUSES or status >= 500
    should_retry = (header(headers, "x-should-retry") or "").lower()
    if should_retry in {"true", "false"}:
        retryable = should_retry == "true"
        summary += f" (x-should-retry: {should_retry})"
    wait = standard_wait(headers, now)
    return OpenFailure(
        summary,
        retryable=retryable,
        status=status,
        retry_after=details.reset_wait if wait is None else wait,
    )
