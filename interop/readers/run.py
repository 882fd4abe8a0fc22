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
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import json
import math
import os
import random
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
from tests.proxy.differential import MUTATIONS, Arguments, Recording, recordings_or_exit
from tests.proxy.real_mutations import SHAPES, custom_grammar_violation
from tests.proxy.support import aiohttp_loopback, gate_stream, run

from interop.agents.agents import Installation
from interop.agents.install import UsageError, npm_install, results_folder
from interop.agents.processes import launch_proxy
from lockgate.conversation import ToolCall
from lockgate.proxy import Accepted, GatingOptions

__all__ = ["PACKAGES", "READERS", "main"]

# The audit's versions where the registry has them (openai 6.49.0, @anthropic-ai/sdk 1.16.0,
# @google/genai 1.30.0: the sources `tests/proxy/readers.py` ports), the AI SDK as
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
READERS: dict[str, tuple[str, ...]] = {
    "chat": ("openai-node", "ai-sdk"),
    "responses": ("openai-node", "ai-sdk"),
    "anthropic": ("anthropic-node", "ai-sdk"),
    "gemini": ("genai-node", "ai-sdk"),
}
READER_NAMES = ("openai-node", "anthropic-node", "genai-node", "ai-sdk")
UNMUTATED = "unmutated"
NEW = "NEW"
# The kinds known when this was written (issue 27), each recognised by the mutations it needs
# (a shape's name, or its name and variant: `json in arguments: nan`) and the readers it shows
# in; anything else is NEW.
KNOWN: tuple[tuple[str, tuple[str, ...], frozenset[str]], ...] = (
    (
        "NaN: the AI SDK drops the chunk",
        ("json in arguments: nan", "json in arguments: infinity"),
        frozenset({"ai-sdk"}),
    ),
    (
        "Chat index null: openai-node drops the fragment",
        ("chat index: null",),
        frozenset({"openai-node"}),
    ),
    (
        "Anthropic start input: the SDK ends with other input",
        ("anthropic start input",),
        frozenset(READER_NAMES),
    ),
    ("Responses call without output_item.done", ("responses no done",), frozenset(READER_NAMES)),
)
GRAMMAR = "custom tool grammar not checked"
DIRECT = "unmutated: read otherwise through the proxy than directly"


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


# --- the cases -------------------------------------------------------------------------------


@dataclass(slots=True)
class Case:
    number: int
    recording: Recording
    labels: tuple[str, ...]  # the mutations applied, a shape's with its variant (empty: unmutated)
    request: dict[str, Any]
    body: bytes

    @property
    def label(self) -> str:
        return " + ".join(self.labels) or UNMUTATED


def mutate(
    name: str, rng: random.Random, protocol: str, request: dict[str, Any], body: bytes
) -> tuple[dict[str, Any], bytes, str] | None:
    """A framing mutation or a shape applied: the request, the body, and the label (a shape's
    is its name and variant); None where it does not apply."""
    if name in SHAPES:
        shaped = SHAPES[name](rng, protocol, body, request)
        if shaped is None:
            return None
        body, request, variant = shaped
        return request, body, f"{name}: {variant}"
    changed = MUTATIONS[name](rng, protocol, body)
    return None if changed is None else (request, changed, name)


def _matches(label: str, mutation: str) -> bool:
    """Whether a case's label is `mutation` (a name, or a name and variant)."""
    return label == mutation or label.startswith(mutation + ": ")


def known_kind(label: str) -> str | None:
    return next((kind for kind, names, _ in KNOWN if any(_matches(label, n) for n in names)), None)


def make_cases(
    recordings: Sequence[Recording], budget: int, seed: int, unmutated: float
) -> tuple[list[Case], list[str]]:
    """`budget` cases (the draws of `seed`); the mutations that raised, as lines."""
    rng = random.Random(seed)
    old, new = sorted(MUTATIONS), sorted(SHAPES)
    cases: list[Case] = []
    broken: list[str] = []
    attempts = 0
    while len(cases) < budget and attempts < budget * 50:
        attempts += 1
        recording = rng.choice(recordings)
        request, body = dict(recording.request), recording.body
        applied: list[str] = []
        if rng.random() >= unmutated:
            for _ in range(rng.choice([1, 1, 1, 2, 3])):
                name = rng.choice(new if rng.random() < 0.5 else old)
                try:
                    changed = mutate(name, rng, recording.protocol, request, body)
                except Exception as exc:  # the mutation's own bug: reported, never a traceback
                    broken.append(f"{recording.name} [{name}]: the mutation raised {exc!r}")
                    continue
                if changed is not None:
                    request, body, label = changed
                    applied.append(label)
            if not applied:
                continue
        cases.append(Case(len(cases), recording, tuple(applied), request, body))
    return cases, broken


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


# --- the jobs and what the readers read ------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Job:
    case: int
    reader: str
    path: str  # "proxy" or "direct"

    @property
    def model(self) -> str:
        return f"lgcase-{self.case}-{READER_NAMES.index(self.reader)}-{self.path}"


def jobs_for(case: Case) -> list[Job]:
    paths = ("proxy", "direct") if not case.labels else ("proxy",)
    return [
        Job(case.number, reader, path)
        for reader in READERS[case.recording.protocol]
        for path in paths
    ]


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


@dataclass(slots=True)
class Served:
    results: dict[str, dict[str, Any]]
    requests: dict[str, dict[str, Any]]
    proxy_log: list[str]
    problems: list[str]
    unknown: int


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


# --- judging ---------------------------------------------------------------------------------


class _Reads:
    def __init__(self, body: bytes) -> None:
        self.body = body

    async def __aiter__(self) -> Any:
        yield self.body

    async def aclose(self) -> None:
        pass


GATING = GatingOptions(
    validate_schemas=True, idle_timeout=3600.0, deadline=3600.0, keepalive_interval=3600.0
)


async def _decide(
    protocol: str, request: dict[str, Any], body: bytes
) -> tuple[str, tuple[ToolCall, ...] | None]:
    try:
        gated = await gate_stream(protocol, request, _Reads(body), GATING)
    except Exception as exc:  # the engine refuses, it never raises: a bug, shown
        return f"raised {exc!r}", None
    if isinstance(gated.outcome, Accepted):
        return "passed", gated.outcome.decision.message.tool_calls
    return ("withheld" if gated.outcome.refusal.withheld else "refused"), None


def _canonical(value: object) -> str:
    return json.dumps(value, sort_keys=True, ensure_ascii=True, allow_nan=True)


def _reader_value(call: dict[str, Any]) -> object:
    text = call.get("arguments")
    if not isinstance(text, str):
        return None
    try:
        return json.loads(text)
    except ValueError:
        return ("not JSON", text)


def matches(call: dict[str, Any], released: ToolCall) -> bool:
    if call.get("name") != released.name:
        return False
    if call.get("kind") == "custom":
        return call.get("raw") == released.arguments_json
    return _canonical(_reader_value(call)) == _canonical(released.arguments)


def describe_call(call: dict[str, Any]) -> str:
    namespace = f"{call['namespace']}." if call.get("namespace") else ""
    shown = call.get("raw") if call.get("kind") == "custom" else call.get("arguments")
    return f"{namespace}{call.get('name')}({_short(str(shown))})"


def describe_released(call: ToolCall) -> str:
    return f"{call.name}({_short(call.arguments_json or _canonical(call.arguments))})"


def _short(text: str, limit: int = 160) -> str:
    text = text.replace("\n", "\\n")
    return text if len(text) <= limit else text[: limit - 1] + "…"


def classify(case: Case, reader: str) -> str:
    for kind, names, readers in KNOWN:
        if reader in readers and any(_matches(label, n) for label in case.labels for n in names):
            return f"known: {kind}"
    suspects = [label for label in case.labels if label.split(": ")[0] in SHAPES]
    suspects = suspects or list(case.labels)
    return f"{NEW} ({' + '.join(suspects) or UNMUTATED})"


@dataclass(slots=True)
class Finding:
    case: Case
    reader: str
    kind: str
    text: str


@dataclass(slots=True)
class Totals:
    cases: int = 0
    jobs: int = 0
    read: int = 0  # jobs with a result line
    decisions: Counter[str] = field(default_factory=Counter)
    reader_errors: Counter[str] = field(default_factory=Counter)
    by_mutation: Counter[str] = field(default_factory=Counter)
    findings: list[Finding] = field(default_factory=list)
    log_mismatches: list[str] = field(default_factory=list)
    released: dict[str, str] = field(default_factory=dict)  # per proxy read: the decision
    missed: Counter[str] = field(default_factory=Counter)  # per reader: released calls not read
    missed_by_mutation: Counter[tuple[str, str]] = field(default_factory=Counter)  # reads
    refused_reads: Counter[str] = field(default_factory=Counter)  # per reader
    silent_refusals: Counter[str] = field(default_factory=Counter)  # refused, read without error


def _proxy_outcomes(lines: Sequence[str]) -> list[str]:
    found = []
    for line in lines:
        with contextlib.suppress(ValueError):
            record = json.loads(line)
            if isinstance(record, dict) and record.get("event") == "request":
                found.append(str(record.get("outcome")))
    return found


def judge(cases: Sequence[Case], served: Served) -> Totals:
    totals = Totals(cases=len(cases))
    decided: list[tuple[str, str]] = []  # (case and reader, the engine's decision)
    for case in cases:
        for name in case.labels or (UNMUTATED,):
            totals.by_mutation[name] += 1
        for job in jobs_for(case):
            totals.jobs += 1
            result = served.results.get(job.model)
            if result is None:
                continue
            totals.read += 1
            if result.get("error"):
                totals.reader_errors[job.reader] += 1
            if job.path != "proxy":
                continue
            request = served.requests.get(job.model)
            if request is None:
                continue  # the reader sent nothing (it raised before): nothing to compare
            outcome, released = run(_decide(case.recording.protocol, request, case.body))
            decided.append((f"case {case.number} {job.reader}", outcome))
            totals.released[job.model] = outcome + (
                "" if released is None else ": " + ", ".join(describe_released(c) for c in released)
            )
            totals.decisions[outcome] += 1
            _compare(totals, case, job, result, request, released, outcome)
            if not case.labels and released is not None:
                _compare_direct(
                    totals,
                    case,
                    job,
                    result,
                    served.results.get(Job(job.case, job.reader, "direct").model),
                )
    # node reads one case after another, so the proxy logs the requests in the order they
    # were sent; those it rejected before going upstream never reached the upstream.
    logged = [o for o in _proxy_outcomes(served.proxy_log) if o != "rejected"]
    if len(logged) == len(decided):
        for (label, outcome), proxy_said in zip(decided, logged, strict=True):
            if outcome != proxy_said:
                totals.log_mismatches.append(
                    f"{label}: the proxy logged {proxy_said}, the engine decided {outcome}"
                )
    else:
        totals.log_mismatches.append(
            f"the proxy logged {len(logged)} judged requests, the upstream saw {len(decided)}: "
            f"{dict(Counter(logged))} against {dict(Counter(o for _, o in decided))}"
        )
    return totals


def _compare(
    totals: Totals,
    case: Case,
    job: Job,
    result: dict[str, Any],
    request: dict[str, Any],
    released: tuple[ToolCall, ...] | None,
    outcome: str,
) -> None:
    wrong: list[str] = []
    grammar: list[str] = []
    # What a reader held when it raised counts only in a refused stream (any call there is
    # one the gate withheld); in an accepted one it is a partial state no client acts on.
    wheres = ("calls", "executed") if released is not None else ("calls", "executed", "seen")
    for where in wheres:
        for call in result.get(where) or []:
            if not isinstance(call, dict):
                continue
            if released is None or not any(matches(call, kept) for kept in released):
                wrong.append(f"{where} {describe_call(call)}")
            elif call.get("kind") == "custom" and custom_grammar_violation(
                request, str(call.get("name")), str(call.get("raw"))
            ):
                grammar.append(f"{where} {describe_call(call)}")
    if released is None:
        totals.refused_reads[job.reader] += 1
        if not result.get("error"):
            totals.silent_refusals[job.reader] += 1
    if released is not None and not result.get("error"):
        ended = [c for c in (result.get("calls") or []) if isinstance(c, dict)]
        missed = sum(1 for kept in released if not any(matches(c, kept) for c in ended))
        totals.missed[job.reader] += missed
        if missed:
            for name in case.labels or (UNMUTATED,):
                totals.missed_by_mutation[(job.reader, name)] += 1
    gate = (
        "refused"
        if released is None
        else "released " + (", ".join(describe_released(c) for c in released) or "no call")
    )
    if wrong:
        text = f"{job.reader} read {'; '.join(wrong)} — the gate ({outcome}) {gate}"
        totals.findings.append(Finding(case, job.reader, classify(case, job.reader), text))
    if grammar:
        text = f"{job.reader} read {'; '.join(grammar)}: outside its tool's regex grammar"
        totals.findings.append(Finding(case, job.reader, f"known: {GRAMMAR}", text))


def _reading(result: dict[str, Any] | None) -> tuple[object, ...]:
    if result is None:
        return ("no result",)
    calls = sorted(
        _canonical([c.get("name"), _reader_value(c) if c.get("kind") != "custom" else c.get("raw")])
        for c in (result.get("calls") or []) + (result.get("executed") or [])
        if isinstance(c, dict)
    )
    return (tuple(calls), bool(result.get("error")))


def _compare_direct(
    totals: Totals, case: Case, job: Job, proxied: dict[str, Any], direct: dict[str, Any] | None
) -> None:
    if _reading(proxied) == _reading(direct):
        return
    if direct is not None and not (direct.get("calls") or direct.get("executed")):
        # Directly the reader ended with no call (Chat's index-less calls, which openai-node
        # and the AI SDK cannot read); through the proxy it reads the canonical form
        # (docs/wire/chat.md §5), and what it read is checked against the released calls.
        return

    def show(result: dict[str, Any] | None) -> str:
        if result is None:
            return "no result"
        calls = [describe_call(c) for c in (result.get("calls") or []) if isinstance(c, dict)]
        error = f", error {_short(str(result['error']), 120)}" if result.get("error") else ""
        return f"calls [{', '.join(calls)}]{error}"

    text = f"{job.reader}: through the proxy {show(proxied)}; directly {show(direct)}"
    totals.findings.append(Finding(case, job.reader, DIRECT, text))


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
