"""The Bedrock Converse side of the gating engine (`lockgate.proxy`): the client tools of a
native `converse-stream` body, the events that begin an action, and the exception message
boto3 raises on.

- **Requests**: `POST …/model/{modelId}/converse-stream` (a stream, in the AWS event stream:
  `ProtocolTarget.framing` "eventstream", `proxy.framing.eventstream`) and
  `POST …/model/{modelId}/converse` (a whole JSON answer, judged as the stream it is the
  snapshot of). The model is the path's, URL-decoded (ids and inference-profile ARNs hold
  `:` and `/`, which SDKs send as `%3A` and `%2F`: `%2F` is allowed there, only there,
  `encoded_slash_allowed`). `invoke` and `invoke-with-response-stream` (Anthropic models'
  Messages in Bedrock's wire) are targets judged by another gateway
  (`ProtocolTarget.gateway`): `invoke.InvokeGateway`, Anthropic's meaning with this wire.
- **Tools**: `toolConfig.tools[].toolSpec` (`name`, `description`, `inputSchema.json`);
  a `cachePoint` or a system tool is no client tool.
- **Actions**: a `contentBlockStart` (Bedrock starts only `toolUse` and `toolResult` blocks),
  a `contentBlockDelta` that carries `toolUse` or `toolResult`, `messageStop` (the stop
  reason) and any other event hold the stream; `messageStart`, text and reasoning deltas and
  `contentBlockStop` are forwarded as they come.
- **A whole response** (`converse`) is judged as `messageStart`, per block its deltas (a
  `toolUse` with a `contentBlockStart` and its whole input as one fragment), `messageStop`
  and `metadata`; a block of a kind the decoder does not read refuses it.
- **The error**: in the stream, an `exception` message (`:exception-type`
  `serviceUnavailableException` when a new request may succeed, else
  `modelStreamErrorException`, both declared by ConverseStream) with `{"message"}`: boto3's
  `EventStream` raises `EventStreamError` on it. A refused whole answer or the proxy's own
  error is Bedrock's JSON error body, `{"message", "__type"}` (botocore reads the error code
  from `__type` when no `x-amzn-errortype` header names it) and boto3 raises `ClientError`.
- **No keep-alive**: the event stream has none (`proxy.framing.eventstream`).
- **The control plane** (`control_plane`, `control_plane_base`): Claude Code on Bedrock
  (`CLAUDE_CODE_SKIP_BEDROCK_AUTH=1`, `ANTHROPIC_BEDROCK_BASE_URL` at the proxy) sends its
  control-plane reads to its one base URL too: `GET /inference-profiles?type=SYSTEM_DEFINED`
  (ListInferenceProfiles, at start) and `GET /inference-profiles/{id}` (GetInferenceProfile,
  an application inference profile's backing model; the id an ARN, its `/` as `%2F`).
  These and the model listings (`GET /foundation-models`, `…/{id}`) are no model request:
  they pass ungated, with the route's held credentials, to the control plane's host
  (`bedrock.{region}.amazonaws.com` for a route whose upstream is
  `bedrock-runtime.{region}.amazonaws.com`; signed for service `bedrock` either way).
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping, Sequence
from typing import Any
from urllib.parse import quote, unquote

from ...conversation import ToolSpec
from ...gateway import ProtocolTarget, Refusal, declared_tools, sse_frame
from ...sse import ServerSentEvent
from ..decoding import compact_json, malformed
from .decoder import BedrockDecoder
from .framing import EXCEPTION_PREFIX, WIRE, EventStreamWire
from .invoke import InvokeGateway

__all__ = ["GATEWAY", "BedrockGateway"]

_STREAM, _WHOLE = "converse-stream", "converse"
# `…/model/{modelId}/converse-stream` or `…/converse`: the model one path segment.
_PATH = re.compile(
    r"/model/(?P<model>[^/]+)/"
    r"(?P<operation>converse-stream|converse|invoke-with-response-stream|invoke)$"
)
# The control plane's reads a Bedrock client sends to its runtime base URL (the route's prefix
# removed): inference profiles (Claude Code) and foundation models.
_CONTROL_PLANE = re.compile(r"^/(?:inference-profiles|foundation-models)(?:/[^/]+)?$")
# Its one-resource reads, at the end of a path as the client sent it (the prefix kept).
_CONTROL_PLANE_ID = re.compile(r"/(?:inference-profiles|foundation-models)/(?P<id>[^/]+)$")
_RUNTIME_HOST = re.compile(
    r"^(?P<scheme>https?://)bedrock-runtime(?P<fips>-fips)?"
    r"(?P<rest>\.[a-z0-9-]+\.amazonaws\.com(?::\d+)?)(?P<path>/.*)?$",
    re.IGNORECASE,
)
_INVOKE_OPERATIONS = frozenset({"invoke-with-response-stream", "invoke"})
_STREAMED = ProtocolTarget(stream=True, framing="eventstream")
_WHOLE_TARGET = ProtocolTarget(stream=False)
# Forwarded as they come (a delta only when it carries no call): everything else holds.
_PREVIEW = frozenset({"messageStart", "contentBlockDelta", "contentBlockStop"})
_ACTION_KEYS = (b'"toolUse"', b'"toolResult"')  # a JSON key, never a string's inside
# The proxy's own errors as Bedrock names them, by status.
_PROXY_ERRORS = {
    400: "ValidationException",
    401: "UnrecognizedClientException",
    403: "AccessDeniedException",
    404: "ResourceNotFoundException",
    408: "ModelTimeoutException",
    413: "ValidationException",
    429: "ThrottlingException",
    502: "ModelErrorException",
    503: "ServiceUnavailableException",
    504: "ModelTimeoutException",
}


class BedrockGateway:
    """The Bedrock Converse gateway."""

    path_endings = ("/converse-stream", "/converse", "/invoke-with-response-stream", "/invoke")
    key_header = "authorization"  # a Bedrock API key, as `Bearer KEY`
    keyed_paths = re.compile(
        r"/model/[^/]+/(?:converse-stream|converse|invoke-with-response-stream|invoke)$"
    )
    eventstream: EventStreamWire = WIRE  # what its messages mean (`proxy.framing.eventstream`)

    def target(self, method: str, path: str, query: Mapping[str, str]) -> ProtocolTarget | None:
        if method.upper() != "POST":
            return None
        found = _PATH.search(path.rstrip("/"))
        if found is None:
            return None
        operation = found.group("operation")
        if operation in _INVOKE_OPERATIONS:
            return INVOKE.target(method, path, query)  # Anthropic's meaning, this wire
        return _STREAMED if operation == _STREAM else _WHOLE_TARGET

    def encoded_slash_allowed(self, path: str) -> bool:
        """Whether every `%2F` of `path` is inside the model id of a model path (an
        inference-profile ARN's `/`, as every AWS SDK sends it) or the id of a control-plane
        read (`GET …/inference-profiles/{id}`), and the id, decoded, holds no empty, `.` or
        `..` part: one label, never a path the upstream could walk."""
        found = _PATH.search(path.rstrip("/"))
        label = "model"
        if found is None:
            found, label = _CONTROL_PLANE_ID.search(path.rstrip("/")), "id"
        if found is None:
            return False
        start, end = found.span(label)
        if "%2f" in (path[:start] + path[end:]).lower():
            return False
        parts = unquote(found.group(label)).split("/")
        return all(part not in ("", ".", "..") for part in parts)

    def control_plane(self, method: str, path: str) -> bool:
        """Whether a request (its plain path, the route's prefix removed) is one of the
        control plane's reads a Bedrock client sends to its runtime base URL."""
        return method.upper() == "GET" and _CONTROL_PLANE.search(path.rstrip("/")) is not None

    def control_plane_base(self, base: str) -> str:
        """Where a control-plane read goes for an upstream at `base`: the control plane's
        host in place of bedrock-runtime's (`bedrock[-fips].{region}.amazonaws.com`); any
        other base (a loopback stand-in, a private endpoint) as it is."""
        found = _RUNTIME_HOST.match(base)
        if found is None:
            return base
        scheme, fips, rest, path = found.group("scheme", "fips", "rest", "path")
        return f"{scheme}bedrock{fips or ''}{rest}{path or ''}"

    def wants_stream(self, request: Mapping[str, Any], target: ProtocolTarget) -> bool:
        return target.stream is True  # the path says it

    def ungateable(self, method: str, path: str, query: Mapping[str, Sequence[str]]) -> str | None:
        return None

    def claims(self, path: str, headers: Mapping[str, str], query: Mapping[str, str]) -> bool:
        # Every AWS SDK request carries `amz-sdk-invocation-id`; Bedrock's paths `/model/…`.
        return path.startswith("/model/") or "amz-sdk-invocation-id" in headers

    def client_error_body(self, status: int, message: str, param: str | None = None) -> bytes:
        kind = _PROXY_ERRORS.get(
            status, "ValidationException" if status < 500 else "InternalServerException"
        )
        return _json_bytes({"message": message, "__type": kind})

    def request_problem(self, request: Mapping[str, Any]) -> tuple[str, str | None] | None:
        return None

    def with_model(
        self, path: str, request: Mapping[str, Any], model: str
    ) -> tuple[str, dict[str, Any]]:
        found = _PATH.search(path.rstrip("/"))
        if found is None:
            return path, dict(request)
        start, end = found.span("model")
        return path[:start] + quote(model, safe=":") + path[end:], dict(request)

    def request_model(self, path: str, request: Mapping[str, Any]) -> str | None:
        found = _PATH.search(path.rstrip("/"))
        return unquote(found.group("model")) if found is not None else None

    def tools(
        self, request: Mapping[str, Any], *, validate_schemas: bool = False
    ) -> tuple[ToolSpec, ...]:
        config = request.get("toolConfig")
        declared = config.get("tools") if isinstance(config, dict) else None
        return declared_tools(declared, _client_tool, validate_schemas=validate_schemas)

    def new_decoder(self) -> BedrockDecoder:
        return BedrockDecoder()

    def begins_hold(self, event: ServerSentEvent) -> bool:
        name = event.event
        if name not in _PREVIEW:
            return True  # a block start (a call), the stop reason, anything else
        if name == "contentBlockDelta":
            data = event.data
            return any(key in data for key in _ACTION_KEYS)
        return False

    def unreadable_action(self, event: ServerSentEvent) -> str | None:
        return None  # a block the decoder cannot replay fails in the decoder

    def is_finish(self, event: ServerSentEvent) -> bool:
        return event.event == "messageStop"

    def whole_stream(self, response: Mapping[str, Any]) -> bytes:
        output = response.get("output")
        message = output.get("message") if isinstance(output, dict) else None
        content = message.get("content") if isinstance(message, dict) else None
        if not isinstance(content, list):
            raise malformed("the response's output.message.content must be a list of blocks")
        frames = [_frame("messageStart", {"role": "assistant"})]
        for index, block in enumerate(content):
            frames.extend(_block_frames(index, block))
        frames.append(_frame("messageStop", {"stopReason": response.get("stopReason")}))
        usage = response.get("usage")
        if isinstance(usage, dict):
            metadata: dict[str, Any] = {"usage": usage}
            if isinstance(response.get("metrics"), dict):
                metadata["metrics"] = response["metrics"]
            frames.append(_frame("metadata", metadata))
        return b"".join(frames)

    def error_body(self, refusal: Refusal) -> bytes:
        kind = "ServiceUnavailableException" if refusal.transient else "ModelErrorException"
        return _json_bytes({"message": refusal.message, "__type": kind})

    def skipped(self, event: ServerSentEvent) -> bool:
        return False  # the decoder reads every message (an unknown event type as progress)

    def is_keepalive(self, event: ServerSentEvent) -> bool:
        return False

    def keepalive(self) -> bytes:
        return b":\n\n"  # an SSE comment: only an SSE framing would send it (none is used)

    def keepalive_event(self) -> ServerSentEvent | None:
        return None

    def refusal_frame(self, refusal: Refusal, last: ServerSentEvent | None) -> bytes:
        return b"".join(sse_frame(event) for event in self.refusal_events(refusal, last))

    def refusal_events(
        self, refusal: Refusal, last: ServerSentEvent | None
    ) -> list[ServerSentEvent]:
        kind = "serviceUnavailableException" if refusal.transient else "modelStreamErrorException"
        payload = _json_bytes({"message": refusal.message})
        return [ServerSentEvent(EXCEPTION_PREFIX + kind, payload)]


def _json_bytes(value: Mapping[str, Any]) -> bytes:
    return compact_json(dict(value)).encode("utf-8", "backslashreplace")


def _frame(name: str, payload: Mapping[str, Any]) -> bytes:
    return sse_frame(ServerSentEvent(name, _json_bytes(payload)))


def _delta(index: int, delta: Mapping[str, Any]) -> bytes:
    return _frame("contentBlockDelta", {"contentBlockIndex": index, "delta": dict(delta)})


def _block_frames(index: int, block: object) -> list[bytes]:
    """One whole content block as ConverseStream streams it (see the module docstring)."""
    stop = _frame("contentBlockStop", {"contentBlockIndex": index})
    if not isinstance(block, dict):
        return [_delta(index, {"unknown": block}), stop]  # the decoder refuses it
    if "toolUse" in block and isinstance(block["toolUse"], dict):
        tool = dict(block["toolUse"])
        value = tool.pop("input", {})
        start = _frame(
            "contentBlockStart", {"contentBlockIndex": index, "start": {"toolUse": tool}}
        )
        text = json.dumps(value, separators=(",", ":"), ensure_ascii=False)
        pieces = [] if value == {} else [_delta(index, {"toolUse": {"input": text}})]
        return [start, *pieces, stop]
    if "toolResult" in block and isinstance(block["toolResult"], dict):
        result = dict(block["toolResult"])
        found = result.pop("content", [])
        start = _frame(
            "contentBlockStart", {"contentBlockIndex": index, "start": {"toolResult": result}}
        )
        return [start, _delta(index, {"toolResult": found}), stop]
    reasoning = block.get("reasoningContent")
    if isinstance(reasoning, dict):
        pieces = []
        said = reasoning.get("reasoningText")
        if isinstance(said, dict):
            pieces.append(_delta(index, {"reasoningContent": {"text": said.get("text", "")}}))
            if "signature" in said:
                signature = {"signature": said["signature"]}
                pieces.append(_delta(index, {"reasoningContent": signature}))
        if "redactedContent" in reasoning:
            redacted = {"redactedContent": reasoning["redactedContent"]}
            pieces.append(_delta(index, {"reasoningContent": redacted}))
        if not pieces:
            pieces.append(_delta(index, {"reasoningContent": reasoning}))  # refused there
        return [*pieces, stop]
    return [_delta(index, block), stop]  # text as it is; another kind the decoder refuses


def _client_tool(tool: dict[str, Any]) -> tuple[object, object, object] | None:
    """A declared `toolSpec`'s (name, description, inputSchema.json); None for a
    `cachePoint` or a system tool."""
    spec = tool.get("toolSpec")
    if not isinstance(spec, dict):
        return None
    schema = spec.get("inputSchema")
    return (
        spec.get("name"),
        spec.get("description"),
        (schema.get("json") if isinstance(schema, dict) else None),
    )


GATEWAY = BedrockGateway()
INVOKE = InvokeGateway(GATEWAY)  # the invoke paths' gateway (`invoke.py`)
