"""Start-up: how fast `lockgate --version` answers, and what preparing the redactor costs.

These were wall-clock assertions in the test suite (`--version` under 0.6 s; an 8,000-
character key prepared in under 10 s), which failed on a busy machine. The suite now asserts
what makes them fast (no SDK is imported to answer `--version`; the redactor prepares a few
forms of a key, never its prefixes); the time itself is measured here, against a baseline
measured in the same run:

  --version            `python -m lockgate --version` in a fresh interpreter;
  interpreter          `python -c pass` (the floor no command can go below);
  redactor, long key   `Redactor([key])` and one `stream().feed` for a 20,000-character key,
                       against the same for a 40-character key.

Medians of interleaved runs. Targets: `--version` within 0.5 s of the bare interpreter;
a 20,000-character key prepared within 50 ms (it took 44 s when every prefix was listed).
Run: `python3 dev.py bench` or `.venv/bin/python benchmarks/startup.py`.
"""

from __future__ import annotations

import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))  # when run as a script

from benchmarks._common import Report, heading, median
from lockgate.credentials import Redactor

RUNS = 7
VERSION_MARGIN_S = 0.5
LONG_KEY_TARGET_S = 0.05


def _wall(command: list[str]) -> float:
    started = time.perf_counter()
    subprocess.run(command, check=True, capture_output=True, stdin=subprocess.DEVNULL)
    return time.perf_counter() - started


def _prepare(key: str) -> Callable[[], float]:
    def run() -> float:
        started = time.perf_counter()
        redactor = Redactor([key])
        redactor.stream().feed("text around " + key[: len(key) // 2])
        return time.perf_counter() - started

    return run


def main() -> int:
    report = Report("startup")
    heading("lockgate --version against a bare interpreter (wall seconds, median)")
    version: list[float] = []
    bare: list[float] = []
    for _ in range(RUNS):  # interleaved: the machine's load falls on both alike
        version.append(_wall([sys.executable, "-m", "lockgate", "--version"]))
        bare.append(_wall([sys.executable, "-c", "pass"]))
    added = median(version) - median(bare)
    print(f"  --version {median(version):.3f} s, interpreter {median(bare):.3f} s")
    report.check(
        "--version within 0.5 s of the interpreter",
        added <= VERSION_MARGIN_S,
        f"+{added:.3f} s ({median(version) / median(bare):.1f}x the bare interpreter)",
    )
    heading("preparing the redactor (seconds, median)")
    long_key = "sk-" + "Ab3x" * 5_000
    short_key = "sk-" + "Ab3x" * 10
    long_runs = [_prepare(long_key)() for _ in range(RUNS)]
    short_runs = [_prepare(short_key)() for _ in range(RUNS)]
    print(f"  20,003 chars {median(long_runs):.4f} s, 43 chars {median(short_runs):.6f} s")
    report.check(
        "a 20,000-character key prepared within 50 ms",
        median(long_runs) <= LONG_KEY_TARGET_S,
        f"{median(long_runs) * 1000:.1f} ms "
        f"({median(long_runs) / max(median(short_runs), 1e-9):.0f}x a 43-character key)",
    )
    report.summary()
    return 0


if __name__ == "__main__":
    sys.exit(main())
