"""`lockgate run` in a subprocess against hostile servers fails closed within its bounds.

Peak memory is measured from the kernel's accounting of the child (`wait4` rusage, taken by
a small launcher so that the child's figure is not this process's).
"""

from __future__ import annotations

from dataclasses import dataclass

import pytest
from benchmarks.hostile import run_cli

from lockgate.errors import FailureKind
from lockgate.fixture import CALCULATOR
from lockgate.lab.scenarios import EDIT_FIX
from lockgate.providers.responses.render import ResponseBuilder
from lockgate.scripted.script import Faults

from ..helpers import ServerThread, closing

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
    ending = closing(result.stdout)
    assert (ending.kind, ending.executed_tools, ending.source) == (kind, 0, CALCULATOR)
    assert "Traceback" not in result.stderr
    assert FAKE_KEY not in result.stdout + result.stderr


def test_a_one_gibibyte_frame_cannot_exhaust_memory() -> None:
    giant = partial_edit().turn(faults=Faults(giant_frame_bytes=1 << 30, fragment_sizes=(65536,)))
    with ServerThread([giant]) as server:
        result = run_measured(server.base_url)
    assert_failed_closed(result, FailureKind.BOUND_EXCEEDED)
    print(f"giant frame: peak RSS {result.peak_rss_mib:.1f} MiB")
    assert result.peak_rss_mib < RSS_LIMIT_MIB


@pytest.mark.parametrize(
    ("endless", "kind", "extra"),
    [
        ("text", FailureKind.BOUND_EXCEEDED, ()),
        ("unknown", FailureKind.DEADLINE, ("--deadline", "2")),
    ],
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
    # The stall (60 s) outlasts the run: only the idle timeout can end it as idle_timeout.
    assert_failed_closed(result, FailureKind.IDLE_TIMEOUT)
    print(f"stall with --idle-timeout 2: failed after {result.seconds:.2f} s (process total)")
