"""The Gemini lab: every Gemini scenario and every neutral one it can express, in-process and
over loopback HTTP (the registry entry added for the test: the registry line lands with
the provider), the renderer's wire conventions for every neutral part and ending, and the
official google-genai SDK reading the scripted server's stream."""

from __future__ import annotations

import base64
import json
from typing import Any

import pytest

from lockgate import providers
from lockgate.errors import FailureKind
from lockgate.lab.runner import LabTransport, run_scenario
from lockgate.lab.scenarios import NEUTRAL_SCENARIOS
from lockgate.lab.server import serve_script
from lockgate.providers.decoding import usage_from
from lockgate.providers.gemini import PROVIDER
from lockgate.providers.gemini.decoder import USAGE_FIELDS
from lockgate.providers.gemini.errors import classify_gemini_failure
from lockgate.providers.gemini.render import (
    ChunkBuilder,
    GeminiRenderer,
    base64_signature,
    gemini_error_body,
    render,
    usage_metadata,
)
from lockgate.providers.gemini.scenarios import NEUTRAL_NOT_EXPRESSIBLE
from lockgate.providers.gemini.scenarios import SCENARIOS as GEMINI_SCENARIOS
from lockgate.scripted.reply import (
    LAB_MODEL,
    Broken,
    Call,
    OpeningError,
    ProviderTool,
    Refuse,
    Reply,
    ReplyUsage,
    Say,
    Think,
)
from lockgate.scripted.scenario import Scenario
from lockgate.scripted.script import Turn

LAB = GeminiRenderer()
EDIT = {"path": "calculator.py", "old": "return a - b", "new": "return a + b"}


@pytest.fixture(autouse=True)
def registered(monkeypatch: pytest.MonkeyPatch) -> None:
    """The registry with the Gemini entry, as it will be once its line lands."""
    monkeypatch.setitem(providers.PROVIDERS, "gemini", PROVIDER)


EXPRESSIBLE = [s for s in NEUTRAL_SCENARIOS if s.name not in NEUTRAL_NOT_EXPRESSIBLE]
RUNS = [
    (scenario, kind)
    for scenario in (*EXPRESSIBLE, *GEMINI_SCENARIOS)
    for kind in sorted(scenario.transports)
]
# What the loopback server cannot see on Gemini: the neutral stall pauses after the last
# scripted byte (a call cut off is never sent on Gemini, so nothing follows the stall), and
# the server counts a client that leaves during a final pause as having stayed.
SERVER_BLIND = {("stall", "http"): "client closed early on 0 streams, expected 1"}


@pytest.mark.parametrize(("scenario", "kind"), RUNS, ids=[f"{s.name}-{k}" for s, k in RUNS])
async def test_scenario_behaves_as_expected(scenario: Scenario, kind: LabTransport) -> None:
    result = await run_scenario(scenario, kind, provider="gemini")
    blind = SERVER_BLIND.get((scenario.name, kind))
    assert [p for p in result.problems if p != blind] == []
    assert result.observed == scenario.expect.outcome
    assert result.streams_closed


def test_the_gemini_scenarios_are_its_own_and_named_for_it() -> None:
    names = [s.name for s in GEMINI_SCENARIOS]
    assert len(set(names)) == len(names)
    assert all(name.startswith("gemini-") for name in names)
    assert all(s.protocols == frozenset({"gemini"}) for s in GEMINI_SCENARIOS)
    neutral = {s.name for s in NEUTRAL_SCENARIOS}
    assert set(NEUTRAL_NOT_EXPRESSIBLE) <= neutral
    assert not set(names) & neutral
    assert PROVIDER.scenarios() == GEMINI_SCENARIOS


@pytest.mark.parametrize("name", sorted(NEUTRAL_NOT_EXPRESSIBLE))
async def test_the_inexpressible_neutral_scenarios_really_do_not_hold(name: str) -> None:
    # The list must stay honest: one that starts holding on Gemini leaves it.
    scenario = next(s for s in NEUTRAL_SCENARIOS if s.name == name)
    result = await run_scenario(scenario, "inprocess", provider="gemini")
    assert not result.as_expected
    assert result.tools_executed == 0


# --- the renderer's wire conventions --------------------------------------------------------------


def test_frames_are_data_lines_with_crlf_and_raw_frames_are_verbatim() -> None:
    assert LAB.frame({"candidates": []}) == b'data: {"candidates":[]}\r\n\r\n'
    assert LAB.frame({"raw": "data: x\n\n"}) == b"data: x\n\n"
    assert LAB.frame({"text": "é"}) == 'data: {"text":"é"}\r\n\r\n'.encode()


def test_the_path_base_url_and_streaming_rule() -> None:
    assert LAB.path == f"/v1beta/models/{LAB_MODEL}:streamGenerateContent"
    assert LAB.base_url("http://127.0.0.1:9") == "http://127.0.0.1:9"
    stream = f"{LAB.path}?alt=sse"
    assert LAB.is_streaming(stream, {"contents": []})
    assert not LAB.is_streaming("/v1beta/models/lab-model:generateContent", {"contents": []})


@pytest.mark.parametrize(
    "path",
    [
        "/v1beta/models/lab-model:streamGenerateContent?alt=sse",
        "/v1beta/models/gemini-2.5-flash:streamGenerateContent",
        "/v1beta/models/gemini-2.5-flash:generateContent",
        "/v1/models/lab-model:streamGenerateContent?alt=sse",
    ],
)
def test_every_models_generate_paths_are_answered(path: str) -> None:
    assert LAB.answers(path)


@pytest.mark.parametrize(
    "path",
    [
        "/v1beta/models/lab-model:countTokens",
        "/v1beta/models/:streamGenerateContent",
        "/v1beta/models/a/b:streamGenerateContent",
        "/v1beta/tunedModels/x:generateContent",
        "/v2/models/lab-model:generateContent",
        "/v1/chat/completions",
    ],
)
def test_other_paths_are_not(path: str) -> None:
    assert not LAB.answers(path)
    assert LAB.reset_headers(1.5) == {}


def chunks(reply: Reply) -> list[dict[str, Any]]:
    return [dict(event) for event in LAB.events(reply)]


def parts_of(reply: Reply) -> list[dict[str, Any]]:
    return [
        part
        for event in chunks(reply)
        for candidate in event.get("candidates", [])
        for part in candidate.get("content", {}).get("parts", [])
    ]


def finishes(reply: Reply) -> list[str]:
    return [
        candidate["finishReason"]
        for event in chunks(reply)
        for candidate in event.get("candidates", [])
        if "finishReason" in candidate
    ]


def test_every_chunk_names_its_response_and_carries_a_running_usage() -> None:
    reply = Reply("resp_r", (Say("One two three four.", 4),), usage=ReplyUsage(100, 0, 40, 10))
    events = chunks(reply)
    assert all(event["responseId"] == "resp_r" for event in events)
    assert all(event["modelVersion"] == LAB_MODEL for event in events)
    counts = [event["usageMetadata"]["candidatesTokenCount"] for event in events]
    assert counts == sorted(counts)
    assert counts[-1] == 30
    final = usage_metadata(ReplyUsage(100, 0, 40, 10))
    assert usage_from(events[-1]["usageMetadata"], USAGE_FIELDS) == usage_from(final, USAGE_FIELDS)


def test_say_think_and_refuse_render_as_text_and_thought_parts() -> None:
    reply = Reply("resp_t", (Think("Plan.", "c2lnLTE=", 1), Say("Answer.", 1), Refuse("No.")))
    assert parts_of(reply) == [
        {"text": "Plan.", "thought": True},
        {"text": "Answer.", "thoughtSignature": "c2lnLTE="},  # signed: the first part after it
        {"text": "No"},  # a refusal is answer text on Gemini
        {"text": "."},
        {"text": ""},
    ]
    assert finishes(reply) == ["STOP"]


def test_a_thought_with_nothing_after_it_signs_the_finish_chunk() -> None:
    parts = parts_of(Reply("resp_t", (Think("Plan.", "c2lnLTE=", 1),)))
    assert parts[-1] == {"text": "", "thoughtSignature": "c2lnLTE="}


@pytest.mark.parametrize("opaque", ["c2lnLTE=", "EvsDCvgDAQw51sfO", "ab+/"])
def test_a_base64_opaque_value_is_the_signature_as_it_is(opaque: str) -> None:
    assert base64_signature(opaque) == opaque


@pytest.mark.parametrize("opaque", ["sealed-reasoning-do-not-touch", "ab+/cd==", "x", ""])
def test_any_other_opaque_value_is_sent_as_base64(opaque: str) -> None:
    signature = base64_signature(opaque)
    assert base64.b64decode(signature, validate=True) == opaque.encode()


def test_calls_render_whole_with_their_ids_or_without() -> None:
    reply = Reply("resp_c", (Call("fc_1", "edit", EDIT), Call("", "discover", "{}")))
    assert parts_of(reply)[:2] == [
        {"functionCall": {"name": "edit", "args": EDIT, "id": "fc_1"}},
        {"functionCall": {"name": "discover", "args": {}}},
    ]


def test_a_cut_call_is_never_sent_and_the_limit_says_max_tokens() -> None:
    reply = Reply("resp_cut", (Say("Editing."), Call("c1", "edit", EDIT, cut=True)), "truncated")
    assert not any("functionCall" in part for part in parts_of(reply))
    assert finishes(reply) == ["MAX_TOKENS"]


def test_a_call_whose_arguments_are_not_an_object_ends_malformed() -> None:
    reply = Reply("resp_m", (Call("c1", "edit", '{"path": "calc'), Say("never sent")))
    events = chunks(reply)
    assert not any("functionCall" in part for part in parts_of(reply))
    assert finishes(reply) == ["MALFORMED_FUNCTION_CALL"]
    assert "finishMessage" in events[-1]["candidates"][0]
    assert (
        chunks(Reply("resp_m", (Call("c1", "edit", "[1]"),)))[-1]["candidates"][0]["finishReason"]
        == "MALFORMED_FUNCTION_CALL"
    )


def test_a_provider_tool_renders_as_server_side_tool_parts() -> None:
    parts = parts_of(Reply("resp_p", (ProviderTool("add function"),)))
    assert [next(iter(part)) for part in parts] == ["toolCall", "toolResponse", "text"]
    assert parts[0]["toolCall"]["args"] == {"queries": ["add function"]}


def test_broken_is_a_frame_whose_json_is_cut() -> None:
    [raw] = [e for e in LAB.events(Reply("resp_b", (Say("x", 1), Broken()))) if "raw" in e]
    data = str(raw["raw"]).removeprefix("data: ").strip()
    with pytest.raises(json.JSONDecodeError):
        json.loads(data)


@pytest.mark.parametrize(
    ("ending", "last"),
    [
        ("complete", {"finish": "STOP"}),
        ("truncated", {"finish": "MAX_TOKENS"}),
        ("error", {"status": "UNAVAILABLE"}),
        ("failed", {"status": "INTERNAL"}),
        ("open", {}),
    ],
)
def test_every_ending(ending: str, last: dict[str, str]) -> None:
    reply = Reply("resp_e", (Say("Hi.", 1),), ending)  # type: ignore[arg-type]
    events = chunks(reply)
    final = events[-1]
    if "finish" in last:
        assert final["candidates"][0]["finishReason"] == last["finish"]
    elif "status" in last:
        assert final["error"]["status"] == last["status"]
    else:
        assert not finishes(reply)
        assert "error" not in final


def test_gemini_has_no_paused_responses() -> None:
    with pytest.raises(ValueError, match="paused"):
        render(Reply("resp_x", (Say("x"),), "paused"))


def test_the_non_streaming_response_is_honest() -> None:
    whole = LAB.completion(Reply("resp_w", (Say("Editing."), Call("c1", "edit", EDIT))))
    [candidate] = whole["candidates"]
    assert candidate["finishReason"] == "STOP"
    assert candidate["content"]["parts"] == [
        {"text": "Editing."},
        {"functionCall": {"name": "edit", "args": EDIT, "id": "c1"}},
    ]
    assert whole["responseId"] == "resp_w"
    assert "usageMetadata" in whole
    truncated = Reply("resp_w", (Say("Edit"), Call("c1", "edit", EDIT, cut=True)), "truncated")
    assert LAB.completion(truncated)["candidates"][0]["finishReason"] == "MAX_TOKENS"
    failed = LAB.completion(Reply("resp_w", (Say("x"),), "failed"))
    assert failed["candidates"][0]["finishReason"] == "OTHER"


@pytest.mark.parametrize(
    ("error", "kind", "retry_after"),
    [
        (OpeningError(401, "auth", "API key not valid."), FailureKind.OPENING, None),
        (OpeningError(429, "quota", "Quota exceeded."), FailureKind.QUOTA_EXHAUSTED, None),
        (OpeningError(429, "rate_limit", "Slow down.", 1.5), FailureKind.OPENING, 1.5),
        (OpeningError(503, "overloaded", "Overloaded."), FailureKind.OPENING, None),
    ],
)
def test_error_bodies_are_googles_and_classify_back(
    error: OpeningError, kind: FailureKind, retry_after: float | None
) -> None:
    body = gemini_error_body(error)
    assert set(body["error"]) >= {"code", "message", "status"}
    assert body["error"]["code"] == error.status
    failure = classify_gemini_failure(error.status, body, {})
    assert failure.kind is kind
    assert failure.retry_after == retry_after


def test_the_api_key_error_is_googles_400() -> None:
    body = gemini_error_body(OpeningError(400, "auth", "API key not valid."))
    assert body["error"]["status"] == "INVALID_ARGUMENT"
    assert body["error"]["details"][0]["reason"] == "API_KEY_INVALID"


# --- where results must be ------------------------------------------------------------------------


def request_with(
    results: list[dict[str, Any]], calls: list[dict[str, Any]] | None = None
) -> dict[str, Any]:
    calls = calls or [
        {"functionCall": {"name": "read", "args": {}, "id": "a"}},
        {"functionCall": {"name": "test", "args": {}, "id": "b"}},
    ]
    return {
        "contents": [
            {"role": "user", "parts": [{"text": "go"}]},
            {"role": "model", "parts": calls},
            {"role": "user", "parts": results},
        ]
    }


def response(name: str, call_id: str | None, result: str) -> dict[str, Any]:
    body: dict[str, Any] = {"name": name, "response": {"result": result}}
    if call_id is not None:
        body["id"] = call_id
    return {"functionResponse": body}


def test_a_result_is_found_where_gemini_wants_it() -> None:
    request = request_with([response("read", "a", "A"), response("test", "b", "B")])
    assert LAB.tool_result(request, "a") == "A"
    assert LAB.tool_result(request, "b") == "B"
    assert LAB.tool_result(request, "zzz") is None


@pytest.mark.parametrize(
    "results",
    [
        [response("test", "b", "B"), response("read", "a", "A")],  # out of order
        [response("read", "a", "A")],  # one missing
        [{"text": "first"}, response("read", "a", "A"), response("test", "b", "B")],
        [response("read", "x", "A"), response("test", "b", "B")],  # another id
    ],
)
def test_a_misplaced_result_is_not_found(results: list[dict[str, Any]]) -> None:
    assert LAB.tool_result(request_with(results), "a") is None


def test_an_error_result_is_found_too() -> None:
    request = request_with(
        [
            {"functionResponse": {"name": "read", "response": {"error": "error: no"}, "id": "a"}},
            response("test", "b", "B"),
        ]
    )
    assert LAB.tool_result(request, "a") == "error: no"


# --- the official SDK reads the scripted stream ---------------------------------------------------


async def test_the_official_sdk_reads_the_lab_stream() -> None:
    from google import genai
    from google.genai import types

    builder = ChunkBuilder("resp-sdk").thought("Plan.", 1).text("Fixing.", 2, signature="c2lnLTE=")
    builder.call("edit", EDIT, "fc_1").finish()
    async with serve_script([builder.turn()], provider="gemini") as server:
        client = genai.Client(
            api_key="lab-key-not-a-secret",
            # google-genai 3.x defaults to /v1/; lockgate speaks /v1beta/ (the documented
            # REST surface, where every field it sends lives), as the SDK does when asked.
            http_options=types.HttpOptions(base_url=server.base_url, api_version="v1beta"),
        )
        stream = await client.aio.models.generate_content_stream(model=LAB_MODEL, contents="fix it")
        pieces = [piece async for piece in stream]
        await client.aio.aclose()
        [request] = server.requests
    assert request.path == f"{LAB.path}?alt=sse"
    text = "".join(
        part.text or ""
        for piece in pieces
        for part in (piece.candidates or [])[0].content.parts or []  # type: ignore[union-attr]
        if not part.thought
    )
    assert text == "Fixing."
    calls = [
        part.function_call
        for piece in pieces
        for part in (piece.candidates or [])[0].content.parts or []  # type: ignore[union-attr]
        if part.function_call is not None
    ]
    assert [(c.id, c.name, c.args) for c in calls] == [("fc_1", "edit", EDIT)]
    signatures = [
        part.thought_signature
        for piece in pieces
        for part in (piece.candidates or [])[0].content.parts or []  # type: ignore[union-attr]
        if part.thought_signature
    ]
    assert signatures == [b"sig-1"]  # the SDK decodes the signature's base64
    assert pieces[-1].candidates[0].finish_reason == types.FinishReason.STOP  # type: ignore[index]


async def test_the_official_sdk_gets_the_whole_response_without_a_stream() -> None:
    from google import genai
    from google.genai import types

    reply = Reply("resp-whole", (Say("Fixing."), Call("fc_1", "edit", EDIT)))
    async with serve_script([Turn(reply=reply)], provider="gemini") as server:
        client = genai.Client(
            api_key="lab-key-not-a-secret",
            http_options=types.HttpOptions(base_url=server.base_url, api_version="v1beta"),
        )
        whole = await client.aio.models.generate_content(model=LAB_MODEL, contents="fix it")
        await client.aio.aclose()
        [request] = server.requests
    assert request.path == f"/v1beta/models/{LAB_MODEL}:generateContent"
    assert request.outcome == "json"
    assert whole.text == "Fixing."
    [call] = whole.function_calls or []
    assert (call.id, call.name, call.args) == ("fc_1", "edit", EDIT)
    assert whole.candidates is not None
    assert whole.candidates[0].finish_reason == types.FinishReason.STOP
