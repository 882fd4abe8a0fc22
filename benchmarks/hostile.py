"""Hostile-server figures for `lockgate run`, measured on the real CLI in a subprocess.

  stall:        a server goes silent mid-arguments; with `--idle-timeout 2`, how long from
                the server's last byte until the client closed the connection (the
                server's own clock), median of the runs;
  giant frame:  a server sends a 1 GiB frame that never ends; the client's peak RSS
                (kernel accounting of the child), median of the runs, against the peak
                RSS of the same command on a small successful run measured here too.

Run: `python3 dev.py bench` or `.venv/bin/python benchmarks/hostile.py [--repeats N]`.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys

from lockgate.lab.scenarios import EDIT_FIX
from lockgate.lab.script import Faults
from lockgate.lab.server import ServerThread
from lockgate.providers.responses.lab import ResponseBuilder

KEY = "sk-benchmark-not-a-secret"


def run_cli(base_url: str, *extra: str) -> tuple[int, float]:
    """Exit code and peak RSS (MiB) of one `lockgate run`."""
    process = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "lockgate",
            "run",
            "--base-url",
            base_url,
            "--allow-execution",
            *extra,
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        stdin=subprocess.DEVNULL,
        env={**os.environ, "OPENAI_API_KEY": KEY},
    )
    _, status, usage = os.wait4(process.pid, 0)
    process.returncode = os.waitstatus_to_exitcode(status)
    return process.returncode, usage.ru_maxrss / 1024


def partial_edit() -> ResponseBuilder:
    builder = ResponseBuilder("resp_bench").created().text("msg", "Editing.")
    return builder.call("fc_1", "call_1", "edit", EDIT_FIX, finish=False)


def stall_seconds() -> float:
    turn = partial_edit().turn(faults=Faults(stall_after=4, stall_seconds=60))
    with ServerThread([turn]) as running:
        code, _ = run_cli(running.base_url, "--idle-timeout", "2")
    assert code == 1
    assert running.server is not None
    timeline = dict((label, at) for at, label in running.server.requests[0].timeline)
    return timeline["client closed"] - timeline["stall"]


def giant_frame_rss() -> float:
    turn = partial_edit().turn(faults=Faults(giant_frame_bytes=1 << 30, fragment_sizes=(65536,)))
    with ServerThread([turn]) as running:
        code, rss = run_cli(running.base_url)
    assert code == 1
    return rss


def baseline_rss() -> float:
    turn = ResponseBuilder("resp_ok").created().text("msg", "The bug is in add.").completed().turn()
    with ServerThread([turn]) as running:
        code, rss = run_cli(running.base_url)
    assert code == 0
    return rss


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--repeats", type=int, default=3)
    args = parser.parse_args()
    stall = statistics.median(stall_seconds() for _ in range(args.repeats))
    giant = statistics.median(giant_frame_rss() for _ in range(args.repeats))
    base = statistics.median(baseline_rss() for _ in range(args.repeats))
    runs = f"median of {args.repeats}"
    print(f"stall, --idle-timeout 2: failed {stall:.2f} s after the last byte ({runs})")
    print(f"giant 1 GiB frame: peak RSS {giant:.1f} MiB (limit 150 MiB)")
    print(f"small successful run: peak RSS {base:.1f} MiB; giant/baseline = {giant / base:.2f}")


if __name__ == "__main__":
    main()
