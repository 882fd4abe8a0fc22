"""`lockgate serve`: a scripted, fault-injecting provider on loopback."""

from __future__ import annotations

import argparse
import sys

from . import process
from .args import one_line, provider_names
from .codes import EXIT_OK, UsageError
from .lab import list_scenarios, scenario_named


async def serve(args: argparse.Namespace) -> int:
    from ..display import visible
    from ..lab.server import serve_script
    from ..providers import DEFAULT_PROVIDER
    from ..scripted.script import MAX_SCRIPT_BYTES, ScriptError, load_script

    provider: str = args.provider or DEFAULT_PROVIDER
    if args.list:
        return list_scenarios([provider], args.json)
    if args.json:
        raise UsageError("--json only goes with --list here (serve logs plain lines)")
    if args.script is not None:
        try:
            with args.script.open("rb") as handle:
                raw = handle.read(MAX_SCRIPT_BYTES + 1)
        except OSError as exc:
            raise UsageError(f"cannot read script {args.script}: {exc.strerror}") from None
        except ValueError as exc:  # e.g. a NUL byte in the path
            raise UsageError(f"cannot read script {args.script!r}: {exc}") from None
        if len(raw) > MAX_SCRIPT_BYTES:
            raise UsageError(f"script {args.script} is larger than {MAX_SCRIPT_BYTES} bytes")
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
        scenario = scenario_named(args.scenario)
        if not scenario.runs_on(provider):
            raise UsageError(f"scenario {scenario.name} does not run on {provider}")
        turns = scenario.turns()
        name = args.scenario

    def log(line: str) -> None:
        print(f"lockgate serve: {visible(line, multiline=False)}", file=sys.stderr, flush=True)

    with process.interrupt_signal() as interrupted:
        try:
            context = serve_script(turns, args.host, args.port, provider=provider, log=log)
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
