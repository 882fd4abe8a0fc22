"""Failures at the provider boundary, each with a machine-readable kind."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

from .conversation import Message


class FailureKind(StrEnum):
    """Why a response could not become a decision. Values appear in traces and the CLI."""

    OPENING = "opening"  # the request could not be opened (HTTP status, connection)
    QUOTA_EXHAUSTED = "quota_exhausted"  # a 429 whose body says the quota is spent
    CONTEXT_WINDOW = "context_window"  # a 400 whose body says the input is over the window
    RETRY_WAIT_TOO_LONG = "retry_wait_too_long"  # the server asked for a longer wait than allowed
    STREAM_ENDED = "stream_ended"  # end of stream without a terminal event
    TRANSPORT = "transport"  # the connection failed after the stream was acquired
    MALFORMED_EVENT = "malformed_event"  # bytes or JSON that do not form a valid event
    BOUND_EXCEEDED = "bound_exceeded"  # a size or count limit was passed
    PROVIDER_ERROR = "provider_error"  # the provider sent an `error` event
    RESPONSE_FAILED = "response_failed"  # the provider reported the response failed
    RESPONSE_INCOMPLETE = "response_incomplete"  # e.g. cut off by the output limit
    LIFECYCLE = "lifecycle"  # start/identity/order/finish-reason rules broken
    CALL_MISMATCH = "call_mismatch"  # terminal calls differ from the streamed ones
    INVALID_BATCH = "invalid_batch"  # a requested call failed validation
    UNSUPPORTED_OUTPUT = "unsupported_output"  # an output item this adapter cannot replay
    CLEANUP = "cleanup"  # closing the stream failed
    IDLE_TIMEOUT = "idle_timeout"  # no bytes arrived for the idle timeout
    DEADLINE = "deadline"  # the response took longer than its total deadline


@dataclass(frozen=True, slots=True)
class Recovery:
    """How a failed response may enter history under a recovery contract: the assistant
    message with its calls, and one `error: …` observation per call (same order). Nothing
    in it is executed."""

    message: Message
    observations: tuple[str, ...]


class ResponseFailure(Exception):
    """One response failed; nothing it requested may run."""

    def __init__(
        self,
        kind: FailureKind,
        message: str,
        *,
        recovery: Recovery | None = None,
        transient: bool = False,
    ) -> None:
        super().__init__(message)
        self.kind = kind
        self.message = message
        self.recovery = recovery
        self.transient = transient  # the provider said a retry may succeed

    def __str__(self) -> str:
        return f"{self.kind}: {self.message}"


class OpenFailure(ResponseFailure):
    """Opening the stream failed before any response byte arrived.

    `retry_after` is the wait the server asked for (seconds), when it said one.
    """

    def __init__(
        self,
        message: str,
        *,
        retryable: bool,
        status: int | None = None,
        kind: FailureKind = FailureKind.OPENING,
        retry_after: float | None = None,
    ) -> None:
        super().__init__(kind, message)
        self.retryable = retryable
        self.status = status
        self.retry_after = retry_after


class StreamInterrupted(Exception):
    """The byte stream broke after it was acquired (raised by transports)."""
