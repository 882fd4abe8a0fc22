"""The transport seam: how a request is opened, and what a transport is built from.

A transport opens one streaming request and hands back a closable stream of bytes; it owns
its connections. `TransportOptions` are what every provider's transport is made from (the
key, the base URL, timeouts, the HTTP backend); `ErrorClassifier` turns a failed opening's
status, body and headers into an `OpenFailure`. Nothing here knows any one provider or HTTP
library.
"""

from __future__ import annotations

import math
import urllib.parse
from collections.abc import AsyncIterator, Callable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Literal, Protocol

from .credentials import api_key_problem
from .errors import OpenFailure

if TYPE_CHECKING:
    import httpx2

__all__ = [
    "ByteStream",
    "ErrorClassifier",
    "HttpBackend",
    "Transport",
    "TransportOptions",
    "base_url_problem",
    "check_timeout",
]


def check_timeout(value: float, name: str) -> float:
    """A positive, finite number of seconds (ValueError otherwise): a NaN timer never
    fires, an infinite one never bounds anything."""
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"{name} must be a number of seconds")
    if not (math.isfinite(value) and value > 0):
        raise ValueError(f"{name} must be a positive, finite number of seconds")
    return float(value)


def base_url_problem(text: str) -> str | None:
    """None for an http(s) URL with a host, a valid port and no `user:password@` (the key
    comes from the environment, never from the URL); else a one-line reason."""
    if not text:
        return "the URL is empty"
    if any(c.isspace() or not c.isprintable() for c in text):
        return "the URL must not contain spaces or control characters"
    try:
        parts = urllib.parse.urlsplit(text)
        port = parts.port
    except ValueError as exc:
        return f"{text!r} is not a valid URL ({exc})"
    if parts.scheme not in {"http", "https"} or not parts.hostname:
        return f"{text!r} is not an http(s) URL with a host"
    if parts.username is not None or parts.password is not None:
        return "the URL must not carry user:password (the key comes from the environment)"
    if port == 0:
        return f"{text!r} has port 0"
    return None


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


HttpBackend = Literal["aiohttp", "httpx"]


@dataclass(frozen=True, slots=True)
class TransportOptions:
    """What a transport is built from. `timeout` bounds connecting and sending;
    `read_timeout` an optional per-read limit in the HTTP client (default none: the
    client's silence watchdog bounds every wait, and a per-read timer costs CPU on every
    read; if set, keep it above the client's idle timeout); `trust_env=False` ignores proxy
    variables (the lab's own loopback server); `backend`: the aiohttp-backed HTTP client
    (default, the faster) or the httpx one, where the provider's SDK has both;
    `http_transport` replaces the network (tests: an `httpx2.MockTransport`)."""

    api_key: str
    base_url: str | None = None
    timeout: float = 30.0
    read_timeout: float | None = None
    trust_env: bool = True
    backend: HttpBackend = "aiohttp"
    http_transport: httpx2.AsyncBaseTransport | None = None

    def __post_init__(self) -> None:
        problem = api_key_problem(self.api_key)  # refused before any request, never echoed
        if problem is not None:
            raise ValueError(f"api_key: {problem}")
        if self.base_url is not None and (problem := base_url_problem(self.base_url)):
            raise ValueError(f"base_url: {problem}")
        check_timeout(self.timeout, "timeout")
        if self.read_timeout is not None:
            check_timeout(self.read_timeout, "read_timeout")
        if self.backend not in ("aiohttp", "httpx"):
            raise ValueError("backend must be 'aiohttp' or 'httpx'")


# status, the error body (parsed JSON, or what the SDK made of it), the response headers
ErrorClassifier = Callable[[int, object, Mapping[str, str]], OpenFailure]
