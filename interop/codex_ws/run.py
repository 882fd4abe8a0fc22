"""Real Codex on the Responses WebSocket through `lockgate proxy` (default flags), against the
hostile WebSocket server (`server.py`): `python -m interop.codex_ws.run [--outcomes a,b]
[--agents codex-builtin,codex-ws-provider] [--timeout 150] [--out FILE]`.

Each run: the server, `lockgate proxy --upstream SERVER --port 0`, Codex pointed at the
proxy (the built-in provider, `openai_base_url`, as `interop.agents` configures it; or a
custom provider with `supports_websockets = true`), the prompt that asks for the marker.
Per run it tells: whether the marker exists (the command ran), Codex's exit, whether every
model request stayed on the WebSocket (no HTTP request reached the server but a model
listing), how many sockets and `response.create`s the server saw and which continued by
`previous_response_id`, whether Codex's output shows lockgate's reason, and the proxy's
records. It writes a JSON file (`--out`) and prints a table. Needs the pinned agents already
installed (`python -m interop.agents.run` installs them); nothing leaves the machine.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import shutil
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from interop.agents.agents import AGENTS, Installation, Invocation, RunPaths
from interop.agents.install import default_cache
from interop.agents.processes import last_lines, launch_proxy, run_agent

from .server import WS_OUTCOMES, hostile_ws_server

__all__ = ["WsRun", "main", "run_one"]

PLACEHOLDER_KEY = "sk-lockgate-codex-ws-placeholder"
EXPECTED_TO_RUN = frozenset({"complete"})


@dataclass
class WsRun:
    agent: str
    outcome: str
    ran: bool
    exit_code: int | None
    timed_out: bool
    seconds: float
    sockets: int
    creates: int
    previous_ids: list[str]
    http: list[str]
    showed_lockgate_reason: bool
    fell_back: bool  # Codex said "Falling back from WebSockets to HTTPS transport"
    last_lines: list[str] = field(default_factory=list)
    proxy_log: list[str] = field(default_factory=list)

    @property
    def stayed_on_websocket(self) -> bool:
        return self.sockets > 0 and not [r for r in self.http if not r.endswith("/models")]

    @property
    def right(self) -> bool:
        """Complete: it ran, on the WebSocket only, continuing by previous_response_id.
        Hostile: nothing ran (a transient refusal Codex retries, five times, then falls back
        to HTTP, where the proxy gates it too: counted apart, not wrong)."""
        if self.outcome in EXPECTED_TO_RUN:
            return self.ran and self.stayed_on_websocket and bool(self.previous_ids)
        return not self.ran


def _codex_ws_provider(
    installation: Installation, paths: RunPaths, base_url: str, key: str
) -> Invocation:
    """A custom Responses provider that asks for the WebSocket (`supports_websockets`)."""
    base = AGENTS["codex"].invocation(installation, paths, base_url, key)
    config = paths.home / ".codex" / "config.toml"
    text = config.read_text()
    config.write_text(text + "supports_websockets = true\n")
    return base


def _invocation(agent: str, installation: Installation, paths: RunPaths, base: str) -> Invocation:
    if agent == "codex-ws-provider":
        return _codex_ws_provider(installation, paths, base, PLACEHOLDER_KEY)
    return AGENTS[agent].invocation(installation, paths, base, PLACEHOLDER_KEY)


async def run_one(
    agent: str, outcome: str, installation: Installation, limit: float, keep: bool = False
) -> WsRun:
    root = Path(tempfile.mkdtemp(prefix=f"lockgate-codex-ws-{outcome}-"))
    paths = RunPaths(root)
    paths.make()
    output = root / "agent-output.txt"
    started = time.monotonic()
    exit_code: int | None = None
    timed_out = False
    proxy_lines: list[str] = []
    try:
        async with hostile_ws_server(outcome, f"touch {paths.marker}") as (origin, seen):
            proxy = await launch_proxy(["--upstream", origin, "--port", "0"])
            try:
                invocation = _invocation(agent, installation, paths, proxy.url)
                started = time.monotonic()
                exit_code, timed_out = await run_agent(invocation, output, limit)
            finally:
                await proxy.stop()
                proxy_lines = list(proxy.lines)
        printed = output.read_text(errors="replace") if output.exists() else ""
        return WsRun(
            agent,
            outcome,
            paths.marker.exists(),
            exit_code,
            timed_out,
            round(time.monotonic() - started, 1),
            len(seen.sockets),
            sum(len(s.creates) for s in seen.sockets),
            seen.previous_ids,
            seen.http,
            "lockgate withheld" in printed or "lockgate refused" in printed,
            "Falling back from WebSockets" in printed,
            last_lines(printed, 6),
            proxy_lines[-12:],
        )
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)


def _table(runs: list[WsRun]) -> str:
    lines = [
        "| agent | outcome | command ran | exit | on WebSocket | sockets / creates "
        "| previous_response_id | lockgate's reason shown | as wanted |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in runs:
        exit_text = "timeout" if run.timed_out else str(run.exit_code)
        lines.append(
            f"| {run.agent} | {run.outcome} | {'RAN' if run.ran else '-'} | {exit_text} "
            f"| {_transport(run)} "
            f"| {run.sockets} / {run.creates} | {len(run.previous_ids)} "
            f"| {'yes' if run.showed_lockgate_reason else '-'} | {'yes' if run.right else 'NO'} |"
        )
    return "\n".join(lines)


def _transport(run: WsRun) -> str:
    if run.stayed_on_websocket:
        return "yes"
    posts = len([r for r in run.http if not r.endswith("/models")])
    said = "Codex fell back to HTTP" if run.fell_back else "HTTP seen"
    return f"until its retries were spent ({said}: {posts} POSTs)"


async def _main(arguments: argparse.Namespace) -> int:
    installation = Installation(Path(arguments.cache) if arguments.cache else default_cache())
    if installation.installed_version("@openai/codex") is None:
        print("Codex is not installed: run python -m interop.agents.run first", file=sys.stderr)
        return 2
    outcomes = arguments.outcomes.split(",") if arguments.outcomes else list(WS_OUTCOMES)
    unknown = [name for name in outcomes if name not in WS_OUTCOMES]
    if unknown:
        print(f"unknown outcomes: {', '.join(unknown)}", file=sys.stderr)
        return 2
    runs: list[WsRun] = []
    for agent in arguments.agents.split(","):
        for outcome in outcomes:
            run = await run_one(agent, outcome, installation, arguments.timeout, arguments.keep)
            runs.append(run)
            print(
                f"{agent} {outcome}: ran={run.ran} exit={run.exit_code} "
                f"timed_out={run.timed_out} sockets={run.sockets} creates={run.creates} "
                f"previous={run.previous_ids} http={run.http} "
                f"reason={run.showed_lockgate_reason} ({run.seconds} s)",
                flush=True,
            )
    print(_table(runs))
    if arguments.out:
        await asyncio.to_thread(_write, Path(arguments.out), runs)
    return 0 if all(run.right for run in runs) else 1


def _write(path: Path, runs: list[WsRun]) -> None:
    path.write_text(json.dumps([asdict(run) for run in runs], indent=2))


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m interop.codex_ws.run")
    parser.add_argument("--agents", default="codex-builtin")
    parser.add_argument("--outcomes", default="")
    parser.add_argument("--timeout", type=float, default=150.0)
    parser.add_argument("--cache", default="")
    parser.add_argument("--out", default="")
    parser.add_argument("--keep", action="store_true")
    return asyncio.run(_main(parser.parse_args(argv)))


if __name__ == "__main__":
    raise SystemExit(main())
