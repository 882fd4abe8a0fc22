"""`lockgate serve`: a scripted, fault-injecting provider on loopback."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from . import process
from .args import one_line, provider_names
from .codes import EXIT_OK, UsageError
from .lab import list_scenarios, served_scenario

if TYPE_CHECKING:
    from pathlib import Path

    from ..cassette.serving import Exchange
    from ..scripted.script import Turn


def _cassette_exchanges(args: argparse.Namespace, target: Path) -> list[Exchange]:
    """`--cassette` with its `--fault`s: the exchanges to serve; UsageError (one line) for a
    cassette that cannot be read, protocols mixed, or a fault that does not fit."""
    from ..cassette.format import CassetteError, load_all
    from ..cassette.serving import exchanges, parse_fault_option, protocol_of

    try:
        options = [parse_fault_option(spec) for spec in args.fault]
    except ValueError as exc:
        raise UsageError(f"invalid --fault: {one_line(str(exc))}") from None
    try:
        cassettes = load_all(target)
    except CassetteError as exc:
        raise UsageError(f"invalid cassette: {one_line(str(exc))}") from None
    try:
        protocol = protocol_of(cassettes)
    except ValueError as exc:
        raise UsageError(f"{one_line(str(target))}: {exc}") from None
    if protocol not in provider_names():
        raise UsageError(f"invalid cassette {one_line(str(target))}: unknown protocol {protocol!r}")
    if args.provider is not None and args.provider != protocol:
        raise UsageError(f"the cassettes speak {protocol}, not --provider {args.provider}")
    try:
        return exchanges(cassettes, options, timing=args.timing)
    except ValueError as exc:
        raise UsageError(f"invalid --fault: {one_line(str(exc))}") from None


async def serve(args: argparse.Namespace) -> int:
    from ..display import visible
    from ..files import FileProblem, read_regular
    from ..lab.server import serve_script
    from ..providers import DEFAULT_PROVIDER
    from ..scripted.script import MAX_SCRIPT_BYTES, ScriptError, load_script

    provider: str = args.provider or DEFAULT_PROVIDER
    if args.list:
        return list_scenarios([provider], args.json)
    if args.json:
        raise UsageError("--json only goes with --list here (serve logs plain lines)")
    cassette_target = getattr(args, "cassette", None)
    if cassette_target is None:
        for flag, value, default in (
            ("--fault", args.fault, []),
            ("--timing", args.timing, "fast"),
            ("--match", args.match, "order"),
        ):
            if value != default:
                raise UsageError(f"{flag} only goes with --cassette")
    select: Callable[[Any], Turn | None] | None = None
    if cassette_target is not None:
        served = _cassette_exchanges(args, cassette_target)
        provider = served[0].cassette.protocol
        turns = [exchange.turn for exchange in served]
        name = one_line(str(cassette_target))
        if args.match == "request":
            from ..cassette.serving import RequestMatcher

            select = RequestMatcher(served)
        if args.fault:
            for exchange in served:
                print(f"lockgate serve: {one_line(exchange.describe())}", file=sys.stderr)
    elif args.script is not None:
        try:
            raw = read_regular(args.script, MAX_SCRIPT_BYTES)  # a pipe or device: never a wait
        except FileProblem as exc:
            raise UsageError(f"script: {exc}") from None
        try:
            script = load_script(raw.decode("utf-8"))
        except (ScriptError, UnicodeDecodeError) as exc:
            raise UsageError(f"invalid script {args.script}: {exc}") from None
        if script.provider is not None:
            if script.provider not in provider_names():
                raise UsageError(
                    f"invalid script {args.script}: unknown provider {script.provider!r}"
                )
            if args.provider is not None and args.provider != script.provider:
                raise UsageError(
                    f"the script speaks {script.provider}, not --provider {args.provider}"
                )
            provider = script.provider
        turns = script.turns
        name = one_line(str(args.script))  # a path may hold any byte
    else:
        scenario = served_scenario(args.scenario)
        if not scenario.runs_on(provider):
            raise UsageError(f"scenario {scenario.name} does not run on {provider}")
        turns = scenario.turns()
        name = args.scenario

    def log(line: str) -> None:
        print(f"lockgate serve: {visible(line, multiline=False)}", file=sys.stderr, flush=True)

    with process.interrupt_signal() as interrupted:
        try:
            context = serve_script(
                turns,
                args.host,
                args.port,
                provider=provider,
                log=log,
                select=select,
                websocket=args.websocket == "serve",
            )
            server = await context.__aenter__()
        except OSError as exc:
            raise UsageError(f"cannot listen on {args.host}:{args.port}: {exc.strerror}") from None
        try:
            # The stop signal is already handled: a signal right after this line stops
            # the server cleanly (exit 0).
            print(
                f"serving {name} ({provider}, {len(turns)} turns) at {server.base_url}",
                flush=True,
            )
            await interrupted.wait()
        finally:
            await context.__aexit__(None, None, None)
    print(f"lockgate serve: stopped after {len(server.requests)} requests", file=sys.stderr)
    return EXIT_OK
