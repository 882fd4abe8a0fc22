"""Run the real agents against the hostile server, directly and through `lockgate proxy`.

    python -m interop.agents.run [--agents codex,claude,gemini,ai-sdk] [--via direct|proxy|both]
                                 [--proxy-args "--validate-schemas"] [--outcomes a,b,…]
                                 [--timeout 90] [--pause 0.5] [--jobs 2]
                                 [--cache DIR] [--out DIR] [--no-install] [--keep]

Installs the pinned agents (`agents.PACKAGES`) with npm into the cache folder (default
`~/.cache/lockgate/interop-agents`, or `$LOCKGATE_INTEROP_CACHE`; skipped when they are
there), then runs every agent x outcome (`complete`, the eight breaks and the four opening
faults; `--outcomes gate`, `opening`, `grammar` (a Codex custom shell's grammar broken) or
`eventstream` (a bad CRC, a cut message, `malformed_tool_use`: run only for the agents that
speak the AWS event stream) for one group) x path: `direct` (the agent talks to
the hostile server) and `proxy` (`lockgate proxy --upstream SERVER`, its default flags plus
`--proxy-args`, in between). Each run has its own server, its own proxy, its own temporary
HOME and work folder, a placeholder key, and a timeout; the agent's process group is killed
when it runs out.

Prints one line per run, then the tables: for each agent and path, how many of the broken
responses ran the shell command (the marker file exists) and whether the complete one did;
and for each opening fault run, whether the session got past it (the command ran, exit 0),
the requests the server saw, and through the proxy the requests the agent sent it and the
proxy's retries (with `--json` among the proxy args: its human log line has no retries).
Writes `results.json` (per run: the marker, exit, time, the requests the server saw, the
agent's last lines, the proxy's log lines), `report.md` (the tables and every run's last
lines) and `requests/` (every request, credentials masked) into the output folder (default
`CACHE/results/<UTC time>`). Exit 0 when every run ran; 2 on a usage or installation error.
Nothing here reaches beyond loopback except npm's install.

Here: the runs and their tables and command line; the installation in `install`, the agent's
and the proxy's processes in `processes`.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import re
import shlex
import shutil
import signal
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .agents import AGENTS, GROUPS, PACKAGES, Agent, Installation, RunPaths
from .hostile import responder_for
from .install import UsageError, default_cache, install, prepare
from .outcomes import BREAKS, EVENTSTREAM_BREAKS, OPENING_FAULTS, Outcome
from .outcomes import GROUPS as OUTCOME_GROUPS
from .processes import (
    ProxyProcess,
    describe_lockgate,
    last_lines,
    launch_proxy,
    lockgate_source,
    proxy_counts,
    run_agent,
)
from .server import HostileServer, Responder

# (UsageError, default_cache, install, last_lines, launch_proxy, lockgate_source, prepare
# and run_agent are here for the runners beside this one: `frames`, `team`.)
__all__ = [
    "PATHS",
    "RunResult",
    "Settings",
    "UsageError",
    "default_cache",
    "gather_interruptibly",
    "install",
    "last_lines",
    "launch_proxy",
    "lockgate_source",
    "main",
    "names",
    "prepare",
    "run_agent",
    "run_case",
    "run_one",
]

T = TypeVar("T")
PLACEHOLDER_KEY = "sk-lockgate-interop-placeholder"
PATHS = ("direct", "proxy")
_LOCKGATE_REASON = re.compile(r"lockgate (?:withheld|refused)")


@dataclass(frozen=True)
class RunResult:
    agent: str
    via: str
    outcome: str
    ran: bool  # the marker file exists: the shell command ran
    exit_code: int | None
    timed_out: bool
    seconds: float
    model_requests: int
    hostile_answers: list[str] = field(default_factory=list)
    websocket_attempts: int = 0
    requests: list[str] = field(default_factory=list)  # "METHOD PATH -> reply"
    last_lines: list[str] = field(default_factory=list)
    proxy_log: list[str] = field(default_factory=list)
    error: str | None = None
    showed_lockgate_reason: bool = False  # "lockgate withheld|refused" anywhere in its output
    proxy_requests: int | None = None  # the requests the agent sent the proxy (None: direct)
    proxy_retries: int | None = None  # the proxy's retries upstream (None: not in its log)


# --- one run ---------------------------------------------------------------------------------


async def _start_proxy(
    upstream: str, extra: Sequence[str], lockgate_src: Path | None = None
) -> ProxyProcess:
    return await launch_proxy(["--upstream", upstream, "--port", "0", *extra], lockgate_src)


@dataclass(frozen=True)
class Settings:
    installation: Installation
    out: Path
    timeout: float
    pause: float
    proxy_args: tuple[str, ...]
    websocket_status: int
    keep: bool
    lockgate_src: Path | None = None
    proxy_description: str = ""
    functions_namespace: bool = False


async def run_one(agent: Agent, outcome: Outcome, via: str, settings: Settings) -> RunResult:
    """One agent against one hostile response, on one path."""

    def responder(command: str) -> Responder:
        return responder_for(outcome, command, settings.pause, settings.functions_namespace)

    return await run_case(agent, outcome.value, responder, via, settings)


async def run_case(
    agent: Agent,
    case: str,
    responder_for: Callable[[str], Responder],
    via: str,
    settings: Settings,
) -> RunResult:
    """One agent against the server `responder_for(command)` answers with (`command`
    creates the marker; the responder labels its answers to the first turn `case…`)."""
    root = Path(tempfile.mkdtemp(prefix=f"lockgate-agents-{agent.name}-{case}-{via}-"))
    try:
        return await _run_in(root, agent, case, responder_for, via, settings)
    finally:
        if not settings.keep:
            shutil.rmtree(root, ignore_errors=True)


async def _run_in(
    root: Path,
    agent: Agent,
    case: str,
    responder_for: Callable[[str], Responder],
    via: str,
    settings: Settings,
) -> RunResult:
    paths = RunPaths(root)
    paths.make()
    responder = responder_for(f"touch {paths.marker}")
    started = time.monotonic()
    exit_code: int | None = None
    timed_out = False
    proxy: ProxyProcess | None = None
    error: str | None = None
    output = root / "agent-output.txt"
    server = HostileServer(responder, settings.websocket_status, secrets=(PLACEHOLDER_KEY,))
    try:
        async with server:
            base = server.url
            if via == "proxy":
                proxy = await _start_proxy(server.url, settings.proxy_args, settings.lockgate_src)
                base = proxy.url
            invocation = agent.invocation(settings.installation, paths, base, PLACEHOLDER_KEY)
            started = time.monotonic()
            exit_code, timed_out = await run_agent(invocation, output, settings.timeout)
    except (OSError, RuntimeError) as exc:
        error = str(exc)
    finally:
        if proxy is not None:
            await proxy.stop()
    seconds = time.monotonic() - started
    ran = paths.marker.exists()
    try:
        printed = output.read_text(errors="replace")
    except OSError:
        printed = ""
    recording = server.recording()
    proxy_log = [] if proxy is None else list(proxy.lines)
    proxy_requests, proxy_retries = proxy_counts(proxy_log)
    requests_dir = settings.out / "requests"
    requests_dir.mkdir(parents=True, exist_ok=True)
    name = f"{agent.name}-{via}-{case}.json"
    (requests_dir / name).write_text(json.dumps(recording, indent=1))
    result = RunResult(
        agent=agent.name,
        via=via,
        outcome=case,
        ran=ran,
        exit_code=exit_code,
        timed_out=timed_out,
        seconds=round(seconds, 1),
        model_requests=sum(1 for request in server.requests if request.protocol is not None),
        hostile_answers=[
            request.reply
            for request in server.requests
            if request.protocol is not None and request.reply.startswith(case)
        ],
        websocket_attempts=sum(  # through the proxy the Upgrade header may be gone
            1
            for request in server.requests
            if request.method == "GET" and request.path.rstrip("/").endswith("/responses")
        ),
        requests=[f"{r.method} {r.path} -> {r.reply}" for r in server.requests],
        last_lines=last_lines(printed),
        proxy_log=proxy_log,
        error=error,
        showed_lockgate_reason=_LOCKGATE_REASON.search(printed) is not None,
        proxy_requests=None if proxy is None else proxy_requests,
        proxy_retries=None if proxy is None else proxy_retries,
    )
    return result


# --- the tables ------------------------------------------------------------------------------


def _ran_label(result: RunResult | None) -> str:
    if result is None:
        return ""
    if result.error is not None:
        return "error"
    label = "RAN" if result.ran else "-"
    return label + (" (t)" if result.timed_out else "")


# the breaks a table counts: the eight of the `gate` group and, where it was run, the grammar
TABLED_BREAKS = (*BREAKS, Outcome.SECOND_CALL_UNGRAMMATICAL, *EVENTSTREAM_BREAKS)


def summary_table(results: Sequence[RunResult], agents: Sequence[str]) -> str:
    """Per agent and path: the broken responses that ran the command, and the complete one
    (the opening faults have their own table)."""
    breaks = {o.value for o in TABLED_BREAKS}
    lines = [
        "| agent | path | broken responses that ran the command | which | complete response |",
        "| --- | --- | --- | --- | --- |",
    ]
    for agent in agents:
        for via in PATHS:
            runs = [r for r in results if r.agent == agent and r.via == via]
            if not any(r.outcome in breaks or r.outcome == Outcome.COMPLETE.value for r in runs):
                continue
            broken = [r for r in runs if r.outcome in breaks]
            ran = [r.outcome for r in broken if r.ran]
            complete = [r for r in runs if r.outcome == Outcome.COMPLETE.value]
            if not complete:
                complete_label = "not run"
            elif complete[0].ran:
                complete_label = "ran it"
            else:
                complete_label = "**did not run it**"
            which = ", ".join(ran) if ran else "none"
            lines.append(
                f"| {agent} | {via} | {len(ran)} of {len(broken)} | {which} | {complete_label} |"
            )
    return "\n".join(lines)


def outcome_table(results: Sequence[RunResult], agents: Sequence[str]) -> str:
    """Every run of the complete response and the breaks: RAN (the marker exists) or -, (t)
    when the agent ran out of time."""
    outcomes = [
        o.value
        for o in (Outcome.COMPLETE, *TABLED_BREAKS)
        if any(r.outcome == o.value for r in results)
    ]
    if not outcomes:
        return ""
    lines = [
        "| agent | path | " + " | ".join(outcomes) + " |",
        "| --- | --- |" + " --- |" * len(outcomes),
    ]
    for agent in agents:
        for via in PATHS:
            runs = {r.outcome: r for r in results if r.agent == agent and r.via == via}
            if runs:
                cells = " | ".join(_ran_label(runs.get(outcome)) for outcome in outcomes)
                lines.append(f"| {agent} | {via} | {cells} |")
    return "\n".join(lines)


def _opening_cell(value: int | None) -> str:
    return "" if value is None else str(value)


def opening_table(results: Sequence[RunResult], agents: Sequence[str]) -> str:
    """Every run of an opening fault: whether the session got past it (the command ran, exit
    0), the model requests the server saw (in brackets those of the first turn: the fault and
    its retries), through the proxy the requests the agent sent it and the proxy's retries,
    the seconds, the agent's last line."""
    faults = [o.value for o in OPENING_FAULTS]
    runs = [r for r in results if r.outcome in faults]
    if not runs:
        return ""
    lines = [
        "| agent | outcome | path | ran | exit | requests at server (first turn) "
        "| requests to proxy "
        "| proxy retries | s | last line |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for agent in agents:
        for fault in faults:
            for via in PATHS:
                for r in runs:
                    if r.agent != agent or r.outcome != fault or r.via != via:
                        continue
                    exit_label = "timed out" if r.timed_out else str(r.exit_code)
                    last = (r.error or (r.last_lines[-1] if r.last_lines else "")).replace("|", "/")
                    lines.append(
                        f"| {agent} | {fault} | {via} | {_ran_label(r)} | {exit_label} "
                        f"| {r.model_requests} ({len(r.hostile_answers)}) "
                        f"| {_opening_cell(r.proxy_requests)} "
                        f"| {_opening_cell(r.proxy_retries)} | {r.seconds} | {last[:100]} |"
                    )
    return "\n".join(lines)


def tables(results: Sequence[RunResult], agents: Sequence[str]) -> list[str]:
    """The tables of what was run, a blank line after each."""
    parts: list[str] = []
    if any(r.outcome not in {o.value for o in OPENING_FAULTS} for r in results):
        parts += [summary_table(results, agents), "", outcome_table(results, agents), ""]
    opening = opening_table(results, agents)
    if opening:
        parts += [opening, ""]
    return parts


def report(results: Sequence[RunResult], agents: Sequence[str], settings: Settings) -> str:
    versions = ", ".join(
        f"{package} {settings.installation.installed_version(package)}" for package in PACKAGES
    )
    proxy_flags = " ".join(settings.proxy_args) or "(default flags)"
    parts = [
        "# Agents against the hostile server",
        "",
        f"Agents: {versions}. Proxy: `lockgate proxy` {proxy_flags}, "
        f"{settings.proxy_description}. Timeout {settings.timeout:g} s per run, "
        f"{settings.pause:g} s pause after each call"
        + (", `namespace: functions` sent." if settings.functions_namespace else "."),
        "",
        *tables(results, agents),
        "## Every run",
    ]
    for result in results:
        status = "timed out" if result.timed_out else f"exit {result.exit_code}"
        parts += [
            "",
            f"### {result.agent} / {result.via} / {result.outcome}: "
            f"{'ran the command' if result.ran else 'ran nothing'} ({status}, {result.seconds} s, "
            f"{result.model_requests} model requests, {result.websocket_attempts} WebSocket "
            f"attempts{_proxy_counts_text(result)}"
            f"{', showed a lockgate reason' if result.showed_lockgate_reason else ''})",
        ]
        if result.error:
            parts.append(f"error: {result.error}")
        parts += ["", "```", *result.last_lines, "```"]
        if result.proxy_log:
            parts += ["", "proxy:", "", "```", *result.proxy_log, "```"]
    return "\n".join(parts) + "\n"


def _proxy_counts_text(result: RunResult) -> str:
    if result.proxy_requests is None:
        return ""
    text = f", {result.proxy_requests} requests to the proxy"
    if result.proxy_retries is not None:
        text += f", {result.proxy_retries} proxy retries"
    return text


# --- the command line ------------------------------------------------------------------------


def names(
    value: str, known: dict[str, Any], what: str, groups: Mapping[str, Sequence[str]]
) -> list[str]:
    chosen: list[str] = []
    for name in (part.strip() for part in value.split(",")):
        if not name:
            continue
        expanded = groups.get(name, (name,))
        for item in expanded:
            if item not in known:
                raise UsageError(f"unknown {what} {item!r}; known: {', '.join(known)}")
            if item not in chosen:
                chosen.append(item)
    if not chosen:
        raise UsageError(f"no {what} given")
    return chosen


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m interop.agents.run",
        description="the real agents against a hostile loopback server, directly and "
        "through lockgate proxy",
    )
    groups = ", ".join(f"{group} ({' '.join(names)})" for group, names in GROUPS.items())
    parser.add_argument(
        "--agents",
        default=",".join(GROUPS),
        help=f"agents or groups, comma-separated (default all: {groups})",
    )
    parser.add_argument("--via", choices=["direct", "proxy", "both"], default="both")
    parser.add_argument(
        "--proxy-args",
        default="",
        metavar="ARGS",
        help='extra `lockgate proxy` flags, one string: --proxy-args="--validate-schemas"',
    )
    parser.add_argument(
        "--outcomes",
        default=",".join(o.value for o in Outcome),
        help="outcomes or groups, comma-separated (default all: gate (complete and the "
        "eight breaks), opening (the four opening faults), grammar, eventstream (the AWS "
        "event stream's three breaks, Bedrock agents only))",
    )
    parser.add_argument("--timeout", type=float, default=90.0, help="seconds per run (90)")
    parser.add_argument(
        "--pause", type=float, default=0.5, help="seconds after each call before what follows (0.5)"
    )
    parser.add_argument("--jobs", type=int, default=2, help="runs at once (2)")
    parser.add_argument(
        "--websocket-status",
        type=int,
        default=404,
        help="the server's answer to a WebSocket upgrade (404, as a server without them)",
    )
    parser.add_argument(
        "--functions-namespace",
        action="store_true",
        help='send `"namespace": "functions"` on calls to the tools of Codex\'s `functions` '
        "namespace (Codex runs both forms; default: without)",
    )
    parser.add_argument(
        "--lockgate-src",
        type=Path,
        default=None,
        metavar="DIR",
        help="run the proxy from this lockgate source tree (e.g. a `git archive` of a "
        "revision) instead of the installed one",
    )
    parser.add_argument("--cache", type=Path, default=None, help="the npm folder for the agents")
    parser.add_argument("--out", type=Path, default=None, help="the results folder")
    parser.add_argument("--no-install", action="store_true", help="never run npm")
    parser.add_argument("--keep", action="store_true", help="keep each run's temporary folder")
    return parser


async def gather_interruptibly(runs: Sequence[Awaitable[T]]) -> list[T]:
    """Every run, concurrently; SIGINT or SIGTERM cancels them all (each kills its agent's
    process group and stops its proxy and server on the way out)."""
    task = asyncio.current_task()
    assert task is not None
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        loop.add_signal_handler(sig, task.cancel)
    try:
        return list(await asyncio.gather(*runs))
    finally:
        for sig in (signal.SIGINT, signal.SIGTERM):
            loop.remove_signal_handler(sig)


async def _run_all(
    plan: list[tuple[Agent, Outcome, str]], settings: Settings, jobs: int
) -> list[RunResult]:
    gate = asyncio.Semaphore(jobs)

    async def one(agent: Agent, outcome: Outcome, via: str) -> RunResult:
        async with gate:
            result = await run_one(agent, outcome, via, settings)
        verdict = "ran the command" if result.ran else "ran nothing"
        status = "timed out" if result.timed_out else f"exit {result.exit_code}"
        tail = result.error or (result.last_lines[-1] if result.last_lines else "")
        print(
            f"{agent.name:<17} {via:<6} {outcome.value:<24} {verdict:<15} "
            f"({status}, {result.seconds} s, {result.model_requests} requests"
            f"{_proxy_counts_text(result)}) {tail[:100]}",
            flush=True,
        )
        return result

    return await gather_interruptibly([one(*entry) for entry in plan])


def main(argv: Sequence[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    try:
        agents = names(args.agents, AGENTS, "agent", GROUPS)
        known_outcomes = {o.value: o for o in Outcome}
        outcome_groups = {
            group: tuple(o.value for o in members) for group, members in OUTCOME_GROUPS.items()
        }
        outcomes = [
            known_outcomes[n]
            for n in names(args.outcomes, known_outcomes, "outcome", outcome_groups)
        ]
        vias = list(PATHS) if args.via == "both" else [args.via]
        if args.timeout <= 0 or args.pause < 0 or args.jobs < 1:
            raise UsageError("--timeout must be positive, --pause not negative, --jobs at least 1")
        try:
            proxy_args = tuple(shlex.split(args.proxy_args))
        except ValueError as exc:
            raise UsageError(f"--proxy-args: {exc}") from None
        if {"--upstream", "--port"} & set(proxy_args):
            raise UsageError("--proxy-args: the runner sets --upstream and --port itself")
        lockgate_src = lockgate_source(args.lockgate_src)
        installation, out = prepare(args.cache, args.out, not args.no_install)
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    description = describe_lockgate(lockgate_src) if "proxy" in vias else "not used"
    settings = Settings(
        installation,
        out,
        args.timeout,
        args.pause,
        proxy_args,
        args.websocket_status,
        args.keep,
        lockgate_src,
        description,
        args.functions_namespace,
    )
    plan = [
        (AGENTS[a], o, v)
        for a in agents
        for v in vias
        for o in outcomes
        if o not in EVENTSTREAM_BREAKS or AGENTS[a].protocol in ("bedrock", "converse")
    ]
    print(f"{len(plan)} runs, {args.jobs} at a time, results in {out}", flush=True)
    if "proxy" in vias:
        print(f"proxy: {description}", flush=True)
    try:
        results = asyncio.run(_run_all(plan, settings, args.jobs))
    except asyncio.CancelledError:
        print("interrupted: every agent, proxy and server stopped", file=sys.stderr)
        return 130
    (out / "results.json").write_text(json.dumps([asdict(r) for r in results], indent=1))
    (out / "report.md").write_text(report(results, agents, settings))
    print()
    print("\n".join(tables(results, agents)))
    print(f"report: {out / 'report.md'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
