"""`lockgate serve --cassette`: a recorded exchange is served with its bytes and read
boundaries (one chunk per recorded read), faults overlaid, in order or `--match request`;
in-process (`ServerThread`) and the CLI in a subprocess; bad input exits 2 in one line."""

from __future__ import annotations

import json
import signal
import socket
import subprocess
import sys
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

import pytest

from lockgate.cassette.faults import parse_fault, playback
from lockgate.cassette.format import Cassette, dumps, save
from lockgate.cassette.serving import RequestMatcher, exchanges
from lockgate.lab.server import ServerThread

from ..helpers import CLI, finish, read_serving_line, usage_error_line
from .recorded import CHAT_REQUEST, json_exchange, recorded

PATH = "/v1/chat/completions"
SERVE = [sys.executable, "-m", "lockgate", "serve"]


@dataclass(frozen=True, slots=True)
class Answer:
    status: int
    headers: list[tuple[str, str]]
    chunks: list[bytes]
    terminated: bool  # the terminating chunk came
    reset: bool  # the connection was reset

    def header(self, name: str) -> str | None:
        return next((v for k, v in self.headers if k.lower() == name), None)


def post(port: int, body: Any, path: str = PATH) -> Answer:
    """One raw HTTP/1.1 POST; the answer's chunks exactly as framed (not TCP reads)."""
    payload = json.dumps(body).encode()
    head = (
        f"POST {path} HTTP/1.1\r\nhost: 127.0.0.1\r\ncontent-type: application/json\r\n"
        f"content-length: {len(payload)}\r\n\r\n"
    )
    data = b""
    reset = False
    with socket.create_connection(("127.0.0.1", port), timeout=30) as sock:  # a hang guard
        sock.sendall(head.encode() + payload)
        while True:
            try:
                piece = sock.recv(65536)
            except ConnectionResetError:
                reset = True
                break
            if not piece:
                break
            data += piece
    top, _, rest = data.partition(b"\r\n\r\n")
    lines = top.decode("latin-1").split("\r\n")
    status = int(lines[0].split(" ")[1])
    headers = [(k.strip(), v.strip()) for k, _, v in (line.partition(":") for line in lines[1:])]
    chunks: list[bytes] = []
    terminated = False
    if any(k.lower() == "transfer-encoding" for k, _ in headers):
        while rest:
            size_line, _, rest = rest.partition(b"\r\n")
            size = int(size_line, 16)
            if size == 0:
                terminated = True
                break
            chunks.append(rest[:size])
            rest = rest[size + 2 :]
    else:
        chunks = [rest]
    return Answer(status, headers, chunks, terminated, reset)


def reads(cassette: Cassette) -> list[bytes]:
    return [read.data for read in cassette.reads]


def test_a_cassette_is_served_with_its_bytes_and_read_boundaries() -> None:
    cassette = recorded(sizes=(17, 1, 90))
    served = exchanges([cassette])
    with ServerThread([e.turn for e in served], provider="chat") as running:
        assert running.server is not None
        answer = post(running.server.port, CHAT_REQUEST)
    assert answer.status == 200
    assert answer.chunks == reads(cassette)
    assert answer.terminated
    assert not answer.reset
    assert answer.header("content-type") == "text/event-stream; charset=utf-8"
    assert answer.header("x-request-id") == "req_rec"
    assert answer.header("content-length") is None  # never the recorded length
    assert answer.header("transfer-encoding") == "chunked"


def test_a_whole_json_body_is_served_as_recorded() -> None:
    cassette = json_exchange()
    with ServerThread([e.turn for e in exchanges([cassette])], provider="chat") as running:
        assert running.server is not None
        answer = post(running.server.port, cassette.request)
    assert answer.status == 200
    assert b"".join(answer.chunks) == cassette.body
    assert answer.header("content-type") == "application/json"


@pytest.mark.parametrize(
    ("spec", "terminated", "reset"),
    [("cut:inside=3", True, False), ("reset:after=2", False, True), ("drop:2", True, False)],
)
def test_faults_are_applied_to_the_served_body(spec: str, terminated: bool, reset: bool) -> None:
    cassette = recorded()
    want = [s for s in playback(cassette, [parse_fault(spec)]).steps if isinstance(s, bytes)]
    assert b"".join(want) != cassette.body
    with ServerThread([e.turn for e in exchanges([cassette], [spec])], provider="chat") as running:
        assert running.server is not None
        answer = post(running.server.port, CHAT_REQUEST)
    assert answer.chunks == want
    assert answer.terminated is terminated
    assert answer.reset is reset


def test_a_status_fault_answers_the_protocols_error_with_retry_after() -> None:
    served = exchanges([recorded()], ["status:429:retry-after=2"])
    with ServerThread([e.turn for e in served], provider="chat") as running:
        assert running.server is not None
        answer = post(running.server.port, CHAT_REQUEST)
    assert answer.status == 429
    assert answer.header("retry-after") == "2"
    assert "error" in json.loads(b"".join(answer.chunks))


def test_match_request_serves_the_cassette_whose_request_equals_it() -> None:
    first = recorded(request={**CHAT_REQUEST, "messages": [{"role": "user", "content": "a"}]})
    second = recorded(
        request={**CHAT_REQUEST, "messages": [{"role": "user", "content": "b"}]},
        sizes=(5,),
    )
    served = exchanges([first, second])
    logged: list[str] = []
    turns = [e.turn for e in served]
    select = RequestMatcher(served)
    with ServerThread(turns, provider="chat", log=logged.append, select=select) as running:
        assert running.server is not None
        port = running.server.port
        b = post(port, second.request)
        again = post(port, second.request)  # used up
        a = post(port, first.request)
        stranger = post(port, {**CHAT_REQUEST, "model": "other"})
    assert b.chunks == reads(second)
    assert a.chunks == reads(first)
    assert again.status == 404
    assert stranger.status == 404
    assert "error" in json.loads(b"".join(stranger.chunks))
    assert len(logged) == 2
    assert all("no unused turn matches this request body" in line for line in logged)


def test_exchanges_are_served_in_order_then_the_server_runs_out() -> None:
    one, two = recorded(sizes=(64,)), recorded(sizes=(3, 11))
    with ServerThread([e.turn for e in exchanges([one, two])], provider="chat") as running:
        assert running.server is not None
        port = running.server.port
        answers = [post(port, CHAT_REQUEST) for _ in range(3)]
    assert answers[0].chunks == reads(one)
    assert answers[1].chunks == reads(two)
    assert answers[2].status == 400  # the script is exhausted


# --- the CLI -------------------------------------------------------------------------------


def test_the_cli_serves_a_folder_with_faults_and_says_which(tmp_path: Path) -> None:
    one = recorded(sizes=(64,), source="")
    two = recorded(sizes=(3, 11), source="")
    save(one, tmp_path / "a.cassette.jsonl")
    save(two, tmp_path / "b.cassette.jsonl")
    process = subprocess.Popen(
        [*SERVE, "--cassette", str(tmp_path), "--fault", "cut:inside=3", "--fault", "random:7"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        assert process.stderr is not None
        lines = [process.stderr.readline().strip() for _ in range(2)]
        base_url = read_serving_line(process)
        port = int(base_url.split(":")[2].split("/")[0])
        answers = [post(port, CHAT_REQUEST) for _ in range(2)]
    finally:
        process.send_signal(signal.SIGINT)
        code, _, err = finish(process)
    assert code == 0, err
    served = zip(lines, (one, two), answers, strict=True)
    for number, (line, cassette, answer) in enumerate(served, 1):
        prefix = f"lockgate serve: exchange {number} (chat, {'ab'[number - 1]}.cassette.jsonl): "
        assert line.startswith(prefix), line
        specs = line.removeprefix(prefix).split(", ")
        assert specs[0] == "cut:inside=3"
        assert len(specs) == 2  # one drawn fault: enough to repeat it exactly
        # The printed faults, applied again, give exactly the served bytes.
        faults = [parse_fault(spec) for spec in specs]
        played = playback(replace(cassette, source="x"), faults)
        if played.status == 200:
            assert answer.chunks == [s for s in played.steps if isinstance(s, bytes)]
        else:
            assert answer.status == played.status


@pytest.mark.parametrize(
    ("files", "extra", "reason"),
    [
        ({}, [], "invalid cassette: cannot read"),
        ({"x.cassette.jsonl": "not json\n"}, [], "invalid cassette: "),
        ({"x.cassette.jsonl": None}, ["--fault", "explode:1"], "invalid --fault: unknown fault"),
        ({"x.cassette.jsonl": None}, ["--fault", "random:x"], "invalid --fault: fault 'random:x'"),
        ({"x.cassette.jsonl": None}, ["--fault", "drop:999"], "addresses event 999; this"),
        ({"x.cassette.jsonl": "json"}, ["--fault", "cut:after=1"], "this exchange has none"),
        ({"x.cassette.jsonl": None}, ["--fault", "bad-crc:1"], "addresses event-stream frames"),
        ({"x.cassette.jsonl": None}, ["--fault", "cut:byte=99999"], "addresses byte 99999"),
        ({"x.cassette.jsonl": None}, ["--provider", "anthropic"], "speak chat, not --provider"),
        ({"a.cassette.jsonl": None, "b.cassette.jsonl": "anthropic"}, [], "one server speaks one"),
    ],
    ids=[
        "missing",
        "not-json",
        "bad-fault",
        "bad-seed",
        "no-such-event",
        "json-exchange",
        "bad-crc-on-sse",
        "byte-past-the-body",
        "provider",
        "mixed",
    ],
)
def test_bad_cassettes_and_faults_exit_2_in_one_line(
    cli: CLI, tmp_path: Path, files: dict[str, str | None], extra: list[str], reason: str
) -> None:
    for name, content in files.items():
        if content is None:
            text = dumps(recorded())
        elif content == "json":
            text = dumps(json_exchange())
        elif content == "anthropic":
            text = dumps(recorded("anthropic"))
        else:
            text = content
        (tmp_path / name).write_text(text)
    target = tmp_path / "x.cassette.jsonl" if len(files) <= 1 else tmp_path
    result = cli("serve", "--cassette", str(target), *extra)
    line = usage_error_line(result)
    assert reason in line, line
    assert "serving" not in result.out


CASSETTE_ONLY = [["--fault", "drop:1"], ["--timing", "recorded"], ["--match", "request"]]


@pytest.mark.parametrize("flag", CASSETTE_ONLY)
def test_cassette_options_need_a_cassette(cli: CLI, flag: list[str]) -> None:
    line = usage_error_line(cli("serve", "--scenario", "repair", *flag))
    assert line.endswith(f"{flag[0]} only goes with --cassette"), line
