"""Hardening: hostile servers, hostile keys, hostile scripts, hostile terminals, signals.

Each test reproduces one way lockgate could be made to misbehave and checks that it now
fails closed, in one line, with the normal closing lines. Most drive `lockgate.cli.main`
in-process against loopback servers the test starts (`ServerThread` for scripted
Responses streams, `RawServer` for byte-level hostility); memory, signals and closed or
full stdout need a real child process.
"""

from __future__ import annotations

import asyncio
import json
import math
import os
import re
import signal
import socket
import struct
import subprocess
import sys
import tempfile
import textwrap
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
from benchmarks.hostile import (
    GIB,
    RSS_LIMIT_MIB,
    RawRequest,
    RawServer,
    error_body,
    gzip_bomb,
    gzip_bomb_body,
    header_flood,
    raw_server,
    run_cli,
)

import lockgate.cli as cli_module
import lockgate.providers.openai.transport  # noqa: F401  (the SDK's import is not timed)
from lockgate.client import StreamingModelClient
from lockgate.conversation import Message
from lockgate.credentials import Redactor
from lockgate.errors import FailureKind, ResponseFailure
from lockgate.events import ResponseFailed, Retrying
from lockgate.fixture import ALL_TOOLS, CALCULATOR, FixtureTools, create_fixture
from lockgate.lab.replay import ReplayTransport
from lockgate.lab.scenarios import FIXED_SOURCE, cancellation_turns, repair_turns
from lockgate.lab.server import ServerThread, serve_script
from lockgate.providers import PROVIDERS
from lockgate.providers.base import CodecOptions
from lockgate.providers.openai.transport import OpenAITransport
from lockgate.providers.responses.codec import ResponsesCodec
from lockgate.providers.responses.render import ResponseBuilder, sse_bytes
from lockgate.scripted.reply import Call, Reply, Say
from lockgate.scripted.script import Faults, Turn
from lockgate.transport import TransportOptions

from .helpers import (
    EDIT,
    Recorder,
    ends_with_file_and_usage,
    replay_client,
    text_turn,
    wait_until,
)

KEY = "sk-proj-HARDENING-SECRET-9a8b7c6d5e"
HISTORY = [Message("user", "fix it")]
PROXY_VARIABLES = (
    *("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"),
    *("http_proxy", "https_proxy", "all_proxy", "no_proxy"),
)
RETRY_VARIABLES = tuple(
    f"LOCKGATE_RETRY_{name}" for name in ("ATTEMPTS", "BASE_DELAY", "MAX_DELAY", "JITTER")
)
SOURCE_ROOT = Path(__file__).resolve().parents[1]


# --- in-process CLI ----------------------------------------------------------------------


@dataclass
class Outcome:
    code: int
    out: str
    err: str

    @property
    def output(self) -> str:
        return self.out + self.err


CLI = Callable[..., Outcome]


@pytest.fixture
def cli(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str], in_process_main: None
) -> CLI:
    """`lockgate.cli.main(args)` in this process, with a clean environment (no key, no
    proxies, no retry settings) and this process's signal handlers and dumpability kept."""
    variables = {entry.key_variable for entry in PROVIDERS.values()} | {"OPENAI_API_KEY"}
    variables |= {"OPENAI_BASE_URL", "ANTHROPIC_BASE_URL"}
    for name in (*PROXY_VARIABLES, *RETRY_VARIABLES, *sorted(variables)):
        monkeypatch.delenv(name, raising=False)

    def call(*args: str, key: str | None = None, env: dict[str, str] | None = None) -> Outcome:
        if key is not None:
            monkeypatch.setenv("OPENAI_API_KEY", key)
        for name, value in (env or {}).items():
            monkeypatch.setenv(name, value)
        capsys.readouterr()
        try:
            code = cli_module.main(list(args))
        except SystemExit as exit_:  # argparse: --help, --version, its own usage errors
            code = exit_.code if isinstance(exit_.code, int) else 1
        captured = capsys.readouterr()
        return Outcome(code, captured.out, captured.err)

    return call


def assert_one_line_usage_error(result: Outcome) -> None:
    assert result.code == 2, result.output
    assert result.out == ""
    lines = result.err.splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("lockgate"), lines[0]
    assert "Traceback" not in result.err
    assert "internal error" not in result.err


def no_traceback(text: str) -> bool:
    """No traceback of lockgate's own (the fixture's failing unit test prints one inside a
    one-line, indented tool result: that one never starts a line)."""
    return not any(line.startswith("Traceback") for line in text.splitlines())


def assert_closing_lines(result: Outcome, source: str = CALCULATOR) -> None:
    """The run's normal last words, and nothing that looks like a crash."""
    assert ends_with_file_and_usage(result.out, source), result.out[-2000:]
    assert no_traceback(result.output)
    assert "internal error" not in result.output
    assert "RecursionError" not in result.output


def failed_as(result: Outcome, kind: str) -> None:
    assert result.code == 1, result.output[-3000:]
    assert f"stopped: provider_failure ({kind}:" in result.out, result.out[-2000:]
    assert "executed tools: 0" in result.out
    assert_closing_lines(result)


def dead_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


def serve(turns: Sequence[Turn]) -> ServerThread:
    return ServerThread(list(turns))


def requests_of(server: ServerThread) -> list[Any]:
    assert server.server is not None
    return list(server.server.requests)


def ascii_frames(builder: ResponseBuilder) -> tuple[dict[str, str], ...]:
    """The builder's events as verbatim frames with ASCII-only JSON: lone surrogates and
    other odd characters travel as `\\uXXXX` escapes, as a server's JSON encoder sends them."""
    return tuple(
        {"raw": f"event: {event['type']}\ndata: {json.dumps(event)}\n\n"}
        for event in builder.events
    )


def raw_event(data: str, name: str = "response.output_text.delta") -> dict[str, str]:
    return {"raw": f"event: {name}\ndata: {data}\n\n"}


def call_turn(name: str, arguments: str | dict[str, Any], response_id: str = "resp_c") -> Turn:
    builder = ResponseBuilder(response_id).created().call("fc_1", "call_1", name, arguments)
    return builder.completed().turn()


def function_outputs(request: Any) -> list[str]:
    return [
        str(item["output"])
        for item in request.body["input"]
        if item.get("type") == "function_call_output"
    ]


# --- 1. error bodies are bounded ----------------------------------------------------------


@pytest.mark.parametrize(
    "make",
    [error_body(500, GIB), gzip_bomb_body(500, GIB)],
    ids=["1-GiB-body", "gzip-bomb-1MB-to-1GiB"],
)
def test_error_bodies_are_read_under_a_cap(make: Any) -> None:
    with raw_server(make) as server:
        result = run_cli(server.base_url, "--retry-base-delay", "0.05", timeout=60)
    print(f"peak RSS {result.peak_rss_mib:.1f} MiB, server wrote {server.sent >> 20} MiB")
    assert result.peak_rss_mib < RSS_LIMIT_MIB
    assert len(server.requests) == 3  # a 5xx: retried, 3 attempts
    assert result.stderr.count("retry opening: attempt") == 2
    assert result.exit_code == 1, result.stderr
    assert "stopped: provider_failure (opening: HTTP 500" in result.stdout
    assert "executed tools: 0" in result.stdout
    assert ends_with_file_and_usage(result.stdout, CALCULATOR)
    assert "Traceback" not in result.stderr
    assert server.sent < 3 * GIB // 4  # the client stopped reading early


def test_the_peak_measured_is_the_child_s_own() -> None:
    """A child forked from a big process inherits that process's high-water RSS in its
    `ru_maxrss`: the measurement must not (this test process holds 256 MiB more)."""
    ballast = b"\x01" * (256 << 20)  # written, so resident
    with serve([text_turn()]) as server:
        result = run_cli(server.base_url, timeout=60)
    del ballast
    assert result.exit_code == 0, result.stderr
    assert result.peak_rss_mib < 150


def test_gzip_bomb_is_what_it_claims() -> None:
    import zlib

    bomb = gzip_bomb(GIB)
    assert len(bomb) < 1_200_000
    inflater = zlib.decompressobj(31)
    inflated = sum(
        len(inflater.decompress(bomb[i : i + 65536], 1 << 24)) for i in range(0, 4 << 16, 65536)
    )
    assert inflated >= 64 << 20  # a quarter MiB of it already inflates to 64+ MiB


@pytest.mark.parametrize("one_line", [False, True], ids=["many-header-lines", "one-huge-line"])
def test_a_header_flood_is_an_opening_failure_not_an_internal_error(
    cli: CLI, one_line: bool
) -> None:
    with raw_server(header_flood(100 << 20, one_line=one_line)) as server:
        result = cli(
            "run",
            "--base-url",
            server.base_url,
            "--retry-attempts",
            "2",
            "--retry-base-delay",
            "0.01",
            key=KEY,
        )
    failed_as(result, "opening")
    assert len(server.requests) == 2  # retried like a connection error
    assert server.sent < 20 << 20


def cut_error_body(status: int) -> Any:
    """HTTP `status` announcing a 100 kB JSON error, then a reset after 1 kB of it."""

    def make(server: RawServer) -> Any:
        async def handle(
            request: RawRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
        ) -> None:
            writer.write(
                f"HTTP/1.1 {status} Error\r\ncontent-type: application/json\r\n"
                "content-length: 100000\r\n\r\n".encode()
                + b'{"error": {"code": "invalid_api_key", "message": "'
                + b"x" * 1000
            )
            await writer.drain()
            await asyncio.sleep(0.05)
            sock = writer.get_extra_info("socket")
            sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))
            writer.transport.abort()

        return handle

    return make


@pytest.mark.parametrize(("status", "requests"), [(401, 1), (503, 3)])
def test_an_error_body_that_breaks_off_keeps_its_status(
    cli: CLI, status: int, requests: int
) -> None:
    with raw_server(cut_error_body(status)) as server:
        result = cli("run", "--base-url", server.base_url, "--retry-base-delay", "0.01", key=KEY)
    failed_as(result, "opening")
    assert f"stopped: provider_failure (opening: HTTP {status}" in result.out
    assert len(server.requests) == requests  # a 401 is terminal, not a connection error


@pytest.mark.parametrize("name", list(PROVIDERS))
def test_every_provider_s_transport_bounds_hostile_openings(cli: CLI, name: str) -> None:
    """The HTTP client is shared: a header flood and a broken-off 401 body fail as
    openings for every registered protocol (the key read from its own variable)."""
    variable = PROVIDERS[name].key_variable
    for make, requests in ((header_flood(100 << 20, one_line=True), 2), (cut_error_body(401), 1)):
        with raw_server(make) as server:
            result = cli(
                "run",
                "--provider",
                name,
                "--base-url",
                server.base_url.removesuffix("/v1"),
                "--retry-attempts",
                "2",
                "--retry-base-delay",
                "0.01",
                env={variable: KEY},
            )
        failed_as(result, "opening")
        assert len(server.requests) == requests, (name, result.out)


# --- 2. unusable keys ---------------------------------------------------------------------

BAD_KEYS = [
    "sk-abc\nsecond-line",
    "sk-abc\r\nsecond-line",
    "sk-abcdef\tsecond",
    "sk-abcdef second",
    "sk-abcdefé-second",
    "sk-abcdef\u200bhidden",
    "sk-abcdef\x1b[31mred",
]


def key_parts(key: str) -> list[str]:
    """Every 4-character window of the key, and its pieces between odd characters."""
    windows = [key[i : i + 4] for i in range(len(key) - 3)]
    pieces = [p for p in re.split(r"[^A-Za-z0-9_-]", key) if len(p) > 3]
    return windows + pieces


@pytest.mark.parametrize("json_lines", [False, True], ids=["human", "json"])
@pytest.mark.parametrize("key", BAD_KEYS, ids=[repr(k) for k in BAD_KEYS])
def test_an_unusable_key_is_a_usage_error_without_echo(
    cli: CLI, key: str, json_lines: bool
) -> None:
    with serve([text_turn()]) as server:
        result = cli("run", "--base-url", server.base_url, *(["--json"] * json_lines), key=key)
        assert requests_of(server) == []
    assert_one_line_usage_error(result)
    assert "OPENAI_API_KEY" in result.err
    assert "no request was made" in result.err
    for part in key_parts(key):
        assert part not in result.output, part


@pytest.mark.parametrize("key", ["a\nb", "sk-abc\nsecond-line", "sk-abcdé-x", "abc"])
def test_the_transport_refuses_an_unusable_key_without_echo(key: str) -> None:
    with pytest.raises(ValueError, match="api_key") as caught:
        OpenAITransport(TransportOptions(api_key=key), "responses")
    assert key not in str(caught.value)
    for part in re.split(r"\s", key):
        if len(part) > 3:
            assert part not in str(caught.value)


# --- 3. redaction ---------------------------------------------------------------------------

QUOTED_KEY = 'sk-quote"inside\\slash-1f2e3d4c'


def echo_text_turn(key: str) -> Turn:
    """The key echoed in answer text, cut in two across two text deltas."""
    half = len(key) // 2
    text = f"Your key is {key[:half]}" + f"{key[half:]}, thanks."
    builder = ResponseBuilder("resp_echo").created()
    cut = len(f"Your key is {key[:half]}")
    builder.text("msg", text, pieces=2)
    for event in builder.events:  # re-cut the two deltas exactly inside the key
        if event["type"] == "response.output_text.delta":
            event["delta"] = text[:cut] if "Your key" in event["delta"] else text[cut:]
    return builder.completed().turn()


@pytest.mark.parametrize("json_lines", [False, True], ids=["human", "json"])
@pytest.mark.parametrize("key", [KEY, QUOTED_KEY], ids=["plain", "quote-and-backslash"])
def test_a_key_echoed_across_two_deltas_is_redacted(cli: CLI, key: str, json_lines: bool) -> None:
    with serve([echo_text_turn(key)]) as server:
        result = cli("run", "--base-url", server.base_url, *(["--json"] * json_lines), key=key)
        [request] = requests_of(server)
    assert result.code == 0, result.output
    assert request.headers["authorization"] == "Bearer [redacted]"
    encoded = json.dumps(key)[1:-1]
    for form in {key, encoded, key[: len(key) // 2 + 2], encoded[: len(encoded) // 2 + 2]}:
        assert form not in result.output
    assert "[redacted]" in result.out


@pytest.mark.parametrize("json_lines", [False, True], ids=["human", "json"])
def test_a_key_echoed_in_an_error_body_is_redacted(cli: CLI, json_lines: bool) -> None:
    body = {"error": {"message": f"bad key {QUOTED_KEY} (really)", "code": "server_error"}}
    with serve([Turn(status=500, body=body)]) as server:
        result = cli(
            "run",
            "--base-url",
            server.base_url,
            "--retry-attempts",
            "1",
            *(["--json"] * json_lines),
            key=QUOTED_KEY,
        )
    assert result.code == 1
    assert QUOTED_KEY not in result.output
    assert json.dumps(QUOTED_KEY)[1:-1] not in result.output
    assert "[redacted]" in result.out


def echo_authorization(server: RawServer) -> Any:
    """First request: a 503 whose message quotes the Authorization header; then a stream
    whose in-stream `error` event quotes it."""

    async def handle(
        request: RawRequest, reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        authorization = request.headers.get("authorization", "")
        if len(server.requests) == 1:
            payload = json.dumps(
                {"error": {"message": f"overloaded, {authorization}", "code": "overloaded"}}
            ).encode()
            writer.write(
                b"HTTP/1.1 503 Service Unavailable\r\ncontent-type: application/json\r\n"
                b"content-length: %d\r\nconnection: close\r\n\r\n%s" % (len(payload), payload)
            )
        else:
            events = ResponseBuilder("resp_auth").created().events
            events.append({"type": "error", "code": "bad_key", "message": f"no: {authorization}"})
            body = b"".join(sse_bytes(event) for event in events)
            writer.write(
                b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\n"
                b"connection: close\r\n\r\n" + body
            )
        await writer.drain()

    return handle


async def test_response_failure_never_carries_the_key_the_server_echoes() -> None:
    recorder = Recorder()
    with raw_server(echo_authorization) as server:
        transport = OpenAITransport(
            TransportOptions(api_key=KEY, base_url=server.base_url, trust_env=False),
            "responses",
        )
        client = StreamingModelClient(
            ResponsesCodec("m"), transport, observer=recorder, sleep=recorder.sleep
        )
        try:
            with pytest.raises(ResponseFailure) as caught:
                await client.complete(HISTORY, ALL_TOOLS)
        finally:
            await client.aclose()
    assert [r.headers["authorization"] for r in server.requests] == [f"Bearer {KEY}"] * 2
    failure = caught.value
    assert failure.kind is FailureKind.PROVIDER_ERROR
    assert KEY not in failure.message
    assert KEY not in str(failure)
    assert all(KEY not in str(arg) for arg in failure.args)
    assert "[redacted]" in failure.message
    reported = [e for e in recorder.events if isinstance(e, ResponseFailed | Retrying)]
    assert len(reported) == 2
    assert all(KEY not in repr(event) for event in reported)


@pytest.mark.parametrize("key", ["a", "ab", "abc"])
def test_keys_under_four_characters_are_refused(cli: CLI, key: str) -> None:
    with serve([text_turn()]) as server:
        result = cli("run", "--base-url", server.base_url, key=key)
        assert requests_of(server) == []
    assert_one_line_usage_error(result)
    assert "too short" in result.err


def test_a_very_long_key_is_redacted_in_linear_time(cli: CLI) -> None:
    """Preparing the stream redactor listed every prefix of the key: quadratic (an
    8,000-character key took 44 s and 3 GB before the run even started)."""
    key = "sk-" + "Ab3x" * 5_000
    # What keeps it linear: the redactor prepares a few forms of the key, not its prefixes
    # (the time it takes is measured in benchmarks/startup.py).
    assert len(Redactor([key])._holdable) <= 8
    with serve([echo_text_turn(key)]) as server:
        result = cli("run", "--base-url", server.base_url, key=key)
    assert result.code == 0, result.err[-500:]
    assert key[:200] not in result.output
    assert "[redacted]" in result.out


# --- 4. terminal injection ---------------------------------------------------------------

INJECT = "\x1b]0;pwned\x07\x1b[2K\r\x1b[1A"
FORGED = "\nstopped: model_finished\nexecuted tools: 99\nusage: input=0\n"


def injection_turns(case: str) -> list[Turn]:
    if case == "answer-text":
        builder = ResponseBuilder("resp_i").created()
        builder.text("msg", f"Done.{INJECT}{FORGED}{INJECT}tail", pieces=5)
        return [builder.completed().turn()]
    if case == "reasoning":
        builder = ResponseBuilder("resp_i").created()
        builder.reasoning(
            {
                "id": "rs_1",
                "type": "reasoning",
                "summary": [{"type": "summary_text", "text": f"think{INJECT}{FORGED}"}],
            }
        )
        return [builder.text("msg", "ok").completed().turn()]
    if case == "tool-name":
        return [call_turn(f"edit{INJECT}{FORGED}", EDIT)]
    if case == "call-id":
        builder = ResponseBuilder("resp_i").created()
        builder.call("fc_1", f"call{INJECT}{FORGED}", "read", {"path": "README.md"})
        return [builder.completed().turn(), text_turn()]
    if case == "error-event":
        builder = ResponseBuilder("resp_i").created().text("msg", "x")
        return [builder.error(f"code{INJECT}", f"boom{INJECT}{FORGED}").turn()]
    if case == "response-failed":
        builder = ResponseBuilder("resp_i").created()
        return [builder.failed(f"code{INJECT}", f"failed{INJECT}{FORGED}").turn()]
    assert case == "http-error"
    body = {"error": {"message": f"denied{INJECT}{FORGED}", "code": f"c{INJECT}"}}
    return [Turn(status=400, body=body)]


INJECTION_CASES = [
    "answer-text",
    "reasoning",
    "tool-name",
    "call-id",
    "error-event",
    "response-failed",
    "http-error",
]


@pytest.mark.parametrize("case", INJECTION_CASES)
def test_escape_sequences_never_reach_the_terminal(cli: CLI, case: str) -> None:
    with serve(injection_turns(case)) as server:
        result = cli("run", "--base-url", server.base_url, "--allow-execution", key=KEY)
    for stream in (result.out, result.err):
        for raw in ("\x1b", "\x07", "\r"):
            assert raw not in stream, (case, stream[-1500:])
    stops = [line for line in result.output.splitlines() if line.startswith("stopped:")]
    assert len(stops) == 1, stops
    for own in ("executed tools:", "usage:"):
        assert sum(line.startswith(own) for line in result.out.splitlines()) == 1
    assert_closing_lines(result)
    last_lines = result.out.rsplit("\nstopped: ", 1)[1]
    assert last_lines.startswith(stops[0].removeprefix("stopped: "))


def test_escape_sequences_in_json_mode_are_json_escapes(cli: CLI) -> None:
    with serve(injection_turns("answer-text")) as server:
        result = cli("run", "--base-url", server.base_url, "--json", key=KEY)
    assert result.code == 0
    assert "\x1b" not in result.output
    records = [json.loads(line) for line in result.out.splitlines()]
    shown = "".join(r["text"] for r in records if r["event"] == "text_delta")
    assert INJECT in shown  # faithful, yet escaped on the wire
    assert records[-1]["event"] == "final"


# --- 5. deep nesting ---------------------------------------------------------------------


def deep_event_turn(levels: int) -> Turn:
    nested = "[" * levels + "]" * levels
    data = f'{{"type":"response.output_text.delta","item_id":"m","delta":"x","n":{nested}}}'
    created = ascii_frames(ResponseBuilder("resp_deep").created())
    return Turn(events=(*created, raw_event(data)))


@pytest.mark.parametrize("json_lines", [False, True], ids=["human", "json"])
@pytest.mark.parametrize("levels", [100, 5_000, 100_000])
def test_a_deeply_nested_event_is_malformed(cli: CLI, levels: int, json_lines: bool) -> None:
    with serve([deep_event_turn(levels)]) as server:
        result = cli("run", "--base-url", server.base_url, *(["--json"] * json_lines), key=KEY)
    if json_lines:
        assert result.code == 1
        final = json.loads(result.out.splitlines()[-1])
        assert final["stopped"].startswith("provider_failure (malformed_event:")
        assert "Recursion" not in result.output
    else:
        failed_as(result, "malformed_event")


def deep_arguments(levels: int) -> str:
    return (
        '{"path": "calculator.py", "old": '
        + "[" * levels
        + '"return a - b"'
        + "]" * levels
        + ', "new": "return a + b"}'
    )


def test_deeply_nested_arguments_are_an_invalid_batch(cli: CLI) -> None:
    with serve([call_turn("edit", deep_arguments(500))]) as server:
        result = cli("run", "--base-url", server.base_url, "--allow-execution", key=KEY)
    failed_as(result, "invalid_batch")
    assert "nested deeper than" in result.out


def test_deeply_nested_arguments_are_recoverable(cli: CLI) -> None:
    turns = [call_turn("edit", deep_arguments(500)), text_turn("Gave up.")]
    with serve(turns) as server:
        result = cli(
            "run", "--base-url", server.base_url, "--allow-execution", "--recover", key=KEY
        )
        requests = requests_of(server)
    assert result.code == 0, result.output
    assert "stopped: model_finished" in result.out
    assert "executed tools: 0" in result.out
    assert_closing_lines(result)
    assert len(requests) == 2
    [observation] = function_outputs(requests[1])
    assert observation.startswith("error: call rejected, not executed:")
    assert "nested deeper than" in observation


# --- 6. lone surrogates --------------------------------------------------------------------


@pytest.mark.parametrize("json_lines", [False, True], ids=["human", "json"])
def test_a_lone_surrogate_in_text_is_shown_escaped_and_sent_back(
    cli: CLI, json_lines: bool
) -> None:
    builder = ResponseBuilder("resp_sur").created().text("msg", "odd \ud800 text", pieces=3)
    builder.call("fc_1", "call_1", "discover", {})
    turns = [Turn(events=ascii_frames(builder.completed())), text_turn()]
    with serve(turns) as server:
        result = cli("run", "--base-url", server.base_url, *(["--json"] * json_lines), key=KEY)
        requests = requests_of(server)
    assert result.code == 0, result.output
    assert "internal error" not in result.output
    assert "\\ud800" in result.out  # made visible (human) or a JSON escape
    assert len(requests) == 2  # the next request went out ...
    assert isinstance(requests[1].body, dict)  # ... as valid UTF-8 JSON (an escape)
    assert "\\ud800" in json.dumps(requests[1].body)


@pytest.mark.parametrize("json_lines", [False, True], ids=["human", "json"])
def test_a_lone_surrogate_in_an_edit_is_an_error_observation(cli: CLI, json_lines: bool) -> None:
    arguments = {"path": "calculator.py", "old": "return a - b", "new": "return a \ud800 b"}
    builder = ResponseBuilder("resp_sur").created().call("fc_1", "call_1", "edit", arguments)
    turns = [Turn(events=ascii_frames(builder.completed())), text_turn()]
    with serve(turns) as server:
        result = cli(
            "run",
            "--base-url",
            server.base_url,
            "--allow-execution",
            *(["--json"] * json_lines),
            key=KEY,
        )
        requests = requests_of(server)
    assert result.code == 0, result.output
    assert "internal error" not in result.output
    assert len(requests) == 2
    assert isinstance(requests[1].body, dict)
    [observation] = function_outputs(requests[1])
    assert observation.startswith("error:")
    assert "surrogate" in observation
    if not json_lines:
        assert_closing_lines(result)


# --- 7. proxies ----------------------------------------------------------------------------


def test_the_lab_ignores_proxy_variables(cli: CLI) -> None:
    dead = f"http://127.0.0.1:{dead_port()}"
    env = {name: dead for name in PROXY_VARIABLES if "no_" not in name.lower()}
    result = cli("lab", "--transport", "http", "--scenario", "repair", env=env)
    assert result.code == 0, result.output[-3000:]
    assert "scenario repair (responses, http): as expected" in result.err
    assert_closing_lines(result, FIXED_SOURCE)


# --- 8. signals ----------------------------------------------------------------------------


@pytest.fixture(scope="module")
def startup_marker(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """A `sitecustomize` that touches `$LOCKGATE_TEST_STARTED` when lockgate's entry point
    starts importing `lockgate.cli` (its first guarded step): a signal sent from then on
    reaches lockgate's own code. (Before that, during Python's own start-up — `site`,
    `runpy` — no program can guard against a Ctrl-C.)"""
    folder = tmp_path_factory.mktemp("startup")
    (folder / "sitecustomize.py").write_text(
        textwrap.dedent(
            """\
            import os
            import sys

            _MARKER = os.environ.get("LOCKGATE_TEST_STARTED")


            class _TouchOnCli:
                @staticmethod
                def find_spec(name, path=None, target=None):
                    if name == "lockgate.cli" and _MARKER:
                        open(_MARKER, "w").close()
                    return None


            if _MARKER:
                sys.meta_path.insert(0, _TouchOnCli)
            """
        )
    )
    return folder


def started_lockgate(
    marker_folder: Path, work: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """`python -m lockgate ARGS`, returned once lockgate's own code runs."""
    marker = work / f"started-{time.monotonic_ns()}"
    path = os.pathsep.join(filter(None, [str(marker_folder), os.environ.get("PYTHONPATH")]))
    environment = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    environment.update(PYTHONPATH=path, LOCKGATE_TEST_STARTED=str(marker), **(env or {}))
    process = subprocess.Popen(
        [sys.executable, "-m", "lockgate", *args],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
        env=environment,
    )
    wait_until(
        marker.exists,
        "the interpreter started",
        alive=lambda: process.poll() is None,
        interval=0.0005,
    )
    return process


def finish(process: subprocess.Popen[str], timeout: float = 30) -> tuple[int, str, str]:
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        pytest.fail(f"lockgate did not stop: {err[-2000:]}")
    return process.returncode, out, err


SIGNAL_DELAYS = (0.0, 0.01, 0.03, 0.07, 0.15, 0.3)


@pytest.mark.parametrize("command", ["lab", "serve", "run"])
def test_sigint_at_any_moment_of_start_up_is_a_clean_interruption(
    startup_marker: Path, tmp_path: Path, command: str
) -> None:
    with raw_server() as silent:  # `run` waits for a response head that never comes
        arguments = {
            "lab": ["lab"],
            "serve": ["serve", "--scenario", "repair"],
            "run": ["run", "--base-url", silent.base_url],
        }[command]
        for delay in SIGNAL_DELAYS:
            process = started_lockgate(
                startup_marker, tmp_path, *arguments, env={"OPENAI_API_KEY": KEY}
            )
            time.sleep(delay)
            process.send_signal(signal.SIGINT)
            code, out, err = finish(process)
            assert no_traceback(err), (delay, err)
            assert "internal error" not in err, (delay, err)
            serving = out.startswith("serving ")
            assert code == (0 if serving else 130), (delay, code, out, err)
            if code == 130:
                assert err.splitlines()[-1:] in ([], ["stopped: interrupted"]), err


SWALLOWED_INTERRUPT = """\
import signal, sys, weakref
from lockgate import interrupts
interrupts.install()
class Owner: pass
owner = Owner()
ref = weakref.ref(owner, lambda _: interrupts.raise_interrupt(signal.SIGINT, None))
del owner  # the callback's KeyboardInterrupt: Python swallows it ("Exception ignored")
sys.argv = ["lockgate", *sys.argv[1:]]
from lockgate.__main__ import run
run()
"""


@pytest.mark.parametrize("command", ["serve", "lab"])
def test_an_interrupt_python_swallowed_still_stops_the_command(command: str) -> None:
    # Seen in CI: a Ctrl-C that landed in an import's weakref callback was dropped by Python,
    # and `serve` went on serving until killed.
    arguments = {"serve": ["serve", "--scenario", "repair"], "lab": ["lab"]}[command]
    process = subprocess.Popen(
        [sys.executable, "-c", SWALLOWED_INTERRUPT, *arguments],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    code, out, err = finish(process, timeout=20)
    assert no_traceback(err), err
    assert "Exception ignored" not in err
    if command == "serve":
        assert out.startswith("serving ")
        assert code == 0, err
        assert "stopped after 0 requests" in err
    else:
        assert code == 130, (out, err)
        assert err.splitlines()[-1] == "stopped: interrupted"


def read_serving_line(process: subprocess.Popen[str]) -> str:
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("serving "), line
    return line.strip().rsplit(" at ", 1)[1]


@pytest.mark.parametrize("number", [signal.SIGINT, signal.SIGTERM], ids=["SIGINT", "SIGTERM"])
def test_a_signal_right_after_the_serving_line_stops_serve_cleanly(
    startup_marker: Path, tmp_path: Path, number: signal.Signals
) -> None:
    process = started_lockgate(startup_marker, tmp_path, "serve", "--scenario", "repair")
    read_serving_line(process)
    process.send_signal(number)
    code, _, err = finish(process)
    assert code == 0, err
    assert "Traceback" not in err
    assert "stopped after 0 requests" in err


def test_sigint_while_a_client_is_mid_stream_stops_serve_cleanly(
    startup_marker: Path, tmp_path: Path
) -> None:
    process = started_lockgate(startup_marker, tmp_path, "serve", "--scenario", "cancellation")
    url = urllib_parse(read_serving_line(process))
    body = json.dumps({"model": "m", "stream": True, "input": "x"}).encode()
    with socket.create_connection((url.hostname, url.port), timeout=10) as client:
        client.sendall(
            f"POST {url.path}/responses HTTP/1.1\r\nhost: x\r\ncontent-type: application/json"
            f"\r\ncontent-length: {len(body)}\r\n\r\n".encode()
            + body
        )
        received = b""
        while b"function_call_arguments.delta" not in received:
            piece = client.recv(65536)
            assert piece, received
            received += piece
        process.send_signal(signal.SIGINT)  # the stream is open and silent (`hang`)
        code, _, err = finish(process)
    assert code == 0, err
    assert "Traceback" not in err
    assert "stopped after 1 requests" in err


def urllib_parse(url: str) -> Any:
    import urllib.parse

    return urllib.parse.urlsplit(url)


def lab_leftovers(folder: Path) -> list[str]:
    """lockgate's temporary folders under `folder`. The lab creates and removes them while
    this looks, so the walk ignores a folder that vanishes under it (`os.walk` does; a
    `Path.rglob` raised FileNotFoundError there, failing the test at random)."""
    found = []
    for root, directories, _ in os.walk(folder):
        for name in directories:
            if name.startswith(("lockgate-lab-", "lockgate-fixture-", "lockgate-run-")):
                found.append(str((Path(root) / name).relative_to(folder)))
    return sorted(found)


@pytest.mark.parametrize("after", [0.0, 0.05, 0.3])
def test_sigterm_during_the_lab_leaves_no_temporary_directory(
    startup_marker: Path, tmp_path: Path, after: float
) -> None:
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    process = started_lockgate(startup_marker, tmp_path, "lab", env={"TMPDIR": str(temporary)})
    wait_until(
        lambda: lab_leftovers(temporary),
        "the lab made a temporary directory",
        alive=lambda: process.poll() is None,
    )
    time.sleep(after)
    process.send_signal(signal.SIGTERM)
    code, _, err = finish(process)
    assert code == 130, err
    assert no_traceback(err)
    assert lab_leftovers(temporary) == []


def test_sigterm_during_a_run_leaves_no_temporary_directory(
    startup_marker: Path, tmp_path: Path
) -> None:
    temporary = tmp_path / "tmp"
    temporary.mkdir()
    with serve(cancellation_turns()) as server:
        process = started_lockgate(
            startup_marker,
            tmp_path,
            "run",
            "--base-url",
            server.base_url,
            "--allow-execution",
            env={"TMPDIR": str(temporary), "OPENAI_API_KEY": KEY},
        )
        assert server.server is not None
        wait_until(server.server.paused.is_set, "the stream went silent", interval=0.005)
        process.send_signal(signal.SIGTERM)
        code, out, err = finish(process)
    assert code == 130, err
    assert "stopped: interrupted" in out
    assert lab_leftovers(temporary) == []


# --- 9. serve --script validation ------------------------------------------------------------

INVALID_SCRIPTS = {
    "fragment-sizes-number": '{"turns": [{"faults": {"fragment_sizes": 5}}]}',
    "fragment-sizes-floats": '{"turns": [{"faults": {"fragment_sizes": [1.5, 2]}}]}',
    "fragment-sizes-strings": '{"turns": [{"faults": {"fragment_sizes": ["3"]}}]}',
    "fragment-sizes-empty": '{"turns": [{"faults": {"fragment_sizes": []}}]}',
    "fragment-sizes-bool": '{"turns": [{"faults": {"fragment_sizes": [true]}}]}',
    "reset-after-float": '{"turns": [{"faults": {"reset_after": 1.5}}]}',
    "stall-after-string": '{"turns": [{"faults": {"stall_after": "2"}}]}',
    "keepalive-float": '{"turns": [{"faults": {"keepalive_every": 2.0}}]}',
    "drip-string": '{"turns": [{"faults": {"drip_ms": "5"}}]}',
    "giant-float": '{"turns": [{"faults": {"giant_frame_bytes": 1e3}}]}',
    "status-float": '{"turns": [{"status": 500.0}]}',
    "status-string": '{"turns": [{"status": "500"}]}',
    "connection-error-string": '{"turns": [{"connection_error": "no"}]}',
    "negative-stall": '{"turns": [{"faults": {"stall_after": 1, "stall_seconds": -1}}]}',
    "huge-stall": '{"turns": [{"faults": {"stall_after": 1, "stall_seconds": 1e9}}]}',
    "nan-stall": '{"turns": [{"faults": {"stall_seconds": NaN}}]}',
    "infinite-stall": '{"turns": [{"faults": {"stall_seconds": Infinity}}]}',
    "nan-in-body": '{"turns": [{"status": 500, "body": {"error": {"x": NaN}}}]}',
    "infinity-in-event": '{"turns": [{"events": [{"type": "x", "n": -Infinity}]}]}',
    "overflowing-float": '{"turns": [{"status": 500, "body": {"x": 1e999}}]}',
    "unhashable-end": '{"turns": [{"faults": {"end": ["eof"]}}]}',
    "header-newline": '{"turns": [{"status": 500, "headers": {"x": "a\\r\\nb: c"}}]}',
    "deep": '{"turns": [{"status": 500, "body": {"x": ' + "[" * 100 + "]" * 100 + "}}]}",
    "very-deep": '{"turns": [' + "[" * 100_000 + "]" * 100_000 + "]}",
    "huge-int": '{"turns": [{"status": ' + "9" * 5000 + "}]}",
    "lone-surrogate-in-event": '{"turns": [{"events": [{"type": "x", "s": "\\ud800"}]}]}',
    "lone-surrogate-in-reply": '{"turns": [{"reply": {"text": "a\\udfffb"}}]}',
}


def assert_not_served(result: Outcome) -> None:
    assert_one_line_usage_error(result)
    assert "serving" not in result.out


@pytest.mark.parametrize("content", list(INVALID_SCRIPTS.values()), ids=list(INVALID_SCRIPTS))
def test_serve_refuses_an_invalid_script_in_one_line(
    cli: CLI, tmp_path: Path, content: str
) -> None:
    script = tmp_path / "script.json"
    script.write_text(content)
    result = cli("serve", "--script", str(script))
    assert_not_served(result)
    assert "invalid script" in result.err


async def test_a_failing_connection_is_one_log_line_never_a_traceback(
    caplog: pytest.LogCaptureFixture,
) -> None:
    """A turn the server cannot even encode (built in Python, past the script checks)."""
    import httpx2

    unencodable = Turn(events=({"type": "response.created", "response": {"id": "\ud800"}},))
    lines: list[str] = []
    async with (
        serve_script([unencodable, text_turn()], log=lines.append) as server,
        httpx2.AsyncClient() as client,
    ):
        with pytest.raises(httpx2.HTTPError):
            async with client.stream(
                "POST", f"{server.base_url}/responses", json={"stream": True}
            ) as response:
                await response.aread()
        again = await client.post(f"{server.base_url}/responses", json={"stream": True})
        await server.settle()
    assert again.status_code == 200  # the server lives on
    assert len(lines) == 1
    assert lines[0].startswith("connection dropped: UnicodeEncodeError:")
    assert "Traceback" not in caplog.text
    assert "Unhandled exception" not in caplog.text


def test_serve_refuses_a_script_over_the_size_cap(cli: CLI, tmp_path: Path) -> None:
    from lockgate.scripted.script import MAX_SCRIPT_BYTES

    script = tmp_path / "big.json"
    with script.open("wb") as handle:
        handle.write(b'{"turns": [')
        handle.truncate(MAX_SCRIPT_BYTES + 1)  # sparse: instant
    result = cli("serve", "--script", str(script))
    assert_not_served(result)
    assert "larger than" in result.err


def test_serve_refuses_a_script_that_is_not_utf8(cli: CLI, tmp_path: Path) -> None:
    script = tmp_path / "latin1.json"
    script.write_bytes(b'{"turns": [{"status": 500, "body": {"m": "caf\xe9"}}]}')
    result = cli("serve", "--script", str(script))
    assert_not_served(result)
    assert "utf-8" in result.err.lower()


@pytest.mark.parametrize(
    "path", ["", " ", "nul\0byte", "line\nbreak\x1b[2J", "/", "/nonexistent/x.json"]
)
def test_serve_refuses_an_unusable_script_path(cli: CLI, path: str) -> None:
    result = cli("serve", "--script", path)
    assert_not_served(result)
    assert "\x1b" not in result.err


# --- 10. serve answers only its protocol's POST path -----------------------------------------


def http_request(url: str, method: str, path: str, body: bytes = b"") -> int:
    import http.client

    parts = urllib_parse(url)
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        connection.request(method, path, body=body or None)
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


def test_serve_answers_other_paths_without_consuming_a_turn(
    cli: CLI, startup_marker: Path, tmp_path: Path
) -> None:
    process = started_lockgate(startup_marker, tmp_path, "serve", "--scenario", "repair")
    try:
        url = read_serving_line(process)
        assert http_request(url, "GET", "/favicon.ico") == 404
        assert http_request(url, "POST", "/v1/other", b"{}") == 404
        assert http_request(url, "GET", "/v1/responses") == 405
        result = cli("run", "--base-url", url, "--allow-execution", key=KEY)
    finally:
        process.send_signal(signal.SIGINT)
        code, _, err = finish(process)
    assert result.code == 0, result.output[-2000:]
    assert "stopped: model_finished" in result.out
    assert "executed tools: 6" in result.out
    assert code == 0
    logged = [line for line in err.splitlines() if "no turn consumed" in line]
    assert len(logged) == 3, err
    assert "GET /favicon.ico: HTTP 404" in logged[0]
    assert "POST /v1/other: HTTP 404" in logged[1]
    assert "GET /v1/responses: HTTP 405" in logged[2]
    assert "stopped after 10 requests" in err


# --- 11. command-line values ---------------------------------------------------------------

BAD_RUN_ARGUMENTS = {
    "port-99999": ["--base-url", "http://127.0.0.1:99999/v1"],
    "port-0": ["--base-url", "http://127.0.0.1:0/v1"],
    "space-in-host": ["--base-url", "http://exa mple.com/v1"],
    "userinfo": ["--base-url", "http://u:p@127.0.0.1:8080/v1"],
    "user-only": ["--base-url", "http://u@127.0.0.1:8080/v1"],
    "ftp": ["--base-url", "ftp://127.0.0.1/v1"],
    "no-host": ["--base-url", "http:///v1"],
    "bad-ipv6": ["--base-url", "http://[::1/v1"],
    "control-in-url": ["--base-url", "http://127.0.0.1:1/v1\x1b[2J"],
    "empty-model": ["--model", ""],
    "blank-model": ["--model", " "],
    "spaced-model": ["--model", "gpt 4"],
    "budget-without-recover": ["--recovery-budget", "2"],
    "nan-idle": ["--idle-timeout", "nan"],
    "inf-deadline": ["--deadline", "inf"],
    "zero-idle": ["--idle-timeout", "0"],
    "negative-jitter": ["--retry-jitter", "-0.5"],
    "attempts-float": ["--retry-attempts", "2.5"],
    "attempts-huge": ["--retry-attempts", "1e999"],
    "max-turns-zero": ["--max-turns", "0"],
    "unknown-flag": ["--bogus"],
    "stray-argument": ["line\nbreak"],
}


@pytest.mark.parametrize("extra", list(BAD_RUN_ARGUMENTS.values()), ids=list(BAD_RUN_ARGUMENTS))
def test_bad_run_arguments_are_one_line_usage_errors(cli: CLI, extra: list[str]) -> None:
    with serve([text_turn()]) as server:
        result = cli("run", "--base-url", server.base_url, *extra, key=KEY)
        assert requests_of(server) == []
    assert_one_line_usage_error(result)
    assert "\x1b" not in result.err


BAD_RETRY_ENVIRONMENT = [
    ("LOCKGATE_RETRY_ATTEMPTS", "inf"),
    ("LOCKGATE_RETRY_ATTEMPTS", "1e999"),
    ("LOCKGATE_RETRY_ATTEMPTS", "nan"),
    ("LOCKGATE_RETRY_ATTEMPTS", "2.5"),
    ("LOCKGATE_RETRY_ATTEMPTS", "0"),
    ("LOCKGATE_RETRY_ATTEMPTS", ""),
    ("LOCKGATE_RETRY_ATTEMPTS", "three\nlines\x1b[2J"),
    ("LOCKGATE_RETRY_BASE_DELAY", "nan"),
    ("LOCKGATE_RETRY_BASE_DELAY", "-1"),
    ("LOCKGATE_RETRY_MAX_DELAY", "inf"),
    ("LOCKGATE_RETRY_JITTER", "1"),
]


@pytest.mark.parametrize(("name", "value"), BAD_RETRY_ENVIRONMENT)
def test_bad_retry_environment_is_a_one_line_usage_error(cli: CLI, name: str, value: str) -> None:
    with serve([text_turn()]) as server:
        result = cli("run", "--base-url", server.base_url, key=KEY, env={name: value})
        assert requests_of(server) == []
    assert_one_line_usage_error(result)
    assert "retry" in result.err
    assert "\x1b" not in result.err


@pytest.mark.parametrize(
    ("name", "flag", "value"),
    [
        ("LOCKGATE_RETRY_ATTEMPTS", "--retry-attempts", "2"),
        ("LOCKGATE_RETRY_BASE_DELAY", "--retry-base-delay", "0.1"),
        ("LOCKGATE_RETRY_MAX_DELAY", "--retry-max-delay", "5"),
        ("LOCKGATE_RETRY_JITTER", "--retry-jitter", "0.2"),
    ],
)
def test_a_flag_wins_over_an_invalid_environment_value(
    cli: CLI, name: str, flag: str, value: str
) -> None:
    with serve([text_turn()]) as server:
        result = cli("run", "--base-url", server.base_url, flag, value, key=KEY, env={name: "nan"})
    assert result.code == 0, result.output
    assert "stopped: model_finished" in result.out


@pytest.mark.parametrize(
    "url", ["::::", "", "ftp://127.0.0.1/v1", "http://u:p@127.0.0.1:1/v1", "http://h:99999/v1"]
)
def test_a_bad_base_url_variable_is_a_usage_error(cli: CLI, url: str) -> None:
    """Without --base-url the SDK reads OPENAI_BASE_URL itself: the same rules apply."""
    result = cli("run", key=KEY, env={"OPENAI_BASE_URL": url})
    assert_one_line_usage_error(result)
    assert "OPENAI_BASE_URL" in result.err
    assert "no request was made" in result.err


def test_the_base_url_flag_wins_over_the_variable(cli: CLI) -> None:
    with serve([text_turn()]) as server:
        result = cli("run", "--base-url", server.base_url, key=KEY, env={"OPENAI_BASE_URL": "::"})
    assert result.code == 0, result.output


def test_native_continuation_is_refused_for_chat(cli: CLI) -> None:
    if "chat" not in PROVIDERS:
        pytest.skip("the chat provider is not registered")
    result = cli("run", "--provider", "chat", "--continuation", "native", key=KEY)
    assert_one_line_usage_error(result)
    assert "--continuation" in result.err


# --- 12. the idle timeout covers the wait for the response head ------------------------------


def test_the_idle_timeout_applies_while_waiting_for_the_response_head(cli: CLI) -> None:
    with raw_server() as server:  # accepts, never answers
        result = cli(
            "run",
            "--base-url",
            server.base_url,
            "--idle-timeout",
            "1",
            "--retry-attempts",
            "2",
            key=KEY,
        )
    # The server never answers: only the silence limit can end each opening.
    failed_as(result, "idle_timeout")
    assert "retry opening: attempt 2/2" in result.err
    assert server.connections == 2


# --- 13. reasoning output is bounded -------------------------------------------------------


def reasoning_flood_turn(total_chars: int = 6_000_000, piece: int = 10_000) -> Turn:
    builder = ResponseBuilder("resp_think").created()
    builder.raw(
        {
            "type": "response.output_item.added",
            "output_index": 0,
            "item": {"id": "rs_1", "type": "reasoning", "summary": []},
        }
    )
    delta = "ponder " * (piece // 7)
    for _ in range(total_chars // len(delta)):
        builder.raw(
            {
                "type": "response.reasoning_summary_text.delta",
                "item_id": "rs_1",
                "output_index": 0,
                "summary_index": 0,
                "delta": delta,
            }
        )
    return builder.completed().turn(faults=Faults(fragment_sizes=(65536,)))


@pytest.mark.parametrize("json_lines", [False, True], ids=["human", "json"])
def test_reasoning_is_bounded(cli: CLI, json_lines: bool) -> None:
    from lockgate.display import MAX_REASONING_CHARS

    with serve([reasoning_flood_turn()]) as server:
        result = cli("run", "--base-url", server.base_url, *(["--json"] * json_lines), key=KEY)
    assert result.code == 1
    assert "reasoning exceeded 256000 characters" in result.out
    if json_lines:
        records = [json.loads(line) for line in result.out.splitlines()]
        shown = sum(len(r["text"]) for r in records if r["event"] == "reasoning_delta")
        assert [r["event"] for r in records].count("reasoning_truncated") == 1
        assert records[-1]["stopped"].startswith("provider_failure (bound_exceeded:")
        assert len(result.out) < 3 * MAX_REASONING_CHARS
    else:
        failed_as(result, "bound_exceeded")
        shown = len(result.err.split("thinking (summary): ", 1)[1].split("\n", 1)[0])
        assert "reasoning output truncated at 64000 characters" in result.err
        assert len(result.err) < MAX_REASONING_CHARS + 10_000
    assert MAX_REASONING_CHARS - 10_000 < shown <= MAX_REASONING_CHARS


# --- 14. events after the terminal event in the same read ----------------------------------


def completed_then(extra: dict[str, Any]) -> Turn:
    """A valid edit, then `response.completed` and `extra` in one frame: one chunk."""
    builder = ResponseBuilder("resp_after").created().call("fc_1", "call_1", "edit", EDIT)
    completed = builder.completed().events[-1]
    both = {"raw": (sse_bytes(completed) + sse_bytes(extra)).decode()}
    events = (*builder.events[:-1], both)
    return Turn(events=events, faults=Faults(fragment_sizes=(1 << 20,)))


AFTER_TERMINAL: dict[str, dict[str, Any]] = {
    "error": {"type": "error", "code": "late", "message": "after the end"},
    "text": {"type": "response.output_text.delta", "item_id": "m", "delta": "late"},
    "second-completed": {
        "type": "response.completed",
        "response": {"id": "resp_after", "status": "completed", "output": []},
    },
}


@pytest.mark.parametrize("extra", list(AFTER_TERMINAL.values()), ids=list(AFTER_TERMINAL))
async def test_an_event_after_the_terminal_event_in_the_same_read_fails(
    extra: dict[str, Any],
) -> None:
    client, transport, _ = replay_client([completed_then(extra)])
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.kind is FailureKind.LIFECYCLE
    assert "after the terminal event" in caught.value.message
    assert transport.streams[0].closed


def test_an_error_after_completed_in_one_chunk_runs_nothing(cli: CLI, tmp_path: Path) -> None:
    with serve([completed_then(AFTER_TERMINAL["error"])]) as server:
        result = cli("run", "--base-url", server.base_url, "--allow-execution", key=KEY)
    failed_as(result, "lifecycle")
    assert "after the terminal event" in result.out


def completed_then_later(extra: dict[str, Any]) -> Turn:
    """A valid edit and `response.completed`, then `extra` in a LATER read (audit 3, L1)."""
    builder = ResponseBuilder("resp_after").created().call("fc_1", "call_1", "edit", EDIT)
    frames = [*builder.completed().events, extra]
    # One read per frame: the client must read on past the terminal event to see `extra`.
    sizes = tuple(len(sse_bytes(frame)) for frame in frames)
    return Turn(events=tuple(frames), faults=Faults(fragment_sizes=sizes))


@pytest.mark.parametrize("extra", list(AFTER_TERMINAL.values()), ids=list(AFTER_TERMINAL))
async def test_an_event_in_a_later_read_after_the_terminal_event_fails(
    extra: dict[str, Any],
) -> None:
    client, transport, _ = replay_client([completed_then_later(extra)])
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.kind is FailureKind.LIFECYCLE
    assert "after the terminal event" in caught.value.message
    assert transport.streams[0].closed


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_every_provider_reads_to_the_end_of_the_body(provider: str) -> None:
    """After each protocol's terminal event, a text event in a later read fails the
    response; without it the same stream is a decision."""
    entry = PROVIDERS[provider]
    lab = entry.render()
    reply = Reply("resp_tail", (Say("Done."),))
    late = lab.events(Reply("resp_late", (Say("late"),), ending="open"))[-1]
    for tail, accepted in (((), True), ((late,), False)):
        frames = [*lab.events(reply), *tail]
        sizes = tuple(len(lab.frame(frame)) for frame in frames)
        turn = Turn(events=tuple(frames), faults=Faults(fragment_sizes=sizes))
        client = StreamingModelClient(
            entry.make_codec(CodecOptions("m")), ReplayTransport([turn], provider)
        )
        if accepted:
            assert (await client.complete(HISTORY, ALL_TOOLS)).content == "Done."
            continue
        with pytest.raises(ResponseFailure) as caught:
            await client.complete(HISTORY, ALL_TOOLS)
        assert caught.value.kind is FailureKind.LIFECYCLE, caught.value


@pytest.mark.parametrize("provider", sorted(PROVIDERS))
async def test_a_body_that_ends_inside_an_event_was_cut(provider: str) -> None:
    """Audit 3, L2: a complete reply, then the body ends cleanly inside a frame: a pending
    partial frame at the end of the body is evidence of a cut, for every protocol (Chat
    without [DONE] included, whose end of body is otherwise its end marker)."""
    entry = PROVIDERS[provider]
    lab = entry.render()
    frames = [
        f
        for f in lab.events(Reply("resp_cut", (Call("call_1", "edit", EDIT),)))
        if f != {"raw": "data: [DONE]\n\n"}
    ]
    turn = Turn(events=(*frames, {"raw": 'data: {"type": "x", "cut'}))
    client = StreamingModelClient(
        entry.make_codec(CodecOptions("m")), ReplayTransport([turn], provider)
    )
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.kind is FailureKind.STREAM_ENDED
    assert "ended inside an SSE event" in caught.value.message


# --- 15. a function call the provider marks incomplete ---------------------------------------


@pytest.mark.parametrize("where", ["item-done", "terminal-output", "both"])
async def test_a_call_marked_incomplete_fails_closed(where: str) -> None:
    builder = ResponseBuilder("resp_inc").created()
    builder.call("fc_1", "call_1", "edit", EDIT, status="incomplete")
    if where == "item-done":
        builder.output[-1] = {**builder.output[-1], "status": "completed"}
    elif where == "terminal-output":
        done = builder.events[-1]
        done["item"] = {**done["item"], "status": "completed"}
    client, _, _ = replay_client([builder.completed().turn()])
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.kind is FailureKind.RESPONSE_INCOMPLETE
    assert "call_1" in caught.value.message


def test_the_incomplete_call_item_lab_scenario_behaves(cli: CLI) -> None:
    result = cli(
        "lab",
        "--provider",
        "responses",
        "--transport",
        "inprocess",
        "--scenario",
        "incomplete-call-item",
    )
    assert result.code == 0, result.output[-2000:]
    assert "as expected" in result.err
    assert "executed tools: 0" in result.out


# --- 16. redirects ---------------------------------------------------------------------------


@pytest.mark.parametrize("status", [301, 302, 303, 307, 308])
def test_a_redirect_is_not_followed(cli: CLI, status: int) -> None:
    with serve([text_turn()]) as elsewhere:
        target = f"{elsewhere.base_url}/responses"
        with serve([Turn(status=status, headers={"location": target})]) as server:
            result = cli("run", "--base-url", server.base_url, key=KEY)
            assert len(requests_of(server)) == 1
        assert requests_of(elsewhere) == []
    failed_as(result, "opening")
    assert f"HTTP {status}" in result.out


# --- 17. output that cannot be written, no temporary directory ------------------------------


def lockgate_shell(command: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    environment.update(env)
    return subprocess.run(
        ["sh", "-c", command],
        capture_output=True,
        text=True,
        env=environment,
        timeout=60,
        check=False,
    )


LAB_REPAIR = "-m lockgate lab --provider responses --transport inprocess --scenario repair"


@pytest.mark.parametrize("arguments", [LAB_REPAIR, "-m lockgate --version", "-m lockgate --help"])
@pytest.mark.parametrize("where", [">&-", ">/dev/full"], ids=["closed", "full"])
def test_unwritable_stdout_is_exit_74_with_one_clear_line(arguments: str, where: str) -> None:
    if where == ">/dev/full" and not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    result = lockgate_shell(f"exec {sys.executable} {arguments} {where}")
    assert result.returncode == 74, result.stderr
    lines = result.stderr.splitlines()
    errors = [line for line in lines if line.startswith("lockgate:")]
    assert len(errors) == 1, result.stderr
    assert errors[0] == lines[-1]
    assert ("not open" if where == ">&-" else "No space left on device") in errors[0]
    assert "Traceback" not in result.stderr
    assert "Exception ignored" not in result.stderr


def test_a_run_into_a_full_stdout_is_exit_74(tmp_path: Path) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with serve(repair_turns()) as server:
        result = lockgate_shell(
            f"exec {sys.executable} -m lockgate run --base-url {server.base_url} "
            "--allow-execution >/dev/full",
            OPENAI_API_KEY=KEY,
        )
    assert result.returncode == 74, result.stderr
    assert result.stderr.splitlines()[-1] == "lockgate: I/O error: No space left on device"
    assert "Traceback" not in result.stderr


@pytest.mark.parametrize("command", ["run", "lab"])
def test_no_temporary_directory_is_a_one_line_usage_error(
    cli: CLI, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, command: str
) -> None:
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "nonexistent"))
    with serve([text_turn()]) as server:
        arguments = {
            "run": ["run", "--base-url", server.base_url],
            "lab": ["lab", "--transport", "inprocess", "--scenario", "repair"],
        }[command]
        result = cli(*arguments, key=KEY)
        assert requests_of(server) == []
    assert_one_line_usage_error(result)
    assert "temporary directory" in result.err


# --- 18. an edit keeps the file mode ---------------------------------------------------------


@pytest.mark.parametrize("mode", [0o644, 0o755, 0o600, 0o640])
def test_an_edit_keeps_the_file_mode(tmp_path: Path, mode: int) -> None:
    root = create_fixture(tmp_path)
    target = root / "calculator.py"
    target.chmod(mode)
    previous = os.umask(0o077)
    try:
        FixtureTools(root).edit("calculator.py", "return a - b", "return a + b")
    finally:
        os.umask(previous)
    assert target.read_text() == FIXED_SOURCE
    assert target.stat().st_mode & 0o7777 == mode
    assert [p.name for p in root.iterdir() if p.name.startswith(".edit-")] == []


# --- 19. the library refuses nonsense --------------------------------------------------------


@pytest.mark.parametrize(
    "options",
    [
        {"idle_timeout": math.nan},
        {"idle_timeout": math.inf},
        {"idle_timeout": 0},
        {"idle_timeout": -1.0},
        {"deadline": math.inf},
        {"deadline": math.nan},
        {"deadline": 0.0},
    ],
)
def test_the_client_refuses_timers_that_never_or_always_fire(options: dict[str, float]) -> None:
    from lockgate.lab.replay import ReplayTransport

    with pytest.raises(ValueError, match="positive, finite"):
        StreamingModelClient(ResponsesCodec("m"), ReplayTransport([]), **options)  # type: ignore[arg-type]


@pytest.mark.parametrize(
    "options",
    [
        {"timeout": math.nan},
        {"timeout": math.inf},
        {"timeout": 0},
        {"read_timeout": math.nan},
        {"read_timeout": -1.0},
        {"timeout": True},
    ],
)
def test_transport_options_refuse_bad_timeouts(options: dict[str, Any]) -> None:
    with pytest.raises(ValueError, match="timeout"):
        TransportOptions(api_key=KEY, **options)


async def test_complete_after_aclose_is_an_opening_failure_without_a_request() -> None:
    client, transport, recorder = replay_client([text_turn()])
    await client.aclose()
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.kind is FailureKind.OPENING
    assert transport.requests == []
    assert any(isinstance(e, ResponseFailed) for e in recorder.events)


async def test_complete_after_aclose_of_the_sdk_transport_is_an_opening_failure() -> None:
    transport = OpenAITransport(
        TransportOptions(api_key=KEY, base_url="http://127.0.0.1:9/v1"), "responses"
    )
    client = StreamingModelClient(ResponsesCodec("m"), transport)
    await client.aclose()
    with pytest.raises(ResponseFailure) as caught:
        await client.complete(HISTORY, ALL_TOOLS)
    assert caught.value.kind is FailureKind.OPENING
    with pytest.raises(ResponseFailure):  # the transport on its own too
        await transport.open({"model": "m"})


def test_a_message_needs_a_known_role() -> None:
    with pytest.raises(ValueError, match="role"):
        Message("bogus")  # type: ignore[arg-type]


@pytest.mark.parametrize("host", ["0.0.0.0", "192.168.1.1", "::", "example.com", ""])
async def test_the_scripted_server_listens_on_loopback_only(host: str) -> None:
    with pytest.raises(ValueError, match="loopback"):
        ServerThread([text_turn()], host=host)
    with pytest.raises(ValueError, match="loopback"):
        async with serve_script([text_turn()], host=host):
            pass


@pytest.mark.parametrize(
    ("header", "value", "recorded"),
    [
        ("Authorization", "sk-nobearer-1234", "[redacted]"),
        ("Authorization", "Bearer sk-with-scheme", "Bearer [redacted]"),
        ("Authorization", "Bearer", "[redacted]"),
        ("api-key", "sk-azure-style", "[redacted]"),
        ("x-api-key", "sk-ant-style", "[redacted]"),
    ],
)
def test_the_scripted_server_never_records_a_credential(
    header: str, value: str, recorded: str
) -> None:
    import http.client

    with serve([text_turn()]) as server:
        parts = urllib_parse(server.base_url)
        connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
        connection.request(
            "POST", "/v1/responses", body=b'{"stream": true}', headers={header: value}
        )
        connection.getresponse().read()
        connection.close()
        [request] = requests_of(server)
    assert request.headers[header.lower()] == recorded
    assert value.split()[-1] not in repr(request) or value == "Bearer"


# --- 20. model-run code cannot read the key --------------------------------------------------

READ_KEY = textwrap.dedent(
    """
    import ctypes, json, os, subprocess, sys
    from lockgate.cli.process import read_api_key
    from lockgate.providers import provider

    key = read_api_key(provider("responses"), None)
    child = subprocess.run(
        ["sh", "-c", "printf %s \\"${OPENAI_API_KEY-unset}\\""], capture_output=True, text=True
    )
    with open("/proc/self/environ", "rb") as handle:
        block = handle.read()
    print(json.dumps({
        "read": key == os.environ.get("EXPECTED", key) and len(key),
        "in_environ": "OPENAI_API_KEY" in os.environ,
        "child": child.stdout,
        "dumpable": ctypes.CDLL(None).prctl(3, 0, 0, 0, 0),
        "in_proc_environ": key.encode() in block,
    }))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl and /proc: Linux")
def test_reading_the_key_hides_it_from_child_processes() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env["OPENAI_API_KEY"] = KEY
    result = subprocess.run(
        [sys.executable, "-c", READ_KEY],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["read"] == len(KEY)
    assert report["in_environ"] is False  # no child inherits it ...
    assert report["child"] == "unset"
    assert report["dumpable"] == 0  # ... nor reads /proc/<ppid>/mem as the same user ...
    assert report["in_proc_environ"] is False  # ... nor /proc/<ppid>/environ (even as root)
    if os.geteuid() == 0:
        print("running as root: root can still read any process's memory")


SNOOP_SOURCE = textwrap.dedent(
    """\
    import os


    def add(a, b):
        return a + b


    print("ENV:", os.environ.get("OPENAI_API_KEY"))
    for pid in (os.getppid(), os.getpid()):
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                print("PROC:", pid, handle.read().replace(b"\\0", b" "))
        except OSError as exc:
            print("PROC:", pid, "denied", exc)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: Linux")
def test_model_edited_code_cannot_read_the_key(tmp_path: Path) -> None:
    edit = {"path": "calculator.py", "old": CALCULATOR, "new": SNOOP_SOURCE}
    turns = [call_turn("edit", edit, "resp_e"), call_turn("test", {}, "resp_t"), text_turn()]
    with serve(turns) as server:
        result = run_cli(server.base_url, key=KEY, timeout=60)
        requests = requests_of(server)
    assert result.exit_code == 0, result.stderr
    assert len(requests) == 3
    [edited, tested] = function_outputs(requests[2])
    assert edited.startswith("edited calculator.py")
    assert "ENV: None" in tested
    assert tested.count("PROC:") == 2
    assert KEY not in json.dumps([r.body for r in requests])
    assert KEY not in result.stdout + result.stderr


# --- 21. start-up stays light ----------------------------------------------------------------

HEAVY = ("openai", "anthropic", "httpx2", "aiohttp", "httpx")
IMPORTS = textwrap.dedent(
    """
    import json, sys
    from lockgate.cli import main
    try:
        code = main(sys.argv[1:])
    except SystemExit as exit_:
        code = exit_.code
    heavy = sorted(name for name in {heavy!r} if name in sys.modules)
    print(json.dumps({{"code": code, "heavy": heavy}}), file=sys.stderr)
    """
).format(heavy=HEAVY)


@pytest.mark.parametrize(
    "arguments",
    [
        ["--version"],
        ["--help"],
        ["run", "--help"],
        ["run", "--max-turns", "0"],
        ["run"],  # no key
        ["lab", "--transport", "inprocess", "--scenario", "repair"],
    ],
    ids=["version", "help", "run-help", "usage-error", "no-key", "lab-inprocess"],
)
def test_start_up_does_not_import_the_sdks(arguments: list[str]) -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    result = subprocess.run(
        [sys.executable, "-c", IMPORTS, *arguments],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
        check=False,
    )
    report = json.loads(result.stderr.splitlines()[-1])
    assert report["code"] in (0, 2), result.stderr
    assert report["heavy"] == []


# --- findings of the review of the whole change -------------------------------------------


def test_a_server_timestamp_never_crashes_the_classifier() -> None:
    from lockgate.providers.anthropic.errors import classify_anthropic_failure
    from lockgate.retry import seconds_until_timestamp

    body = {"type": "error", "error": {"type": "rate_limit_error", "message": "slow"}}
    for stamp in ("0001-01-01T00:00:00", "9999-12-31T23:59:59+14:00", "2026-13-40T00:00:00"):
        headers = {
            "anthropic-ratelimit-requests-remaining": "0",
            "anthropic-ratelimit-requests-reset": stamp,
        }
        failure = classify_anthropic_failure(429, body, headers, now=1_800_000_000)
        assert failure.retryable
    # A timestamp without a zone is UTC, whatever the machine's zone.
    assert seconds_until_timestamp("2027-01-01T00:00:10", 1798761600.0) == 10.0


async def test_a_classifier_failure_is_an_opening_failure_not_a_crash() -> None:
    import httpx2

    from lockgate.providers.openai.transport import OPENAI_SDK
    from lockgate.sdk import SDKTransport

    def explode(status: int, body: object, headers: object) -> Any:
        raise ValueError("a classifier bug")

    def handler(request: httpx2.Request) -> httpx2.Response:
        return httpx2.Response(429, json={"error": {"message": "x"}})

    options = TransportOptions(
        api_key=KEY,
        base_url="http://provider.test/v1",
        http_transport=httpx2.MockTransport(handler),
    )
    transport = SDKTransport(options, OPENAI_SDK, "/responses", explode)
    client = StreamingModelClient(ResponsesCodec("m"), transport)
    try:
        with pytest.raises(ResponseFailure) as caught:
            await client.complete([Message("user", "go")], ALL_TOOLS)
    finally:
        await client.aclose()
    assert caught.value.kind is FailureKind.OPENING
    assert "HTTP 429" in caught.value.message


async def test_a_history_the_codec_refuses_is_a_response_failure() -> None:
    class Refusing(ResponsesCodec):
        def encode(self, history: Any, tools: Any) -> dict[str, Any]:
            raise ValueError("refusing to send a reasoning item without its following item")

    client, transport, _ = replay_client([text_turn()])
    client.codec = Refusing("m")
    with pytest.raises(ResponseFailure) as caught:
        await client.complete([Message("user", "go")], ALL_TOOLS)
    assert caught.value.kind is FailureKind.OPENING
    assert transport.requests == []  # no request was made


def test_provider_items_are_never_read_as_messages_by_the_orphan_guard() -> None:
    from lockgate.providers.responses.codec import check_no_orphan_reasoning

    reasoning = {"type": "reasoning", "id": "rs_1", "summary": []}
    opaque = {"type": "web_search_call", "role": "user", "id": "ws_1"}  # hostile, opaque
    check_no_orphan_reasoning([reasoning, opaque, {"role": "assistant", "content": "x"}])


def test_a_thinking_budget_below_the_apis_minimum_is_a_usage_error(cli: CLI) -> None:
    result = cli("run", "--provider", "anthropic", "--thinking-budget", "10", key=KEY)
    assert_one_line_usage_error(result)
    assert "1024" in result.err


async def test_the_deadline_holds_while_one_read_carries_an_event_flood() -> None:
    from lockgate.providers.base import CodecOptions

    frame = b'data: {"id":"c","object":"chat.completion.chunk","choices":[]}\n\n'

    class Flood:
        async def __aiter__(self) -> Any:
            yield frame * 400_000  # one decompressed read holding 400,000 events

        async def aclose(self) -> None:
            return None

    class FloodTransport:
        async def open(self, request: Any, *, attempt: int = 0) -> Flood:
            return Flood()

        async def aclose(self) -> None:
            return None

    codec = PROVIDERS["chat"].make_codec(CodecOptions("m"))
    client = StreamingModelClient(codec, FloodTransport(), deadline=0.2, max_event_bytes=1 << 26)
    with pytest.raises(ResponseFailure) as caught:
        await client.complete([Message("user", "go")], ALL_TOOLS)
    # The flood never ends and never exceeds a bound: only the deadline can stop it.
    assert caught.value.kind is FailureKind.DEADLINE


def test_streams_are_requested_uncompressed(cli: CLI) -> None:
    with ServerThread([text_turn()]) as running:
        result = cli("run", "--base-url", running.base_url, key=KEY)
        assert running.server is not None
        encodings = [r.headers.get("accept-encoding") for r in running.server.requests]
    assert result.code == 0, result.err
    assert encodings == ["identity"]
