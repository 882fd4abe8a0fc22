"""Hostile servers and impatient users, against the real CLI in a subprocess.

Peak memory is measured from the kernel's accounting of the child (`wait4` rusage, taken by
a small launcher so that the child's figure is not this process's), and interruption is a
real SIGINT.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
from dataclasses import dataclass
from pathlib import Path

import pytest
from benchmarks.hostile import run_cli

from lockgate.fixture import CALCULATOR
from lockgate.lab.scenarios import EDIT_FIX, cancellation_turns
from lockgate.providers.responses.render import ResponseBuilder
from lockgate.scripted.script import Faults, Turn

from .helpers import ServerThread, ends_with_file_and_usage, wait_until

FAKE_KEY = "sk-lockgate-HOSTILE-5e1d"
RSS_LIMIT_MIB = 150


@dataclass
class Finished:
    exit_code: int
    stdout: str
    stderr: str
    peak_rss_mib: float
    seconds: float


def run_measured(base_url: str, *extra: str, timeout: float = 60) -> Finished:
    """`lockgate run --base-url URL --allow-execution EXTRA`, its peak RSS its own: not
    inherited from this (possibly big) test process (see `benchmarks.hostile.run_cli`)."""
    result = run_cli(base_url, *extra, key=FAKE_KEY, timeout=timeout)
    if result.exit_code == -9:
        pytest.fail("lockgate run did not finish in time")
    return Finished(
        result.exit_code, result.stdout, result.stderr, result.peak_rss_mib, result.seconds
    )


def partial_edit() -> ResponseBuilder:
    return (
        ResponseBuilder("resp_h")
        .created()
        .text("msg", "Editing.")
        .call("fc_1", "call_1", "edit", EDIT_FIX, finish=False)
    )


def assert_failed_closed(result: Finished, kind: str) -> None:
    assert result.exit_code == 1, result.stderr
    assert f"stopped: provider_failure ({kind}:" in result.stdout
    assert "executed tools: 0" in result.stdout
    assert ends_with_file_and_usage(result.stdout, CALCULATOR)
    assert "Traceback" not in result.stderr
    assert FAKE_KEY not in result.stdout + result.stderr


def test_a_one_gibibyte_frame_cannot_exhaust_memory() -> None:
    giant = partial_edit().turn(faults=Faults(giant_frame_bytes=1 << 30, fragment_sizes=(65536,)))
    with ServerThread([giant]) as server:
        result = run_measured(server.base_url)
    assert_failed_closed(result, "bound_exceeded")
    print(f"giant frame: peak RSS {result.peak_rss_mib:.1f} MiB")
    assert result.peak_rss_mib < RSS_LIMIT_MIB


@pytest.mark.parametrize(
    ("endless", "kind", "extra"),
    [("text", "bound_exceeded", ()), ("unknown", "deadline", ("--deadline", "2"))],
)
def test_an_endless_stream_of_small_events_is_bounded(
    endless: str, kind: str, extra: tuple[str, ...]
) -> None:
    turn = partial_edit().turn(faults=Faults(endless=endless))  # type: ignore[arg-type]
    with ServerThread([turn]) as server:
        result = run_measured(server.base_url, *extra)
    assert_failed_closed(result, kind)
    assert result.peak_rss_mib < RSS_LIMIT_MIB


def test_stall_fails_at_the_idle_timeout() -> None:
    stall = partial_edit().turn(faults=Faults(stall_after=4, stall_seconds=60))
    with ServerThread([stall]) as server:
        result = run_measured(server.base_url, "--idle-timeout", "2")
    assert_failed_closed(result, "idle_timeout")
    print(f"stall with --idle-timeout 2: failed after {result.seconds:.2f} s (process total)")
    assert result.seconds < 10


def test_sigint_during_a_stream_stops_cleanly() -> None:
    env = {**os.environ, "OPENAI_API_KEY": FAKE_KEY}
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
    assert "stopped: interrupted" in stdout
    assert "executed tools: 0" in stdout
    assert ends_with_file_and_usage(stdout, CALCULATOR)
    assert "Traceback" not in stderr
    assert len(server.server.requests) == 1


def test_run_leaves_no_fixture_behind(tmp_path: Path) -> None:
    turn = ResponseBuilder("resp_ok").created().text("msg", "Done.").completed().turn()
    env = {**os.environ, "OPENAI_API_KEY": FAKE_KEY, "TMPDIR": str(tmp_path)}
    with ServerThread([turn, Turn(status=500)]) as server:
        result = subprocess.run(
            [sys.executable, "-m", "lockgate", "run", "--base-url", server.base_url],
            capture_output=True,
            text=True,
            env=env,
            timeout=60,
            check=False,
        )
    assert result.returncode == 0
    assert list(tmp_path.iterdir()) == []
