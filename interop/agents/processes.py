"""The processes a run starts and stops: the agent (`run_agent`: its output to a file, its
process group killed however it ends) and `lockgate proxy` (`launch_proxy`: which lockgate
it runs, where it listens, its log collected and counted), and what they print made
printable (`last_lines`).
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import re
import signal
import subprocess
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from .agents import Invocation
from .install import UsageError

__all__ = [
    "ProxyProcess",
    "describe_lockgate",
    "last_lines",
    "launch_proxy",
    "lockgate_source",
    "proxy_counts",
    "proxy_environment",
    "run_agent",
]

_LAST_LINES = 12
_CONTROL = re.compile(r"[\x00-\x08\x0b-\x1f\x7f\x9b]")
_ANSI = re.compile(r"\x1b\[[0-?]*[ -/]*[@-~]|\x1b\][^\x07]*\x07")
# The proxy's human log line for one request: `METHOD PATH PROTOCOL OUTCOME… STATUS N ms`.
_PROXY_REQUEST_LINE = re.compile(r"[A-Z]+ /\S* \S+ .* \d{3} \d+ ms")


def _printable(line: str) -> str:
    line = _ANSI.sub("", line)
    return _CONTROL.sub(lambda match: f"\\x{ord(match.group()):02x}", line)


def last_lines(text: str, count: int = _LAST_LINES) -> list[str]:
    lines = [_printable(line.rstrip()) for line in text.splitlines()]
    return [line for line in lines if line.strip()][-count:]


@dataclass(frozen=True)
class ProxyProcess:
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


async def launch_proxy(arguments: Sequence[str], lockgate_src: Path | None = None) -> ProxyProcess:
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

    return ProxyProcess(process, url.rstrip("/"), lines, asyncio.create_task(read()))


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
