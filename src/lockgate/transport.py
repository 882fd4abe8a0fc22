"""The transport seam: open a request, get a closable stream of bytes."""

from __future__ import annotations

import math
from collections.abc import AsyncIterator, Mapping
from typing import Any, Protocol


def check_timeout(value: float, name: str) -> float:
    """A positive, finite number of seconds (ValueError otherwise): a NaN timer never
    fires, an infinite one never bounds anything."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number of seconds")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive, finite number of seconds")
    return float(value)


class ByteStream(Protocol):
    """An acquired response body. Iterating raises StreamInterrupted on transport errors."""

    def __aiter__(self) -> AsyncIterator[bytes]: ...

    async def aclose(self) -> None: ...


class Transport(Protocol):
    """Opens one streaming request. Raises OpenFailure (retryable or not) before any byte of
    the response body arrived; owns its connections and closes them in `aclose`. After
    `aclose`, `open` raises a non-retryable OpenFailure. `attempt` counts the retries before
    this opening (0 for the first), so that a transport can tell the server (the SDKs'
    `x-stainless-retry-count`)."""

    async def open(self, request: Mapping[str, Any], *, attempt: int = 0) -> ByteStream: ...

    async def aclose(self) -> None: ...
