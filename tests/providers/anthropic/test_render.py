"""The Anthropic lab renderer and scenarios, and `lockgate serve` driven by the SDK.

Every neutral and every Anthropic scenario on both transports, the renderer's wire
conventions, and `lockgate serve --provider anthropic` driven by the official SDK's
streaming helper.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

import anthropic
import pytest

from lockgate.errors import FailureKind
from lockgate.lab.scenarios import NEUTRAL_SCENARIOS, SCENARIOS
from lockgate.providers.anthropic.errors import classify_anthropic_failure
from lockgate.providers.anthropic.render import AnthropicRenderer
from lockgate.providers.anthropic.scenarios import SCENARIOS as ANTHROPIC_SCENARIOS
from lockgate.providers.anthropic.scenarios import (
    check_interleaved,
    check_pause,
    check_thinking_replay,
)
from lockgate.scripted.reply import Call, OpeningError, ProviderTool, Refuse, Reply, Say, Think
from lockgate.scripted.scenario import Observation

LAB = AnthropicRenderer()

RUNS = [
    (scenario, kind)
    for scenario in SCENARIOS
    if scenario.runs_on("anthropic")
    for kind in sorted(scenario.transports)
]


def test_every_scenario_runs_on_anthropic() -> None:
    names = {scenario.name for scenario, _ in RUNS}
    assert names >= {scenario.name for scenario in NEUTRAL_SCENARIOS}
    assert names >= {scenario.name for scenario in ANTHROPIC_SCENARIOS}
    assert all(s.name.startswith("anthropic-") for s in ANTHROPIC_SCENARIOS)
    assert all(s.protocols == frozenset({"anthropic"}) for s in ANTHROPIC_SCENARIOS)


# Every run of RUNS is played by tests/lab/test_runner.py (all providers, both transports).


# --- the renderer's wire conventions ---------------------------------------------------------


def test_frames_are_named_events_whose_name_is_the_type() -> None:
    frame = LAB.frame({"type": "ping"})
    assert frame == b'event: ping\ndata: {"type":"ping"}\n\n'
    assert LAB.frame({"raw": "data: x\n\n"}) == b"data: x\n\n"
    assert LAB.path == "/v1/messages"
    assert LAB.base_url("http://127.0.0.1:9") == "http://127.0.0.1:9"


def test_a_rendered_stream_is_what_the_api_sends() -> None:
    reply = Reply(
        "msg_r",
        (Think("Hm.", "sig"), Say("Hi."), Call("toolu_1", "read", {"path": "README.md"})),
    )
    events = LAB.events(reply)
    types = [event["type"] for event in events]
    assert types[0] == "message_start"
    assert types[1:3] == ["content_block_start", "ping"]
    assert types[-2:] == ["message_delta", "message_stop"]
    assert events[-2]["delta"]["stop_reason"] == "tool_use"
    thinking = [e["delta"] for e in events if e.get("index") == 0 and "delta" in e]
    assert thinking[-1] == {"type": "signature_delta", "signature": "sig"}
    arguments = [e["delta"]["partial_json"] for e in events if e.get("index") == 2 and "delta" in e]
    assert arguments[0] == ""
    assert "".join(arguments) == '{"path": "README.md"}'


@pytest.mark.parametrize(
    ("ending", "last"),
    [
        ("truncated", "max_tokens"),
        ("paused", "pause_turn"),
        ("error", "overloaded_error"),
        ("failed", "api_error"),
    ],
)
def test_endings(ending: str, last: str) -> None:
    events = LAB.events(Reply("msg_e", (Say("x"),), ending))  # type: ignore[arg-type]
    final = events[-1] if ending in ("error", "failed") else events[-2]
    stated = (
        final["error"]["type"] if ending in ("error", "failed") else final["delta"]["stop_reason"]
    )
    assert stated == last
    assert LAB.events(Reply("msg_o", (Say("x"),), "open"))[-1]["type"] == "content_block_stop"


def test_a_refusal_is_a_stop_reason_with_details_and_no_block() -> None:
    events = LAB.events(Reply("msg_refuse", (Refuse("No."),)))
    assert [e["type"] for e in events] == ["message_start", "message_delta", "message_stop"]
    assert events[1]["delta"]["stop_reason"] == "refusal"
    assert events[1]["delta"]["stop_details"] == {"type": "refusal", "explanation": "No."}


def test_the_non_streaming_message_is_a_valid_sdk_message() -> None:
    reply = Reply(
        "msg_c",
        (Think("t", "sig"), Say("Hi."), ProviderTool("q"), Call("toolu_1", "test", {})),
    )
    message = anthropic.types.Message.model_validate(LAB.completion(reply))
    assert message.stop_reason == "tool_use"
    assert [block.type for block in message.content] == [
        "thinking",
        "text",
        "server_tool_use",
        "web_search_tool_result",
        "tool_use",
    ]
    assert message.usage.input_tokens == 320


@pytest.mark.parametrize(
    ("error", "kind", "outcome"),
    [
        (OpeningError(401, "auth", "bad key"), "authentication_error", FailureKind.OPENING),
        (OpeningError(429, "quota", "no credit"), "billing_error", FailureKind.QUOTA_EXHAUSTED),
        (OpeningError(429, "rate_limit", "slow"), "rate_limit_error", FailureKind.OPENING),
        (OpeningError(529, "overloaded", "busy"), "overloaded_error", FailureKind.OPENING),
        (OpeningError(500, "server", "oops"), "api_error", FailureKind.OPENING),
        (OpeningError(503, "unavailable", "down"), "api_error", FailureKind.OPENING),
        (OpeningError(529, "unavailable", "down"), "overloaded_error", FailureKind.OPENING),
        (OpeningError(400, "exhausted", "done"), "invalid_request_error", FailureKind.OPENING),
    ],
)
def test_error_bodies(error: OpeningError, kind: str, outcome: FailureKind) -> None:
    body = LAB.error_body(error)
    assert body["type"] == "error"
    assert body["error"] == {"type": kind, "message": error.message}
    assert body["request_id"]
    assert classify_anthropic_failure(error.status, body, {}).kind is outcome


def test_reset_headers_name_the_request_limit_only() -> None:
    headers = LAB.reset_headers(1.5)
    assert headers["anthropic-ratelimit-requests-remaining"] == "0"
    assert int(headers["anthropic-ratelimit-tokens-remaining"]) > 0
    requests = datetime.fromisoformat(headers["anthropic-ratelimit-requests-reset"])
    tokens = datetime.fromisoformat(headers["anthropic-ratelimit-tokens-reset"])
    assert tokens > requests
    failure = classify_anthropic_failure(429, {}, headers)
    assert failure.retry_after is not None
    assert 1.0 <= failure.retry_after <= 1.5


def _request(*messages: dict[str, Any]) -> dict[str, Any]:
    return {"messages": list(messages)}


ASKED = {
    "role": "assistant",
    "content": [{"type": "tool_use", "id": "c1", "name": "t", "input": {}}],
}


def _result(call_id: str, content: str = "ok") -> dict[str, Any]:
    return {"type": "tool_result", "tool_use_id": call_id, "content": content}


def test_tool_result_is_found_only_where_anthropic_wants_it() -> None:
    text = {"type": "text", "text": "and?"}
    placed = _request(ASKED, {"role": "user", "content": [_result("c1"), text]})
    assert LAB.tool_result(placed, "c1") == "ok"
    after_text = _request(ASKED, {"role": "user", "content": [text, _result("c1")]})
    assert LAB.tool_result(after_text, "c1") is None
    later = _request(
        ASKED,
        {"role": "user", "content": [text]},
        {"role": "user", "content": [_result("c1")]},
    )
    assert LAB.tool_result(later, "c1") is None
    missing = _request(ASKED, {"role": "user", "content": [_result("other")]})
    assert LAB.tool_result(missing, "c1") is None
    assert LAB.tool_result(_request({"role": "user", "content": "hi"}), "c1") is None
    listed = _request(
        ASKED,
        {"role": "user", "content": [_result("c1", [{"type": "text", "text": "x"}])]},  # type: ignore[arg-type]
    )
    assert LAB.tool_result(listed, "c1") == "x"


def _observation(*requests: dict[str, Any]) -> Observation:
    return Observation(requests, (), None, "model_finished", LAB)


def test_the_checks_notice_a_broken_replay() -> None:
    thinking = {"type": "thinking", "thinking": "x", "signature": "changed"}
    first = {"thinking": {"type": "enabled", "budget_tokens": 2048}, "max_tokens": 4096}
    tampered = _request(
        {"role": "user", "content": "go"},
        {
            "role": "assistant",
            "content": [
                {"type": "tool_use", "id": "call_1", "name": "discover", "input": {}},
                thinking,
            ],
        },
        {"role": "user", "content": [_result("call_1")]},
    )
    assert len(check_thinking_replay(_observation(first, tampered))) == 2
    assert check_interleaved(_observation(first, tampered))
    paused = _request({"role": "user", "content": "go"})
    assert check_pause(_observation(paused, _request({"role": "user", "content": "go"})))


# --- `lockgate serve --provider anthropic` with the official SDK -----------------------------


async def test_the_sdk_stream_helper_drives_the_repair_scenario(served_repair: str) -> None:
    client = anthropic.AsyncAnthropic(
        api_key="sk-ant-test-serve", base_url=served_repair, max_retries=0
    )
    kinds: list[list[str]] = []
    reasons: list[str | None] = []
    try:
        for _ in range(7):
            async with client.messages.stream(
                model="claude-test",
                max_tokens=1024,
                messages=[{"role": "user", "content": "fix the bug"}],
            ) as stream:
                async for _event in stream:
                    pass
                final = await stream.get_final_message()
            kinds.append([block.type for block in final.content])
            reasons.append(final.stop_reason)
    finally:
        await client.close()
    assert kinds[0] == ["text", "tool_use"]
    assert kinds[-1] == ["text"]
    assert sum(k.count("tool_use") for k in kinds) == 6
    assert reasons == ["tool_use"] * 6 + ["end_turn"]
