"""Gateway-style faults through `lockgate proxy --config` with retries and a fall-back.

Run from the repository root (about 3 minutes; loopback only, fake keys):

    .venv/bin/python -m interop.gateways.proxy_faults [--json FILE] [--only NAME]...

It starts the loopback fault server (`upstream.FaultServer`) in this process and
`lockgate proxy --config` as a child with two routes to it: `provider` (retries: 2,
max_wait: 5 s; idle timeout 2 s) and `provider-fallback` (retries: 1, one fall-back upstream
whose `model` is the healthy scenario). Each scenario of `scenarios.GATEWAY_FAULTS` (a 429
with `retry-after: 1` once, a 500 once, a reset before the head once, a persistent 503 with
the fall-back and without one, silence once, a cut mid-answer: a reset, and a clean end) is
requested by the official `openai` SDK with its default retries (2) and with
`max_retries=0`, and by the `anthropic` SDK (default retries); for comparison, also
straight at the fault server with the `openai` SDK's default retries (`direct`). Printed
per run: what the client ended with (`clients.verdict`), its error, the attempts that
reached the fault server, the elapsed time, and the deltas of the proxy's `/metrics`
counters (`lockgate_proxy_retries_total`, `lockgate_proxy_fallbacks_total`, refusals by
kind). The rule checked: a fault is retried only while nothing of the answer reached the
client; a cut mid-answer reaches the client as an error, is never retried by the proxy,
and never ends as a success.

Exit status: 0 when every run through the proxy ended as its scenario expects, else 1 (2: bad
arguments; 74: the JSON file could not be written).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import secrets
import sys
import tempfile
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import asdict, dataclass
from pathlib import Path

from .clients import Outcome, anthropic_stream, openai_stream, verdict
from .processes import (
    Metrics,
    free_port,
    lockgate_proxy,
    read_metrics,
    routes_config,
    stop_on_sigterm,
)
from .scenarios import ALL_SCENARIOS, FALLBACK_MODEL, GATEWAY_FAULTS, Fault
from .upstream import FaultServer

__all__ = ["Client", "Run", "main", "proxy_config"]

Driver = Callable[..., Awaitable[Outcome]]


@dataclass(frozen=True, slots=True)
class Client:
    """One way of asking: an SDK, its retries, and whether it goes through the proxy."""

    label: str
    driver: Driver
    max_retries: int
    protocol: str  # "chat" or "anthropic"
    through_proxy: bool = True


CLIENTS = (
    Client("openai (retries 2)", openai_stream, 2, "chat"),
    Client("openai (max_retries=0)", openai_stream, 0, "chat"),
    Client("anthropic (retries 2)", anthropic_stream, 2, "anthropic"),
    Client("direct: openai (retries 2)", openai_stream, 2, "chat", through_proxy=False),
)


@dataclass(frozen=True, slots=True)
class Run:
    """One scenario asked by one client."""

    scenario: str
    client: str
    expect: str
    verdict: str
    text: str
    calls: str
    finish: str | None
    error: str | None
    attempts: int
    gaps: list[float]  # seconds between the attempts at the fault server
    elapsed: float
    retries: float | None
    fallbacks: float | None
    refusals: dict[str, float]
    outcomes: dict[str, float]

    @property
    def as_expected(self) -> bool:
        wanted = "full answer" if self.expect == "success" else "error"
        return self.verdict == wanted


def proxy_config(port: int, provider: str) -> str:
    """The proxy's YAML: the two routes to `provider`."""
    return routes_config(port, [("provider", provider, FALLBACK_MODEL)])


def base_url(origin: str, route: str, protocol: str) -> str:
    """Where an SDK is pointed: the OpenAI SDK takes `…/v1`, Anthropic's the root."""
    root = f"{origin}/{route}" if route else origin
    return root + "/v1" if protocol == "chat" else root


async def run_one(
    server: FaultServer,
    proxy: str | None,
    fault: Fault,
    client: Client,
    *,
    read_timeout: float = 20.0,
) -> Run:
    route = "provider-fallback" if fault.fallback else "provider"
    run = secrets.token_hex(8)
    before = await read_metrics(proxy) if proxy else None
    if proxy is not None:
        url = base_url(proxy, route, client.protocol)
    else:
        url = base_url(server.origin, "", client.protocol)
    outcome = await client.driver(
        url, fault.name, max_retries=client.max_retries, read_timeout=read_timeout, run=run
    )
    await asyncio.sleep(0.3)  # the proxy records its side after the client's end
    requests = server.of_run(run, (fault.name, FALLBACK_MODEL))
    retries = fallbacks = None
    refusals: dict[str, float] = {}
    outcomes: dict[str, float] = {}
    if proxy is not None and before is not None:
        delta: Metrics = (await read_metrics(proxy)).minus(before)
        retries = delta.value("lockgate_proxy_retries_total", route=route)
        fallbacks = delta.value("lockgate_proxy_fallbacks_total", route=route)
        kinds = delta.kinds("lockgate_proxy_refusals_total", "kind", route=route)
        refusals = {kind: count for kind, count in kinds.items() if count}
        ends = delta.kinds("lockgate_proxy_requests_total", "outcome", route=route)
        outcomes = {kind: count for kind, count in ends.items() if count}
    return Run(
        scenario=fault.name,
        client=client.label,
        expect=fault.expect,
        verdict=verdict(outcome, fault),
        text=outcome.text,
        calls=outcome.call_names,
        finish=outcome.finish,
        error=outcome.error,
        attempts=len(requests),
        gaps=server.gaps(requests),
        elapsed=round(outcome.elapsed, 2),
        retries=retries,
        fallbacks=fallbacks,
        refusals=refusals,
        outcomes=outcomes,
    )


def table(runs: Sequence[Run]) -> str:
    """The runs as a Markdown table."""
    lines = [
        "| fault | client | client saw | error (type: message) | text seen | calls "
        "| attempts upstream (s between) | elapsed s | proxy retries | proxy fall-backs "
        "| proxy outcome / refusal |",
        "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |",
    ]
    for run in runs:
        number = "-" if run.retries is None else f"{run.retries:g}"
        fallbacks = "-" if run.fallbacks is None else f"{run.fallbacks:g}"
        proxy_side = ", ".join(
            [f"{k} {v:g}" for k, v in run.outcomes.items()]
            + [f"refused {k} {v:g}" for k, v in run.refusals.items()]
        )
        error = (run.error or "").replace("|", "\\|")
        gaps = f" ({', '.join(f'{gap:g}' for gap in run.gaps)})" if run.gaps else ""
        lines.append(
            f"| {run.scenario} | {run.client} | {run.verdict} | {error} "
            f"| {json.dumps(run.text) if run.text else '-'} | {run.calls} "
            f"| {run.attempts}{gaps} | {run.elapsed:.2f} | {number} | {fallbacks} "
            f"| {proxy_side or '-'} |"
        )
    return "\n".join(lines)


async def measure(only: Sequence[str]) -> list[Run]:
    faults = [fault for fault in GATEWAY_FAULTS if not only or fault.name in only]
    runs: list[Run] = []
    with tempfile.TemporaryDirectory(prefix="lockgate-gateways-") as folder:
        async with FaultServer({s.name: s for s in ALL_SCENARIOS}) as server:
            config = Path(folder) / "proxy.yaml"
            port = free_port()
            config.write_text(proxy_config(port, server.origin))
            async with lockgate_proxy(config, port) as proxy:
                for fault in faults:
                    for client in CLIENTS:
                        origin = proxy.origin if client.through_proxy else None
                        run = await run_one(server, origin, fault, client)
                        print(
                            f"{fault.name:24} {client.label:28} {run.verdict:18} "
                            f"attempts={run.attempts} {run.elapsed:.2f}s "
                            f"retries={run.retries} fallbacks={run.fallbacks} {run.error or ''}",
                            file=sys.stderr,
                        )
                        runs.append(run)
    return runs


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m interop.gateways.proxy_faults",
        description="Gateway-style faults through lockgate proxy with retries and a fall-back.",
    )
    parser.add_argument("--json", type=Path, help="also write every run as a JSON line here")
    parser.add_argument(
        "--only", action="append", default=[], help="run only this scenario (repeatable)"
    )
    args = parser.parse_args(argv)
    known = {fault.name for fault in GATEWAY_FAULTS}
    unknown = [name for name in args.only if name not in known]
    if unknown:
        parser.error(f"unknown scenario {unknown[0]!r} (known: {', '.join(sorted(known))})")
    stop_on_sigterm()
    runs = asyncio.run(measure(args.only))
    print(table(runs))
    if args.json is not None:
        try:
            args.json.write_text("".join(json.dumps(asdict(run)) + "\n" for run in runs))
        except OSError as exc:
            print(f"cannot write {args.json}: {exc.strerror}", file=sys.stderr)
            return 74
    proxied = [run for run in runs if not run.client.startswith("direct")]
    unexpected = [run for run in proxied if not run.as_expected]
    for run in unexpected:
        print(f"UNEXPECTED: {run.scenario} / {run.client}: {run.verdict}", file=sys.stderr)
    return 1 if unexpected else 0


if __name__ == "__main__":
    sys.exit(main())
