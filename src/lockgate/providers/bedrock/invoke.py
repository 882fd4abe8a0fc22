"""Bedrock InvokeModel for Anthropic models: Anthropic Messages in Bedrock's wire, gated as
a pair, never a branch: the Anthropic gateway's meaning (`providers/anthropic/gateway.py`:
its decoder, tools, holds, finish, whole answer) with Bedrock's routing, keys, errors and event
stream, with this module's message mapping.

- **Requests**: `POST …/model/{modelId}/invoke-with-response-stream` (a stream, the AWS
  event stream) and `POST …/model/{modelId}/invoke` (a whole JSON answer: an Anthropic
  Messages response, judged as the stream it is the snapshot of). The body is an Anthropic
  Messages body without `model` and `stream` (`anthropic_version`, `anthropic_beta` kept as
  they are): its `tools` are the declared tools. A body without `anthropic_version` (another
  model's) is refused with 400 before it is sent (`request_problem`). The Bedrock gateway's
  `target` names this gateway (`ProtocolTarget.gateway`) for these paths.
- **The mapping** (`InvokeWire`): a `chunk` event's payload is `{"bytes": <base64>}` (and
  maybe Bedrock's padding `p`), the base64 of one Anthropic event's JSON; the event read is
  that JSON, named by its `type`. An `exception` message (`modelStreamErrorException`,
  `throttlingException` …) or an `error` message is read as the Anthropic `error` event it
  means (`{"type": "error", "error": {"code": <its type>, "type": "overloaded_error" when
  ConverseStream's table calls it transient, else "model_stream_error", "message"}}`), so the
  Anthropic decoder fails the response as `provider_error` whatever came before; any other
  event type, or a chunk that holds no JSON object with a `type`, is `malformed_event`. An
  event is written back as a `chunk` message (the message as it came when unchanged: the
  framing sends its bytes).
- **The error**: in the stream, an `exception` message (`modelStreamErrorException`, or
  `serviceUnavailableException` when a new request may succeed, both declared by
  InvokeModelWithResponseStream): boto3 raises `EventStreamError` on it, the Anthropic
  Bedrock SDK's decoder raises on its status. A refused whole answer or the proxy's own
  error is Bedrock's JSON error body (boto3 raises `ClientError`).
- **Lab**: `invoke_stream` wraps Anthropic events (the Anthropic renderer's) as `chunk`
  messages, `render_invoke` a neutral reply so.
"""

from __future__ import annotations

import base64
import binascii
import json
import re
from collections.abc import Iterable, Mapping, Sequence
from typing import TYPE_CHECKING, Any

from ...conversation import ToolSpec
from ...errors import FailureKind, ResponseFailure
from ...eventstream import EventMessage, EventStreamError, encode_message
from ...gateway import Gateway, ProtocolTarget, Refusal
from ...sse import ServerSentEvent
from ..anthropic.gateway import GATEWAY as ANTHROPIC
from ..decoding import compact_json
from .decoder import exception_failure
from .framing import (
    ERROR_PREFIX,
    EXCEPTION_PREFIX,
    as_event,
    as_message,
    failure_of,
    message_headers,
)

if TYPE_CHECKING:
    from ...codec import StreamDecoder
    from ...scripted.reply import Reply

__all__ = ["INVOKE_PATH", "InvokeGateway", "InvokeWire", "invoke_stream", "render_invoke"]

CHUNK = "chunk"
# `…/model/{modelId}/invoke-with-response-stream` or `…/invoke`: the model one path segment.
INVOKE_PATH = re.compile(
    r"/model/(?P<model>[^/]+)/(?P<operation>invoke-with-response-stream|invoke)$"
)


def _malformed(what: str) -> ResponseFailure:
    return ResponseFailure(FailureKind.MALFORMED_EVENT, f"an invoke stream's {what}")


class InvokeWire:
    """InvokeModelWithResponseStream's messages as the Anthropic events they carry
    (`proxy.framing.eventstream.EventStreamMapping`; see the module docstring)."""

    __slots__ = ()

    def as_event(self, message: EventMessage) -> ServerSentEvent:
        event = as_event(message)
        name = event.event or ""
        if name.startswith((EXCEPTION_PREFIX, ERROR_PREFIX)):
            return _anthropic_error(name, event.data)
        if name != CHUNK:
            raise _malformed(f"event of type {name!r} (only chunk events carry the answer)")
        try:
            payload = json.loads(event.data)
            data = base64.b64decode(payload["bytes"], validate=True)
            inner = json.loads(data)
        except (ValueError, TypeError, KeyError, binascii.Error):
            raise _malformed("chunk holds no base64 of a JSON event") from None
        kind = inner.get("type") if isinstance(inner, dict) else None
        if not isinstance(kind, str) or not kind or kind.startswith(":"):
            raise _malformed("chunk holds an event without a type")
        return ServerSentEvent(kind, data)

    def as_message(self, event: ServerSentEvent) -> bytes:
        name = event.event or ""
        if name.startswith((EXCEPTION_PREFIX, ERROR_PREFIX)):
            return as_message(event)
        return chunk_message(event.data)

    def failure_of(self, error: EventStreamError) -> ResponseFailure:
        return failure_of(error)


WIRE = InvokeWire()


def _anthropic_error(name: str, data: bytes) -> ServerSentEvent:
    """An `exception` or `error` message as the Anthropic `error` event it means."""
    if name.startswith(EXCEPTION_PREFIX):
        kind = name[len(EXCEPTION_PREFIX) :]
        failure = exception_failure(kind, data)
        text, transient = failure.message.removeprefix("provider error: "), failure.transient
    else:
        kind = name[len(ERROR_PREFIX) :]
        text, transient = f"{kind}: {data.decode('utf-8', 'replace')}", False
    error = {
        "code": kind,
        "type": "overloaded_error" if transient else "model_stream_error",
        "message": text,
    }
    payload = {"type": "error", "error": error}
    return ServerSentEvent("error", compact_json(payload).encode("utf-8", "backslashreplace"))


def chunk_message(data: bytes) -> bytes:
    """One Anthropic event's JSON as the `chunk` message Bedrock sends it in."""
    payload = {"bytes": base64.b64encode(data).decode("ascii")}
    return encode_message(message_headers(CHUNK), json.dumps(payload).encode("ascii"))


class InvokeGateway:
    """Anthropic Messages on Bedrock's invoke paths: the Anthropic gateway's meaning,
    Bedrock's paths, keys and errors (see the module docstring)."""

    eventstream = WIRE

    def __init__(self, bedrock: Gateway) -> None:
        """`bedrock`: the Bedrock gateway, whose paths, keys and errors these are."""
        self._bedrock = bedrock
        self.path_endings = ("/invoke-with-response-stream", "/invoke")
        self.key_header = bedrock.key_header
        self.keyed_paths = bedrock.keyed_paths
        self.streamed = ProtocolTarget(stream=True, framing="eventstream", gateway=self)
        self.whole = ProtocolTarget(stream=False, gateway=self)

    # --- Bedrock's: the request's path, keys, errors -------------------------------------

    def target(self, method: str, path: str, query: Mapping[str, str]) -> ProtocolTarget | None:
        if method.upper() != "POST":
            return None
        found = INVOKE_PATH.search(path.rstrip("/"))
        if found is None:
            return None
        return self.whole if found.group("operation") == "invoke" else self.streamed

    def wants_stream(self, request: Mapping[str, Any], target: ProtocolTarget) -> bool:
        return target.stream is True  # the path says it

    def request_problem(self, request: Mapping[str, Any]) -> tuple[str, str | None] | None:
        if "anthropic_version" in request:
            return None
        return (
            "lockgate gates Bedrock InvokeModel for Anthropic models only (a Messages body "
            "with anthropic_version); use Converse or ConverseStream for other models",
            "anthropic_version",
        )

    def with_model(
        self, path: str, request: Mapping[str, Any], model: str
    ) -> tuple[str, dict[str, Any]]:
        return self._bedrock.with_model(path, request, model)

    def request_model(self, path: str, request: Mapping[str, Any]) -> str | None:
        return self._bedrock.request_model(path, request)

    def ungateable(self, method: str, path: str, query: Mapping[str, Sequence[str]]) -> str | None:
        return None

    def claims(self, path: str, headers: Mapping[str, str], query: Mapping[str, str]) -> bool:
        return self._bedrock.claims(path, headers, query)

    def client_error_body(self, status: int, message: str, param: str | None = None) -> bytes:
        return self._bedrock.client_error_body(status, message, param)

    def error_body(self, refusal: Refusal) -> bytes:
        return self._bedrock.error_body(refusal)

    def refusal_frame(self, refusal: Refusal, last: ServerSentEvent | None) -> bytes:
        return self._bedrock.refusal_frame(refusal, last)

    def refusal_events(
        self, refusal: Refusal, last: ServerSentEvent | None
    ) -> list[ServerSentEvent]:
        return self._bedrock.refusal_events(refusal, last)

    def keepalive(self) -> bytes:
        return self._bedrock.keepalive()

    def keepalive_event(self) -> ServerSentEvent | None:
        return None  # the event stream has none

    # --- Anthropic's: what the answer means ----------------------------------------------

    def tools(
        self, request: Mapping[str, Any], *, validate_schemas: bool = False
    ) -> tuple[ToolSpec, ...]:
        return ANTHROPIC.tools(request, validate_schemas=validate_schemas)

    def new_decoder(self) -> StreamDecoder:
        return ANTHROPIC.new_decoder()

    def begins_hold(self, event: ServerSentEvent) -> bool:
        return ANTHROPIC.begins_hold(event)

    def unreadable_action(self, event: ServerSentEvent) -> str | None:
        return ANTHROPIC.unreadable_action(event)

    def is_finish(self, event: ServerSentEvent) -> bool:
        return ANTHROPIC.is_finish(event)

    def whole_stream(self, response: Mapping[str, Any]) -> bytes:
        return ANTHROPIC.whole_stream(response)

    def skipped(self, event: ServerSentEvent) -> bool:
        return ANTHROPIC.skipped(event)

    def is_keepalive(self, event: ServerSentEvent) -> bool:
        return ANTHROPIC.is_keepalive(event)


# --- the lab -----------------------------------------------------------------------------


def invoke_stream(events: Iterable[Mapping[str, Any]]) -> bytes:
    """Anthropic events (JSON objects with their `type`) as an invoke stream's body."""
    return b"".join(chunk_message(compact_json(dict(event)).encode("utf-8")) for event in events)


def render_invoke(reply: Reply) -> bytes:
    """A neutral reply as InvokeModelWithResponseStream streams it for an Anthropic model."""
    from ..anthropic.render import RENDERER

    return invoke_stream(RENDERER.events(reply))
