"""One `lockgate proxy --config` for a team: Claude Code, Codex and Gemini CLI side by side.

    python -m interop.agents.team [--outcomes complete,second-call-invalid,429-once]
                                  [--timeout 120] [--cache DIR] [--no-install]
                                  [--lockgate-src DIR] [--keep]

The setup of docs/proxy.md's team config, tried as a new user would, on loopback: one
hostile server stands for the three providers (it answers each protocol on its own paths);
one proxy process, started from a config file with three routes (`/anthropic`, `/openai`,
`/gemini`), each holding its provider's (placeholder) key read from a file, with retries,
and a team token that every agent shows as its API key. Each agent points at its route;
for each outcome (the complete response, a broken one, a fault before the first byte),
whether the agent's shell command ran. Then the proxy's `/metrics` (asked with the team
token): per route, the requests by outcome, the calls withheld and released, and the
retries; and what the upstream was sent: every model request with its route's held key
(told apart by its length in the masked recording), never the team token.

Prints one line per run, the metrics and the credential check; exit 0 when every run ran,
1 when a complete response did not run its call, a broken one ran it, or the credentials
were wrong; 2 on a usage or installation error.
"""

from __future__ import annotations

import argparse
import asyncio
import re
import shutil
import sys
import tempfile
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

from .agents import AGENTS, Agent, RunPaths
from .hostile import responder_for
from .outcomes import Outcome
from .run import (
    UsageError,
    default_cache,
    install,
    last_lines,
    launch_proxy,
    lockgate_source,
    run_agent,
)
from .server import Exchange, HostileServer, Reply, Responder

__all__ = ["main"]

# route name -> (agent, the key the proxy holds for it: a length of its own)
ROUTES: dict[str, tuple[str, str]] = {
    "anthropic": ("claude", "sk-ant-team-held-placeholder-key-0000000001"),
    "openai": ("codex", "sk-team-held-placeholder-key-openai-0000000000002"),
    "gemini": ("gemini", "AIza-team-held-placeholder-key-gemini-00000000000000003"),
}
TEAM_TOKEN = "lockgate-team-token-7f3a"  # what every agent shows as its API key
DEFAULT_OUTCOMES = ("complete", "second-call-invalid", "429-once")
_MASKED = re.compile(r"\[masked: (\d+) chars\]")
_SHOWN = ("lockgate_proxy_requests_total", "lockgate_proxy_tool_calls_", "lockgate_proxy_retries")


class Swappable:
    """The hostile server's answers, changed between runs (one server for the session)."""

    def __init__(self) -> None:
        self.current: Responder | None = None

    def __call__(self, exchange: Exchange) -> Reply:
        assert self.current is not None
        return self.current(exchange)


@dataclass(frozen=True)
class TeamRun:
    route: str
    agent: str
    outcome: str
    ran: bool
    exit_code: int | None
    timed_out: bool
    last_line: str

    @property
    def as_expected(self) -> bool:
        return self.ran == (Outcome(self.outcome).opening is not None or self.outcome == "complete")


def team_config(root: Path, upstream: str) -> Path:
    """The config file (docs/proxy.md's team example, on loopback) and its secret files."""
    secrets = root / "secrets"
    secrets.mkdir()
    (secrets / "team-token").write_text(TEAM_TOKEN + "\n")
    lines = [
        "listen: {host: 127.0.0.1, port: 0}",
        f"client_token: {{file: {secrets / 'team-token'}}}",
        "routes:",
    ]
    for name, (_, key) in ROUTES.items():
        (secrets / f"{name}.key").write_text(key + "\n")
        lines += [
            f"  - name: {name}",
            f"    prefix: /{name}",
            f"    upstream: {upstream}",
            f"    key: {{file: {secrets / f'{name}.key'}}}",
            "    retries: {attempts: 2, max_wait: 5}",
        ]
    config = root / "team.yaml"
    config.write_text("\n".join(lines) + "\n")
    return config


def credential_lengths(server: HostileServer) -> dict[str, set[int]]:
    """For each protocol, the lengths of the credentials the upstream was sent (masked)."""
    seen: dict[str, set[int]] = {}
    for request in server.requests:
        if request.protocol is None:
            continue
        values = [value for _, value in request.headers] + [value for _, value in request.query]
        lengths = {int(m.group(1)) for v in values for m in [_MASKED.search(v)] if m}
        seen.setdefault(request.protocol, set()).update(lengths)
    return seen


def metrics(url: str) -> list[str]:
    """The proxy's `/metrics` lines worth showing (asked with the team token)."""
    request = urllib.request.Request(url + "/metrics", headers={"x-lockgate-token": TEAM_TOKEN})
    with urllib.request.urlopen(request, timeout=10) as response:  # loopback only
        text: str = response.read().decode()
    return [
        line
        for line in text.splitlines()
        if line.startswith(_SHOWN) and not line.endswith(" 0.0") and "_created" not in line
    ]


async def session(
    outcomes: Sequence[Outcome],
    cache: Path,
    limit: float,
    src: Path | None,
    keep: bool,
    allow_install: bool,
) -> int:
    installation = install(cache, allow_install)
    root = Path(tempfile.mkdtemp(prefix="lockgate-team-"))
    responder = Swappable()
    server = HostileServer(responder)
    runs: list[TeamRun] = []
    failures = 0
    try:
        async with server:
            config = team_config(root, server.url)
            proxy = await launch_proxy(["--config", str(config)], src)
            print(f"proxy: {proxy.url} with routes {', '.join('/' + r for r in ROUTES)}")
            try:
                for route, (agent_name, _) in ROUTES.items():
                    agent: Agent = AGENTS[agent_name]
                    for outcome in outcomes:
                        paths = RunPaths(root / f"{agent_name}-{outcome.value}")
                        paths.make()
                        responder.current = responder_for(outcome, f"touch {paths.marker}")
                        base = f"{proxy.url}/{route}"
                        invocation = agent.invocation(installation, paths, base, TEAM_TOKEN)
                        output = paths.root / "agent-output.txt"
                        exit_code, timed_out = await run_agent(invocation, output, limit)
                        printed = output.read_text(errors="replace")
                        run = TeamRun(
                            route,
                            agent_name,
                            outcome.value,
                            paths.marker.exists(),
                            exit_code,
                            timed_out,
                            (last_lines(printed, 1) or [""])[0][:120],
                        )
                        runs.append(run)
                        verdict = "ran the command" if run.ran else "ran nothing"
                        flag = "" if run.as_expected else "  <- NOT AS EXPECTED"
                        print(
                            f"{route:10} {agent_name:7} {outcome.value:22} {verdict:16}"
                            f" (exit {exit_code}{', timed out' if timed_out else ''})"
                            f" {run.last_line}{flag}",
                            flush=True,
                        )
                print("\n/metrics (non-zero series):")
                for line in await asyncio.to_thread(metrics, proxy.url):
                    print("  " + line)
            finally:
                await proxy.stop()
    finally:
        if not keep:
            shutil.rmtree(root, ignore_errors=True)
    failures += sum(1 for run in runs if not run.as_expected)
    lengths = credential_lengths(server)
    expected = {AGENTS[agent].protocol: len(key) for agent, key in ROUTES.values()}
    print("\ncredentials the upstream was sent (lengths, masked):")
    for protocol, want in expected.items():
        got = lengths.get(protocol, set())
        good = got == {want}
        failures += 0 if good else 1
        print(
            f"  {protocol:10} {sorted(got)} (held key {want}, team token {len(TEAM_TOKEN)}):"
            f" {'only the held key' if good else 'WRONG'}"
        )
    return 1 if failures else 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m interop.agents.team", description=__doc__)
    parser.add_argument("--outcomes", default=",".join(DEFAULT_OUTCOMES))
    parser.add_argument("--timeout", type=float, default=120.0)
    parser.add_argument("--cache", type=Path)
    parser.add_argument("--lockgate-src", type=Path)
    parser.add_argument("--no-install", action="store_true")
    parser.add_argument("--keep", action="store_true", help="keep the temporary folders")
    args = parser.parse_args(argv)
    try:
        known = {outcome.value: outcome for outcome in Outcome}
        names = [name.strip() for name in args.outcomes.split(",") if name.strip()]
        unknown = [name for name in names if name not in known]
        if unknown or not names:
            raise UsageError(f"--outcomes: unknown {', '.join(unknown) or '(none given)'}")
        if args.timeout <= 0:
            raise UsageError("--timeout must be positive")
        src = lockgate_source(args.lockgate_src)
        cache: Path = (args.cache or default_cache()).resolve()
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    outcomes = [known[name] for name in names]
    try:
        return asyncio.run(
            session(outcomes, cache, args.timeout, src, args.keep, not args.no_install)
        )
    except UsageError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    sys.exit(main())
