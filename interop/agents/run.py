"""Run the real agents against the hostile server, directly and through `lockgate proxy`.

    python -m interop.agents.run [--agents codex,claude,gemini,ai-sdk] [--via direct|proxy|both]
                                 [--proxy-args "--validate-schemas"] [--outcomes a,b,…]
                                 [--timeout 90] [--pause 0.5] [--jobs 2]
                                 [--cache DIR] [--out DIR] [--no-install] [--keep]

Installs the pinned agents (`agents.PACKAGES`) with npm into the cache folder (default
`~/.cache/lockgate/interop-agents`, or `$LOCKGATE_INTEROP_CACHE`; skipped when they are
there), then runs every agent x outcome (`complete`, the eight breaks and the four opening
faults; `--outcomes gate`, `opening` or `grammar` (a Codex custom shell's grammar broken)
for one group) x path: `direct` (the agent talks to
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
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import datetime
import json
import os
import re
import shlex
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Awaitable, Callable, Mapping, Sequence
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import Any, TypeVar

from .agents import (
    AGENTS,
    AI_SDK_SCRIPT,
    GROUPS,
    PACKAGES,
    Agent,
    Installation,
    Invocation,
    RunPaths,
)
from .hostile import responder_for
from .outcomes import BREAKS, OPENING_FAULTS, Outcome
from .outcomes import GROUPS as OUTCOME_GROUPS
from .server import HostileServer, Responder

__all__ = [
    "RunResult",
    "gather_interruptibly",
    "launch_proxy",
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
_LAST_LINES = 12
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x9b]")
_LOCKGATE_REASON = re.compile(r"lockgate (?:withheld|refused)")
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
# The proxy's human log line for one request: `METHOD PATH PROTOCOL OUTCOME… STATUS N ms`.
_PROXY_REQUEST_LINE = re.compile(r"[A-Z]+ /\S* \S+ .* \d{3} \d+ ms")


class UsageError(Exception):
    """One line for the user; exit 2."""


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


# --- installation ----------------------------------------------------------------------------


def default_cache() -> Path:
    configured = os.environ.get("LOCKGATE_INTEROP_CACHE")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "lockgate" / "interop-agents"


def npm_install(installation: Installation, allowed: bool, timeout: float | None = None) -> bool:
    """npm installs the pinned packages into the installation's folder when one is missing;
    whether it did. UsageError (one line) when it may not (`allowed` False), cannot (no npm)
    or failed (an error, more than `timeout` seconds, a package still missing)."""
    cache = installation.root
    missing = installation.missing()
    if not missing:
        return False
    if not allowed:
        raise UsageError(f"not installed in {cache}: {', '.join(missing)} (drop --no-install)")
    npm = shutil.which("npm")
    if npm is None:
        raise UsageError("npm is not on PATH: install Node.js 20+ with npm first")
    cache.mkdir(parents=True, exist_ok=True)
    pinned = [f"{package}@{version}" for package, version in installation.packages.items()]
    command = [npm, "install", "--prefix", str(cache), "--no-audit", "--no-fund", *pinned]
    print(f"installing into {cache}: {' '.join(pinned)}", flush=True)
    try:
        completed = subprocess.run(
            command, capture_output=True, text=True, check=False, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise UsageError(f"npm install took longer than {timeout:.0f} s") from None
    if completed.returncode != 0:
        tail = (completed.stderr or completed.stdout).strip().splitlines()[-3:]
        raise UsageError(f"npm install failed ({completed.returncode}): {' / '.join(tail)}")
    still = installation.missing()
    if still:
        raise UsageError(f"npm install left out: {', '.join(still)}")
    return True


def install(cache: Path, allowed: bool) -> Installation:
    """The agents at their pinned versions in `cache` (npm install when one is missing)."""
    installation = Installation(cache)
    if not npm_install(installation, allowed):
        print(f"agents already installed in {cache}", flush=True)
    shutil.copyfile(Path(__file__).with_name(AI_SDK_SCRIPT), cache / AI_SDK_SCRIPT)
    return installation


def results_folder(cache: Path, out: Path | None, prefix: str = "") -> Path:
    """`out`, else `CACHE/results/<prefix><UTC time>`, made."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    results = (out or cache / "results" / f"{prefix}{stamp}").resolve()
    results.mkdir(parents=True, exist_ok=True)
    return results


def prepare(
    cache: Path | None, out: Path | None, allow_install: bool, prefix: str = ""
) -> tuple[Installation, Path]:
    """The agents installed in `cache` (default `default_cache()`; npm when allowed) and
    the results folder, made: `out`, else `CACHE/results/<prefix><UTC time>`. UsageError
    for whatever fails, an OSError included."""
    try:
        folder = (cache or default_cache()).resolve()
        installation = install(folder, allow_install)
        results = results_folder(folder, out, prefix)
    except OSError as exc:
        raise UsageError(f"{exc.strerror or exc}: {exc.filename or ''}") from None
    return installation, results


# --- one run ---------------------------------------------------------------------------------


def _printable(line: str) -> str:
    line = _ANSI.sub("", line)
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", line)


def last_lines(text: str, count: int = _LAST_LINES) -> list[str]:
    lines = [_printable(line.rstrip()) for line in text.splitlines()]
    return [line for line in lines if line.strip()][-count:]


@dataclass(frozen=True)
class _Proxy:
    process: asyncio.subprocess.Process
    url: str
    lines: list[str]
    reader: asyncio.Task[None]

    async def stop(self) -> None:
        if self.process.returncode is None:
            with contextlib.suppress(ProcessLookupError):
                self.process.send_signal(signal.SIGTERM)
            try:
                await asyncio.wait_for(self.process.wait(), 10)
            except TimeoutError:
                with contextlib.suppress(ProcessLookupError):
                    self.process.kill()
                await self.process.wait()
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(self.reader, 5)


def proxy_environment(lockgate_src: Path | None) -> dict[str, str]:
    """The proxy's environment: this one's PATH, HOME and LANG, and with `--lockgate-src`
    that source tree first on PYTHONPATH (so the proxy runs that revision's lockgate)."""
    env = {name: os.environ[name] for name in ("PATH", "HOME", "LANG") if name in os.environ}
    if lockgate_src is not None:
        env["PYTHONPATH"] = str(lockgate_src)
    return env


def lockgate_source(path: Path | None) -> Path | None:
    """The folder holding the `lockgate` package in a source tree given as `--lockgate-src`
    (the tree itself or its `src`); UsageError when there is none."""
    if path is None:
        return None
    for folder in (path / "src", path):
        if (folder / "lockgate" / "__init__.py").is_file():
            return folder.resolve()
    raise UsageError(f"--lockgate-src {path}: no lockgate package in it or in its src/")


def describe_lockgate(lockgate_src: Path | None) -> str:
    """Which lockgate the proxy runs: its version and where it is imported from, and for a
    git checkout its commit and how many files under src/ differ from it."""
    probe = "import lockgate, lockgate.version as v; print(v.__version__, lockgate.__file__)"
    completed = subprocess.run(
        [sys.executable, "-c", probe],
        env=proxy_environment(lockgate_src),
        capture_output=True,
        text=True,
        check=False,
    )
    if completed.returncode != 0:
        return "lockgate (not importable)"
    version, _, where = completed.stdout.strip().partition(" ")
    package = Path(where).parent
    text = f"lockgate {version} from {package}"
    repository = package.parent.parent
    head = subprocess.run(
        ["git", "-C", str(repository), "rev-parse", "--short", "HEAD"],
        capture_output=True,
        text=True,
        check=False,
    )
    if head.returncode == 0:
        changed = subprocess.run(
            ["git", "-C", str(repository), "status", "--porcelain", "--", "src"],
            capture_output=True,
            text=True,
            check=False,
        )
        count = len(changed.stdout.splitlines())
        text += f" (git {head.stdout.strip()}, {count} paths under src/ changed since)"
    return text


async def _start_proxy(
    upstream: str, extra: Sequence[str], lockgate_src: Path | None = None
) -> _Proxy:
    return await launch_proxy(["--upstream", upstream, "--port", "0", *extra], lockgate_src)


async def launch_proxy(arguments: Sequence[str], lockgate_src: Path | None = None) -> _Proxy:
    """`lockgate proxy ARGUMENTS` in a process of its own, once it says where it listens;
    its later lines are collected."""
    argv = [sys.executable, "-m", "lockgate", "proxy", *arguments]
    env = proxy_environment(lockgate_src)
    process = await asyncio.create_subprocess_exec(
        *argv,
        stdin=asyncio.subprocess.DEVNULL,
        stdout=asyncio.subprocess.PIPE,
        stderr=asyncio.subprocess.STDOUT,
        env=env,
    )
    assert process.stdout is not None
    stdout = process.stdout
    try:
        first = (await asyncio.wait_for(stdout.readline(), 60)).decode(errors="replace")
    except TimeoutError:
        process.kill()
        await process.wait()
        raise RuntimeError("lockgate proxy said nothing in 60 s") from None
    url = _listening_url(first)
    if url is None:
        rest = (await stdout.read()).decode(errors="replace")
        await process.wait()
        problem = " / ".join(last_lines(first + rest, 3)) or f"exit {process.returncode}"
        raise RuntimeError(f"lockgate proxy did not start: {problem}")
    lines: list[str] = []

    async def read() -> None:
        while True:
            line = await stdout.readline()
            if not line:
                return
            lines.append(_printable(line.decode(errors="replace").rstrip()))

    return _Proxy(process, url.rstrip("/"), lines, asyncio.create_task(read()))


def _listening_url(line: str) -> str | None:
    """Where the proxy listens, from its first line (`proxying at URL -> UPSTREAM`, or with
    `--json` the `listening` record)."""
    match = re.match(r"proxying at (\S+) -> ", line)
    if match is not None:
        return match.group(1)
    record = _json_record(line)
    if record is not None and record.get("event") == "listening":
        url = record.get("url")
        return url if isinstance(url, str) else None
    return None


def _json_record(line: str) -> dict[str, Any] | None:
    if not line.startswith("{"):
        return None
    try:
        value = json.loads(line)
    except ValueError:
        return None
    return value if isinstance(value, dict) else None


def proxy_counts(lines: Sequence[str]) -> tuple[int, int | None]:
    """From the proxy's log: the requests it served (one line or `--json` record each), and
    its retries upstream summed (None: its log does not say, without `--json`)."""
    requests = 0
    retries: int | None = None
    for line in lines:
        record = _json_record(line)
        if record is not None:
            if record.get("event") == "request":
                requests += 1
                count = record.get("retries")
                if isinstance(count, int):
                    retries = (retries or 0) + count
        elif _PROXY_REQUEST_LINE.fullmatch(line):
            requests += 1
    return requests, retries


def _kill_group(pid: int, sig: int) -> None:
    with contextlib.suppress(ProcessLookupError, PermissionError):
        os.killpg(pid, sig)


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
    proxy: _Proxy | None = None
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


async def run_agent(invocation: Invocation, output: Path, limit: float) -> tuple[int | None, bool]:
    """Run an agent to its end, its output into `output`: (its exit code, None when it
    ran out of `limit` seconds; whether it did). Its process group is killed either way."""
    exit_code: int | None = None
    timed_out = False
    with output.open("wb") as sink:
        process = await asyncio.create_subprocess_exec(
            *invocation.argv,
            cwd=invocation.cwd,
            env=invocation.env,
            stdin=asyncio.subprocess.DEVNULL,
            stdout=sink,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
        try:
            exit_code = await asyncio.wait_for(process.wait(), limit)
        except TimeoutError:
            timed_out = True
            _kill_group(process.pid, signal.SIGTERM)
            try:
                await asyncio.wait_for(process.wait(), 3)
            except TimeoutError:
                _kill_group(process.pid, signal.SIGKILL)
                await process.wait()
        finally:
            _kill_group(process.pid, signal.SIGKILL)  # what it left behind
            if process.returncode is None:
                await process.wait()
    return exit_code, timed_out


# --- the tables ------------------------------------------------------------------------------


def _ran_label(result: RunResult | None) -> str:
    if result is None:
        return ""
    if result.error is not None:
        return "error"
    label = "RAN" if result.ran else "-"
    return label + (" (t)" if result.timed_out else "")


# the breaks a table counts: the eight of the `gate` group and, where it was run, the grammar
TABLED_BREAKS = (*BREAKS, Outcome.SECOND_CALL_UNGRAMMATICAL)


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
        "eight breaks), opening (the four opening faults))",
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
    plan = [(AGENTS[a], o, v) for a in agents for v in vias for o in outcomes]
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
