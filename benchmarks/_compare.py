"""Before and after: lockgate's own per-event work and retained memory, measured on this
tree and on a git revision (default `HEAD`), in separate processes, interleaved.

Measured in memory, on the same native frames (one frame per chunk, the lab renderers'
~2,000-event streams of `_streams.py`), per protocol:

- pipeline CPU: SSE decoder + provider decoder + gate (the client's decode-and-gate loop), µs/event;
- the same with jiter switched off (this tree only: what the standard-library JSON path
  costs);
- retained bytes per character at the bounds (gate fed 64,000 1-char text deltas and 8 x
  16,000 1-char argument deltas; each protocol's whole pipeline fed the same reply).

The revision is exported with `git archive` into a temporary directory (the working tree is
not touched). Without git, or outside a checkout, it prints why and exits 0.
Run by hand (not by `dev.py bench`: it compares against git):
`.venv/bin/python benchmarks/_compare.py [--against REV] [--rounds N] [--cpu-only]`.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path
from typing import Any

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # when run as a script


def child(what: str, no_jiter: bool) -> dict[str, float]:
    """The measurements (`cpu` or `memory`), with whatever `lockgate` is first on the
    path."""
    import gc

    from benchmarks._common import advance
    from benchmarks._streams import PROTOCOLS, StreamSpec, stream_frames
    from benchmarks.bounds import gate_arguments, gate_text, pipeline_retained, retained
    from lockgate.events import ignore_event
    from lockgate.fixture import ALL_TOOLS
    from lockgate.gate import ResponseGate
    from lockgate.providers import PROVIDERS, CodecOptions
    from lockgate.sse import SSEDecoder

    if no_jiter:
        import lockgate.jsonlimits

        lockgate.jsonlimits._jiter_loads = None
    results: dict[str, float] = {}
    for protocol in PROTOCOLS if what == "cpu" else ():
        frames = stream_frames(StreamSpec(protocol, "chunks"))
        codec = PROVIDERS[protocol].make_codec(CodecOptions(model="bench-model"))
        runs = []
        for _ in range(15):
            gc.collect()
            started = time.process_time()
            sse = SSEDecoder()
            decoder = codec.new_decoder()
            gate = ResponseGate(ALL_TOOLS, ignore_event)
            decision = None
            for frame in frames:
                decision = advance(sse.feed(frame), decoder, gate, decision)
            for event in decoder.end_of_stream():
                decision = gate.accept(event) or decision
            assert decision is not None
            runs.append((time.process_time() - started) / len(frames) * 1e6)
        results[f"pipeline CPU, {protocol}, median (µs/event)"] = statistics.median(runs)
        results[f"pipeline CPU, {protocol}, best (µs/event)"] = min(runs)
    if what == "cpu":
        return results
    size, _ = retained(gate_text)
    results["gate at the text bound (B/char)"] = size / 64_000
    size, _ = retained(gate_arguments)
    results["gate at the argument bounds (B/char)"] = size / (8 * 16_000)
    for protocol in PROTOCOLS:
        ratio, _ = pipeline_retained(protocol)
        results[f"{protocol} pipeline at the bounds (B/char)"] = ratio
    return results


def run_child(source: Path, what: str, no_jiter: bool = False) -> dict[str, float]:
    environment = {**os.environ, "PYTHONPATH": str(source)}
    command = [sys.executable, str(Path(__file__).resolve()), "--child", what]
    if no_jiter:
        command.append("--no-jiter")
    output = subprocess.run(
        command, env=environment, capture_output=True, text=True, check=True, timeout=300
    )
    result: dict[str, float] = json.loads(output.stdout.strip().splitlines()[-1])
    return result


def export(revision: str, into: Path) -> Path | None:
    """`git archive REV src` unpacked under `into`; None without git or the revision."""
    archive = into / "src.tar"
    try:
        with archive.open("wb") as handle:
            subprocess.run(
                ["git", "-C", str(ROOT), "archive", revision, "src"],
                stdout=handle,
                stderr=subprocess.PIPE,
                check=True,
                timeout=60,
            )
    except (OSError, subprocess.CalledProcessError, subprocess.TimeoutExpired) as exc:
        print(f"compare: cannot export {revision!r} from git ({exc}); nothing compared")
        return None
    with tarfile.open(archive) as tar:
        tar.extractall(into, filter="data")
    return into / "src"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--against", default="HEAD", help="git revision (default HEAD)")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--cpu-only", action="store_true", help="skip the memory figures")
    parser.add_argument("--child", choices=("cpu", "memory"), help=argparse.SUPPRESS)
    parser.add_argument("--no-jiter", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.child, args.no_jiter)))
        return 0
    started = time.monotonic()
    with tempfile.TemporaryDirectory() as folder:
        baseline = export(args.against, Path(folder))
        if baseline is None:
            return 0
        before: list[dict[str, float]] = []
        after: list[dict[str, float]] = []
        plain: list[dict[str, float]] = []
        for _ in range(args.rounds):  # interleaved, against drift
            before.append(run_child(baseline, "cpu"))
            after.append(run_child(ROOT / "src", "cpu"))
            plain.append(run_child(ROOT / "src", "cpu", no_jiter=True))
        memory_before: dict[str, float] = {}
        memory_after: dict[str, float] = {}
        if not args.cpu_only:
            memory_before = run_child(baseline, "memory")  # deterministic: once
            memory_after = run_child(ROOT / "src", "memory")

    def medians(runs: list[dict[str, float]]) -> dict[str, Any]:
        return {key: statistics.median(run[key] for run in runs) for key in runs[0]}

    old = {**medians(before), **memory_before}
    new = {**medians(after), **memory_after}
    no_jiter = medians(plain)
    print(
        f"== before ({args.against}) and after (this tree); CPU: {args.rounds} processes "
        "each, 15 runs in each =="
    )
    print(f"  {'':46s} {'before':>9s} {'after':>9s} {'after/before':>13s} {'no jiter':>9s}")
    for key, value in new.items():
        previous = old.get(key, float("nan"))
        extra = f"{no_jiter[key]:9.2f}" if key in no_jiter else ""
        print(f"  {key:46s} {previous:9.2f} {value:9.2f} {value / previous:12.2f}x {extra}")
    print(f"(compare took {time.monotonic() - started:.0f} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
