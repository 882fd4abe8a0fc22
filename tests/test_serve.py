"""`lockgate serve` and the scripted server: real sockets, real SDK."""

from __future__ import annotations

import asyncio
import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx2
import openai
import pytest

from lockgate.lab.script import Faults, ScriptError, Turn, load_script
from lockgate.lab.server import serve_script
from lockgate.providers.responses.lab import ResponseBuilder

from .helpers import run_lockgate, serving_repair


@pytest.fixture
def served_repair() -> Iterator[str]:
    with serving_repair("responses") as base_url:
        yield base_url


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


def run_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return run_lockgate(*args, timeout=60)


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "non-empty list"),
        ('[{"status": 99}]', "status"),
        ('[{"events": [{"no": "type"}]}]', "events"),
        ('[{"faults": {"drip": 1}}]', "faults"),
        ('[{"faults": {"end": "never"}}]', "end must be"),
        ('[{"bogus": 1}]', "unknown keys"),
    ],
)
def test_serve_rejects_invalid_scripts_in_one_line(
    tmp_path: Path, content: str, needle: str
) -> None:
    script = tmp_path / "script.json"
    script.write_text(content)
    result = run_cli("serve", "--script", str(script))
    assert result.returncode == 2
    assert result.stderr.count("\n") == 1
    assert needle in result.stderr
    assert "Traceback" not in result.stderr


def test_serve_reports_unreadable_script_and_bad_host(tmp_path: Path) -> None:
    missing = run_cli("serve", "--script", str(tmp_path / "missing.json"))
    assert missing.returncode == 2
    assert "cannot read script" in missing.stderr
    remote = run_cli("serve", "--scenario", "repair", "--host", "10.1.2.3")
    assert remote.returncode == 2
    assert "not a loopback address" in remote.stderr


def test_load_script_round_trips_every_fault() -> None:
    turns = load_script(
        json.dumps(
            {
                "turns": [
                    {
                        "status": 429,
                        "body": {"error": {"code": "rate_limit_exceeded"}},
                        "headers": {"retry-after": "1"},
                    },
                    {"connection_error": True},
                    {
                        "events": [
                            {"type": "response.created", "response": {"id": "r"}},
                            {"raw": ": hi\n\n"},
                        ],
                        "faults": {
                            "fragment_sizes": [1, 2],
                            "line_ending": "crlf",
                            "done_sentinel": True,
                            "stall_after": 1,
                            "stall_seconds": 0.5,
                        },
                    },
                ]
            }
        )
    ).turns
    assert turns[0] == Turn(
        status=429, body={"error": {"code": "rate_limit_exceeded"}}, headers={"retry-after": "1"}
    )
    assert turns[1].connection_error
    assert turns[2].faults == Faults(
        fragment_sizes=(1, 2),
        line_ending="crlf",
        done_sentinel=True,
        stall_after=1,
        stall_seconds=0.5,
    )
    with pytest.raises(ScriptError):
        load_script('{"turns": "nope"}')


async def test_server_records_requests_without_the_credential() -> None:
    turn = ResponseBuilder("r").created().text("m", "hi").completed().turn()
    async with serve_script([turn]) as server, httpx2.AsyncClient() as client:
        response = await client.post(
            f"{server.base_url}/responses",
            json={"model": "m", "stream": True},
            headers={"Authorization": "Bearer sk-very-secret"},
        )
        body = response.content
        await server.settle()
    assert response.status_code == 200
    assert response.headers["content-type"] == "text/event-stream"
    assert b"event: response.created" in body
    recorded = server.requests[0]
    assert recorded.body == {"model": "m", "stream": True}
    assert recorded.headers["authorization"] == "Bearer [redacted]"
    assert "sk-very-secret" not in repr(server.requests)
    assert recorded.client_closed_early is False


async def test_server_http_errors_carry_body_and_headers() -> None:
    turn = Turn(
        status=429,
        body={"error": {"code": "rate_limit_exceeded"}},
        headers={"retry-after-ms": "400"},
    )
    async with serve_script([turn]) as server, httpx2.AsyncClient() as client:
        response = await client.post(f"{server.base_url}/responses", json={"stream": True})
    assert response.status_code == 429
    assert response.headers["retry-after-ms"] == "400"
    assert response.json() == {"error": {"code": "rate_limit_exceeded"}}


async def test_server_reset_and_dropped_connection_are_socket_errors() -> None:
    builder = ResponseBuilder("r").created().text("m", "some text here")
    turns = [Turn(connection_error=True), builder.turn(faults=Faults(reset_after=2))]
    async with serve_script(turns) as server, httpx2.AsyncClient() as client:
        with pytest.raises(httpx2.TransportError):
            await client.post(f"{server.base_url}/responses", json={"stream": True})
        with pytest.raises(httpx2.TransportError):
            await read_whole_stream(client, f"{server.base_url}/responses")


async def read_whole_stream(client: httpx2.AsyncClient, url: str) -> None:
    async with client.stream("POST", url, json={"stream": True}) as response:
        async for _ in response.aiter_bytes():
            pass


async def test_server_notices_a_client_that_leaves_during_a_hang() -> None:
    turn = ResponseBuilder("r").created().turn(faults=Faults(end="hang"))
    async with serve_script([turn]) as server:
        async with (
            httpx2.AsyncClient() as client,
            client.stream(
                "POST", f"{server.base_url}/responses", json={"stream": True}
            ) as response,
        ):
            assert response.status_code == 200
            await asyncio.wait_for(server.paused.wait(), 5)
        await server.settle()
    assert server.requests[0].client_closed_early is True


async def test_server_fragments_bytes_exactly_as_scripted() -> None:
    text = "é✓"
    turn = (
        ResponseBuilder("r")
        .created()
        .text("m", text, 1)
        .completed()
        .turn(faults=Faults(fragment_sizes=(1,), line_ending="crlf"))
    )
    async with (
        serve_script([turn]) as server,
        httpx2.AsyncClient() as client,
        client.stream("POST", f"{server.base_url}/responses", json={"stream": True}) as response,
    ):
        chunks = [chunk async for chunk in response.aiter_raw()]
    joined = b"".join(chunks)
    assert b"\r\n" in joined
    assert b"\n\n" not in joined
    assert text.encode() in joined


def test_readme_script_example_is_a_valid_script() -> None:
    readme = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    block = readme.split("```json\n", 1)[1].split("```", 1)[0]
    turns = load_script(block).turns
    assert [turn.status for turn in turns] == [429, 200, 200]
    assert turns[1].connection_error
    assert turns[2].faults.line_ending == "crlf"
