"""`lockgate serve --provider bedrock` answers InvokeModel for Anthropic models beside
Converse: `/model/{id}/invoke-with-response-stream` streams the Anthropic renderer's events in
`chunk` messages (read here by boto3's own client), `/model/{id}/invoke` answers the Anthropic
`Message`; the lab runs every neutral scenario Bedrock runs on that wire too (the variant
`bedrock-invoke`)."""

from __future__ import annotations

import asyncio
import json
from typing import Any

import boto3  # type: ignore[import-untyped]
import botocore.config  # type: ignore[import-untyped]
import pytest
from botocore.exceptions import EventStreamError  # type: ignore[import-untyped]

from lockgate.eventstream import EventStreamDecoder
from lockgate.lab.runner import lab_runs, run_scenario
from lockgate.lab.scenarios import NEUTRAL_SCENARIOS, SCENARIOS, SCENARIOS_BY_NAME
from lockgate.lab.server import serve_script
from lockgate.providers.anthropic.render import RENDERER as ANTHROPIC
from lockgate.providers.bedrock.invoke import WIRE
from lockgate.providers.bedrock.lab_invoke import ANTHROPIC_VERSION, RENDERER, invoke_path
from lockgate.providers.bedrock.server_render import RENDERER as BEDROCK
from lockgate.providers.variants import lab_entry, server_provider, with_variants
from lockgate.scripted.reply import Call, Reply, Say
from lockgate.scripted.script import Turn, json_answer

MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
EDIT = {"path": "calc.py", "old": "a - b", "new": "a + b"}
EDITING = Reply("r1", (Say("Fixing it.", pieces=2), Call("call_1", "edit", EDIT)))
BODY = {
    "anthropic_version": ANTHROPIC_VERSION,
    "max_tokens": 64,
    "messages": [{"role": "user", "content": "fix it"}],
}


def client(url: str) -> Any:
    return boto3.client(
        "bedrock-runtime",
        endpoint_url=url,
        region_name="us-east-1",
        aws_access_key_id="x",
        aws_secret_access_key="y",
        config=botocore.config.Config(retries={"total_max_attempts": 1}),
    )


def stream_events(url: str) -> list[dict[str, Any]]:
    answer = client(url).invoke_model_with_response_stream(modelId=MODEL, body=json.dumps(BODY))
    return [json.loads(event["chunk"]["bytes"]) for event in answer["body"]]


def whole(url: str) -> dict[str, Any]:
    answer = client(url).invoke_model(modelId=MODEL, body=json.dumps(BODY))
    document: dict[str, Any] = json.loads(answer["body"].read())
    return document


async def test_boto3_reads_the_anthropic_events_of_an_invoke_stream() -> None:
    async with serve_script([Turn(reply=EDITING)], provider="bedrock") as server:
        url = f"http://127.0.0.1:{server.port}"
        events = await asyncio.to_thread(stream_events, url)
        [request] = server.requests
    assert events == ANTHROPIC.events(EDITING)
    assert request.path == invoke_path(MODEL)
    assert request.outcome == "stream"


async def test_boto3_reads_the_whole_invoke_answer() -> None:
    async with serve_script([Turn(reply=EDITING)], provider="bedrock") as server:
        url = f"http://127.0.0.1:{server.port}"
        document = await asyncio.to_thread(whole, url)
    expected = ANTHROPIC.completion(EDITING)
    assert document["content"] == expected["content"]
    assert document["stop_reason"] == "tool_use"


async def test_an_in_stream_error_is_an_exception_message_boto3_raises_on() -> None:
    failing = Reply("r2", (Say("Fixing"),), ending="error")
    async with serve_script([Turn(reply=failing)], provider="bedrock") as server:
        url = f"http://127.0.0.1:{server.port}"
        with pytest.raises(EventStreamError, match="serviceUnavailableException"):
            await asyncio.to_thread(stream_events, url)


def test_the_server_routes_each_path_to_its_wire() -> None:
    converse = f"/model/{MODEL}/converse-stream"
    assert BEDROCK.for_path(converse) is BEDROCK
    assert BEDROCK.for_path(invoke_path(MODEL)) is RENDERER
    assert BEDROCK.for_path(invoke_path(MODEL, stream=False)) is RENDERER
    assert BEDROCK.answers(invoke_path(MODEL, stream=False))
    assert RENDERER.is_streaming(invoke_path(MODEL), {})
    assert not RENDERER.is_streaming(invoke_path(MODEL, stream=False), {})
    assert not BEDROCK.answers(f"/model/{MODEL}/invoke-something")


def _reply_turns() -> list[tuple[str, Turn]]:
    found: list[tuple[str, Turn]] = []
    for scenario in NEUTRAL_SCENARIOS:
        if not scenario.runs_on("bedrock"):
            continue
        found.extend((scenario.name, turn) for turn in scenario.turns() if turn.reply is not None)
    return found


@pytest.mark.parametrize(("name", "turn"), _reply_turns())
def test_every_neutral_reply_streams_its_anthropic_events_in_chunks(name: str, turn: Turn) -> None:
    assert turn.reply is not None
    events = RENDERER.events(turn.reply)
    body = b"".join(RENDERER.frame(event) for event in events)
    messages = EventStreamDecoder().feed(body)  # whole, well-framed messages
    assert len(messages) == len(events)
    for message, event in zip(messages, events, strict=True):
        if "raw" in event or event.get("type") == "error":
            continue  # a broken chunk, an exception message
        assert json.loads(WIRE.as_event(message).data) == event
    if json_answer(turn).outcome == "json":
        assert RENDERER.completion(turn.reply) == ANTHROPIC.completion(turn.reply)


def test_the_lab_runs_bedrocks_neutral_scenarios_on_the_invoke_variant() -> None:
    assert with_variants(["bedrock"]) == ["bedrock", "bedrock-invoke"]
    assert server_provider("bedrock-invoke") == "bedrock"
    assert lab_entry("bedrock-invoke").render() is RENDERER
    runs = lab_runs(None, ["bedrock"], "http")
    invoked = {scenario.name for scenario, provider, _ in runs if provider == "bedrock-invoke"}
    neutral = {scenario.name for scenario in NEUTRAL_SCENARIOS}
    expected = {s.name for s in SCENARIOS if s.name in neutral and s.runs_on("bedrock")}
    assert "framing-variants" not in expected  # no SSE line ends in a binary stream
    assert invoked == expected
    assert not any(name.startswith("bedrock-") for name in invoked)


@pytest.mark.parametrize("name", ["repair", "second-call-invalid", "output-limit"])
async def test_an_invoke_lab_run_goes_to_the_invoke_path(name: str) -> None:
    result = await run_scenario(SCENARIOS_BY_NAME[name], "http", provider="bedrock-invoke")
    assert result.as_expected, result.problems
    assert result.provider == "bedrock-invoke"
    assert all("anthropic_version" in request for request in result.requests)
