"""The Gemini gateway (`providers/gemini/gateway.py`) on its own, and google-genai reading what
the engine sends.

- Routing: the path asks for a stream (`:streamGenerateContent?alt=sse`) or a whole answer
  (`:generateContent`), on the Gemini API and on Vertex AI (a publisher's model, a tuned
  model, an endpoint); without `alt=sse` the answer is one JSON array, refused.
- The tools a request declares: `parametersJsonSchema` as it is (preferred), else the
  OpenAPI-subset `parameters` read as the JSON Schema they mean (upper-case types,
  `nullable`, nested properties, items and anyOf, counts written as strings), in lowerCamel
  or snake_case spellings; each judged through the gate.
- What holds the stream: text and thought text pass at once; a call, a part the provider
  ran, the finish and anything the gateway does not know hold it.
- What no judged part may carry: a call spelled `function_call` beside text, which the
  decoder reads as text and google-genai as a call.
- google-genai (installed, both ways it reads a stream: httpx2, aiohttp) reads an accepted
  stream as it reads the upstream's; raises `APIError` with lockgate's sentence on a
  refused one (`ServerError` where a new request may succeed, `ClientError` where not);
  reads a held stream's blank-line keep-alives as nothing; and reads a whole answer judged
  and refused as a `ServerError` carrying lockgate's sentence.

Time is virtual (`support.run`): nothing waits on the wall clock.
"""

from __future__ import annotations

import json
from collections.abc import Callable, Coroutine, Mapping
from typing import Any

import httpx2
import pytest
from google import genai
from google.genai import errors as genai_errors
from google.genai import types as genai_types

from lockgate.gateway import DeclaredTool, ProtocolTarget
from lockgate.providers import provider as registry_entry
from lockgate.providers.gemini.gateway import GATEWAY, json_schema
from lockgate.proxy import Accepted, Refused, judge_whole
from lockgate.scripted.reply import Call, Reply, Say, Think
from lockgate.scripted.scenario import EDIT_FIX
from lockgate.sse import ServerSentEvent

from ..helpers import ROOT
from .support import (
    Gated,
    GenaiRead,
    canonical,
    gate_stream,
    genai_over_aiohttp,
    genai_over_httpx,
    keepalive_count,
    options,
    request_for,
    run,
    sdk_reads,
    tool_events,
)
from .test_engine import HANG, Upstream, edit_reply, native_frames, split_at_hold
from .test_gateways import verdict

GenaiReader = Callable[[bytes], Coroutine[Any, Any, GenaiRead]]
READERS: dict[str, GenaiReader] = {"httpx2": genai_over_httpx, "aiohttp": genai_over_aiohttp}
CORPUS = ROOT.parent / "shared" / "real-streams"


def gated(upstream: Any, request: Mapping[str, Any] | None = None, **overrides: Any) -> Gated:
    gating = options(**{"deadline": 600.0, **overrides})
    return run(gate_stream("gemini", request or request_for("gemini"), upstream, gating))


def read(reader: str, body: bytes) -> GenaiRead:
    return run(READERS[reader](body))


def dumped(got: GenaiRead) -> list[dict[str, Any]]:
    """What google-genai made of each chunk (its HTTP headers left out); it raised nothing."""
    assert got.raised is None, got.raised
    return [chunk.model_dump(exclude={"sdk_http_response"}) for chunk in got.chunks]


def chunk(*parts: dict[str, Any], **candidate: Any) -> dict[str, Any]:
    content = {"parts": list(parts), "role": "model"}
    return {"candidates": [{"content": content, "index": 0, **candidate}], "responseId": "r_1"}


def frame(payload: Mapping[str, Any]) -> bytes:
    return b"data: " + json.dumps(payload).encode() + b"\r\n\r\n"


# --- routing -----------------------------------------------------------------------------------

VERTEX = "/v1/projects/p/locations/us-central1"


@pytest.mark.parametrize(
    "path",
    [
        "/v1beta/models/gemini-2.5-flash",
        "/v1/models/gemini-2.5-flash",
        f"{VERTEX}/publishers/google/models/gemini-2.5-flash",
        "/v1beta/tunedModels/my-model",
        f"{VERTEX}/endpoints/1234567890",  # a tuned model's endpoint on Vertex AI
        "/some/gateway/prefix/v1beta/models/m",
    ],
)
def test_the_path_asks_for_a_stream_or_a_whole_answer(path: str) -> None:
    streamed = GATEWAY.target("POST", f"{path}:streamGenerateContent", {"alt": "sse"})
    assert streamed == ProtocolTarget(stream=True)
    assert GATEWAY.target("post", f"{path}:generateContent/", {}) == ProtocolTarget(stream=False)
    array = GATEWAY.target("POST", f"{path}:streamGenerateContent", {})
    assert array is not None
    assert array.stream is True
    assert array.problem is not None
    assert "alt=sse" in array.problem
    assert GATEWAY.target("GET", f"{path}:streamGenerateContent", {"alt": "sse"}) is None
    # The body never decides: it has no `stream`.
    assert GATEWAY.wants_stream({"stream": False}, ProtocolTarget(stream=True))
    assert not GATEWAY.wants_stream({"stream": True}, ProtocolTarget(stream=False))


@pytest.mark.parametrize(
    "path",
    [
        "/v1beta/models/m:countTokens",
        "/v1beta/models/m",
        "/v1beta/models/m:streamGenerateContentX",
        f"{VERTEX}/publishers/anthropic/models/claude:streamRawPredict",
        "/v1beta/cachedContents",
    ],
)
def test_other_requests_are_no_gemini_requests(path: str) -> None:
    assert GATEWAY.target("POST", path, {"alt": "sse"}) is None


# --- the tools a request declares ----------------------------------------------------------------

OPENAPI: dict[str, Any] = {
    "type": "OBJECT",
    "properties": {
        "path": {"type": "STRING", "description": "A file."},
        "count": {"type": "INTEGER", "nullable": True},
        "mode": {"type": "STRING", "format": "enum", "enum": ["fast", "slow"], "nullable": True},
        "tags": {"type": "ARRAY", "items": {"type": "STRING"}, "minItems": "1"},
        "target": {
            "anyOf": [
                {"type": "STRING"},
                {
                    "type": "OBJECT",
                    "properties": {"line": {"type": "INTEGER"}},
                    "required": ["line"],
                },
            ],
            "nullable": True,
        },
        "options": {
            "type": "OBJECT",
            "properties": {"depth": {"type": "NUMBER"}, "deep": {"type": "BOOLEAN"}},
        },
    },
    "required": ["path"],
    "propertyOrdering": ["path", "count"],
}


def declared(declaration: Mapping[str, Any]) -> dict[str, Any]:
    return {"tools": [{"functionDeclarations": [{"name": "t", **declaration}]}]}


def judged_call(request: Mapping[str, Any], arguments: Mapping[str, Any], name: str = "t") -> str:
    tools = GATEWAY.tools(request, validate_schemas=True)
    return verdict(tools, name, json.dumps(arguments))


@pytest.mark.parametrize(
    ("arguments", "expected"),
    [
        ({"path": "a"}, "accepted"),
        ({}, "invalid_batch"),  # `path` is required
        ({"path": 1}, "invalid_batch"),  # STRING
        ({"path": "a", "count": None}, "accepted"),  # nullable
        ({"path": "a", "count": 2}, "accepted"),
        ({"path": "a", "count": "2"}, "invalid_batch"),  # INTEGER
        ({"path": "a", "mode": None}, "accepted"),  # a nullable enum takes null
        ({"path": "a", "mode": "slow"}, "accepted"),
        ({"path": "a", "mode": "medium"}, "invalid_batch"),
        ({"path": "a", "tags": ["x"]}, "accepted"),
        ({"path": "a", "tags": []}, "invalid_batch"),  # minItems, written as a string
        ({"path": "a", "tags": ["x", 2]}, "invalid_batch"),  # items
        ({"path": "a", "target": None}, "accepted"),  # a nullable anyOf takes null
        ({"path": "a", "target": "main"}, "accepted"),
        ({"path": "a", "target": {"line": 3}}, "accepted"),
        ({"path": "a", "target": {"line": "x"}}, "invalid_batch"),  # nested in anyOf
        ({"path": "a", "target": 7}, "invalid_batch"),
        ({"path": "a", "options": {"deep": True, "depth": 1.5}}, "accepted"),
        ({"path": "a", "options": {"depth": "deep"}}, "invalid_batch"),  # NUMBER, nested
        ({"path": "a", "options": {"deep": "yes"}}, "invalid_batch"),  # BOOLEAN, nested
    ],
)
def test_openapi_parameters_are_validated_as_the_json_schema_they_mean(
    arguments: dict[str, Any], expected: str
) -> None:
    request = declared({"description": "d", "parameters": OPENAPI})
    [tool] = GATEWAY.tools(request, validate_schemas=True)
    assert isinstance(tool, DeclaredTool)
    assert tool.schema_problem is None  # usable: the gate validates with it
    assert judged_call(request, arguments) == expected


def test_the_conversion_lowers_every_type_and_keeps_every_other_keyword() -> None:
    schema = json_schema(OPENAPI)
    assert isinstance(schema, dict)
    text = json.dumps(schema)
    for upper in ("STRING", "INTEGER", "NUMBER", "BOOLEAN", "ARRAY", "OBJECT"):
        assert f'"{upper}"' not in text
    assert "nullable" not in text
    assert schema["propertyOrdering"] == ["path", "count"]
    assert schema["properties"]["path"] == {"type": "string", "description": "A file."}
    assert schema["properties"]["count"] == {"type": ["integer", "null"]}
    assert json_schema(OPENAPI) == schema  # the declared schema itself is left as it was
    assert OPENAPI["properties"]["count"] == {"type": "INTEGER", "nullable": True}
    # A property named like a keyword is a property.
    named = {"type": "OBJECT", "properties": {"type": {"type": "STRING"}, "nullable": {}}}
    assert json_schema(named) == {
        "type": "object",
        "properties": {"type": {"type": "string"}, "nullable": {}},
    }


def test_snake_case_schema_keywords_are_read_as_the_api_reads_them() -> None:
    schema = {
        "type": "OBJECT",
        "properties": {
            "tags": {"type": "ARRAY", "items": {"type": "STRING"}, "min_items": 1},
            "target": {"any_of": [{"type": "STRING"}, {"type": "INTEGER"}]},
            "name": {"type": "STRING", "max_length": "3"},
        },
    }
    request = declared({"parameters": schema})
    assert judged_call(request, {"tags": ["x"], "target": 2, "name": "abc"}) == "accepted"
    assert judged_call(request, {"tags": []}) == "invalid_batch"
    assert judged_call(request, {"target": 1.5}) == "invalid_batch"
    assert judged_call(request, {"name": "abcd"}) == "invalid_batch"


def test_parameters_json_schema_is_preferred_to_parameters() -> None:
    request = declared(
        {
            "parametersJsonSchema": {
                "type": "object",
                "properties": {"path": {"type": "string"}},
                "required": ["path"],
            },
            "parameters": {
                "type": "OBJECT",
                "properties": {"other": {"type": "INTEGER"}},
                "required": ["other"],
            },
        }
    )
    assert judged_call(request, {"path": "a"}) == "accepted"
    assert judged_call(request, {"other": 1}) == "invalid_batch"
    # A null `parametersJsonSchema` is none: `parameters` are read.
    request = declared({"parametersJsonSchema": None, "parameters": {"type": "OBJECT"}})
    assert judged_call(request, {"any": 1}) == "accepted"


def test_snake_case_declarations_are_read_too() -> None:
    schema = {"type": "object", "properties": {"path": {"type": "string"}}, "required": ["path"]}
    request = {
        "tools": [
            {"function_declarations": [{"name": "read", "parameters_json_schema": schema}]},
            {"functionDeclarations": [{"name": "edit", "parameters": {"type": "OBJECT"}}]},
            {"googleSearch": {}},
            {"codeExecution": {}},
            {"function_declarations": "not a list"},
            {"functionDeclarations": [{"description": "no name"}, "not a declaration"]},
        ]
    }
    tools = GATEWAY.tools(request, validate_schemas=True)
    assert [tool.name for tool in tools] == ["read", "edit"]
    assert judged_call(request, {"path": "a"}, "read") == "accepted"
    assert judged_call(request, {"path": 1}, "read") == "invalid_batch"
    assert judged_call(request, {}, "google_search") == "invalid_batch"  # the provider's


def test_the_codecs_own_request_declares_lockgates_tools() -> None:
    from lockgate.fixture import ALL_TOOLS

    tools = GATEWAY.tools(request_for("gemini"), validate_schemas=True)
    assert [(t.name, dict(t.parameters)) for t in tools] == [
        (t.name, dict(t.parameters)) for t in ALL_TOOLS
    ]


# --- what holds the stream ----------------------------------------------------------------------


def event(payload: object) -> ServerSentEvent:
    return ServerSentEvent(None, json.dumps(payload).encode())


USAGE = {"promptTokenCount": 3, "totalTokenCount": 3}
SIGNATURE = "c2lnLTE="


@pytest.mark.parametrize(
    "payload",
    [
        chunk({"text": "Fixing."}),
        chunk({"text": "Planning.", "thought": True}),
        chunk({"text": "Fixing.", "thoughtSignature": SIGNATURE}),
        chunk({"text": "a"}, {"text": "b"}),
        {**chunk({"text": "x"}), "usageMetadata": USAGE, "modelVersion": "m"},
        {"usageMetadata": USAGE, "modelVersion": "m", "responseId": "r_1"},
        {"candidates": []},
        {"candidates": [{"index": 0, "safetyRatings": [], "content": {"parts": []}}]},
    ],
)
def test_text_alone_passes_at_once(payload: dict[str, Any]) -> None:
    assert not GATEWAY.begins_hold(event(payload))
    assert GATEWAY.unreadable_action(event(payload)) is None


@pytest.mark.parametrize(
    "payload",
    [
        chunk({"functionCall": {"name": "edit", "args": {}}}),
        chunk({"text": "Fixing."}, {"functionCall": {"name": "edit", "args": {}}}),
        chunk({"functionCall": {"name": "edit"}, "thought": True}),
        chunk({"executableCode": {"language": "PYTHON", "code": "print(1)"}}),
        chunk({"codeExecutionResult": {"outcome": "OUTCOME_OK", "output": "1"}}),
        chunk({"toolCall": {"toolType": "GOOGLE_SEARCH_WEB", "args": {}}}),
        chunk({"inlineData": {"mimeType": "image/png", "data": "AA=="}}),
        chunk({"text": "", "thoughtSignature": SIGNATURE}, finishReason="STOP"),
        chunk({"text": "x"}, finishReason="MAX_TOKENS"),
        chunk({"text": "x"}, groundingMetadata={}),  # a candidate field it does not know
        chunk({"text": "x", "someFutureField": 1}),  # a part field it does not know
        {**chunk({"text": "x"}), "promptFeedback": {"blockReason": "SAFETY"}},
        {**chunk({"text": "x"}), "someFutureField": 1},  # a chunk field it does not know
        {"error": {"code": 503, "message": "overloaded", "status": "UNAVAILABLE"}},
        {"candidates": "not a list"},
        {"candidates": ["not a candidate"]},
        {"candidates": [{"content": {"parts": "not a list"}}]},
        {"candidates": [{"content": {"parts": ["not a part"]}}]},
        [chunk({"text": "a JSON array"})],
    ],
)
def test_anything_but_text_holds(payload: object) -> None:
    assert GATEWAY.begins_hold(event(payload))


def test_a_key_spelled_with_escapes_holds_too() -> None:
    escaped = b'{"candidates":[{"content":{"parts":[{"function\\u0043all":{"name":"x"}}]}}]}'
    assert GATEWAY.begins_hold(ServerSentEvent(None, escaped))
    assert GATEWAY.begins_hold(ServerSentEvent(None, b"not json"))
    assert GATEWAY.begins_hold(ServerSentEvent(None, b'{"candidates": [{"content": '))


# --- what no part may carry: a call the decoder reads as text ------------------------------------

SNAKE_CALL = {"function_call": {"name": "shell", "args": {"command": "rm -rf ~"}}}


@pytest.mark.parametrize(
    "part",
    [
        {"text": "Only text.", **SNAKE_CALL},
        {"text": "Thinking.", "thought": True, **SNAKE_CALL},
        {"text": "", "thoughtSignature": SIGNATURE, **SNAKE_CALL},
    ],
)
def test_a_snake_case_call_beside_text_is_refused(part: dict[str, Any]) -> None:
    """google-genai reads a part's `function_call` as its call (its models take both
    spellings); the decoder reads the part as the text it also holds. Accepted as text
    only, the client would act on a call the gate never saw."""
    assert GATEWAY.unreadable_action(event(chunk(part))) is not None
    escaped = json.dumps(chunk(part)).replace("function_call", "function\\u005fcall")
    assert GATEWAY.unreadable_action(ServerSentEvent(None, escaped.encode())) is not None
    frames = native_frames("gemini", Reply("resp_text", (Say("Only text."),)))
    body = [frames[0], frame(chunk(part)), *frames[1:]]
    result = gated(Upstream(body))
    assert isinstance(result.outcome, Refused)
    assert result.outcome.refusal.kind == "unsupported_output"
    assert b"shell" not in result.output

    for reader in READERS:
        assert read(reader, result.output).calls() == []


def test_the_usual_chunks_carry_no_unreadable_action() -> None:
    for reply in (edit_reply(), Reply("resp_think", (Think("Plan."), Say("Done.")))):
        for raw in native_frames("gemini", reply):
            data = raw.removeprefix(b"data: ").rstrip(b"\r\n")
            assert GATEWAY.unreadable_action(ServerSentEvent(None, data)) is None


# --- google-genai on the engine's output ----------------------------------------------------------


def full_reply() -> Reply:
    return Reply(
        "resp_full",
        (
            Think("Plan the fix."),
            Say("Fixing it now."),
            Call("call_1", "read", {"path": "calculator.py"}),
            Call("call_2", "edit", EDIT_FIX),
        ),
    )


@pytest.mark.parametrize("reader", sorted(READERS))
def test_google_genai_reads_an_accepted_stream_as_it_reads_the_upstream(reader: str) -> None:
    frames = native_frames("gemini", full_reply())
    result = gated(Upstream(frames))
    assert isinstance(result.outcome, Accepted)
    through = read(reader, result.output)
    assert dumped(through) == dumped(read(reader, b"".join(frames)))
    assert through.calls() == [
        ("call_1", "read", {"path": "calculator.py"}),
        ("call_2", "edit", EDIT_FIX),
    ]


@pytest.mark.parametrize("reader", sorted(READERS))
@pytest.mark.parametrize(
    ("ending", "kind", "error", "code"),
    [
        ("cut", "stream_ended", genai_errors.ServerError, 503),  # transient: try again
        ("unknown tool", "invalid_batch", genai_errors.ClientError, 400),  # not transient
    ],
)
def test_google_genai_raises_on_a_refused_stream_with_lockgates_sentence(
    reader: str, ending: str, kind: str, error: type[genai_errors.APIError], code: int
) -> None:
    if ending == "cut":
        before, after = split_at_hold(native_frames("gemini", edit_reply()))
        body = [*before, after[0]]  # the body ends after the call, before its finish
    else:
        body = native_frames("gemini", edit_reply(name="shell", arguments={"command": "ls"}))
        before, _ = split_at_hold(body)
    result = gated(Upstream(body))
    assert isinstance(result.outcome, Refused)
    refusal = result.outcome.refusal
    assert refusal.kind == kind
    got = read(reader, result.output)
    raised = got.raised
    assert isinstance(raised, error), raised
    assert raised.code == code
    assert raised.status == ("UNAVAILABLE" if code == 503 else "FAILED_PRECONDITION")
    assert raised.message == refusal.message
    assert raised.message.startswith("lockgate withheld 1 tool call: ")
    assert len(got.chunks) == len(before)  # what came before the error: the forwarded text
    assert got.calls() == []


@pytest.mark.parametrize("reader", sorted(READERS))
def test_google_genai_reads_a_held_stream_with_blank_line_keepalives(reader: str) -> None:
    frames = native_frames("gemini", full_reply())
    before, after = split_at_hold(frames)
    upstream = Upstream([*before, after[0], 40.0, *after[1:2], 40.0, *after[2:]])
    result = gated(upstream, idle_timeout=60.0, keepalive_interval=15.0)
    assert isinstance(result.outcome, Accepted)
    assert keepalive_count(result.output, result.gateway) >= 4  # 80 s / 15 s
    assert b"\n" in result.pieces  # sent alone, while nothing else is
    assert b"\n:" not in result.output  # no SSE comment: Gemini's clients read none
    assert dumped(read(reader, result.output)) == dumped(read(reader, b"".join(frames)))


def test_a_keepalive_before_anything_else_is_read_as_nothing() -> None:
    frames = native_frames("gemini", Reply("resp_call", (Call("call_1", "read", {"path": "a"}),)))
    result = gated(Upstream([frames[0], 40.0, *frames[1:]]), idle_timeout=60.0)
    assert isinstance(result.outcome, Accepted)
    assert result.output.startswith(b"\n")  # the call held from the first chunk on
    assert run(sdk_reads("gemini", result.output)) == []


# --- a whole answer ----------------------------------------------------------------------------


def whole(reply: Reply) -> bytes:
    return json.dumps(registry_entry("gemini").render().completion(reply)).encode()


async def _generate(status: int, body: bytes, headers: Mapping[str, str]) -> object:
    """What google-genai's `generate_content` returns, or raises, on this answer."""

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(
            status, content=body, headers={"content-type": "application/json", **headers}
        )

    async with httpx2.AsyncClient(transport=httpx2.MockTransport(handler)) as http:
        client = genai.Client(
            api_key="lab-key-not-a-secret",
            http_options=genai_types.HttpOptions(
                base_url="http://proxy.test", api_version="v1beta", httpx_async_client=http
            ),
        )
        try:
            return await client.aio.models.generate_content(model="m", contents="x")
        except genai_errors.APIError as exc:
            return exc
        finally:
            await client.aio.aclose()


def test_a_whole_answer_is_judged_and_passes_unchanged() -> None:
    body = whole(full_reply())
    decided = judge_whole(registry_entry("gemini"), request_for("gemini"), body)
    assert isinstance(decided.outcome, Accepted)
    assert (decided.status, decided.body) == (200, body)
    answer = run(_generate(decided.status, decided.body, dict(decided.headers)))
    assert isinstance(answer, genai_types.GenerateContentResponse)
    assert [c.name for c in answer.function_calls or []] == ["read", "edit"]


@pytest.mark.parametrize(
    "parts",
    [
        (Call("call_1", "edit", EDIT_FIX), Call("call_2", "shell", {"command": "rm -rf ."})),
        (Say("Fixing."), Call("call_1", "edit", {"path": 7})),  # the schema says a string
    ],
)
def test_a_refused_whole_answer_is_a_server_error_with_lockgates_sentence(
    parts: tuple[Call | Say, ...],
) -> None:
    decided = judge_whole(
        registry_entry("gemini"), request_for("gemini"), whole(Reply("resp_bad", parts))
    )
    assert isinstance(decided.outcome, Refused)
    refusal = decided.outcome.refusal
    assert (decided.status, refusal.kind) == (502, "invalid_batch")
    assert ("x-should-retry", "false") in decided.headers
    assert list(json.loads(decided.body)) == ["error"]  # Google's error, nothing else
    raised = run(_generate(decided.status, decided.body, dict(decided.headers)))
    assert isinstance(raised, genai_errors.ServerError)  # the HTTP status decides: 502
    assert raised.code == 502
    assert raised.message == refusal.message
    assert "lockgate withheld" in raised.message


def test_a_whole_answer_holding_a_snake_case_call_is_refused() -> None:
    body = json.loads(whole(Reply("resp_text", (Say("Only text."),))))
    body["candidates"][0]["content"]["parts"][0].update(SNAKE_CALL)
    decided = judge_whole(
        registry_entry("gemini"), request_for("gemini"), json.dumps(body).encode()
    )
    assert isinstance(decided.outcome, Refused)
    assert decided.outcome.refusal.kind == "unsupported_output"


# --- a real recording's OpenAPI parameters -------------------------------------------------


@pytest.mark.skipif(not CORPUS.is_dir(), reason=f"no real recordings at {CORPUS}")
def test_a_recorded_call_is_validated_against_its_recorded_openapi_parameters() -> None:
    recording = json.loads((CORPUS / "gemini-crewAI-1.json").read_text(encoding="utf-8"))
    request = recording["request"]
    [declaration] = request["tools"][0]["functionDeclarations"]
    assert declaration["parameters"]["type"] == "OBJECT"  # the OpenAPI subset
    body = recording["body"].encode()
    accepted = gated(Upstream([body]), request)
    assert isinstance(accepted.outcome, Accepted)
    assert accepted.output == canonical(body)
    [call] = recording["expect"]["tool_calls"]
    assert json.loads(call["arguments"]) == {"city": "San Francisco"}
    wrong = body.replace(b'"city": "San Francisco"', b'"city": 12')  # a STRING, declared
    assert wrong != body
    refused = gated(Upstream([wrong]), request)
    assert isinstance(refused.outcome, Refused)
    assert refused.outcome.refusal.kind == "invalid_batch"
    assert tool_events(refused.output) == []


# --- the gateway's own errors --------------------------------------------------------------------


def test_the_proxys_own_errors_are_googles() -> None:
    body = json.loads(GATEWAY.client_error_body(401, "no key", "key"))
    assert body == {"error": {"code": 401, "message": "no key", "status": "UNAUTHENTICATED"}}
    assert json.loads(GATEWAY.client_error_body(418, "odd"))["error"]["status"] == "UNKNOWN"


@pytest.mark.parametrize("reader", sorted(READERS))
def test_silence_while_holding_reaches_google_genai_as_a_server_error(reader: str) -> None:
    before, after = split_at_hold(native_frames("gemini", edit_reply()))
    result = gated(Upstream([*before, after[0], HANG]))
    assert isinstance(result.outcome, Refused)
    assert result.outcome.refusal.kind == "idle_timeout"
    raised = read(reader, result.output).raised
    assert isinstance(raised, genai_errors.ServerError)
    assert raised.message is not None
    assert "no bytes for 1 s" in raised.message


@pytest.mark.parametrize(
    ("code", "status", "error"),
    [
        (503, "UNAVAILABLE", genai_errors.ServerError),
        (429, "RESOURCE_EXHAUSTED", genai_errors.ServerError),  # a new request may succeed
        (400, "INVALID_ARGUMENT", genai_errors.ClientError),
    ],
)
def test_an_upstream_error_chunk_reaches_google_genai_as_lockgates_refusal(
    code: int, status: str, error: type[genai_errors.APIError]
) -> None:
    upstream = {"error": {"code": code, "message": "The model is overloaded.", "status": status}}
    result = gated(Upstream([frame(upstream)]))
    assert isinstance(result.outcome, Refused)
    assert result.outcome.refusal.kind == "provider_error"
    assert result.pieces == (result.output,)  # the refusal alone
    for reader in READERS:
        raised = read(reader, result.output).raised
        assert isinstance(raised, error), (reader, raised)
        assert raised.message == result.outcome.refusal.message
        assert "The model is overloaded." in raised.message


def test_a_named_event_is_refused_for_no_gemini_client_reads_one() -> None:
    # google-genai reads a line that is not `data: ` as raw JSON and raises on it;
    # @google/genai reads nothing after it: the gate cannot release what they would read.
    frames = native_frames("gemini", Reply("resp_text", (Say("Only text."),)))
    named = [frames[0], b"event: message\r\n" + frames[1], *frames[2:]]
    result = gated(Upstream(named))
    assert isinstance(result.outcome, Refused)
    assert result.outcome.refusal.kind == "malformed_event"
    assert not any(line.startswith(b"event:") for line in result.output.splitlines())
    for reader in READERS:
        raised = read(reader, result.output).raised
        assert raised is not None, reader
