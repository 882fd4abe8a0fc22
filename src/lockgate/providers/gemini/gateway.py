"""The Gemini side of the gating engine (`lockgate.proxy`): the Gemini API's and Vertex AI's
`generateContent` requests, their function declarations, the chunks that begin an action,
and the error google-genai and Gemini CLI raise on.

- **Requests**: `POST …/models/{model}:streamGenerateContent?alt=sse` (a stream) and
  `POST …/models/{model}:generateContent` (a whole answer), on the Gemini API
  (`/v1beta/models/…`, `/v1beta/tunedModels/…`) and Vertex AI (`/v1/projects/{p}/locations/
  {l}/publishers/google/models/{m}:…`, and a tuned model's `…/endpoints/{e}:…`). A
  `streamGenerateContent` without `alt=sse` answers one JSON array, which the engine does
  not read: it is refused (400) before anything is sent.
- **Tools**: every `functionDeclarations` entry of the request's `tools` (either spelling,
  lowerCamelCase or snake_case, as the API reads both): its name and its schema,
  `parametersJsonSchema` (JSON Schema, as it is; preferred) or `parameters` (the API's
  OpenAPI subset, read as the JSON Schema it means: `json_schema`). Other tools
  (`googleSearch`, `codeExecution`, …) are the provider's.
- **Held from**: the first chunk that is not text or thought text alone: a `functionCall`,
  a part the provider executed, any part or field the gateway does not know, and the
  `finishReason`.
- **Refused**: a part that carries a call spelled `function_call` (snake_case): the
  decoder reads only `functionCall` (and reads a part holding text and `function_call` as
  the text), while google-genai reads either spelling as the part's call.
- **The error**: a chunk `{"error": {"code", "message", "status"}}`: google-genai raises
  `APIError` on a chunk whose first key is `error` (a `ServerError` for 5xx, a
  `ClientError` for 4xx). Transient: 503 `UNAVAILABLE`; else 400 `FAILED_PRECONDITION`.
- **Keep-alives**: a blank line. Gemini's clients read no SSE comment: google-genai and
  Gemini CLI's `@google/genai` take a `:` line for the start of a JSON error, and the latter
  never reads past it; both skip blank lines.
- **A whole response** is the stream of one chunk: itself.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from typing import Any

from ...conversation import ToolSpec
from ...gateway import ProtocolTarget, Refusal, declared_tools, event_object, sse_frame
from ...sse import ServerSentEvent
from ..decoding import compact_json
from .decoder import GeminiDecoder

__all__ = ["GATEWAY", "GeminiGateway", "json_schema"]

KEEPALIVE = b"\n"
_REQUEST = re.compile(
    r"/(?:models|tunedModels)/(?P<model>[^/:]+):(?P<method>streamGenerateContent|generateContent)$"
)
# A tuned model's endpoint on Vertex AI: the same methods, a resource that names no model.
_ENDPOINT = re.compile(r"/endpoints/[^/:]+:(?P<method>streamGenerateContent|generateContent)$")
_STREAMED = ProtocolTarget(stream=True)
_WHOLE = ProtocolTarget(stream=False)
_ARRAY = ProtocolTarget(
    stream=True,
    problem=(
        "a streamGenerateContent request without alt=sse is answered as one JSON array, "
        "which lockgate does not gate; ask for alt=sse (google-genai and Gemini CLI do)"
    ),
)
# The part fields of text alone: forwarded at once. Anything else holds the stream.
_PREVIEW_PART = frozenset({"text", "thought", "thoughtSignature"})
# The fields of a chunk that hold no action: forwarded at once.
_PREVIEW_CHUNK = frozenset({"candidates", "usageMetadata", "modelVersion", "responseId"})
_PREVIEW_CANDIDATE = frozenset(
    {"content", "index", "safetyRatings", "citationMetadata", "avgLogprobs"}
)
# The proxy's own errors in Google's shape: the status name by HTTP status.
_STATUS = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    413: "INVALID_ARGUMENT",
    426: "FAILED_PRECONDITION",
    429: "RESOURCE_EXHAUSTED",
    502: "UNAVAILABLE",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
# A part's call in the spelling the decoder does not read and google-genai does (its models
# take snake_case field names too).
_SNAKE_CALL = "function_call"
_MAYBE_SNAKE_CALL = (b"_call", b"\\u")  # one of these is in the data of any such part
# The Schema fields the API also reads in snake_case, by their lowerCamelCase names.
_SNAKE_KEYWORDS = {
    "any_of": "anyOf",
    "min_items": "minItems",
    "max_items": "maxItems",
    "min_length": "minLength",
    "max_length": "maxLength",
    "min_properties": "minProperties",
    "max_properties": "maxProperties",
    "property_ordering": "propertyOrdering",
}
# The Schema's int64 fields, which protobuf's JSON writes as strings ("1").
_COUNTS = frozenset(
    {"minItems", "maxItems", "minLength", "maxLength", "minProperties", "maxProperties"}
)
_OPENAPI_TYPES = {
    "STRING": "string",
    "NUMBER": "number",
    "INTEGER": "integer",
    "BOOLEAN": "boolean",
    "ARRAY": "array",
    "OBJECT": "object",
    "NULL": "null",
}


class GeminiGateway:
    """The Gemini native gateway."""

    path_endings = (":streamGenerateContent", ":generateContent")

    def target(self, method: str, path: str, query: Mapping[str, str]) -> ProtocolTarget | None:
        if method.upper() != "POST":
            return None
        trimmed = path.rstrip("/")
        found = _REQUEST.search(trimmed) or _ENDPOINT.search(trimmed)
        if found is None:
            return None
        if found.group("method") == "generateContent":
            return _WHOLE
        return _STREAMED if query.get("alt", "").lower() == "sse" else _ARRAY

    def wants_stream(self, request: Mapping[str, Any], target: ProtocolTarget) -> bool:
        return target.stream is True  # the path says it: the body has no `stream`

    key_header = "x-goog-api-key"

    # A model's (or a Vertex AI endpoint's) `:generateContent`, `:streamGenerateContent` and
    # `:countTokens` (Gemini CLI counts before it sends).
    keyed_paths = re.compile(
        r"/(?:(?:models|tunedModels)|endpoints)/[^/:]+"
        r":(?:streamGenerateContent|generateContent|countTokens)$"
    )

    def ungateable(self, method: str, path: str, query: Mapping[str, Sequence[str]]) -> str | None:
        return None

    def claims(self, path: str, headers: Mapping[str, str], query: Mapping[str, str]) -> bool:
        # google-genai and Gemini CLI send `x-goog-api-key` (or `key=`) and `x-goog-api-client`.
        return any(name in headers for name in ("x-goog-api-key", "x-goog-api-client")) or (
            "key" in query
        )

    def client_error_body(self, status: int, message: str, param: str | None = None) -> bytes:
        return _frame_data(
            {
                "error": {
                    "code": status,
                    "message": message,
                    "status": _STATUS.get(status, "UNKNOWN"),
                }
            }
        )

    def request_problem(self, request: Mapping[str, Any]) -> tuple[str, str | None] | None:
        return None

    def with_model(
        self, path: str, request: Mapping[str, Any], model: str
    ) -> tuple[str, dict[str, Any]]:
        found = _REQUEST.search(path.rstrip("/"))
        if found is None:
            return path, dict(request)
        start, end = found.span("model")  # the path names the model
        return path[:start] + model + path[end:], dict(request)

    def request_model(self, path: str, request: Mapping[str, Any]) -> str | None:
        found = _REQUEST.search(path.rstrip("/"))
        return None if found is None else found.group("model")

    def tools(
        self, request: Mapping[str, Any], *, validate_schemas: bool = False
    ) -> tuple[ToolSpec, ...]:
        return declared_tools(
            _declarations(request), _declared_fields, validate_schemas=validate_schemas
        )

    def new_decoder(self) -> GeminiDecoder:
        return GeminiDecoder()

    def begins_hold(self, event: ServerSentEvent) -> bool:
        payload = event_object(event)
        if payload is None or not set(payload) <= _PREVIEW_CHUNK:
            return True
        candidates = payload.get("candidates")
        if candidates is None:
            return False
        if type(candidates) is not list:
            return True
        for candidate in candidates:
            if type(candidate) is not dict or not set(candidate) <= _PREVIEW_CANDIDATE:
                return True  # a finishReason, and whatever the gateway does not know
            content = candidate.get("content")
            if content is None:
                continue
            parts = content.get("parts") if type(content) is dict else None
            if type(parts) is not list:
                return True
            if any(type(part) is not dict or not set(part) <= _PREVIEW_PART for part in parts):
                return True
        return False

    def unreadable_action(self, event: ServerSentEvent) -> str | None:
        # A part the decoder cannot replay fails in the decoder; a call it does not read,
        # beside what it does read, fails here.
        data = event.data
        if not any(marker in data for marker in _MAYBE_SNAKE_CALL):
            return None
        payload = event_object(event)
        candidates = payload.get("candidates") if payload is not None else None
        for candidate in candidates if type(candidates) is list else ():
            content = candidate.get("content") if type(candidate) is dict else None
            parts = content.get("parts") if type(content) is dict else None
            for part in parts if type(parts) is list else ():
                if type(part) is dict and part.get(_SNAKE_CALL) is not None:
                    return (
                        "a part holds a call spelled `function_call`, which google-genai "
                        "reads as a call and lockgate does not; the response is refused"
                    )
        return None

    def is_finish(self, event: ServerSentEvent) -> bool:
        payload = event_object(event)
        candidates = payload.get("candidates") if payload is not None else None
        if type(candidates) is not list:
            return payload is None
        return any(
            type(candidate) is not dict or candidate.get("finishReason") is not None
            for candidate in candidates
        )

    def whole_stream(self, response: Mapping[str, Any]) -> bytes:
        return _frame(response)

    def error_body(self, refusal: Refusal) -> bytes:
        return _frame_data(_error(refusal))

    def skipped(self, event: ServerSentEvent) -> bool:
        return False

    def is_keepalive(self, event: ServerSentEvent) -> bool:
        return False

    def keepalive(self) -> bytes:
        return KEEPALIVE

    def keepalive_event(self) -> ServerSentEvent | None:
        return None  # the framing's own

    def refusal_frame(self, refusal: Refusal, last: ServerSentEvent | None) -> bytes:
        return b"".join(sse_frame(event) for event in self.refusal_events(refusal, last))

    def refusal_events(
        self, refusal: Refusal, last: ServerSentEvent | None
    ) -> list[ServerSentEvent]:
        return [ServerSentEvent(None, _frame_data(_error(refusal)))]


def _field(mapping: Mapping[str, Any], *names: str) -> Any:
    """The first of `names` (the API's lowerCamelCase, or its snake_case) that is given."""
    for name in names:
        if mapping.get(name) is not None:
            return mapping[name]
    return None


def _declarations(request: Mapping[str, Any]) -> list[dict[str, Any]]:
    tools = request.get("tools")
    if not isinstance(tools, list):
        return []
    found: list[dict[str, Any]] = []
    for tool in tools:
        if not isinstance(tool, dict):
            continue
        declared = _field(tool, "functionDeclarations", "function_declarations")
        if isinstance(declared, list):
            found.extend(entry for entry in declared if isinstance(entry, dict))
    return found


def _declared_fields(declaration: dict[str, Any]) -> tuple[object, object, object]:
    """A function declaration's name, description and schema: `parametersJsonSchema` as it
    is, else `parameters` as the JSON Schema it means."""
    schema = _field(declaration, "parametersJsonSchema", "parameters_json_schema")
    if schema is None:
        openapi = declaration.get("parameters")
        schema = None if openapi is None else json_schema(openapi)
    return declaration.get("name"), declaration.get("description"), schema


def json_schema(openapi: object, depth: int = 0) -> object:
    """The JSON Schema an OpenAPI-subset schema of the Gemini API means: its upper-case
    types lower-cased; `nullable: true` as null allowed beside the rest (a `null` type
    beside the other, null among the `enum` values, a `null` alternative of `anyOf`);
    the fields the API also reads in snake_case (`any_of`, `min_items` …) under their
    lowerCamelCase names (the latter win when both are given); the int64 counts protobuf
    writes as strings (`"minItems": "1"`) as numbers; every other keyword as it is (nested
    schemas converted alike)."""
    if depth > 64 or not isinstance(openapi, dict):
        return openapi
    converted: dict[str, Any] = {}
    for name, value in openapi.items():
        given = str(name)  # a JSON object's keys are strings
        key = _SNAKE_KEYWORDS.get(given, given)
        if key != given and key in openapi:
            continue  # both spellings: the lowerCamelCase one is read
        if key == "type" and isinstance(value, str):
            converted[key] = _OPENAPI_TYPES.get(value.upper(), value)
        elif key == "nullable":
            continue
        elif key == "properties" and isinstance(value, dict):
            converted[key] = {name: json_schema(sub, depth + 1) for name, sub in value.items()}
        elif key == "items":
            converted[key] = json_schema(value, depth + 1)
        elif key in ("anyOf", "oneOf", "allOf") and isinstance(value, list):
            converted[key] = [json_schema(sub, depth + 1) for sub in value]
        elif key in _COUNTS and isinstance(value, str) and value.isascii() and value.isdigit():
            converted[key] = int(value)
        else:
            converted[key] = value
    if openapi.get("nullable") is True:
        kind, values, alternatives = (converted.get(k) for k in ("type", "enum", "anyOf"))
        if isinstance(kind, str):
            converted["type"] = [kind, "null"]
        if isinstance(values, list) and None not in values:
            converted["enum"] = [*values, None]
        if isinstance(alternatives, list):
            converted["anyOf"] = [*alternatives, {"type": "null"}]
    return converted


def _error(refusal: Refusal) -> dict[str, Any]:
    code, status = (503, "UNAVAILABLE") if refusal.transient else (400, "FAILED_PRECONDITION")
    return {"error": {"code": code, "message": refusal.message, "status": status}}


def _frame_data(payload: Mapping[str, Any]) -> bytes:
    return compact_json(dict(payload)).encode("utf-8", "backslashreplace")


def _frame(payload: Mapping[str, Any]) -> bytes:
    return b"data: " + _frame_data(payload) + b"\n\n"


GATEWAY = GeminiGateway()
