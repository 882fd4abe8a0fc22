"""`lockgate serve --provider chat` against the official SDK's own Chat streaming helper,
and `lockgate run --provider chat` against it: the repair conversation, every turn."""

from __future__ import annotations

import json
from collections.abc import Iterator

import openai
import pytest

from lockgate.lab.scenarios import FIXED_SOURCE, repair_turns
from lockgate.scripted.scenario import text_turn

from .helpers import ServerThread, ends_with_file_and_usage, run_lockgate, serving_repair


@pytest.fixture
def served_chat_repair() -> Iterator[str]:
    with serving_repair("chat") as base_url:
        yield base_url


async def test_sdk_chat_stream_helper_drives_the_repair_scenario(served_chat_repair: str) -> None:
    client = openai.AsyncOpenAI(api_key="sk-test-serve", base_url=served_chat_repair, max_retries=0)
    finishes: list[str | None] = []
    calls: list[str] = []
    try:
        for _ in range(7):
            async with client.chat.completions.stream(
                model="any", messages=[{"role": "user", "content": "fix the bug"}]
            ) as stream:
                async for _event in stream:
                    pass
                final = await stream.get_final_completion()
            choice = final.choices[0]
            finishes.append(choice.finish_reason)
            calls += [call.function.name for call in choice.message.tool_calls or []]
    finally:
        await client.close()
    assert finishes == ["tool_calls"] * 6 + ["stop"]
    assert calls == ["discover", "read", "test", "read", "edit", "test"]


async def test_a_non_streaming_request_gets_the_json_completion() -> None:
    turn = text_turn("chatcmpl-plain", "No stream needed.")
    with ServerThread([turn], provider="chat") as running:
        client = openai.AsyncOpenAI(api_key="sk-test", base_url=running.base_url, max_retries=0)
        try:
            completion = await client.chat.completions.create(
                model="any", messages=[{"role": "user", "content": "hi"}]
            )
        finally:
            await client.close()
    assert completion.choices[0].message.content == "No stream needed."
    assert completion.choices[0].finish_reason == "stop"


@pytest.mark.parametrize("http_client", ["aiohttp", "httpx"])
def test_run_with_the_chat_provider_repairs_the_fixture(http_client: str) -> None:
    with ServerThread(repair_turns(), provider="chat") as running:
        result = run_lockgate(
            "run",
            "--provider",
            "chat",
            "--base-url",
            running.base_url,
            "--allow-execution",
            "--http-client",
            http_client,
            key="sk-chat-run-test",
        )
        assert running.server is not None
        requests = [r.body for r in running.server.requests]
    assert result.returncode == 0, result.stderr
    assert "stopped: model_finished" in result.stdout
    assert ends_with_file_and_usage(result.stdout, FIXED_SOURCE)
    assert len(requests) == 7
    first, last = requests[0], requests[-1]
    assert first["stream"] is True
    assert first["stream_options"] == {"include_usage": True}
    assert first["parallel_tool_calls"] is False
    assert first["max_tokens"] == 2048
    assert [tool["function"]["name"] for tool in first["tools"]] == [
        "discover",
        "read",
        "edit",
        "test",
    ]
    roles = [message["role"] for message in last["messages"]]
    assert roles[:2] == ["system", "user"]
    assert roles.count("tool") == 6
    edits = [
        call
        for message in last["messages"]
        for call in message.get("tool_calls") or []
        if call["function"]["name"] == "edit"
    ]
    assert json.loads(edits[0]["function"]["arguments"])["new"] == "return a + b"


def test_responses_only_flags_are_refused_with_chat() -> None:
    for flag in (["--continuation", "native"], ["--encrypted-reasoning", "on"]):
        result = run_lockgate("run", "--provider", "chat", *flag, key="sk-test-flags")
        assert result.returncode == 2
        assert result.stderr.count("\n") == 1
        assert "not available with --provider chat" in result.stderr
        assert result.stdout == ""  # no run started, nothing printed
