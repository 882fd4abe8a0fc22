"""The real JS readers through `lockgate proxy`: mutated real recordings, each read by the
npm libraries clients use, against what the gate released.

    python -m interop.readers.run [--budget N] [--seed S] [--show K] [--batch B]
                                  [--unmutated SHARE] [--corpus DIR] [--cache DIR]
                                  [--out DIR] [--no-install] [--timeout SECONDS]

Installs the pinned packages (`PACKAGES`) with npm into the cache folder (default
`~/.cache/lockgate/interop-readers`, or `$LOCKGATE_INTEROP_READERS_CACHE`; skipped when they
are there). Then builds N cases from the recordings of `../shared/real-streams` (never copied
here): each a recording with one to three mutations (`tests.proxy.differential.MUTATIONS`
and `tests.proxy.real_mutations.SHAPES`, the shapes the Python differential
runs too), or, for a share of them (`--unmutated`, 0.2), the recording as it is.
A loopback upstream serves each case's body (the case is named by the request's model); the
real `lockgate proxy --upstream` (default flags, `--json` for its log) stands in front. One
node process per batch of cases (`readers.mjs`) reads each case through the proxy with each
JS reader of its protocol — openai-node (Chat and Responses stream helpers),
@anthropic-ai/sdk (`messages.stream`), @google/genai (`generateContentStream`), and the AI
SDK's `streamText` with tools that `execute` — and, for an unmutated case, directly from the
upstream too.

What the gate released is computed by lockgate's own engine on the same bytes with the
request the upstream received through the proxy (`tests.proxy.support.gate_stream`, the
proxy's default gating), and checked against the proxy's log (its outcome per request).

A **finding**: a reader that ended with, executed, or held in its snapshot when it raised, a
call whose name or arguments differ from every call the gate released (every call of a
refused stream); a released custom tool call whose input is outside the regex grammar its
tool declares; an unmutated recording the gate accepted, read otherwise through the proxy
than directly. Each is classed as one of the known kinds or NEW; every case with a finding
is written to `OUT/cases/` (request, body, what was read) for reproduction.

Prints the totals and the first K findings; exit 1 on any finding, 0 on none, 2 on bad
arguments, a missing node or npm, or an installation that failed (one line).

Here: the installation, the loopback upstream, the node batches through the proxy, the report
and the command line; the cases and their jobs in `cases`, the judging in `judge`.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import math
import os
import re
import shutil
import signal
import sys
import tempfile
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from aiohttp import ClientConnectionResetError, web
from tests.proxy.differential import Arguments, recordings_or_exit
from tests.proxy.support import aiohttp_loopback

from interop.agents.agents import Installation
from interop.agents.install import UsageError, npm_install, results_folder
from interop.agents.processes import launch_proxy

from .cases import (
    READER_NAMES,
    READERS,
    UNMUTATED,
    Case,
    Job,
    Served,
    jobs_for,
    known_kind,
    make_cases,
)
from .judge import Totals, judge

__all__ = ["PACKAGES", "READERS", "main"]

# The audit's versions where the registry has them (openai 6.49.0, @anthropic-ai/sdk 1.16.0,
# @google/genai 1.30.0: the sources `tests/proxy/readers/` ports), the AI SDK as
# interop/agents pins it, @ai-sdk/google the registry's latest on 2026-12-04.
PACKAGES: dict[str, str] = {
    "openai": "6.49.0",
    "@anthropic-ai/sdk": "1.16.0",
    "@google/genai": "1.30.0",
    "ai": "7.0.173",
    "@ai-sdk/openai": "4.0.118",
    "@ai-sdk/anthropic": "4.0.105",
    "@ai-sdk/google": "4.0.121",
}
SCRIPT = "readers.mjs"


# --- installation ----------------------------------------------------------------------------


def default_cache() -> Path:
    configured = os.environ.get("LOCKGATE_INTEROP_READERS_CACHE")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "lockgate" / "interop-readers"


def install(cache: Path, allowed: bool) -> Path:
    """The pinned packages in `cache` (npm install when one is missing), the harness beside
    them; the folder."""
    if shutil.which("node") is None:
        raise UsageError("node is not on PATH: install Node.js 20+ with npm first")
    npm_install(Installation(cache, PACKAGES), allowed, timeout=600)
    shutil.copyfile(Path(__file__).with_name(SCRIPT), cache / SCRIPT)
    return cache


# --- the loopback upstream -------------------------------------------------------------------

_MODEL_IN_PATH = re.compile(r"/models/([^/:]+):")


@dataclass(slots=True)
class Upstream:
    """Serves the body of the case the model names; keeps every request it got, by model."""

    bodies: dict[str, bytes]
    requests: dict[str, dict[str, Any]] = field(default_factory=dict)
    unknown: int = 0

    async def handle(self, request: web.Request) -> web.StreamResponse:
        raw = await request.read()
        try:
            payload = json.loads(raw) if raw else {}
        except ValueError:
            payload = {}
        model = payload.get("model") if isinstance(payload, dict) else None
        match = _MODEL_IN_PATH.search(request.path)
        if match is not None:
            model = match.group(1)
        body = self.bodies.get(model) if isinstance(model, str) else None
        if body is None or not isinstance(payload, dict):
            self.unknown += 1
            return web.json_response({"error": {"message": "no such case"}}, status=404)
        self.requests.setdefault(str(model), payload)
        response = web.StreamResponse(status=200, headers={"content-type": "text/event-stream"})
        with contextlib.suppress(ConnectionError, ClientConnectionResetError):
            await response.prepare(request)
            third = max(1, len(body) // 3)
            for start in range(0, len(body), third):
                await response.write(body[start : start + third])
            await response.write_eof()
        return response


# --- the readers read the cases ---------------------------------------------------------------


def _node_job(job: Job, case: Case, proxy: str, upstream: str) -> dict[str, Any]:
    return {
        "key": job.model,
        "reader": job.reader,
        "protocol": case.recording.protocol,
        "base": proxy if job.path == "proxy" else upstream,
        "model": job.model,
        "request": case.request,
    }


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


async def run_batch(
    cache: Path, jobs: list[dict[str, Any]], folder: Path, limit: float
) -> tuple[dict[str, dict[str, Any]], str | None]:
    """One node process reads `jobs`: the result line per key, and a problem (one line) when
    the process failed or ran out of `limit` seconds (its process group killed)."""
    jobs_path, results_path = folder / "jobs.json", folder / "results.jsonl"
    jobs_path.write_text(json.dumps(jobs))
    node = shutil.which("node") or "node"
    process = await asyncio.create_subprocess_exec(
        node,
        str(cache / SCRIPT),
        str(jobs_path),
        str(results_path),
        cwd=cache,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.DEVNULL,
        stderr=asyncio.subprocess.PIPE,
        start_new_session=True,
    )
    problem = None
    try:
        _, stderr = await asyncio.wait_for(process.communicate(), limit)
        if process.returncode != 0:
            tail = stderr.decode(errors="replace").strip().splitlines()[-1:]
            problem = f"node exited {process.returncode}: {' '.join(tail)}"
    except TimeoutError:
        problem = f"node ran out of {limit:.0f} s"
        _kill_group(process.pid, signal.SIGTERM)
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(process.wait(), 3)
    finally:
        _kill_group(process.pid, signal.SIGKILL)
        if process.returncode is None:
            await process.wait()
    results: dict[str, dict[str, Any]] = {}
    with contextlib.suppress(OSError):
        # "\n" only: JSON.stringify leaves U+2028, U+0085 and the like unescaped, and
        # str.splitlines would split a line on them.
        for line in results_path.read_text(errors="replace").split("\n"):
            with contextlib.suppress(ValueError):
                value = json.loads(line)
                if isinstance(value, dict) and isinstance(value.get("key"), str):
                    results[value["key"]] = value
    return results, problem


async def serve(cases: Sequence[Case], cache: Path, batch: int, limit: float) -> Served:
    """Every job of every case through the proxy (and direct for the unmutated ones)."""
    all_jobs = [(job, case) for case in cases for job in jobs_for(case)]
    upstream = Upstream({job.model: case.body for job, case in all_jobs})
    results: dict[str, dict[str, Any]] = {}
    problems: list[str] = []
    proxy = None
    async with aiohttp_loopback(upstream.handle) as upstream_url:
        try:
            proxy = await launch_proxy(["--upstream", upstream_url, "--port", "0", "--json"])
            with tempfile.TemporaryDirectory(prefix="lockgate-readers-") as temporary:
                for start in range(0, len(cases), batch):
                    chosen = cases[start : start + batch]
                    jobs = [
                        _node_job(j, c, proxy.url, upstream_url)
                        for c in chosen
                        for j in jobs_for(c)
                    ]
                    folder = Path(temporary) / f"batch-{start}"
                    folder.mkdir()
                    found, problem = await run_batch(cache, jobs, folder, limit + 15 * len(jobs))
                    results.update(found)
                    if problem is not None:
                        problems.append(f"cases {start}-{start + len(chosen) - 1}: {problem}")
                    done = min(len(cases), start + batch)
                    print(f"  read {done}/{len(cases)} cases", flush=True)
        finally:
            if proxy is not None:
                await proxy.stop()
    log = [] if proxy is None else list(proxy.lines)
    return Served(results, upstream.requests, log, problems, upstream.unknown)


# --- the report ------------------------------------------------------------------------------


def report(
    totals: Totals,
    cases: Sequence[Case],
    seed: int,
    budget: int,
    show: int,
    served: Served,
    broken: Sequence[str],
    out: Path | None,
) -> None:
    protocols = Counter(case.recording.protocol for case in cases)
    print(f"JS readers through lockgate proxy: seed {seed}, budget {budget}")
    print(f"versions: {', '.join(f'{p} {v}' for p, v in PACKAGES.items())}")
    print(
        f"cases: {totals.cases} ({', '.join(f'{p} {n}' for p, n in sorted(protocols.items()))}; "
        f"{totals.by_mutation[UNMUTATED]} unmutated)"
    )
    print(f"reads: {totals.read} of {totals.jobs} (readers: {', '.join(READER_NAMES)})")
    print(f"the gate's decisions (proxy reads): {dict(sorted(totals.decisions.items()))}")
    print(f"reads that ended in an error, per reader: {dict(sorted(totals.reader_errors.items()))}")
    print(
        "released calls a reader ended without (not findings), per reader: "
        f"{dict(sorted(totals.missed.items()))}"
    )
    silent = ", ".join(
        f"{reader} {totals.silent_refusals[reader]} of {totals.refused_reads[reader]}"
        for reader in READER_NAMES
        if totals.refused_reads[reader]
    )
    print(f"refused streams a reader ended without an error (not findings): {silent}")
    if totals.missed_by_mutation:
        print("reads that ended without a released call, per reader x mutation (not findings):")
        for (reader, name), count in sorted(totals.missed_by_mutation.items()):
            known = known_kind(name)
            note = f" (known: {known})" if known else ""
            print(f"  {reader} x {name}: {count}{note}")
    for line in [*served.problems, *totals.log_mismatches, *broken]:
        print(f"problem: {line}")
    if served.unknown:
        print(f"problem: the upstream got {served.unknown} requests it had no case for")
    kinds = sorted({f.kind for f in totals.findings})
    print(f"findings: {len(totals.findings)}")
    print("findings per reader x kind:")
    for reader in READER_NAMES:
        mine = Counter(f.kind for f in totals.findings if f.reader == reader)
        shown = ", ".join(f"{kind}: {mine[kind]}" for kind in kinds if mine[kind]) or "none"
        print(f"  {reader}: {sum(mine.values())} ({shown})")
    print("per mutation (cases, cases with a finding):")
    with_finding: Counter[str] = Counter()
    for number in {f.case.number for f in totals.findings}:
        for name in cases[number].labels or (UNMUTATED,):
            with_finding[name] += 1
    for name in sorted(totals.by_mutation):
        print(f"  {name}: {totals.by_mutation[name]}, {with_finding[name]}")
    for finding in totals.findings[:show]:
        case = finding.case
        print(
            f"finding [{finding.kind}] case {case.number}: {case.recording.name} "
            f"[{case.label}]: {finding.text}"
        )
    if out is not None:
        (out / "proxy.log").write_text("".join(line + "\n" for line in served.proxy_log))
        with (out / "reads.jsonl").open("w") as sink:
            for case in cases:
                for job in jobs_for(case):
                    read = {
                        "case": case.number,
                        "recording": case.recording.name,
                        "mutations": list(case.labels),
                        "reader": job.reader,
                        "path": job.path,
                        "gate": totals.released.get(job.model),
                        "result": served.results.get(job.model),
                    }
                    sink.write(json.dumps(read) + "\n")
        print(f"every read written to {out / 'reads.jsonl'}")
    if out is not None and totals.findings:
        folder = out / "cases"
        folder.mkdir(parents=True, exist_ok=True)
        for number in sorted({f.case.number for f in totals.findings}):
            case = cases[number]
            record = {
                "recording": case.recording.name,
                "protocol": case.recording.protocol,
                "mutations": list(case.labels),
                "request": case.request,
                "body_base64": base64.b64encode(case.body).decode(),
                "findings": [
                    {"reader": f.reader, "kind": f.kind, "text": f.text}
                    for f in totals.findings
                    if f.case.number == number
                ],
                "results": {job.model: served.results.get(job.model) for job in jobs_for(case)},
            }
            (folder / f"case-{number}.json").write_text(json.dumps(record, indent=1))
        print(f"cases with a finding written to {folder}")


def main(argv: Sequence[str] | None = None) -> int:
    parser = Arguments(
        prog="python -m interop.readers.run",
        description="Mutated real recordings through lockgate proxy, read by real JS libraries.",
    )
    parser.common(200, 0, 20, "cases (default 200)", "findings")
    parser.add_argument("--batch", type=int, default=100, help="cases per node process")
    parser.add_argument("--unmutated", type=float, default=0.2, help="share of unmutated cases")
    parser.add_argument(
        "--timeout", type=float, default=60.0, help="seconds per node batch, plus 15 per read"
    )
    parser.add_argument("--cache", type=Path, default=None, help="the npm folder")
    parser.add_argument("--out", type=Path, default=None, help="where cases with a finding go")
    parser.add_argument("--no-install", action="store_true", help="never run npm")
    args = parser.parse_args(argv)
    if args.budget < 1 or args.show < 0 or args.batch < 1 or args.timeout <= 0:
        parser.error(
            "--budget and --batch must be at least 1, --show not negative, --timeout positive"
        )
    if not 0.0 <= args.unmutated <= 1.0 or math.isnan(args.unmutated):
        parser.error("--unmutated must be between 0 and 1")
    recordings = recordings_or_exit(args.corpus)
    if isinstance(recordings, int):
        return recordings
    try:
        cache = install((args.cache or default_cache()).resolve(), not args.no_install)
        out = results_folder(cache, args.out)
    except UsageError as exc:
        print(f"error: {exc}")
        return 2
    except OSError as exc:
        print(f"error: {exc.strerror or exc}: {exc.filename or ''}")
        return 2
    cases, broken = make_cases(recordings, args.budget, args.seed, args.unmutated)
    print(f"{len(cases)} cases from {len(recordings)} recordings; reading them", flush=True)
    try:
        served = asyncio.run(serve(cases, cache, args.batch, args.timeout))
    except (OSError, RuntimeError) as exc:
        print(f"error: {exc}")
        return 2
    except KeyboardInterrupt:
        print("interrupted")
        return 2
    totals = judge(cases, served)
    report(totals, cases, args.seed, args.budget, args.show, served, broken, out)
    failed = totals.findings or served.problems or totals.log_mismatches or broken
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
