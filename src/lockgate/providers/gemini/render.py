"""The Gemini protocol in the lab: replies rendered as the live API streams them (every SSE
`data:` a whole `GenerateContentResponse`, CRLF framing, no end sentinel, calls whole in one
part, thought parts, `thoughtSignature` on the first part after the thinking, `usageMetadata`
as a running total on every chunk, the finish in a separate chunk with an empty text part as
Gemini 3 sends it), the non-streaming `GenerateContentResponse`, Google error bodies with
`RetryInfo` / `QuotaFailure` details, and where Gemini wants tool results.

How neutral reply parts render, as the real API would send them:

- `Say`: text parts; `Think`: `thought: true` parts, its opaque value (as base64, which
  Gemini's signatures are) the `thoughtSignature` of the next part (the first text or call
  after it, as Gemini 2.5 and 3 place it), or of an empty text part in the finish chunk
  when nothing follows.
- `Refuse`: Gemini has no refusal of its own: the model's refusal is answer text.
- `Call`: a `functionCall` part, whole, with the call's id when it has one (Gemini 3.5 sends
  ids; an empty id renders the 2.x shape, without). A call cut off by the output limit is
  never sent (Gemini sends calls whole, never their fragments); a call whose arguments are
  not a JSON object cannot be sent either: the provider parses calls itself, and the
  response ends `MALFORMED_FUNCTION_CALL` instead.
- `ProviderTool`: a server-side Google Search, as Gemini 3 reports it (`toolCall` and
  `toolResponse` parts).
- `Broken`: a frame whose JSON is cut off.
- Endings: `complete` → `STOP`, `truncated` → `MAX_TOKENS`, `error` → an `UNAVAILABLE`
  error chunk, `failed` → an `INTERNAL` error chunk, `open` → nothing; Gemini has no paused
  responses (`paused` raises).

Four neutral scenarios cannot be expressed on Gemini at all (`scenarios.
NEUTRAL_NOT_EXPRESSIBLE` says which, and why).

`ChunkBuilder` authors such streams, chunk by chunk, and keeps the final content.
"""

from __future__ import annotations

import base64
import binascii
import json
from collections.abc import Mapping, Sequence
from typing import Any, Literal

from ...scripted.renderer import Frame, FunctionCallsOnly, walk
from ...scripted.reply import (
    LAB_MODEL,
    Call,
    OpeningError,
    ProviderTool,
    Refuse,
    Reply,
    ReplyUsage,
    Say,
    Think,
    split,
)
from ...scripted.script import Turn
from .codec import API_VERSION, stream_path
from .decoder import SIGNATURE

__all__ = [
    "PER_DAY",
    "PER_MINUTE",
    "RENDERER",
    "ChunkBuilder",
    "GeminiRenderer",
    "base64_signature",
    "gemini_error_body",
    "google_error",
    "quota_failure",
    "render",
    "retry_info",
    "usage_metadata",
]

PATH = stream_path(LAB_MODEL)
_METHODS = frozenset({"streamGenerateContent", "generateContent"})
DEFAULT_USAGE = ReplyUsage()

# HTTP status → the gRPC status Google states beside it.
_STATUSES: dict[int, str] = {
    400: "INVALID_ARGUMENT",
    401: "UNAUTHENTICATED",
    403: "PERMISSION_DENIED",
    404: "NOT_FOUND",
    408: "DEADLINE_EXCEEDED",
    409: "ABORTED",
    429: "RESOURCE_EXHAUSTED",
    499: "CANCELLED",
    500: "INTERNAL",
    501: "NOT_IMPLEMENTED",
    503: "UNAVAILABLE",
    504: "DEADLINE_EXCEEDED",
}
_HELP = {
    "@type": "type.googleapis.com/google.rpc.Help",
    "links": [
        {
            "description": "Learn more about Gemini API quotas",
            "url": "https://ai.google.dev/gemini-api/docs/rate-limits",
        }
    ],
}


def _duration(seconds: float) -> str:
    """Seconds as a protobuf Duration in JSON (`12s`, `1.5s`)."""
    return f"{seconds:.9f}".rstrip("0").rstrip(".") + "s"


def retry_info(seconds: float) -> dict[str, Any]:
    return {"@type": "type.googleapis.com/google.rpc.RetryInfo", "retryDelay": _duration(seconds)}


QUOTA_METRIC = "generativelanguage.googleapis.com/generate_content_free_tier_requests"


def quota_failure(quota_id: str, value: str = "15") -> dict[str, Any]:
    return {
        "@type": "type.googleapis.com/google.rpc.QuotaFailure",
        "violations": [
            {
                "quotaMetric": QUOTA_METRIC,
                "quotaId": quota_id,
                "quotaDimensions": {"location": "global", "model": LAB_MODEL},
                "quotaValue": value,
            }
        ],
    }


PER_MINUTE = "GenerateRequestsPerMinutePerProjectPerModel-FreeTier"
PER_DAY = "GenerateRequestsPerDayPerProjectPerModel-FreeTier"


def google_error(
    code: int, message: str, details: Sequence[Mapping[str, Any]] = ()
) -> dict[str, Any]:
    """Google's error document: `{"error": {code, message, status[, details]}}`."""
    error: dict[str, Any] = {
        "code": code,
        "message": message,
        "status": _STATUSES.get(code, "UNKNOWN"),
    }
    if details:
        error["details"] = [dict(detail) for detail in details]
    return {"error": error}


def gemini_error_body(error: OpeningError) -> dict[str, Any]:
    """A neutral opening error as Google writes it. Google states the wait in the body
    (`RetryInfo`), so `reset_seconds` goes there, not into headers."""
    details: list[dict[str, Any]] = []
    if error.kind == "quota":
        details = [quota_failure(PER_DAY, "250"), _HELP]
    elif error.kind == "rate_limit":
        details = [quota_failure(PER_MINUTE), _HELP]
    elif error.kind == "auth" and error.status == 400:
        details = [
            {
                "@type": "type.googleapis.com/google.rpc.ErrorInfo",
                "reason": "API_KEY_INVALID",
                "domain": "googleapis.com",
            }
        ]
    if error.reset_seconds is not None:
        details.append(retry_info(error.reset_seconds))
    return google_error(error.status, error.message, details)


def usage_metadata(
    usage: ReplyUsage, candidates: int | None = None, thoughts: int | None = None
) -> dict[str, Any]:
    """A `usageMetadata` for `usage` (lockgate's terms: Gemini counts thoughts apart from
    the candidates, both in the output); `candidates` / `thoughts` for a running total
    before the end."""
    final_thoughts = usage.reasoning_tokens
    final_candidates = max(0, usage.output_tokens - final_thoughts)
    candidates = final_candidates if candidates is None else min(candidates, final_candidates)
    thoughts = final_thoughts if thoughts is None else min(thoughts, final_thoughts)
    metadata: dict[str, Any] = {
        "promptTokenCount": usage.input_tokens,
        "candidatesTokenCount": candidates,
        "totalTokenCount": usage.input_tokens + candidates + thoughts,
        "promptTokensDetails": [{"modality": "TEXT", "tokenCount": usage.input_tokens}],
    }
    if usage.cached_input_tokens:
        metadata["cachedContentTokenCount"] = usage.cached_input_tokens
    if thoughts:
        metadata["thoughtsTokenCount"] = thoughts
    return metadata


class ChunkBuilder:
    """Authors a realistic Gemini `streamGenerateContent` SSE stream, chunk by chunk.
    `index` None omits the candidate index (Gemini 2.0-flash and Vertex AI do)."""

    def __init__(
        self,
        response_id: str,
        model: str = LAB_MODEL,
        usage: ReplyUsage | None = DEFAULT_USAGE,
        *,
        index: int | None = 0,
    ) -> None:
        self.response_id = response_id
        self.model = model
        self.usage = usage
        self.index = index
        self.events: list[Frame] = []
        self.parts: list[dict[str, Any]] = []  # the final content, for the non-streaming form
        self.finish_reason: str | None = None
        self._chunks = 0  # chunks with content so far (the running candidate count)

    def _envelope(self, body: dict[str, Any], *, final: bool) -> dict[str, Any]:
        if self.usage is not None:
            self._chunks += 1
            running = None if final else self._chunks
            body["usageMetadata"] = usage_metadata(self.usage, running)
        body["modelVersion"] = self.model
        body["responseId"] = self.response_id
        return body

    def chunk(
        self,
        parts: list[dict[str, Any]] | None,
        finish: str | None = None,
        *,
        finish_message: str = "",
        index: int | Literal["default"] | None = "default",
        final: bool | None = None,
    ) -> ChunkBuilder:
        """One chunk with one candidate (`parts` None: a candidate without content)."""
        candidate: dict[str, Any] = {}
        if parts is not None:
            candidate["content"] = {"parts": parts, "role": "model"}
        if finish is not None:
            candidate["finishReason"] = finish
            self.finish_reason = finish
        if finish_message:
            candidate["finishMessage"] = finish_message
        chosen = self.index if index == "default" else index
        if chosen is not None:
            candidate["index"] = chosen
        body = {"candidates": [candidate]}
        self.events.append(
            self._envelope(body, final=finish is not None if final is None else final)
        )
        return self

    def text(self, text: str, pieces: int = 4, *, signature: str = "") -> ChunkBuilder:
        """Answer text in `pieces` chunks; `signature` rides on the first."""
        for number, piece in enumerate(split(text, pieces)):
            part: dict[str, Any] = {"text": piece}
            if number == 0 and signature:
                part[SIGNATURE] = signature
            self.chunk([part])
        final: dict[str, Any] = {"text": text}
        if signature:
            final[SIGNATURE] = signature
        self.parts.append(final)
        return self

    def thought(self, text: str, pieces: int = 3) -> ChunkBuilder:
        for piece in split(text, pieces):
            self.chunk([{"text": piece, "thought": True}])
        self.parts.append({"text": text, "thought": True})
        return self

    def call_part(
        self, name: str, arguments: Mapping[str, Any], call_id: str = "", signature: str = ""
    ) -> dict[str, Any]:
        function: dict[str, Any] = {"name": name, "args": dict(arguments)}
        if call_id:
            function["id"] = call_id
        part: dict[str, Any] = {"functionCall": function}
        if signature:
            part[SIGNATURE] = signature
        self.parts.append(part)
        return part

    def call(
        self,
        name: str,
        arguments: Mapping[str, Any],
        call_id: str = "",
        *,
        signature: str = "",
        finish: str | None = None,
    ) -> ChunkBuilder:
        """A whole call in one chunk (`finish`: the finish rides on it, as 2.x sends it)."""
        return self.chunk([self.call_part(name, arguments, call_id, signature)], finish)

    def search(self, tool_id: str, query: str, signature: str = "") -> ChunkBuilder:
        """A Google Search the provider ran (Gemini 3's server-side tool invocation parts)."""
        call: dict[str, Any] = {
            "toolCall": {
                "toolType": "GOOGLE_SEARCH_WEB",
                "args": {"queries": [query]},
                "id": tool_id,
            }
        }
        if signature:
            call[SIGNATURE] = signature
        result = {
            "toolResponse": {
                "toolType": "GOOGLE_SEARCH_WEB",
                "response": {"search_suggestions": f"<div>{query}</div>"},
                "id": tool_id,
            }
        }
        self.parts.extend((call, result))
        return self.chunk([call]).chunk([result], index=None)

    def code_execution(self, code: str, output: str) -> ChunkBuilder:
        """Code the provider wrote and ran itself (the code execution tool)."""
        executable = {"executableCode": {"language": "PYTHON", "code": code}}
        result = {"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": output}}
        self.parts.extend((executable, result))
        return self.chunk([executable]).chunk([result])

    def finish(
        self, reason: str = "STOP", *, signature: str = "", final: bool = True
    ) -> ChunkBuilder:
        """The finish in a chunk of its own with an empty text part (Gemini 3), which
        carries a pending signature when there is one. `final=False`: its usage is still a
        running total (a usage-only chunk follows)."""
        part: dict[str, Any] = {"text": ""}
        if signature:
            part[SIGNATURE] = signature
            self.parts.append(part)
        return self.chunk([part], reason, final=final)

    def malformed_call(self, name: str) -> ChunkBuilder:
        """The provider could not parse the model's call: no call part, the finish says it."""
        return self.chunk(
            None,
            "MALFORMED_FUNCTION_CALL",
            finish_message=f"Malformed function call: print(default_api.{name}(",
        )

    def usage_only(self) -> ChunkBuilder:
        """A chunk with the final usage and nothing else."""
        return self.emit(self._envelope({}, final=True))

    def error(self, code: int = 503, message: str = "The model is overloaded.") -> ChunkBuilder:
        """An error chunk inside the 200 stream (Google's error object)."""
        return self.emit(google_error(code, message))

    def blocked(self, reason: str = "SAFETY") -> ChunkBuilder:
        """The prompt was blocked: `promptFeedback.blockReason`, no candidates."""
        feedback = {
            "blockReason": reason,
            "safetyRatings": [
                {"category": "HARM_CATEGORY_DANGEROUS_CONTENT", "probability": "HIGH"}
            ],
        }
        return self.emit(self._envelope({"promptFeedback": feedback}, final=True))

    def emit(self, event: Frame) -> ChunkBuilder:
        self.events.append(event)
        return self

    def raw(self, text: str) -> ChunkBuilder:
        return self.emit({"raw": text})

    def response(self) -> dict[str, Any]:
        """The whole response as `:generateContent` answers it (non-streaming)."""
        candidate: dict[str, Any] = {
            "content": {"parts": list(self.parts), "role": "model"},
            "finishReason": self.finish_reason or "STOP",
            "index": 0,
        }
        body: dict[str, Any] = {"candidates": [candidate]}
        if self.usage is not None:
            body["usageMetadata"] = usage_metadata(self.usage)
        body["modelVersion"] = self.model
        body["responseId"] = self.response_id
        return body

    def turn(self, **options: Any) -> Turn:
        return Turn(events=tuple(self.events), **options)


def _arguments_object(call: Call) -> dict[str, Any] | None:
    """A call's arguments as the object Gemini sends, or None where they are not one."""
    if isinstance(call.arguments, Mapping):
        return dict(call.arguments)
    try:
        value = json.loads(call.arguments) if call.arguments.strip() else {}
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def base64_signature(opaque: str) -> str:
    """A `Think`'s opaque value as a thoughtSignature: Gemini's are standard base64 (the
    official SDK decodes them to bytes and refuses anything else), so a value that is not
    canonical base64 already is encoded."""
    try:
        if base64.b64encode(base64.b64decode(opaque, validate=True)).decode() == opaque:
            return opaque
    except (binascii.Error, ValueError):
        pass
    return base64.b64encode(opaque.encode()).decode()


class _Reply(FunctionCallsOnly):
    """A neutral reply, part by part, as the Gemini API streams it (`walk`; see the module
    docstring)."""

    protocol_name = "Gemini"

    def __init__(self, reply: Reply) -> None:
        if reply.ending == "paused":
            raise ValueError("Gemini has no paused responses")
        self.builder = ChunkBuilder(reply.response_id, reply.model, reply.usage)
        self._suffix = reply.response_id.removeprefix("resp_")
        self._signature = ""  # a Think's opaque part, for the part after it
        self._stopped = False  # the provider ended the response (a call it could not parse)

    def _take_signature(self) -> str:
        signature, self._signature = self._signature, ""
        return signature

    def say(self, part: Say, number: int) -> None:
        if not self._stopped:
            self.builder.text(part.text, part.pieces, signature=self._take_signature())

    def think(self, part: Think, number: int) -> None:
        if not self._stopped:
            self.builder.thought(part.text, part.pieces)
            self._signature = base64_signature(part.opaque)

    def refuse(self, part: Refuse, number: int) -> None:
        if not self._stopped:  # Gemini has no refusal: the model's refusal is its answer
            self.builder.text(part.text, 2, signature=self._take_signature())

    def call(self, part: Call, number: int) -> None:
        self.plain(part)
        if self._stopped or part.cut:
            return  # calls arrive whole: one the output limit cut off never arrives
        arguments = _arguments_object(part)
        if arguments is None:
            self.builder.malformed_call(part.name)
            self._stopped = True
            return
        self.builder.call(part.name, arguments, part.call_id, signature=self._take_signature())

    def provider_tool(self, part: ProviderTool, number: int) -> None:
        if not self._stopped:
            tool_id = f"srch_{self._suffix}_{number}"
            self.builder.search(tool_id, part.query, self._take_signature())

    def broken(self, number: int) -> None:
        if not self._stopped:
            self.builder.raw(
                'data: {"candidates": [{"content": {"parts": [{"text": "unterminat\r\n\r\n'
            )

    def end(self, reply: Reply) -> None:
        if self._stopped:
            return
        if reply.ending == "complete":
            self.builder.finish("STOP", signature=self._signature)
        elif reply.ending == "truncated":
            self.builder.finish("MAX_TOKENS", signature=self._signature)
        elif reply.ending == "error":
            self.builder.error(503, "The model is overloaded. Please try again later.")
        elif reply.ending == "failed":
            self.builder.error(500, reply.error_message)
        # "open": no finish at all (the faults decide how the body ends).


def render(reply: Reply) -> ChunkBuilder:
    """A neutral reply as the Gemini API streams it (see the module docstring)."""
    stream = _Reply(reply)
    walk(reply, stream)
    return stream.builder


def _parts(content: object) -> list[dict[str, Any]]:
    parts = content.get("parts") if isinstance(content, dict) else None
    return [part for part in parts if isinstance(part, dict)] if isinstance(parts, list) else []


def _function_calls(content: object) -> list[dict[str, Any]]:
    return [
        part["functionCall"]
        for part in _parts(content)
        if isinstance(part.get("functionCall"), dict)
    ]


class GeminiRenderer:
    """The Gemini side of the lab and of `lockgate serve --provider gemini`."""

    provider = "gemini"
    path = PATH  # the lab model's stream path (the model is part of the path)
    stream_query = "alt=sse"  # a stream is asked by the path and this query

    def answers(self, path: str) -> bool:
        """`/v1beta/models/{any model}:streamGenerateContent` or `:generateContent` (and
        the same under `/v1/`, where google-genai 3.x sends by default)."""
        route = path.split("?", 1)[0]
        for version in (API_VERSION, "v1"):
            prefix = f"/{version}/models/"
            if route.startswith(prefix):
                model, _, method = route.removeprefix(prefix).partition(":")
                return bool(model) and "/" not in model and method in _METHODS
        return False

    def base_url(self, origin: str) -> str:
        return origin  # the host root: the transport appends /v1beta/models/…

    def events(self, reply: Reply) -> list[Frame]:
        return list(render(reply).events)

    def frame(self, event: Frame) -> bytes:
        """`data: <json>` and a blank line, CRLF as the real API frames it; `{"raw": …}`
        verbatim."""
        if "raw" in event and len(event) == 1:
            return str(event["raw"]).encode()
        data = json.dumps(event, separators=(",", ":"), ensure_ascii=False)
        return f"data: {data}\r\n\r\n".encode()

    def endless_event(self, kind: Literal["text", "unknown"]) -> Frame:
        if kind == "text":
            return {"candidates": [{"content": {"parts": [{"text": "more "}], "role": "model"}}]}
        return {"modelVersion": LAB_MODEL, "note": "unknown fields are progress"}

    def completion(self, reply: Reply) -> dict[str, Any]:
        builder = render(reply)
        response = builder.response()
        if reply.ending in ("error", "failed"):
            response["candidates"][0]["finishReason"] = "OTHER"
        return response

    def error_body(self, error: OpeningError) -> dict[str, Any]:
        return gemini_error_body(error)

    def reset_headers(self, seconds: float) -> dict[str, str]:
        """None: Google states the wait in the error body (`RetryInfo.retryDelay`), which
        `error_body` writes from the error's `reset_seconds`."""
        return {}

    def is_streaming(self, path: str, body: object) -> bool:
        """Gemini chooses streaming by the method in the path (`:streamGenerateContent`),
        not by the body."""
        return path.split("?", 1)[0].endswith(":streamGenerateContent")

    def tool_result(self, request: Mapping[str, Any], call_id: str) -> str | None:
        """The result for the call with id `call_id`, only if the user turn right after its
        model turn starts with one `functionResponse` per call, in the calls' order, the
        matching one naming the same call (name and id)."""
        contents = [c for c in request.get("contents", []) if isinstance(c, dict)]
        for index, content in enumerate(contents):
            calls = _function_calls(content)
            ids = [call.get("id") for call in calls]
            if content.get("role") != "model" or call_id not in ids:
                continue
            following = contents[index + 1] if index + 1 < len(contents) else {}
            if following.get("role") != "user":
                return None
            parts = _parts(following)
            responses = [p.get("functionResponse") for p in parts[: len(calls)]]
            if any(
                not isinstance(r, dict) or r.get("name") != c.get("name")
                for r, c in zip(responses, calls, strict=False)
            ) or len(responses) != len(calls):
                return None
            if any("functionResponse" in part for part in parts[len(calls) :]):
                return None  # a result after other content
            position = ids.index(call_id)
            response = responses[position]
            assert isinstance(response, dict)
            if response.get("id") != call_id:
                return None
            body = response.get("response")
            if not isinstance(body, dict):
                return None
            value = body.get("result", body.get("error", ""))
            return value if isinstance(value, str) else json.dumps(value)
        return None


RENDERER = GeminiRenderer()
