"""Shared test helpers: scripted turns, a client wired to the in-process replay, the CLI in
this process (`Outcome`, for the `cli` fixture of conftest.py) and in a subprocess, and exact
readers of what the CLI prints (its closing lines, its `--json` records). `ServerThread` is
re-exported from the library for the subprocess tests."""

from __future__ import annotations

__all__ = ["ServerThread"]  # re-exported; the rest are plain helpers

import contextlib
import http.client
import json
import os
import random
import re
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from lockgate.client import StreamingModelClient
from lockgate.conversation import Message
from lockgate.events import Event
from lockgate.fixture import CALCULATOR
from lockgate.lab.replay import ReplayTransport
from lockgate.lab.server import ServerThread
from lockgate.providers.openai.transport import OpenAITransport
from lockgate.providers.responses.codec import ResponsesCodec
from lockgate.providers.responses.render import ResponseBuilder
from lockgate.scripted.script import Turn
from lockgate.transport import TransportOptions

ROOT = Path(__file__).resolve().parents[1]  # the project: README.md, src/, tests/
EDIT = {"path": "calculator.py", "old": "return a - b", "new": "return a + b"}
KEY = "sk-proj-HARDENING-SECRET-9a8b7c6d5e"  # a well-formed key no server accepts
HISTORY = [Message("user", "fix it")]
PROXY_VARIABLES = (
    *("HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY"),
    *("http_proxy", "https_proxy", "all_proxy", "no_proxy"),
)
RETRY_VARIABLES = tuple(
    f"LOCKGATE_RETRY_{name}" for name in ("ATTEMPTS", "BASE_DELAY", "MAX_DELAY", "JITTER")
)


def wait_until(
    condition: Callable[[], object],
    what: str,
    *,
    alive: Callable[[], object] | None = None,
    limit: float = 60.0,
    interval: float = 0.001,
) -> None:
    """Poll `condition` until it holds. This is a guard against a hang, never a measure of
    speed: the limit is far beyond any wait a working program takes, and running out of it
    raises TimeoutError("never happened: WHAT"). `alive` (if given) must keep holding while
    waiting (e.g. the process is still running), else AssertionError."""
    deadline = time.monotonic() + limit
    while not condition():
        if alive is not None:
            assert alive(), f"stopped before this happened: {what}"
        if time.monotonic() > deadline:
            raise TimeoutError(f"never happened: {what}")
        time.sleep(interval)


def edit_turn(response_id: str = "resp_1") -> Turn:
    builder = ResponseBuilder(response_id).created().call("fc_1", "call_1", "edit", EDIT)
    return builder.completed().turn()


def text_turn(text: str = "All done.", response_id: str = "resp_t") -> Turn:
    return ResponseBuilder(response_id).created().text("msg_1", text).completed().turn()


def responses_transport(**options: Any) -> OpenAITransport:
    """The SDK transport for Responses, from `TransportOptions` fields."""
    return OpenAITransport(TransportOptions(**options), "responses")


class Recorder:
    """Collects observer events and sleep requests."""

    def __init__(self) -> None:
        self.events: list[Event] = []
        self.sleeps: list[float] = []

    def __call__(self, event: Event) -> None:
        self.events.append(event)

    async def sleep(self, delay: float) -> None:
        self.sleeps.append(delay)


def replay_client(
    turns: list[Turn], recorder: Recorder | None = None
) -> tuple[StreamingModelClient, ReplayTransport, Recorder]:
    recorder = recorder or Recorder()
    transport = ReplayTransport(turns)
    client = StreamingModelClient(
        ResponsesCodec("test-model"),
        transport,
        observer=recorder,
        sleep=recorder.sleep,
        rng=random.Random(1),
    )
    return client, transport, recorder


USAGE_LINE = (
    r"usage: (input=\d+ \(cached=\d+(, cache_write=\d+)?\) output=\d+ \(reasoning=\d+\) "
    r"total=\d+|not reported)\n"
)


def indented(source: str) -> str:
    """A file as the CLI prints it: every non-empty line indented by two spaces."""
    return "".join(f"  {line}" if line.strip("\n") else line for line in source.splitlines(True))


def ends_with_file_and_usage(stdout: str, source: str) -> bool:
    """The run's last words: the final file (indented), then exactly one usage line."""
    pattern = r"final calculator\.py:\n" + re.escape(indented(source)) + USAGE_LINE + r"\Z"
    return re.search(pattern, stdout) is not None


def run_lockgate(
    *args: str,
    key: str | None = None,
    env: dict[str, str] | None = None,
    timeout: float = 120,
) -> subprocess.CompletedProcess[str]:
    """`python -m lockgate ARGS` as a user runs it: captured text output, no stdin.
    `key` becomes OPENAI_API_KEY (None: the variable is absent)."""
    environment = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    if key is not None:
        environment["OPENAI_API_KEY"] = key
    environment.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", "lockgate", *args],
        capture_output=True,
        text=True,
        env=environment,
        timeout=timeout,
        stdin=subprocess.DEVNULL,
        check=False,
    )


def assert_no_traceback(result: subprocess.CompletedProcess[str]) -> None:
    assert "Traceback" not in result.stderr
    assert "Traceback" not in result.stdout


@contextlib.contextmanager
def serving_repair(provider: str) -> Iterator[str]:
    """`lockgate serve --provider PROVIDER --scenario repair` in a subprocess: its base URL;
    afterwards Ctrl-C must stop it cleanly after all 7 requests."""
    process = subprocess.Popen(
        [sys.executable, "-m", "lockgate", "serve", "--provider", provider, "--scenario", "repair"],
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith(f"serving repair ({provider}, 7 turns) at http://127.0.0.1:"), line
    try:
        yield line.strip().rsplit(" at ", 1)[1]
    finally:
        process.send_signal(signal.SIGINT)
        assert process.wait(10) == 0
        assert process.stderr is not None
        lines = process.stderr.read().splitlines()
        assert lines[-1:] == ["lockgate serve: stopped after 7 requests"], lines


# --- what the CLI prints, read exactly ----------------------------------------------------

_CLOSING = (
    r"\nstopped: (?P<stopped>[^\n]*)\n"
    r"executed tools: (?P<tools>\d+)\n"
    r"final calculator\.py:\n(?P<source>(?:  [^\n]*\n|\n)*)"
    r"(?P<usage>" + USAGE_LINE.removesuffix(r"\n") + r")\n"
)


@dataclass(frozen=True)
class Closing:
    """A run's closing lines, as `run` (and each lab run) prints them last: the stop line
    after `stopped: `, the number of tools executed, the final file (indentation removed)
    and the usage line."""

    stopped: str
    executed_tools: int
    source: str
    usage: str

    @property
    def kind(self) -> str | None:
        return stop_kind(self.stopped)


def _closing(match: re.Match[str]) -> Closing:
    source = "".join(
        line if line == "\n" else line.removeprefix("  ")
        for line in match["source"].splitlines(True)
    )
    return Closing(match["stopped"], int(match["tools"]), source, match["usage"])


def closing(stdout: str) -> Closing:
    """The closing lines that end `stdout`; AssertionError when it does not end in them
    exactly (one stop line, the tools line, the indented file, one usage line)."""
    match = re.search(_CLOSING + r"\Z", stdout)
    assert match is not None, f"no closing lines at the end of: {stdout[-2000:]!r}"
    return _closing(match)


def closings(stdout: str) -> list[Closing]:
    """Every run's closing lines in `stdout` (the lab prints one set per run), in order;
    every `stopped:` line of `stdout` must open one, and the last must end it."""
    found = [_closing(match) for match in re.finditer(_CLOSING, stdout)]
    assert len(found) == stdout.count("\nstopped: "), stdout[-2000:]
    assert found
    assert found[-1] == closing(stdout)
    return found


def stop_kind(stopped: str) -> str | None:
    """The `FailureKind` value of a stop line `provider_failure (KIND: message)`; None for
    any other stop (model_finished, turn_limit, interrupted, ...)."""
    match = re.fullmatch(r"provider_failure \((\w+): .*\)", stopped, re.S)
    return match[1] if match else None


def json_records(stdout: str) -> list[dict[str, Any]]:
    """`--json` output: one JSON object per line, every line."""
    records = [json.loads(line) for line in stdout.splitlines()]
    assert all(isinstance(record, dict) and "event" in record for record in records), stdout
    return records


def final_record(stdout: str) -> dict[str, Any]:
    """The `final` record that ends `run --json` output."""
    records = json_records(stdout)
    assert records, "no records"
    assert records[-1]["event"] == "final", records[-1]
    return records[-1]


def stderr_lines(text: str, prefix: str) -> list[str]:
    """The whole lines of `text` that start with `prefix`."""
    return [line for line in text.splitlines() if line.startswith(prefix)]


_RETRY = re.compile(r"retry opening: attempt (\d+)/(\d+) in (\d+\.\d\d) s \((.*)\)")


@dataclass(frozen=True)
class RetryLine:
    attempt: int
    max_attempts: int
    delay: float
    reason: str


def retry_lines(stderr: str) -> list[RetryLine]:
    """Every `retry opening: attempt A/M in D s (REASON)` line of `stderr`, parsed whole (a
    line that starts so but does not have that form fails)."""
    parsed = []
    for line in stderr_lines(stderr, "retry opening:"):
        match = _RETRY.fullmatch(line)
        assert match is not None, line
        parsed.append(RetryLine(int(match[1]), int(match[2]), float(match[3]), match[4]))
    return parsed


# --- the CLI in this process (the `cli` fixture) -------------------------------------------


@dataclass
class Outcome:
    code: int
    out: str
    err: str

    @property
    def output(self) -> str:
        return self.out + self.err


CLI = Callable[..., Outcome]


def no_traceback(text: str) -> bool:
    """No traceback of lockgate's own (the fixture's failing unit test prints one inside a
    one-line, indented tool result: that one never starts a line)."""
    return not any(line.startswith("Traceback") for line in text.splitlines())


def usage_error_line(result: Outcome) -> str:
    """The one line of a usage error (exit 2, nothing on stdout, one `lockgate…` line on
    stderr, no traceback), returned for the caller to check its wording."""
    assert result.code == 2, result.output
    assert result.out == ""
    lines = result.err.splitlines()
    assert len(lines) == 1, result.err
    assert lines[0].startswith("lockgate"), lines[0]
    assert "Traceback" not in result.err
    assert "internal error" not in result.err
    return lines[0]


def assert_closing_lines(result: Outcome, source: str = CALCULATOR) -> Closing:
    """The run's normal last words, and nothing that looks like a crash."""
    ending = closing(result.out)
    assert ending.source == source
    assert no_traceback(result.output)
    assert "internal error" not in result.output
    assert "RecursionError" not in result.output
    return ending


def failed_as(result: Outcome, kind: str) -> Closing:
    """Exit 1 with a provider failure of `kind`, nothing executed, the file unchanged."""
    assert result.code == 1, result.output[-3000:]
    ending = assert_closing_lines(result)
    assert ending.kind == kind, ending.stopped
    assert ending.executed_tools == 0
    return ending


# --- scripted Responses servers -------------------------------------------------------------


def serve(turns: Sequence[Turn]) -> ServerThread:
    return ServerThread(list(turns))


def requests_of(server: ServerThread) -> list[Any]:
    assert server.server is not None
    return list(server.server.requests)


def dead_port() -> int:
    """A loopback port nobody listens on (bound, then released)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
    return port


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


def http_request(
    url: str, method: str, path: str, body: bytes = b"", headers: dict[str, str] | None = None
) -> int:
    """One plain HTTP request to the server at `url`: its status."""
    parts = urllib.parse.urlsplit(url)
    assert parts.hostname is not None, url
    connection = http.client.HTTPConnection(parts.hostname, parts.port, timeout=10)
    try:
        connection.request(method, path, body=body or None, headers=headers or {})
        response = connection.getresponse()
        response.read()
        return response.status
    finally:
        connection.close()


# --- lockgate as a child process that is signalled ------------------------------------------


def started_lockgate(
    marker_folder: Path, work: Path, *args: str, env: dict[str, str] | None = None
) -> subprocess.Popen[str]:
    """`python -m lockgate ARGS`, returned once lockgate's own code runs (`marker_folder`:
    the `startup_marker` fixture of conftest.py)."""
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
    """Waits for the child: (exit code, stdout, stderr); kills it and fails if it hangs."""
    try:
        out, err = process.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        out, err = process.communicate()
        raise AssertionError(f"lockgate did not stop: {err[-2000:]}") from None
    return process.returncode, out, err


def read_serving_line(process: subprocess.Popen[str]) -> str:
    """The base URL from `lockgate serve`'s first line."""
    assert process.stdout is not None
    line = process.stdout.readline()
    assert line.startswith("serving "), line
    return line.strip().rsplit(" at ", 1)[1]
