"""The retry owner's policy: only opening a stream is ever retried."""

from __future__ import annotations

import random
from collections.abc import Awaitable, Callable
from dataclasses import dataclass

from .errors import OpenFailure

_RANDOM = random.Random()

Sleep = Callable[[float], Awaitable[None]]


@dataclass(frozen=True, slots=True)
class RetryPolicy:
    """At most `attempts` openings; delay before attempt n+1 is base·2ⁿ ± jitter."""

    attempts: int = 3
    base_delay: float = 0.25
    max_delay: float = 8.0
    jitter: float = 0.10

    def __post_init__(self) -> None:
        if self.attempts < 1:
            raise ValueError("attempts must be at least 1")
        if self.base_delay < 0 or self.max_delay < 0 or not 0 <= self.jitter < 1:
            raise ValueError("delays must be non-negative and jitter in [0, 1)")

    def backoff(self, failed_attempts: int, rng: random.Random | None = None) -> float:
        """Delay after `failed_attempts` (1-based) failed openings."""
        generator = rng or _RANDOM
        delay = min(self.base_delay * 2.0 ** (failed_attempts - 1), self.max_delay)
        return delay * generator.uniform(1 - self.jitter, 1 + self.jitter)


def classify_http_failure(status: int, body: object) -> OpenFailure:
    """Classify an HTTP error received while opening a stream.

    Retryable: 5xx (including 529, overloaded). Terminal: every other status (401, 429 …).
    """
    error = body.get("error") if isinstance(body, dict) else None
    if not isinstance(error, dict):
        error = body if isinstance(body, dict) else {}
    code = error.get("code") or error.get("type")
    message = error.get("message")
    detail = f" {code}" if isinstance(code, str) and code else ""
    text = f": {_one_line(message)}" if isinstance(message, str) and message else ""
    return OpenFailure(f"HTTP {status}{detail}{text}", retryable=status >= 500, status=status)


def _one_line(text: str, limit: int = 300) -> str:
    flat = " ".join(text.split())
    return flat if len(flat) <= limit else flat[:limit] + "…"
