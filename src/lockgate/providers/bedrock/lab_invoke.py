"""Bedrock InvokeModel for Anthropic models in the lab and in `lockgate serve --provider
bedrock`: `POST /model/{modelId}/invoke-with-response-stream` answered with the Anthropic
renderer's events, each in a `chunk` message (`invoke.chunk_message`: base64 of the event's
JSON), and `POST /model/{modelId}/invoke` with the Anthropic `Message` as a whole answer.

- **The renderer** (`InvokeRenderer`): the Anthropic lab renderer's meaning (events, the
  whole answer, where a tool result goes) in Bedrock's wire (the event stream, Bedrock's JSON
  error bodies, no rate-limit reset header). An Anthropic `error` event becomes the
  `exception` message Bedrock sends in its place (`overloaded_error` →
  `serviceUnavailableException`, any other → `modelStreamErrorException`); a frame the
  Anthropic renderer writes raw (a cut JSON) is sent as a `chunk` holding those bytes.
- **The lab's client** (`INVOKE_LAB`, the lab variant `bedrock-invoke`): the Anthropic
  request body as Bedrock's invoke takes it (no `model`, no `stream`; `anthropic_version`
  kept), posted to the invoke path; the body read by the event-stream framer with
  `invoke.InvokeWire`'s mapping and judged by the Anthropic decoder, an `exception` message
  being the provider error `decoder.exception_failure` makes of it.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from typing import TYPE_CHECKING, Any, Literal
from urllib.parse import unquote

from ...conversation import Message, ToolSpec
from ...errors import FailureKind, ResponseFailure
from ...eventstream import MEDIA_TYPE, MIN_MESSAGE_BYTES, EventStreamDecoder, EventStreamError
from ...scripted.renderer import Frame
from ...scripted.reply import LAB_MODEL, OpeningError, Reply
from ...sse import ServerSentEvent
from ..anthropic.codec import AnthropicCodec
from ..anthropic.gateway import GATEWAY as ANTHROPIC
from ..base import CodecOptions, Provider
from .codec import _model_segment
from .decoder import exception_failure
from .errors import classify_bedrock_failure
from .framing import ERROR_PREFIX, EXCEPTION_PREFIX, failure_of
from .invoke import WIRE, chunk_message
from .render import bedrock_error_body, frame_bytes

if TYPE_CHECKING:
    from ...codec import StreamDecoder
    from ...events import StreamEvent
    from ...gateway import Gateway
    from ...scripted.renderer import Renderer
    from ...scripted.scenario import Scenario
    from ...transport import Transport, TransportOptions

__all__ = [
    "ANTHROPIC_VERSION",
    "INVOKE_LAB",
    "InvokeCodec",
    "InvokeRenderer",
    "invoke_path",
    "is_invoke_path",
]

ANTHROPIC_VERSION = "bedrock-2023-05-31"
STREAM_OPERATION = "invoke-with-response-stream"


def invoke_path(model: str, *, stream: bool = True) -> str:
    """The InvokeModel path of `model` (`stream`: with response stream)."""
    return f"/model/{_model_segment(model)}/{STREAM_OPERATION if stream else 'invoke'}"


def _operation(path: str) -> str | None:
    parts = path.split("?", 1)[0].split("/")
    if len(parts) != 4 or parts[0] != "" or parts[1] != "model" or not unquote(parts[2]):
        return None
    return parts[3]


def is_invoke_path(path: str) -> bool:
    return _operation(path) in (STREAM_OPERATION, "invoke")


def _anthropic() -> Renderer:
    from ..anthropic.render import RENDERER

    return RENDERER


def _raw_chunk(raw: object) -> bytes:
    """A frame the Anthropic renderer writes raw: bytes go as they are (an event-stream
    fault); SSE text has its `data:` lines' content sent in a `chunk`."""
    if isinstance(raw, bytes):
        return raw
    data = [line[5:].lstrip() for line in str(raw).splitlines() if line.startswith("data:")] or [
        str(raw)
    ]
    return chunk_message("\n".join(data).encode("utf-8"))


class InvokeRenderer:
    """InvokeModel for Anthropic models, as `lockgate serve --provider bedrock` answers it
    (see the module docstring)."""

    provider = "bedrock"
    path = invoke_path(LAB_MODEL)
    stream_query = ""
    media_type = MEDIA_TYPE

    def answers(self, path: str) -> bool:
        return is_invoke_path(path)

    def is_streaming(self, path: str, body: object) -> bool:
        return _operation(path) == STREAM_OPERATION

    def base_url(self, origin: str) -> str:
        return origin

    def events(self, reply: Reply) -> list[Frame]:
        return _anthropic().events(reply)

    def frame(self, event: Frame) -> bytes:
        if "raw" in event and "type" not in event:
            return _raw_chunk(event["raw"])
        if "exception" in event:
            return frame_bytes(event)
        if event.get("type") == "error":
            error = event.get("error")
            kind = error.get("type") if isinstance(error, Mapping) else None
            text = error.get("message", "") if isinstance(error, Mapping) else ""
            name = (
                "serviceUnavailableException"
                if kind == "overloaded_error"
                else "modelStreamErrorException"
            )
            return frame_bytes({"exception": name, "message": text})
        data = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
        return chunk_message(data.encode("utf-8"))

    def endless_event(self, kind: Literal["text", "unknown"]) -> Frame:
        return _anthropic().endless_event(kind)

    def completion(self, reply: Reply) -> dict[str, Any]:
        return _anthropic().completion(reply)

    def error_body(self, error: OpeningError) -> dict[str, Any]:
        return bedrock_error_body(error)

    def reset_headers(self, seconds: float) -> dict[str, str]:
        return {}  # Bedrock states no rate-limit reset time

    def tool_result(self, request: Mapping[str, Any], call_id: str) -> str | None:
        return _anthropic().tool_result(request, call_id)


RENDERER = InvokeRenderer()


# --- the lab's client ----------------------------------------------------------------------


class _InvokeFramer:
    """The event stream read with InvokeWire's mapping: each `chunk` its Anthropic event."""

    __slots__ = ("_decoder",)

    cut = False  # a cut body raises in `finish`

    def __init__(self, max_event_bytes: int) -> None:
        self._decoder = EventStreamDecoder(max(MIN_MESSAGE_BYTES, max_event_bytes))

    def feed(self, chunk: bytes) -> list[ServerSentEvent]:
        try:
            messages = self._decoder.feed(chunk)
        except EventStreamError as error:
            raise failure_of(error) from None
        return [WIRE.as_event(message) for message in messages]

    def finish(self) -> list[ServerSentEvent]:
        try:
            self._decoder.finish()
        except EventStreamError as error:
            raise failure_of(error) from None
        return []


class _InvokeDecoder:
    """The Anthropic decoder, with the stream's `exception` and `error` messages as the
    provider errors they are; nothing is read after one."""

    def __init__(self) -> None:
        self._inner: StreamDecoder = ANTHROPIC.new_decoder()
        self._failed = False

    def canonical_data(self) -> bytes | None:
        return self._inner.canonical_data()

    def end_of_stream(self) -> Sequence[StreamEvent]:
        return () if self._failed else self._inner.end_of_stream()

    def decode(self, event: ServerSentEvent) -> Sequence[StreamEvent]:
        name = event.event or ""
        if self._failed:
            what = f"{name or 'an event'} after the stream's exception"
            raise ResponseFailure(FailureKind.LIFECYCLE, what)
        if name.startswith(EXCEPTION_PREFIX):
            self._failed = True
            return (exception_failure(name[len(EXCEPTION_PREFIX) :], event.data),)
        if name.startswith(ERROR_PREFIX):
            self._failed = True
            return (exception_failure(name[len(ERROR_PREFIX) :], b""),)
        return self._inner.decode(event)


class InvokeCodec:
    """The Anthropic request as Bedrock's invoke takes it, and its stream's reader."""

    provider = "bedrock-invoke"

    def __init__(self, inner: AnthropicCodec) -> None:
        self._inner = inner
        self.model = inner.model

    @classmethod
    def from_options(cls, options: CodecOptions) -> InvokeCodec:
        return cls(AnthropicCodec(options.model, max_output_tokens=options.max_output_tokens))

    @property
    def producer(self) -> str:
        return f"{self.provider}:{self.model}"

    def encode(self, history: Sequence[Message], tools: Sequence[ToolSpec]) -> dict[str, Any]:
        request = self._inner.encode(history, tools)
        request.pop("stream", None)  # the path says it; `model` goes in the path too
        return {"anthropic_version": ANTHROPIC_VERSION, **request}

    def new_decoder(self) -> _InvokeDecoder:
        return _InvokeDecoder()

    def new_framer(self, max_event_bytes: int) -> _InvokeFramer:
        return _InvokeFramer(max_event_bytes)


def _transport(options: TransportOptions) -> Transport:
    from .transport import BedrockTransport

    class InvokeTransport(BedrockTransport):
        """Opens InvokeModelWithResponseStream event streams."""

        def url(self, model: str) -> str:
            return f"{self._base_url}{invoke_path(model)}"

    return InvokeTransport(options)


def _gateway() -> Gateway:
    from .gateway import INVOKE

    return INVOKE


def _render() -> Renderer:
    return RENDERER


def _scenarios() -> Sequence[Scenario]:
    return ()


def _unplayable() -> Mapping[str, str]:
    from .scenarios import NEUTRAL_NOT_EXPRESSIBLE

    wire = ("framing-variants", "giant-frame", "rate-limit-reset-header")
    return {name: NEUTRAL_NOT_EXPRESSIBLE[name] for name in wire}


INVOKE_LAB = Provider(
    name="bedrock-invoke",
    title="AWS Bedrock InvokeModelWithResponseStream (Anthropic models)",
    key_variable="AWS_BEARER_TOKEN_BEDROCK",
    base_url_variable="AWS_ENDPOINT_URL_BEDROCK_RUNTIME",
    default_model="us.anthropic.claude-sonnet-4-5-20250929-v1:0",
    base_url_hint="https://bedrock-runtime.us-east-1.amazonaws.com",
    make_codec=InvokeCodec.from_options,
    make_transport=_transport,
    classify_error=classify_bedrock_failure,
    gateway=_gateway,
    render=_render,
    scenarios=_scenarios,
    unplayable=_unplayable,
)
"""The lab's variant of the Bedrock provider for the invoke paths (not in the registry: the
lab and `serve` reach it through the Bedrock renderer, `BedrockRenderer.for_path`)."""
