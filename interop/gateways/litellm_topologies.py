"""LiteLLM's proxy around `lockgate proxy`, in both topologies (issue 24 item 7).

Needs LiteLLM's proxy in a virtualenv of its own (nothing of it is imported here):

    python3 -m venv /tmp/litellm-venv && /tmp/litellm-venv/bin/pip install 'litellm[proxy]'

Run from the repository root (about 5 minutes; loopback only, fake keys):

    .venv/bin/python -m interop.gateways.litellm_topologies \\
        [--litellm /tmp/litellm-venv/bin/litellm] [--json FILE] [--only NAME]... [--anthropic]
        [--litellm-retries N]

The "provider" is the loopback fault server (`upstream.FaultServer`, in this process).
`lockgate proxy --config` and `litellm --config` run as children. lockgate's routes:
`provider` → the fault server, `litellm` and `litellm-anthropic` → LiteLLM, each with
retries: 2, max_wait 5 s, idle timeout 2 s, and a `…-fallback` twin whose fall-back upstream
asks for the healthy scenario's deployment. LiteLLM keeps its defaults (its router's
retries, no fall-backs); per scenario it has a deployment `gated.NAME` whose `api_base` is
lockgate's `provider` route, and `raw.NAME` whose `api_base` is the fault server. Each
scenario of `scenarios.GATE_FAULTS` and `scenarios.GATEWAY_FAULTS` is asked by the official
`openai` SDK (default retries, streaming Chat Completions, one declared tool `edit`) in
four topologies:

- `gate`: client → lockgate → provider;
- `litellm`: client → LiteLLM → provider;
- `L→G`: client → LiteLLM → lockgate → provider;
- `G→L`: client → lockgate → LiteLLM → provider.

Printed per run: what the client ended with (`clients.verdict`: `error`, `full answer`, or —
the failures of a gate — `FABRICATED SUCCESS`: a stream the provider never completed ended
normally; `INVALID PASSED`: an invalid call or a call cut by the output limit ended as a
success), whether a tool call reached the client, its error, the attempts at the provider.
`--anthropic` adds the `anthropic` SDK on LiteLLM's `/v1/messages` (deployments
`anthropic/NAME`), in the `litellm`, `L→G` and `G→L` topologies.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import json
import secrets
import sys
import tempfile
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from .clients import anthropic_stream, openai_stream, verdict
from .processes import free_port, litellm_proxy, lockgate_proxy, routes_config, stop_on_sigterm
from .scenarios import ALL_SCENARIOS, FALLBACK_MODEL, GATE_FAULTS, GATEWAY_FAULTS, Fault
from .upstream import FaultServer

__all__ = ["TOPOLOGIES", "Measured", "litellm_config", "lockgate_config", "main"]

DEFAULT_LITELLM = Path("/tmp/litellm-venv/bin/litellm")
FAKE_UPSTREAM_KEY = "sk-test-litellm-upstream-0000"
TOPOLOGIES = ("gate", "litellm", "L→G", "G→L")
CLIENT_TIMEOUT = 10.0  # the SDK's read timeout: what ends a silence nobody else ends


@dataclass(frozen=True, slots=True)
class Measured:
    """One scenario in one topology."""

    scenario: str
    topology: str
    client: str
    expect: str
    verdict: str
    tool_call_reached_client: bool
    calls: str
    finish: str | None
    error: str | None
    attempts: int
    gaps: list[float]  # seconds between the attempts at the provider
    elapsed: float
    strays: int  # requests of earlier runs the provider received during this one


def lockgate_config(port: int, provider: str, litellm: str) -> str:
    """lockgate's routes: `provider` to the fault server, `litellm` and
    `litellm-anthropic` to LiteLLM, each with its `…-fallback` twin."""
    return routes_config(
        port,
        [
            ("provider", provider, FALLBACK_MODEL),
            ("litellm", litellm, f"raw.{FALLBACK_MODEL}"),
            ("litellm-anthropic", litellm, f"anthropic.raw.{FALLBACK_MODEL}"),
        ],
    )


def _fallback_scenarios() -> frozenset[str]:
    return frozenset(fault.name for fault in (*GATE_FAULTS, *GATEWAY_FAULTS) if fault.fallback)


def litellm_config(provider: str, gate: str, retries: int | None = None) -> str:
    """LiteLLM's model list: per scenario `gated.NAME` (through lockgate's `provider` route)
    and `raw.NAME` (straight to the fault server), for Chat (`openai/`) and, as
    `anthropic.gated.NAME` / `anthropic.raw.NAME`, Messages (`anthropic/`)."""
    fallback = _fallback_scenarios()
    entries = []
    for scenario in ALL_SCENARIOS:
        route = "provider-fallback" if scenario.name in fallback else "provider"
        for kind, chat_base, messages_base in (
            ("gated", f"{gate}/{route}/v1", f"{gate}/{route}"),
            ("raw", f"{provider}/v1", provider),
        ):
            for prefix, model, base in (
                ("", f"openai/{scenario.name}", chat_base),
                ("anthropic.", f"anthropic/{scenario.name}", messages_base),
            ):
                entries.append(
                    f"""\
  - model_name: {prefix}{kind}.{scenario.name}
    litellm_params:
      model: {model}
      api_base: {base}
      api_key: {FAKE_UPSTREAM_KEY}
"""
                )
    router = "" if retries is None else f"router_settings:\n  num_retries: {retries}\n"
    return "model_list:\n" + "".join(entries) + "litellm_settings:\n  telemetry: false\n" + router


def _where(
    topology: str, gate: str, litellm: str, fault: Fault, anthropic: bool
) -> tuple[str, str]:
    """The base URL and the model a client asks, for one topology."""
    suffix = "" if anthropic else "/v1"
    prefix = "anthropic." if anthropic else ""
    fallback = "-fallback" if fault.fallback else ""
    if topology == "gate":
        return f"{gate}/provider{fallback}{suffix}", fault.name
    if topology == "litellm":
        return f"{litellm}{suffix}", f"{prefix}raw.{fault.name}"
    if topology == "L→G":
        return f"{litellm}{suffix}", f"{prefix}gated.{fault.name}"
    route = "litellm-anthropic" if anthropic else "litellm"
    return f"{gate}/{route}{fallback}{suffix}", f"{prefix}raw.{fault.name}"


async def measure_one(
    server: FaultServer,
    gate: str,
    litellm: str,
    fault: Fault,
    topology: str,
    anthropic: bool,
    key: str,
) -> Measured:
    url, model = _where(topology, gate, litellm, fault, anthropic)
    run = secrets.token_hex(8)
    seen = len(server.received)
    driver = anthropic_stream if anthropic else openai_stream
    outcome = await driver(
        url, model, max_retries=2, read_timeout=CLIENT_TIMEOUT, api_key=key, run=run
    )
    await asyncio.sleep(0.3)
    requests = server.of_run(run, (fault.name, FALLBACK_MODEL))
    return Measured(
        scenario=fault.name,
        topology=topology,
        client="anthropic" if anthropic else "openai",
        expect=fault.expect,
        verdict=verdict(outcome, fault),
        tool_call_reached_client=bool(outcome.calls),
        calls=outcome.call_names,
        finish=outcome.finish,
        error=outcome.error,
        attempts=len(requests),
        gaps=server.gaps(requests),
        strays=sum(1 for request in server.received[seen:] if request.run != run),
        elapsed=round(outcome.elapsed, 2),
    )


def table(runs: Sequence[Measured]) -> str:
    lines = [
        "| fault | client | topology | client saw | tool call reached client | finish "
        "| error (type: message) | attempts at provider (s between) | elapsed s |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in runs:
        error = (run.error or "").replace("|", "\\|")
        reached = f"yes ({run.calls})" if run.tool_call_reached_client else "no"
        gaps = f" ({', '.join(f'{gap:g}' for gap in run.gaps)})" if run.gaps else ""
        lines.append(
            f"| {run.scenario} | {run.client} | {run.topology} | {run.verdict} | {reached} "
            f"| {run.finish or '-'} | {error} | {run.attempts}{gaps} | {run.elapsed:.2f} |"
        )
    return "\n".join(lines)


def _cell(run: Measured) -> str:
    reached = f"call reached ({run.calls})" if run.tool_call_reached_client else "no call"
    if run.verdict in ("error", "full answer"):
        return f"{run.verdict}; {reached}"
    return f"**{run.verdict}** (finish {run.finish or 'none'}); {reached}"


def matrix(runs: Sequence[Measured]) -> str:
    """Fault by topology, per client: what the client ended with, and whether a tool call
    reached it."""
    lines: list[str] = []
    for client in dict.fromkeys(run.client for run in runs):
        chosen = [run for run in runs if run.client == client]
        topologies = list(dict.fromkeys(run.topology for run in chosen))
        lines.append(f"{client} SDK:\n")
        lines.append("| fault | " + " | ".join(topologies) + " |")
        lines.append("| --- |" + " --- |" * len(topologies))
        for scenario in dict.fromkeys(run.scenario for run in chosen):
            cells = {run.topology: _cell(run) for run in chosen if run.scenario == scenario}
            row = " | ".join(cells.get(topology, "-") for topology in topologies)
            lines.append(f"| {scenario} | {row} |")
        lines.append("")
    return "\n".join(lines)


async def measure(
    litellm_command: Path, only: Sequence[str], anthropic: bool, retries: int | None = None
) -> list[Measured]:
    faults = [f for f in (*GATE_FAULTS, *GATEWAY_FAULTS) if not only or f.name in only]
    runs: list[Measured] = []
    with tempfile.TemporaryDirectory(prefix="lockgate-litellm-") as folder:
        async with FaultServer({s.name: s for s in ALL_SCENARIOS}) as server:
            gate_port, litellm_port = free_port(), free_port()
            gate_origin = f"http://127.0.0.1:{gate_port}"
            litellm_origin = f"http://127.0.0.1:{litellm_port}"
            gate_config = Path(folder) / "lockgate.yaml"
            gate_config.write_text(lockgate_config(gate_port, server.origin, litellm_origin))
            litellm_yaml = Path(folder) / "litellm.yaml"
            litellm_yaml.write_text(litellm_config(server.origin, gate_origin, retries))
            async with contextlib.AsyncExitStack() as stack:
                gate = await stack.enter_async_context(lockgate_proxy(gate_config, gate_port))
                key = "sk-test-litellm-master-" + secrets.token_hex(24)
                litellm = await stack.enter_async_context(
                    litellm_proxy(litellm_command, litellm_yaml, litellm_port, key)
                )
                clients = (False, True) if anthropic else (False,)
                for fault in faults:
                    for use_anthropic in clients:
                        for topology in TOPOLOGIES:
                            if use_anthropic and topology == "gate":
                                continue  # measured by proxy_faults
                            run = await measure_one(
                                server,
                                gate.origin,
                                litellm.origin,
                                fault,
                                topology,
                                use_anthropic,
                                key,
                            )
                            print(
                                f"{fault.name:28} {run.client:9} {topology:7} {run.verdict:18} "
                                f"call={run.calls} finish={run.finish} attempts={run.attempts} "
                                f"{run.elapsed:.2f}s {run.error or ''}",
                                file=sys.stderr,
                            )
                            runs.append(run)
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m interop.gateways.litellm_topologies",
        description="LiteLLM's proxy in both topologies around lockgate proxy.",
    )
    parser.add_argument("--litellm", type=Path, default=DEFAULT_LITELLM, help="the litellm command")
    parser.add_argument("--json", type=Path, help="also write every run as a JSON line here")
    parser.add_argument("--only", action="append", default=[], help="only this scenario")
    parser.add_argument(
        "--anthropic", action="store_true", help="also the anthropic SDK on /v1/messages"
    )
    parser.add_argument(
        "--litellm-retries",
        type=int,
        metavar="N",
        help="LiteLLM's router_settings.num_retries (default: LiteLLM's own, 2)",
    )
    args = parser.parse_args(argv)
    if args.litellm_retries is not None and args.litellm_retries < 0:
        parser.error("--litellm-retries must be 0 or more")
    if not args.litellm.is_file():
        parser.error(f"{args.litellm}: no such command (install litellm[proxy] first)")
    known = {fault.name for fault in (*GATE_FAULTS, *GATEWAY_FAULTS)}
    unknown = [name for name in args.only if name not in known]
    if unknown:
        parser.error(f"unknown scenario {unknown[0]!r} (known: {', '.join(sorted(known))})")
    stop_on_sigterm()
    runs = asyncio.run(measure(args.litellm, args.only, args.anthropic, args.litellm_retries))
    print(table(runs))
    print()
    print(matrix(runs))
    if args.json is not None:
        try:
            args.json.write_text("".join(json.dumps(asdict(run)) + "\n" for run in runs))
        except OSError as exc:
            print(f"cannot write {args.json}: {exc.strerror}", file=sys.stderr)
            return 74
    return 0


if __name__ == "__main__":
    sys.exit(main())
