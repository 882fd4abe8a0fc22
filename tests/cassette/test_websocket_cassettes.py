"""Cassettes of the Responses WebSocket: `lockgate proxy --record` writes one cassette per
relayed response (method `WS`, each upstream message one read, as the SSE frame that
carries it, with the gate's verdict), and `serve --cassette` plays them back over a
WebSocket, one message per recorded frame, with the cassette faults per message."""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from lockgate.cassette.format import Verdict, load_all
from lockgate.cassette.recorder import websocket_read
from lockgate.cassette.serving import RequestMatcher, exchanges
from lockgate.lab.scenarios import SCENARIOS_BY_NAME
from lockgate.lab.server import serve_script
from lockgate.lab.via_websocket import (
    WEBSOCKET_FAULTS_BY_NAME,
    WebSocketAnswer,
    _fault_requests,
    calls_done,
    naive_websocket,
)
from lockgate.proxy import GatingOptions
from lockgate.proxy.server import ProxyConfig, serving
from lockgate.scripted.script import Turn
from lockgate.sse import SSEDecoder

from .test_record_cli import assert_no_secret

HELD = "sk-held-WS-RECORD-SECRET-31"
HEADERS = {"authorization": "Bearer lab-client-key"}


def _turns() -> list[Turn]:
    edit, answer = SCENARIOS_BY_NAME["websocket-upgrade"].turns()
    [closed] = WEBSOCKET_FAULTS_BY_NAME["ws-close-1011"].scenario.turns()
    return [edit, answer, closed]


async def _record(folder: Path) -> tuple[list[WebSocketAnswer], list[Mapping[str, Any]]]:
    """Three responses through the relay, recorded: the answers and the requests."""
    [request] = await _fault_requests()
    requests = [request, {**request, "previous_response_id": "resp_websocket"}, request]
    gating = GatingOptions(idle_timeout=1.0, deadline=30.0, validate_schemas=True)
    async with serve_script(_turns(), provider="responses") as upstream:
        config = ProxyConfig(
            f"http://127.0.0.1:{upstream.port}", gating=gating, api_key=HELD, record=folder
        )
        async with serving(config, lambda record: None) as proxy:
            answers = await naive_websocket(proxy.url + "/v1/responses", requests, HEADERS, 1.5)
            assert proxy.recorder is not None
            assert proxy.recorder.errors == []
    return answers, requests


async def test_the_relay_records_each_response_as_a_cassette(tmp_path: Path) -> None:
    answers, requests = await _record(tmp_path)
    assert [answer.ended for answer in answers] == ["response.completed"] * 2 + ["error"]
    recorded = load_all(tmp_path)
    assert [(c.protocol, c.method, c.path, c.status) for c in recorded] == [
        ("responses", "WS", "/v1/responses", 200)
    ] * 3
    assert [c.verdict for c in recorded] == [
        Verdict("accepted", None, 1),
        Verdict("accepted", None, 0),
        Verdict("refused", "transport", 1),
    ]
    assert recorded[1].request["previous_response_id"] == "resp_websocket"
    assert recorded[0].request["tools"] == requests[0]["tools"]
    # each upstream message one read, as its SSE frame; the broken socket's end is a reset
    for cassette, answer in zip(recorded[:2], answers[:2], strict=True):
        assert [read.data for read in cassette.reads] == [
            websocket_read(message.encode()) for message in answer.messages
        ]
        assert cassette.end == "clean"
    assert recorded[2].end == "reset"
    assert calls_done([event.data.decode() for event in _events(recorded[2].body)]) == 1
    assert_no_secret(tmp_path, HELD)


def _events(body: bytes) -> list[Any]:
    decoder = SSEDecoder()
    return [*decoder.feed(body), *decoder.finish()]


def test_a_websocket_message_is_one_sse_frame_with_its_type() -> None:
    assert websocket_read(b'{"type":"response.created","n":1}') == (
        b'event: response.created\ndata: {"type":"response.created","n":1}\n\n'
    )
    assert websocket_read(b"not json\nsecond line") == b"data: not json\ndata: second line\n\n"
    [event] = _events(websocket_read(b'{\n "type": "x"\n}'))
    assert json.loads(event.data) == {"type": "x"}


async def test_serve_plays_recorded_websocket_responses_with_faults_per_message(
    tmp_path: Path,
) -> None:
    answers, requests = await _record(tmp_path)
    cassettes = load_all(tmp_path)
    played = exchanges(cassettes[:2])
    async with serve_script([e.turn for e in played], provider="responses") as server:
        url = f"http://{server.host}:{server.port}/v1/responses"
        again = await naive_websocket(url, requests[:2], HEADERS, 1.5)
    assert [a.messages for a in again] == [a.messages for a in answers[:2]]
    assert [a.ended for a in again] == ["response.completed"] * 2
    # `--match request`: each message gets the cassette whose recorded request it is
    async with serve_script([], provider="responses", select=RequestMatcher(played)) as server:
        url = f"http://{server.host}:{server.port}/v1/responses"
        matched = await naive_websocket(url, requests[1::-1], HEADERS, 1.5)
    assert [a.messages for a in matched] == [a.messages for a in answers[1::-1]]
    # faults address messages: a reset after the third, a clean cut after the fifth
    reset = exchanges(cassettes[:1], ["reset:after=3"])[0].turn
    cut = exchanges(cassettes[:1], ["cut:after=5"])[0].turn
    async with serve_script([reset, cut], provider="responses") as server:
        url = f"http://{server.host}:{server.port}/v1/responses"
        faulted = await naive_websocket(url, requests[:2], HEADERS, 1.5)
    assert [a.ended for a in faulted] == ["closed 1006", "closed 1000"]
    assert list(faulted[0].messages) == list(answers[0].messages[: len(faulted[0].messages)])
    assert len(faulted[0].messages) <= 3
    assert faulted[1].messages == answers[0].messages[:5]
