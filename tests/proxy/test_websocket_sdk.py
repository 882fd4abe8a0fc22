"""The official `openai` SDK's Responses WebSocket client (`AsyncOpenAI().responses.connect()`)
through the relay (issue 30): a response with a valid call reaches it whole, typed; a second
response on the same socket continues by `previous_response_id`; an invalid batch reaches it
as one `error` event with lockgate's reason, and none of the calls. Loopback only."""

from __future__ import annotations

from typing import Any

import openai

from lockgate.proxy.server import ProxyConfig, serving

from .test_server import gating
from .test_websocket_support import (
    READ_TOOL,
    UpstreamSocket,
    call_events,
    send_all,
    text_events,
    ws_upstream,
)

READ = {"path": "calculator.py"}
TERMINALS = ("response.completed", "response.incomplete", "response.failed", "error")


async def _session(url: str, previous: str | None = None) -> list[list[Any]]:
    """Two responses on one SDK socket; the events of each."""
    client = openai.AsyncOpenAI(base_url=url + "/v1", api_key="sk-sdk-test", max_retries=0)
    answers: list[list[Any]] = []
    async with client.responses.connect(max_retries=0) as connection:
        for number in range(2):
            request: dict[str, Any] = {
                "type": "response.create",
                "model": "lab-model",
                "input": "fix it",
                "tools": [READ_TOOL],
            }
            if number:
                request["previous_response_id"] = "resp_1"
            await connection.send(request)  # type: ignore[arg-type]
            events: list[Any] = []
            async for event in connection:
                events.append(event)
                if event.type in TERMINALS:
                    break
            answers.append(events)
            if events[-1].type == "error":
                break
    return answers


async def test_the_sdk_reads_a_gated_call_and_continues_on_the_same_socket() -> None:
    async def script(socket: UpstreamSocket, message: dict[str, Any]) -> None:
        if len(socket.received) == 1:
            await send_all(socket, call_events("resp_1", ("read", READ)))
        else:
            await send_all(socket, text_events("resp_2"))

    async with (
        ws_upstream(script) as upstream,
        serving(ProxyConfig(upstream.url, gating=gating())) as proxy,
    ):
        first, second = await _session(proxy.url)
    assert first[-1].type == "response.completed"
    calls = [item for item in first[-1].response.output if item.type == "function_call"]
    assert [(call.name, call.arguments) for call in calls] == [
        ("read", '{"path": "calculator.py"}')
    ]
    assert second[-1].type == "response.completed"
    [socket] = upstream.sockets
    assert socket.received[1].get("previous_response_id") == "resp_1"


async def test_the_sdk_gets_an_invalid_batch_as_one_error_and_no_call() -> None:
    async def script(socket: UpstreamSocket, message: dict[str, Any]) -> None:
        await send_all(socket, call_events("resp_1", ("read", READ), ("rm_rf", {"path": "/"})))

    async with (
        ws_upstream(script) as upstream,
        serving(ProxyConfig(upstream.url, gating=gating())) as proxy,
    ):
        [events] = await _session(proxy.url)
    last = events[-1]
    assert last.type == "error"
    assert "lockgate withheld 2 tool calls" in str(last)
    assert not any(
        event.type == "response.output_item.done" and event.item.type == "function_call"
        for event in events
    )
