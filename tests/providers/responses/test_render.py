"""The Responses lab renderer: what `lockgate serve` sends, the official SDK accepts."""

from __future__ import annotations

import openai


async def test_sdk_stream_helper_drives_the_repair_scenario(served_repair: str) -> None:
    client = openai.AsyncOpenAI(api_key="sk-test-serve", base_url=served_repair, max_retries=0)
    outputs: list[list[str]] = []
    try:
        for _ in range(7):
            async with client.responses.stream(model="any", input="fix the bug") as stream:
                async for _event in stream:
                    pass
                final = await stream.get_final_response()
            assert final.status == "completed"
            outputs.append([item.type for item in final.output])
    finally:
        await client.close()
    assert outputs[0] == ["message", "function_call"]
    assert outputs[-1] == ["message"]
    assert sum(kinds.count("function_call") for kinds in outputs) == 6
