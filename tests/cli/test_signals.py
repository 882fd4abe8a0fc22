"""SIGINT and SIGTERM at any moment stop every command cleanly and leave nothing behind."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.parse
from pathlib import Path

import pytest
from benchmarks.hostile import raw_server

from lockgate.fixture import CALCULATOR
from lockgate.lab.scenarios import cancellation_turns
from lockgate.lab.server import ServerThread

from ..helpers import (
    KEY,
    closing,
    finish,
    no_traceback,
    read_serving_line,
    serve,
    started_lockgate,
    wait_until,
)

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
        assert err.splitlines()[-1] == "lockgate serve: stopped after 0 requests"
    else:
        assert code == 130, (out, err)
        assert err.splitlines()[-1] == "stopped: interrupted"


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
    assert err.splitlines() == ["lockgate serve: stopped after 0 requests"]


def test_sigint_while_a_client_is_mid_stream_stops_serve_cleanly(
    startup_marker: Path, tmp_path: Path
) -> None:
    process = started_lockgate(startup_marker, tmp_path, "serve", "--scenario", "cancellation")
    url = urllib.parse.urlsplit(read_serving_line(process))
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
    assert err.splitlines()[-1] == "lockgate serve: stopped after 1 requests"


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
    assert closing(out).stopped == "interrupted"
    assert lab_leftovers(temporary) == []


def test_sigint_during_a_stream_stops_cleanly() -> None:
    env = {**os.environ, "OPENAI_API_KEY": KEY}
    with ServerThread(cancellation_turns()) as server:
        process = subprocess.Popen(
            [
                sys.executable,
                "-m",
                "lockgate",
                "run",
                "--base-url",
                server.base_url,
                "--allow-execution",
            ],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=env,
        )
        assert server.server is not None
        wait_until(server.server.paused.is_set, "the stream went silent", interval=0.02)
        process.send_signal(signal.SIGINT)
        stdout, stderr = process.communicate(timeout=30)
        requests = server.server.requests
        wait_until(lambda: requests[0].client_closed_early, "the connection closed")
    assert process.returncode == 130, stderr
    ending = closing(stdout)
    assert (ending.stopped, ending.executed_tools, ending.source) == ("interrupted", 0, CALCULATOR)
    assert "Traceback" not in stderr
    assert len(server.server.requests) == 1
