"""The Responses WebSocket mode as the lab's scripted server speaks it (`lab/websocket.py`):
which client messages ask for a response, and the wrapped error that answers a request with
an HTTP status.

A client asks for a response with a `response.create` message whose fields are the HTTP
request body's at the top level (`model`, `input`, `tools`, `previous_response_id` …; a
`response` object holding them is taken too); any other message (`response.processed` …)
asks for none. An HTTP error is one `error` message carrying the `status`, the error body's
`error` object and the headers the HTTP answer would have had, as OpenAI sends it and as
Codex reads it (a wrapped error with a non-2xx `status` is that HTTP status to it). A
scripted body that ends without a terminal message (a clean end mid-response) is a close
with 1000 on the socket (`ends_response`).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import Any

from .websocket import TERMINAL_TYPES

__all__ = ["CREATE", "ends_response", "request_of", "wrapped_error"]

CREATE = "response.create"


def request_of(message: object) -> dict[str, Any] | None:
    """The request body a client message carries, or None (not a `response.create`)."""
    if type(message) is not dict or message.get("type") != CREATE:
        return None
    inner = message.get("response")
    body = dict(inner) if type(inner) is dict else dict(message)
    body.pop("type", None)
    body["stream"] = True  # a response on the socket always streams
    return body


def ends_response(message: bytes) -> bool:
    """Whether a server message ends its response (`response.completed`, `.incomplete`,
    `.failed`, `error`)."""
    try:
        value: Any = json.loads(message)
    except (ValueError, RecursionError):
        return False
    return type(value) is dict and value.get("type") in TERMINAL_TYPES


def wrapped_error(
    status: int, body: Mapping[str, Any], headers: Mapping[str, str]
) -> dict[str, Any]:
    """The `error` message for an HTTP error `status` with its JSON `body` and headers."""
    error = body.get("error")
    message: dict[str, Any] = {
        "type": "error",
        "status": status,
        "error": dict(error) if isinstance(error, Mapping) else dict(body),
    }
    if headers:
        message["headers"] = dict(headers)
    return message
