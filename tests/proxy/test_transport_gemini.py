"""google-genai through `gated_client()` (its `HttpOptions(httpx_async_client=…)`), against a
loopback Gemini server: a complete response's call reaches the SDK; a batch with an invalid
second call is refused before any call does, and the SDK raises with lockgate's reason."""

from __future__ import annotations

import asyncio
from typing import Any

import pytest

from lockgate import gated_client
from lockgate.scripted.reply import Call, Reply, Say
from lockgate.scripted.script import Turn

from ..helpers import EDIT, ServerThread

genai = pytest.importorskip("google.genai")
types = pytest.importorskip("google.genai.types")

COMPLETE = Turn(reply=Reply("r1", (Say("Fixing."), Call("call_1", "edit", EDIT))))
INVALID_SECOND = Turn(
    reply=Reply(
        "r2",
        (Say("Fixing."), Call("call_1", "edit", EDIT), Call("call_2", "edit", {"path": "x"})),
    )
)
EDIT_SCHEMA = {
    "type": "object",
    "properties": {name: {"type": "string"} for name in EDIT},
    "required": sorted(EDIT),
}


async def _stream(base_url: str) -> tuple[list[str], BaseException | None]:
    client = genai.Client(
        api_key="placeholder-key",
        http_options=types.HttpOptions(
            base_url=base_url,
            httpx_async_client=gated_client(),
            retry_options=types.HttpRetryOptions(attempts=1),
        ),
    )
    tool = types.Tool(
        function_declarations=[
            types.FunctionDeclaration(name="edit", parameters_json_schema=EDIT_SCHEMA)
        ]
    )
    config = types.GenerateContentConfig(tools=[tool])
    calls: list[str] = []
    try:
        stream: Any = await client.aio.models.generate_content_stream(
            model="gemini-2.5-flash", contents="Fix it.", config=config
        )
        async for chunk in stream:
            for candidate in chunk.candidates or []:
                parts = candidate.content.parts if candidate.content else None
                calls.extend(p.function_call.name for p in parts or [] if p.function_call)
    except Exception as exc:
        return calls, exc
    return calls, None


def test_google_genai_gets_a_complete_call_and_raises_on_an_invalid_batch() -> None:
    with ServerThread([COMPLETE, INVALID_SECOND], provider="gemini") as server:
        complete = asyncio.run(_stream(server.base_url))
        refused = asyncio.run(_stream(server.base_url))
    assert complete == (["edit"], None)
    calls, raised = refused
    assert calls == []  # the valid first call of the bad batch never reached the SDK
    assert isinstance(raised, genai.errors.ClientError)
    assert "lockgate withheld 2 tool calls: invalid_batch" in str(raised)
