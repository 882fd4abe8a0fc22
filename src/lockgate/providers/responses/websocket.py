"""The Responses API's WebSocket mode, as the proxy's relay needs it (`proxy/relay.py`,
`proxy/framing/websocket.py`): the message that ends a refused response, the messages that
end a response, and the upstream's connection limit.

- **The refusal** is one wrapped error message, `{"type": "error", "status": 5xx, "error":
  {"type", "code", "message", "param"}}`, then the relay closes the socket. Codex reads a
  wrapped error with a non-2xx `status` as that HTTP status on a request
  (`codex-api/src/endpoint/responses_websocket.rs`: `map_wrapped_websocket_error_event`):
  it shows it with its body and drops the socket; a 5xx it retries on a new socket (five
  times; then it falls back to HTTP for the rest of the session), a 4xx it does not retry.
  An `error` without `status` it would read as an event and go on waiting. `status` is 503
  when a new request may succeed (the refusal is transient: a cut, silence, the deadline, a
  transient provider error), else 400 (an invalid batch, a bound, a model refusal: the same
  request would get the same answer; tried with Codex 0.171: it shows the reason and ends
  the turn, still on the WebSocket);
  `type` and `code` are the HTTP stream error's (`server_error` / `lockgate_refused`,
  `lockgate_<kind>`), the message lockgate's reason.
- **A response ends** with `response.completed`, `.incomplete`, `.failed` or an `error`
  message (`TERMINAL_TYPES`): the relay's per-response body ends after it.
- **The connection limit** (`websocket_connection_limit_reached`, after 60 minutes on one
  socket): an `error` whose `error.code` says it; the relay passes it as it came (Codex
  retries it on a new socket) instead of a refusal.
"""

from __future__ import annotations

import json
from typing import Any

from ...gateway import Refusal
from ...sse import ServerSentEvent
from ..decoding import compact_json

__all__ = [
    "CONNECTION_LIMIT_CODE",
    "TERMINAL_TYPES",
    "WIRE",
    "ResponsesWebSocketWire",
    "is_connection_limit",
    "refusal_status",
]

TERMINAL_TYPES = frozenset(
    {"response.completed", "response.incomplete", "response.failed", "error"}
)
CONNECTION_LIMIT_CODE = "websocket_connection_limit_reached"


def refusal_status(refusal: Refusal) -> int:
    """The HTTP status a refusal's wrapped error states: 503 when a new request may
    succeed (Codex retries it), else 400 (Codex shows it and does not retry)."""
    return 503 if refusal.transient else 400


def is_connection_limit(message: bytes) -> bool:
    """Whether an upstream message is the connection limit's wrapped error."""
    if CONNECTION_LIMIT_CODE.encode() not in message:
        return False
    try:
        value: Any = json.loads(message)
    except (ValueError, RecursionError):
        return False
    error = value.get("error") if type(value) is dict and value.get("type") == "error" else None
    return type(error) is dict and error.get("code") == CONNECTION_LIMIT_CODE


class ResponsesWebSocketWire:
    """The Responses gateway's WebSocket wire (`ResponsesGateway.websocket`)."""

    def refusal_message(self, refusal: Refusal, last: ServerSentEvent | None) -> bytes:
        error = {
            "type": "server_error" if refusal.transient else "lockgate_refused",
            "code": f"lockgate_{refusal.kind}",
            "message": refusal.message,
            "param": None,
        }
        message = {"type": "error", "status": refusal_status(refusal), "error": error}
        return compact_json(message).encode("utf-8", "backslashreplace")


WIRE = ResponsesWebSocketWire()
