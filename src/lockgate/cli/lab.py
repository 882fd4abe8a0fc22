"""`lockgate lab`: the failure laboratory's runs, table, trace and scenario list."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import TYPE_CHECKING, Any, TextIO

from .args import provider_names
from .codes import EXIT_FAILED, EXIT_OK, UsageError
from .output import observer, print_outcome
from .process import temporary_directory, until_interrupted

if TYPE_CHECKING:
    from ..cassette.judge import LabReport
    from ..lab.runner import LabResult
    from ..lab.via_proxy import ProxyLabResult
    from ..scripted.scenario import Scenario


def _lab_table(results: Sequence[LabResult], out: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="lockgate lab")
    for column in ("scenario", "provider", "transport", "expected", "observed"):
        table.add_column(column)
    for column in ("tools executed", "stream closed", "opening attempts", "server requests"):
        table.add_column(column, justify="right")
    table.add_column("client closed early", justify="right")
    table.add_column("result")
    for result in results:
        server = result.server
        table.add_row(
            result.scenario.name,
            result.provider,
            result.transport,
            result.scenario.expect.outcome,
            result.observed,
            str(result.tools_executed),
            "yes" if result.streams_closed else "NO",
            str(result.attempts),
            str(server.requests) if server else "-",
            str(server.closed_early) if server else "-",
            "ok" if result.as_expected else "NOT AS EXPECTED: " + "; ".join(result.problems),
        )
    # On a terminal, fit its width; into a file or a pipe, never wrap.
    width = None if out.isatty() else 1000
    Console(file=out, width=width, highlight=False, soft_wrap=False).print(table)


def _lab_record(result: LabResult) -> dict[str, Any]:
    """One JSON record per lab run, with the same columns as the table."""
    server = result.server
    return {
        "event": "lab_run",
        "scenario": result.scenario.name,
        "provider": result.provider,
        "transport": result.transport,
        "expected": result.scenario.expect.outcome,
        "observed": result.observed,
        "tools_executed": result.tools_executed,
        "stream_closed": result.streams_closed,
        "opening_attempts": result.attempts,
        "server_requests": server.requests if server else None,
        "client_closed_early": server.closed_early if server else None,
        "as_expected": result.as_expected,
        "problems": result.problems,
    }


async def run_lab(args: argparse.Namespace) -> int:
    return await until_interrupted(_lab(args))


def scenario_named(name: str) -> Scenario:
    from ..lab.scenarios import SCENARIOS_BY_NAME

    scenario = SCENARIOS_BY_NAME.get(name)
    if scenario is None:
        raise UsageError(f"unknown scenario {name!r} (see lockgate lab --help)")
    return scenario


def served_scenario(name: str) -> Scenario:
    """A lab scenario, or a WebSocket fault (`ws-…`: `lab --via proxy` and `serve` play it,
    on the Responses WebSocket)."""
    from ..lab.via_websocket import WEBSOCKET_FAULTS_BY_NAME

    fault = WEBSOCKET_FAULTS_BY_NAME.get(name)
    return fault.scenario if fault is not None else scenario_named(name)


def list_scenarios(providers: Sequence[str], json_lines: bool) -> int:
    """One line per scenario that runs on any of `providers`: its name, the protocols it
    runs on, the transports, what it must show, and what it plays."""
    from ..display import JsonLinesDisplay
    from ..lab.scenarios import SCENARIOS

    chosen = [s for s in SCENARIOS if any(s.runs_on(provider) for provider in providers)]
    if json_lines:
        lines = JsonLinesDisplay(sys.stdout)
        for scenario in chosen:
            lines.emit(
                {
                    "event": "scenario",
                    "name": scenario.name,
                    "protocols": sorted(scenario.protocols or provider_names()),
                    "transports": sorted(scenario.transports),
                    "expected": scenario.expect.outcome,
                    "summary": scenario.summary,
                }
            )
        return EXIT_OK
    width = max(len(scenario.name) for scenario in chosen)
    for scenario in chosen:
        protocols = "all" if scenario.protocols is None else ",".join(sorted(scenario.protocols))
        http = " (http only)" if scenario.transports == frozenset({"http"}) else ""
        print(
            f"{scenario.name:<{width}}  {protocols:<9}  {scenario.expect.outcome:<19}  "
            f"{scenario.summary}{http}"
        )
    print(f"{len(chosen)} scenarios")
    return EXIT_OK


def _proxy_table(results: Sequence[ProxyLabResult], out: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="lockgate lab --via proxy")
    for column in ("scenario", "provider", "naive client"):
        table.add_column(column)
    for column in ("requests", "passed", "withheld", "run executed", "expected"):
        table.add_column(column, justify="right")
    table.add_column("naive via proxy", justify="right")
    table.add_column("naive direct", justify="right")
    table.add_column("result")
    for result in results:
        table.add_row(
            result.scenario.name,
            result.provider,
            _naive_client(result),
            str(result.requests),
            str(result.passed),
            str(result.withheld),
            str(result.run_tools),
            str(result.expected_tools),
            str(result.naive_tools),
            str(result.direct_tools),
            "ok" if result.as_expected else "NOT AS EXPECTED: " + "; ".join(result.problems),
        )
    width = None if out.isatty() else 1000
    Console(file=out, width=width, highlight=False, soft_wrap=False).print(table)


def _naive_client(result: ProxyLabResult) -> str:
    """What the naive client did beyond sending `lockgate run`'s requests."""
    done = []
    if result.websocket:
        done.append("WebSocket")
    elif result.upgrade is not None:
        done.append(f"WebSocket first ({result.upgrade})")
    if result.declared:
        done.append("declares its tools")
    return ", ".join(done) or "as run"


def _proxy_record(result: ProxyLabResult) -> dict[str, Any]:
    return {
        "event": "lab_proxy_run",
        "scenario": result.scenario.name,
        "provider": result.provider,
        "declares_tools": result.declared,
        "websocket": result.websocket,
        "websocket_upgrade": result.upgrade,
        "requests": result.requests,
        "passed": result.passed,
        "withheld": result.withheld,
        "run_executed": result.run_tools,
        "naive_expected_via_proxy": result.expected_tools,
        "naive_executed_via_proxy": result.naive_tools,
        "naive_executed_direct": result.direct_tools,
        "as_expected": result.as_expected,
        "problems": list(result.problems),
    }


async def _via_proxy(args: argparse.Namespace, providers: Sequence[str]) -> int:
    """`lockgate lab --via proxy`: every scenario as naive client → proxy → serve."""
    from ..display import JsonLinesDisplay
    from ..lab.via_proxy import proxy_lab_runs, run_via_proxy
    from ..providers import provider as registry_entry

    gated = [name for name in providers if registry_entry(name).gateway is not None]
    if not gated:
        every = [name for name in provider_names() if registry_entry(name).gateway is not None]
        raise UsageError(
            f"the proxy does not gate {', '.join(providers)} (it gates {', '.join(every)})"
        )
    chosen = None if args.scenario is None else served_scenario(args.scenario)
    runs, skipped = proxy_lab_runs(chosen, gated)
    if not runs:
        where = args.provider if chosen is None else f"{args.provider} through the proxy"
        name = "no scenario" if chosen is None else f"scenario {chosen.name}"
        raise UsageError(f"{name} runs on {where}")
    results = []
    progress = sys.stderr.isatty() and not args.json
    for number, run in enumerate(runs, start=1):
        if progress:
            declared = ", tools declared" if run.declared else ""
            declared += ", WebSocket" if run.websocket else ""
            label = f"{number}/{len(runs)} {run.scenario.name} ({run.provider}{declared})"
            sys.stderr.write(f"\r\x1b[2Klab: {label}")
            sys.stderr.flush()
        results.append(
            await run_via_proxy(
                run.scenario, run.provider, declared=run.declared, websocket=run.websocket
            )
        )
    if progress:
        sys.stderr.write("\r\x1b[2K")
    failed = [result for result in results if not result.as_expected]
    if args.json:
        lines = JsonLinesDisplay(sys.stdout)
        for result in results:
            lines.emit(_proxy_record(result))
        for scenario, provider, reason in skipped:
            lines.emit(
                {
                    "event": "lab_proxy_skip",
                    "scenario": scenario.name,
                    "provider": provider,
                    "reason": reason,
                }
            )
    else:
        _proxy_table(results, sys.stdout)
        for scenario, provider, reason in skipped:
            print(f"skipped {scenario.name} ({provider}): {reason}")
        print(f"{len(results) - len(failed)} of {len(results)} runs through the proxy as expected")
    return EXIT_OK if not failed else EXIT_FAILED


def _cassette_table(report: LabReport, out: TextIO) -> None:
    from rich.console import Console
    from rich.table import Table

    table = Table(title="lockgate lab --cassettes")
    for column in ("cassette", "protocol"):
        table.add_column(column)
    for column in ("runs", "accepted", "refused", "violations", "undetectable"):
        table.add_column(column, justify="right")
    for row in report.rows:
        table.add_row(
            row.cassette,
            row.protocol,
            str(row.runs),
            str(row.accepted),
            str(row.refused),
            str(len(row.violations)),
            str(len(row.undetectable)),
        )
    width = None if out.isatty() else 1000
    Console(file=out, width=width, highlight=False, soft_wrap=False).print(table)


async def _cassette_lab(args: argparse.Namespace) -> int:
    """`lockgate lab --cassettes DIR`: every cassette through lockgate's own client,
    unfaulted and under its faults (`cassette.judge.lab`), on a virtual-time loop in a
    worker thread (a stall costs no time); an interruption stops it after the run under
    way."""
    import asyncio
    import threading
    from pathlib import Path

    from ..cassette.format import CassetteError, load_all
    from ..cassette.judge import lab
    from ..display import JsonLinesDisplay
    from .args import one_line

    for flag, given in (
        ("--scenario", args.scenario is not None),
        ("--list", args.list),
        ("--via", getattr(args, "via", None) is not None),
        ("--transport", args.transport != "both"),
    ):
        if given:
            raise UsageError(f"--cassettes plays the recorded exchanges; leave out {flag}")
    try:
        cassettes = load_all(Path(args.cassettes))
    except CassetteError as exc:
        raise UsageError(str(exc)) from None
    if args.provider != "all":
        cassettes = [c for c in cassettes if c.protocol == args.provider]
        if not cassettes:
            raise UsageError(f"no {args.provider} cassette in {args.cassettes}")
    unknown = sorted({c.protocol for c in cassettes} - set(provider_names()))
    if unknown:
        raise UsageError(f"cassettes of a protocol lockgate does not speak: {', '.join(unknown)}")
    stop = threading.Event()
    show = sys.stderr.isatty() and not args.json

    def progress(number: int, total: int, name: str) -> None:
        if show:
            sys.stderr.write(f"\r\x1b[2Klab: {number}/{total} {one_line(name)[:120]}")
            sys.stderr.flush()

    try:
        report = await asyncio.to_thread(
            lab, cassettes, budget=args.budget, seed=args.seed, stop=stop, progress=progress
        )
    except BaseException:
        stop.set()  # the worker stops after the run under way
        raise
    if show:
        sys.stderr.write("\r\x1b[2K")
    violations = report.violations
    if args.json:
        lines = JsonLinesDisplay(sys.stdout)
        for row in report.rows:
            base = row.baseline
            lines.emit(
                {
                    "event": "lab_cassette",
                    "cassette": row.cassette,
                    "protocol": row.protocol,
                    "runs": row.runs,
                    "accepted": row.accepted,
                    "refused": row.refused,
                    "violations": len(row.violations),
                    "undetectable": len(row.undetectable),
                    "unfaulted": base.kind,
                    "decision": None if base.decision is None else base.decision.as_json(),
                }
            )
        for violation in violations:
            lines.emit(
                {
                    "event": "lab_cassette_violation",
                    "cassette": violation.cassette,
                    "fault": violation.fault,
                    "reason": violation.reason,
                }
            )
        for change in report.undetectable:
            lines.emit(
                {
                    "event": "lab_cassette_undetectable",
                    "cassette": change.cassette,
                    "fault": change.fault,
                    "reason": change.reason,
                }
            )
        lines.emit(
            {
                "event": "lab_cassettes",
                "runs": report.runs,
                "violations": len(violations),
                "undetectable": len(report.undetectable),
            }
        )
    else:
        _cassette_table(report, sys.stdout)
        for violation in violations:
            fault = violation.fault or "unfaulted"
            print(one_line(f"VIOLATION {violation.cassette} {fault}: {violation.reason}"))
        if report.undetectable:
            print(
                f"{len(report.undetectable)} runs released another well-formed response: a "
                "dropped, duplicated or swapped event on a protocol without event numbers "
                "(chat, anthropic, gemini, bedrock) is not detectable from the bytes (--json lists "
                "them)"
            )
        print(f"{report.runs} runs, {len(violations)} violations")
    return EXIT_OK if not violations else EXIT_FAILED


async def _lab(args: argparse.Namespace) -> int:
    from pathlib import Path

    from ..credentials import Redactor
    from ..display import JsonLinesDisplay
    from ..lab.runner import lab_runs, run_scenario
    from ..session import SessionOutcome

    if args.list:
        if args.scenario is not None:
            raise UsageError("--list lists every scenario; leave out --scenario")
        return list_scenarios(
            provider_names() if args.provider == "all" else [args.provider], args.json
        )
    with temporary_directory("lockgate-lab-"):
        pass  # every run needs one: a missing temporary directory is said once, up front
    providers = provider_names() if args.provider == "all" else [args.provider]
    if getattr(args, "cassettes", None) is not None:
        return await _cassette_lab(args)
    if getattr(args, "budget", None) is not None:
        raise UsageError("--budget is for --cassettes")
    if getattr(args, "via", None) == "proxy":
        if args.transport != "both":
            raise UsageError("--via proxy plays over HTTP; leave out --transport")
        return await _via_proxy(args, providers)
    if args.scenario is None:
        runs = lab_runs(None, providers, args.transport)
        results = []
        progress = sys.stderr.isatty() and not args.json
        with temporary_directory("lockgate-lab-") as workspace:  # every run's fixture
            for number, (scenario, provider, kind) in enumerate(runs, start=1):
                if progress:
                    label = f"{number}/{len(runs)} {scenario.name} ({provider}, {kind})"
                    sys.stderr.write(f"\r\x1b[2Klab: {label}")
                    sys.stderr.flush()
                result = await run_scenario(
                    scenario, kind, provider=provider, workspace=Path(workspace)
                )
                results.append(result)
        if progress:
            sys.stderr.write("\r\x1b[2K")
        failed = [result for result in results if not result.as_expected]
        if args.json:
            lines = JsonLinesDisplay(sys.stdout)
            for result in results:
                lines.emit(_lab_record(result))
        else:
            _lab_table(results, sys.stdout)
            print(f"{len(results) - len(failed)} of {len(results)} runs behaved as expected")
        return EXIT_OK if not failed else EXIT_FAILED
    scenario = scenario_named(args.scenario)
    runs = lab_runs(scenario, providers, args.transport)
    if not runs:
        raise UsageError(
            f"scenario {scenario.name} does not run on {args.provider} over {args.transport}"
        )
    redact = Redactor()
    code = EXIT_OK
    for _, provider, kind in runs:
        print(f"== {scenario.name} ({provider}, {kind}) ==", file=sys.stderr)
        display = observer(args.json, redact)
        result = await run_scenario(scenario, kind, display, provider=provider)
        print_outcome(
            SessionOutcome(
                result.observed, result.stopped, result.tools_executed, result.final_source
            ),
            result.usage,
            display,
            redact,
        )
        if isinstance(display, JsonLinesDisplay):
            display.emit(_lab_record(result))
        if result.as_expected:
            print(f"scenario {scenario.name} ({provider}, {kind}): as expected", file=sys.stderr)
        else:
            problems = "; ".join(result.problems)
            print(
                f"scenario {scenario.name} ({provider}, {kind}): NOT AS EXPECTED: {problems}",
                file=sys.stderr,
            )
            code = EXIT_FAILED
    return code
