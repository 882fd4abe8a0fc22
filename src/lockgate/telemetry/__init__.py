"""Telemetry seams: what the proxy (and `lockgate run`, the transport) tell a tracer about
one request, and nothing else. The tracer is an observer: it never changes a request, never
fails one, and never receives a prompt, an argument, a key, a token or a path.

The proxy builds one `RequestTrace` per admitted request (`Tracing.request`), one
`AttemptTrace` per upstream attempt (whose `headers()` carry the trace context upstream), and
ends the request with a `RequestSummary` read from its flow. `NO_TRACING` is the default: off.
The OpenTelemetry implementation lives in `lockgate.telemetry.otel` (the `otel` extra).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Protocol

__all__ = [
    "NO_TRACING",
    "AttemptTrace",
    "RequestSummary",
    "RequestTrace",
    "TokenUsage",
    "Tracing",
]


@dataclass(frozen=True, slots=True)
class TokenUsage:
    """Tokens as the response stated them (None: not stated)."""

    input_tokens: int | None = None
    output_tokens: int | None = None


@dataclass(frozen=True, slots=True)
class RequestSummary:
    """One request when it ended, with only low-cardinality, secret-free facts.

    `protocol` is lockgate's protocol name (`responses`, `chat`, `anthropic`, `gemini`, …),
    `operation` the GenAI operation (`chat`, `generate_content`, …), `error_type` a
    lockgate refusal kind (`lockgate.invalid_batch`, …) or None when nothing was refused,
    `outcome` what became of the request (the proxy's outcome vocabulary), times on the
    monotonic clock the request was started with."""

    protocol: str | None
    operation: str
    route: str
    outcome: str
    started: float
    ended: float
    status: int = 0
    request_model: str | None = None
    response_model: str | None = None
    finish_reasons: tuple[str, ...] = ()
    usage: TokenUsage | None = None
    error_type: str | None = None
    first_token_at: float | None = None
    released_calls: int = 0
    withheld_calls: int = 0
    retries: int = 0
    streaming: bool = True


class AttemptTrace(Protocol):
    """One attempt upstream."""

    def headers(self) -> Mapping[str, str]:
        """The trace context to send upstream with this attempt (empty: none)."""
        ...

    def end(self, status: int | None, error_type: str | None) -> None:
        """The attempt is over: the status it answered (None: no answer) and, if it failed,
        a low-cardinality kind."""
        ...


class RequestTrace(Protocol):
    """One request, from admission to its end."""

    def attempt(self, number: int, upstream: str, fallback: bool) -> AttemptTrace:
        """Attempt `number` (1-based) begins, to the upstream named `upstream` (a configured
        name or host, never a URL path or key)."""
        ...

    def end(self, summary: RequestSummary) -> None: ...


class Tracing(Protocol):
    """A tracer: one `RequestTrace` per request. `client_headers` are the client's request
    headers, read only for trace context (`traceparent`, `tracestate`)."""

    def request(self, client_headers: Mapping[str, str], started: float) -> RequestTrace: ...


class _NoAttempt:
    __slots__ = ()

    def headers(self) -> Mapping[str, str]:
        return {}

    def end(self, status: int | None, error_type: str | None) -> None:
        pass


class _NoRequest:
    __slots__ = ()

    def attempt(self, number: int, upstream: str, fallback: bool) -> AttemptTrace:
        return _NO_ATTEMPT

    def end(self, summary: RequestSummary) -> None:
        pass


class _NoTracing:
    __slots__ = ()

    def request(self, client_headers: Mapping[str, str], started: float) -> RequestTrace:
        return _NO_REQUEST


_NO_ATTEMPT = _NoAttempt()
_NO_REQUEST = _NoRequest()
NO_TRACING: Tracing = _NoTracing()
