"""Bedrock exchanges recorded through the proxy (`lockgate proxy --record DIR`) and played
back by `lockgate serve --cassette`: a ConverseStream and an InvokeModelWithResponseStream
answer, binary event-stream bodies, come back byte for byte with their read boundaries,
their cassettes judged as recorded, and an event-stream fault played on them is refused."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import aiohttp
import pytest

from lockgate.cassette import load_all
from lockgate.cassette.faults import parse_fault
from lockgate.cassette.format import Verdict, dumps
from lockgate.cassette.judge import judge
from lockgate.cassette.serving import exchanges
from lockgate.eventstream import MEDIA_TYPE, EventStreamDecoder
from lockgate.lab.scenarios import repair_turns
from lockgate.lab.server import ServerThread, serve_script
from lockgate.providers.bedrock.lab_invoke import ANTHROPIC_VERSION, invoke_path
from lockgate.proxy import GatingOptions
from lockgate.proxy.server import ProxyConfig, ProxyRecord, serving
from lockgate.scripted.reply import Call, Reply, Say
from lockgate.scripted.script import Turn

from ..helpers import CLI

MODEL = "us.anthropic.claude-sonnet-4-5-20250929-v1:0"
CONVERSE = f"/model/{MODEL.replace(':', '%3A')}/converse-stream"
INVOKE = invoke_path(MODEL)
HELD = "bedrock-api-key-HELD-9a8b7c"
EDIT = {"path": "calc.py", "old": "a - b", "new": "a + b"}
SCHEMA = {
    "type": "object",
    "properties": {
        "path": {"type": "string"},
        "old": {"type": "string"},
        "new": {"type": "string"},
    },
    "required": ["path", "old", "new"],
}
CONVERSE_BODY = {
    "messages": [{"role": "user", "content": [{"text": "fix calc.py"}]}],
    "toolConfig": {
        "tools": [
            {"toolSpec": {"name": "edit", "description": "edit", "inputSchema": {"json": SCHEMA}}}
        ]
    },
}
INVOKE_BODY = {
    "anthropic_version": ANTHROPIC_VERSION,
    "max_tokens": 512,
    "messages": [{"role": "user", "content": "fix calc.py"}],
    "tools": [{"name": "edit", "description": "edit", "input_schema": SCHEMA}],
}
EDITING = Turn(reply=Reply("r1", (Say("Fixing it.", pieces=3), Call("call_1", "edit", EDIT))))


async def post(url: str, body: Any) -> tuple[int, str, list[bytes]]:
    """The status, content type and every body read of one POST."""
    async with (
        aiohttp.ClientSession() as session,
        session.post(
            url, data=json.dumps(body), headers={"content-type": "application/json"}
        ) as answer,
    ):
        reads = [piece async for piece in answer.content.iter_any()]
        return answer.status, answer.headers.get("content-type", ""), reads


async def record(tmp_path: Path, path: str, body: Any) -> bytes:
    """One exchange through the proxy, recorded in `tmp_path`; the body the client got."""
    records: list[ProxyRecord] = []
    gating = GatingOptions(idle_timeout=10.0, deadline=60.0, validate_schemas=True)
    async with serve_script([EDITING], provider="bedrock") as upstream:
        config = ProxyConfig(
            f"http://127.0.0.1:{upstream.port}", gating=gating, api_key=HELD, record=tmp_path
        )
        async with serving(config, records.append) as proxy:
            status, kind, reads = await post(proxy.url + path, body)
            assert proxy.recorder is not None
            assert proxy.recorder.errors == []
    assert (status, kind) == (200, MEDIA_TYPE)
    assert [r.outcome for r in records] == ["passed"]
    return b"".join(reads)


@pytest.mark.parametrize(("path", "body"), [(CONVERSE, CONVERSE_BODY), (INVOKE, INVOKE_BODY)])
async def test_a_recorded_bedrock_exchange_replays_byte_for_byte(
    tmp_path: Path, path: str, body: Any
) -> None:
    received = await record(tmp_path, path, body)
    [cassette] = load_all(tmp_path)
    # The proxy records the path as it routed it (the model id's `%3A` read as `:`).
    wanted = ("bedrock", unquote(path), "eventstream")
    assert (cassette.protocol, cassette.path, cassette.wire) == wanted
    assert cassette.verdict == Verdict("accepted", None, 1)
    assert cassette.body == received  # the bytes the client got, binary and whole
    assert len(EventStreamDecoder().feed(received)) == len(cassette.frames()[0])
    [written] = await asyncio.to_thread(lambda: list(tmp_path.glob("*.cassette.jsonl")))
    text = await asyncio.to_thread(written.read_text)
    assert text == dumps(cassette)
    assert HELD not in text
    lines = [json.loads(line) for line in text.splitlines()[1:]]
    assert all("base64" in line for line in lines if "end" not in line)
    # `lockgate serve --cassette`: the same bytes, the same read boundaries
    served = exchanges([cassette])
    async with serve_script([e.turn for e in served], provider="bedrock") as server:
        status, kind, reads = await post(f"http://127.0.0.1:{server.port}{path}", body)
    assert (status, kind) == (200, MEDIA_TYPE)
    assert b"".join(reads) == received
    judged = await judge(cassette)
    assert judged.accepted, judged.detail
    assert judged.decision is not None
    assert [name for name, _ in judged.decision.calls] == ["edit"]


@pytest.mark.parametrize("path", [CONVERSE, INVOKE])
@pytest.mark.parametrize(
    ("spec", "kind"),
    [
        ("cut:inside=LAST", "stream_ended"),
        ("bad-crc:2", "malformed_event"),
        ("exception:3", "provider_error"),
    ],
)
async def test_event_stream_faults_on_a_recorded_exchange_are_refused(
    tmp_path: Path, path: str, spec: str, kind: str
) -> None:
    body = CONVERSE_BODY if path == CONVERSE else INVOKE_BODY
    await record(tmp_path, path, body)
    [cassette] = load_all(tmp_path)
    count = len(cassette.frames()[0])
    fault = spec.replace("LAST", str(count - 1 if path == CONVERSE else count))
    [served] = exchanges([cassette], [fault])
    async with serve_script([served.turn], provider="bedrock") as server:
        _, _, reads = await post(f"http://127.0.0.1:{server.port}{path}", body)
    assert b"".join(reads) != cassette.body
    judged = await judge(cassette, [parse_fault(fault)])
    assert not judged.accepted
    assert judged.kind == kind, judged.detail


def test_run_records_a_bedrock_session_that_replays_the_same_way(cli: CLI, tmp_path: Path) -> None:
    """`lockgate run --provider bedrock --record DIR`: each exchange a binary cassette at its
    ConverseStream path (the model out of the body), verdicts as decided; served back by
    `lockgate serve --cassette`, `run` repairs the file the same way."""
    record, again = tmp_path / "record", tmp_path / "again"
    record.mkdir()
    again.mkdir()
    key = {"AWS_BEARER_TOKEN_BEDROCK": HELD}
    with ServerThread(repair_turns(), provider="bedrock") as server:
        result = cli(
            "run", "--provider", "bedrock", "--base-url", server.base_url, "--model", MODEL,
            "--allow-execution", "--record", str(record), env=key,
        )  # fmt: skip
    assert result.code == 0, result.err
    recorded = load_all(record)
    assert len(recorded) == 7
    for cassette in recorded:
        assert (cassette.protocol, cassette.path) == ("bedrock", CONVERSE)
        assert cassette.wire == "eventstream"
        assert "model" not in cassette.request
        assert HELD not in dumps(cassette)
    assert [c.verdict for c in recorded[:6]] == [Verdict("accepted", None, 1)] * 6
    with ServerThread([e.turn for e in exchanges(recorded)], provider="bedrock") as replay:
        replayed = cli(
            "run", "--provider", "bedrock", "--base-url", replay.base_url, "--model", MODEL,
            "--allow-execution", "--record", str(again), env=key,
        )  # fmt: skip
    assert replayed.code == 0, replayed.err
    assert [c.body for c in load_all(again)] == [c.body for c in recorded]
