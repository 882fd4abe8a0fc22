"""The Chat lab renderer, through the official SDK's stream helper and its plain completion."""

from __future__ import annotations

import openai

from lockgate.scripted.scenario import text_turn

from ...helpers import ServerThread


async def test_sdk_chat_stream_helper_drives_the_repair_scenario(served_repair: str) -> None:
    client = openai.AsyncOpenAI(api_key="sk-test-serve", base_url=served_repair, max_retries=0)
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
