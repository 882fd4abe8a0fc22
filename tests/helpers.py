"""Shared test helpers: scripted turns, a client wired to the in-process replay, the CLI in a
subprocess. `ServerThread` is re-exported from the library for the subprocess tests."""

from __future__ import annotations

__all__ = ["ServerThread"]  # re-exported; the rest are plain helpers

import contextlib
import os
import random
import signal
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from typing import Any

from lockgate.client import StreamingModelClient
from lockgate.events import Event
from lockgate.lab.replay import ReplayTransport
from lockgate.lab.server import ServerThread
from lockgate.providers.openai.transport import OpenAITransport
from lockgate.providers.responses.codec import ResponsesCodec
from lockgate.providers.responses.render import ResponseBuilder
from lockgate.scripted.script import Turn
from lockgate.transport import TransportOptions

EDIT = {"path": "calculator.py", "old": "return a - b", "new": "return a + b"}


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
    import re

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
        assert "stopped after 7 requests" in process.stderr.read()
