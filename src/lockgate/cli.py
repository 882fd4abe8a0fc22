"""The `lockgate` command line: `run` (live, opt-in), `lab` (failure lab), `serve`.

Exit codes: 0 success (lab: every scenario as expected); 1 provider failure, turn limit or a
lab scenario not as expected; 2 usage or configuration error; 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import ipaddress
import os
import signal
import sys
import tempfile
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import TextIO, TypeVar, cast

import httpx
from rich.console import Console
from rich.table import Table

from . import __version__
from .client import DEFAULT_DEADLINE_SECONDS, DEFAULT_IDLE_TIMEOUT_SECONDS, StreamingModelClient
from .conversation import Usage
from .display import HumanDisplay, JsonLinesDisplay, Redactor
from .events import Observer, UsageMeter, fan_out
from .fixture import create_fixture
from .lab.runner import LabResult, LabTransport, run_scenario
from .lab.scenarios import SCENARIOS, SCENARIOS_BY_NAME, Scenario
from .lab.script import ScriptError, load_script
from .lab.server import serve_script
from .providers.base import TransportOptions
from .providers.openai.transport import OpenAITransport
from .providers.responses.codec import ResponsesCodec
from .retry import RetryPolicy
from .session import SessionOutcome, run_session

Number = TypeVar("Number", int, float)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
DEFAULT_MODEL = "gpt-4.1-mini"
SDK_READ_TIMEOUT_MARGIN_SECONDS = 5.0


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"lockgate: error: {message}\n")


def _number(
    convert: Callable[[str], Number], what: str, valid: Callable[[Number], bool], rule: str
) -> Callable[[str], Number]:
    """An argparse type: parse with `convert`, then require `valid` (else: `rule`)."""

    def parse(text: str) -> Number:
        try:
            value = convert(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if not valid(value):
            raise argparse.ArgumentTypeError(rule)
        return value

    return parse


_positive_int = _number(int, "a whole number", lambda v: v >= 1, "must be at least 1")
_positive_seconds = _number(
    float, "a number of seconds", lambda v: 0 < v < 1e9, "must be a positive number of seconds"
)
_non_negative_seconds = _number(
    float, "a number of seconds", lambda v: 0 <= v < 1e9, "must be a non-negative number of seconds"
)
_fraction = _number(float, "a number", lambda v: 0 <= v < 1, "must be at least 0 and less than 1")
_port = _number(int, "a port number", lambda v: 0 <= v <= 65535, "must be between 0 and 65535")


def _loopback_host(text: str) -> str:
    host = "127.0.0.1" if text == "localhost" else text
    try:
        loopback = ipaddress.ip_address(host).is_loopback
    except ValueError:
        loopback = False
    if not loopback:
        raise argparse.ArgumentTypeError(f"{text!r} is not a loopback address")
    return host


def _base_url(text: str) -> str:
    try:
        url = httpx.URL(text)
    except (httpx.InvalidURL, TypeError):
        raise argparse.ArgumentTypeError(f"{text!r} is not a URL") from None
    if url.scheme not in {"http", "https"} or not url.host:
        raise argparse.ArgumentTypeError(f"{text!r} is not an http(s) URL")
    return text


def build_parser() -> argparse.ArgumentParser:
    parser = _Parser(prog="lockgate", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"lockgate {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = commands.add_parser("run", help="run the agent against a live Responses endpoint")
    run.add_argument("--model", default=DEFAULT_MODEL, help=f"model name (default {DEFAULT_MODEL})")
    run.add_argument("--base-url", type=_base_url, help="any Responses-compatible endpoint")
    run.add_argument(
        "--allow-execution",
        action="store_true",
        help="expose edit and test (the model may change files and run code)",
    )
    run.add_argument("--max-turns", type=_positive_int, default=10, help="turn limit (default 10)")
    run.add_argument("--json", action="store_true", help="events as JSON lines on stdout")
    run.add_argument(
        "--idle-timeout",
        type=_positive_seconds,
        default=DEFAULT_IDLE_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help="fail a response after this long without a byte (default 60)",
    )
    run.add_argument(
        "--continuation",
        choices=["stateless", "native"],
        default="stateless",
        help="stateless: full history, store false (default); native: store true and "
        "previous_response_id",
    )
    run.add_argument(
        "--encrypted-reasoning",
        choices=["auto", "on", "off"],
        default="auto",
        help="ask for encrypted reasoning to replay (auto: reasoning models only)",
    )
    run.add_argument(
        "--recover",
        action="store_true",
        help="answer rejected or truncated calls with error observations instead of stopping",
    )
    run.add_argument(
        "--recovery-budget",
        type=_positive_int,
        default=2,
        metavar="N",
        help="with --recover: stop after N recoveries in a row (default 2)",
    )
    retry = run.add_argument_group(
        "retry owner (environment: LOCKGATE_RETRY_ATTEMPTS, _BASE_DELAY, _MAX_DELAY, _JITTER)"
    )
    retry.add_argument("--retry-attempts", type=_positive_int, metavar="N", help="default 3")
    retry.add_argument(
        "--retry-base-delay", type=_non_negative_seconds, metavar="SECONDS", help="default 0.25"
    )
    retry.add_argument(
        "--retry-max-delay",
        type=_non_negative_seconds,
        metavar="SECONDS",
        help="longest wait honoured, also from the server (default 60)",
    )
    retry.add_argument(
        "--retry-jitter", type=_fraction, metavar="FRACTION", help="default 0.1 (±10%%)"
    )
    run.add_argument(
        "--deadline",
        type=_positive_seconds,
        default=DEFAULT_DEADLINE_SECONDS,
        metavar="SECONDS",
        help="fail a response that takes longer than this in total (default 600)",
    )

    lab = commands.add_parser("lab", help="run the offline failure laboratory")
    lab.add_argument(
        "--scenario",
        choices=[scenario.name for scenario in SCENARIOS],
        metavar="NAME",
        help="run one scenario with its full trace: " + ", ".join(s.name for s in SCENARIOS),
    )
    lab.add_argument(
        "--transport",
        choices=["inprocess", "http", "both"],
        default="both",
        help="replay in-process, over loopback HTTP through the SDK, or both (default)",
    )
    lab.add_argument("--json", action="store_true", help="trace as JSON lines on stdout")

    serve = commands.add_parser(
        "serve", help="serve a scripted, fault-injecting Responses provider on loopback"
    )
    source = serve.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--scenario",
        choices=[scenario.name for scenario in SCENARIOS],
        metavar="NAME",
        help="serve a lab scenario's turns",
    )
    source.add_argument("--script", type=Path, metavar="FILE", help="serve a JSON script")
    serve.add_argument("--host", type=_loopback_host, default="127.0.0.1", help="loopback only")
    serve.add_argument("--port", type=_port, default=0, help="port (default 0: an ephemeral port)")
    return parser


def _observer(json_lines: bool, redact: Redactor) -> Observer:
    if json_lines:
        return JsonLinesDisplay(sys.stdout, redact=redact)
    return HumanDisplay(sys.stdout, sys.stderr, redact=redact)


def _print_outcome(
    outcome: SessionOutcome, usage: Usage, json_lines: bool, redact: Redactor
) -> None:
    """The run's last words: stop line, tools executed, the final file, and usage last."""
    if json_lines:
        JsonLinesDisplay(sys.stdout, redact=redact).emit(
            {
                "event": "final",
                "stopped": outcome.stopped,
                "executed_tools": outcome.executed_tools,
                "file": "calculator.py",
                "source": outcome.final_source,
                "usage": dataclasses.asdict(usage),
            }
        )
        return
    source = outcome.final_source
    if not source.endswith("\n"):
        source += "\n"
    sys.stdout.write(
        redact(
            f"\nstopped: {outcome.stopped}\n"
            f"executed tools: {outcome.executed_tools}\n"
            f"final calculator.py:\n{source}"
            f"{usage.line()}\n"
        )
    )
    sys.stdout.flush()


async def _run_live(args: argparse.Namespace, api_key: str, retry: RetryPolicy) -> int:
    redact = Redactor([api_key])
    meter = UsageMeter()
    observer = fan_out(meter, _observer(args.json, redact))
    reasoning = {"auto": None, "on": True, "off": False}[args.encrypted_reasoning]
    codec = ResponsesCodec(
        args.model, continuation=args.continuation, encrypted_reasoning=reasoning
    )
    transport = OpenAITransport(
        TransportOptions(
            api_key=api_key,
            base_url=args.base_url,
            read_timeout=args.idle_timeout + SDK_READ_TIMEOUT_MARGIN_SECONDS,
        ),
        "responses",
    )
    client = StreamingModelClient(
        codec,
        transport,
        observer=observer,
        retry=retry,
        idle_timeout=args.idle_timeout,
        deadline=args.deadline,
    )
    with (
        tempfile.TemporaryDirectory(prefix="lockgate-run-") as parent,
        _interrupt_signal() as (interrupted),
    ):
        try:
            outcome = await run_session(
                create_fixture(Path(parent)),
                client,
                allow_execution=args.allow_execution,
                max_turns=args.max_turns,
                observer=observer,
                interrupt=interrupted.wait,
                recovery_budget=args.recovery_budget if args.recover else 0,
            )
        finally:
            await transport.aclose()
        _print_outcome(outcome, meter.total, args.json, redact)
    if outcome.outcome == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_OK if outcome.outcome == "model_finished" else EXIT_FAILED


@contextlib.contextmanager
def _interrupt_signal() -> Iterator[asyncio.Event]:
    """SIGINT/SIGTERM set an event instead of raising, so the run can stop cleanly."""
    loop = asyncio.get_running_loop()
    interrupted = asyncio.Event()
    installed = []
    for number in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(number, interrupted.set)
            installed.append(number)
    try:
        yield interrupted
    finally:
        for number in installed:
            loop.remove_signal_handler(number)


def _lab_table(results: Sequence[LabResult], out: TextIO) -> None:
    table = Table(title="lockgate lab")
    for column in ("scenario", "transport", "expected", "observed"):
        table.add_column(column)
    for column in ("tools executed", "stream closed", "opening attempts", "server requests"):
        table.add_column(column, justify="right")
    table.add_column("client closed early", justify="right")
    table.add_column("result")
    for result in results:
        server = result.server
        table.add_row(
            result.scenario.name,
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
    Console(file=out, width=200, highlight=False).print(table)


def _lab_json(result: LabResult) -> None:
    """One JSON line per lab run, with the same columns as the table."""
    server = result.server
    JsonLinesDisplay(sys.stdout).emit(
        {
            "event": "lab_run",
            "scenario": result.scenario.name,
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
    )


def _lab_runs(scenarios: Sequence[Scenario], transport: str) -> list[tuple[Scenario, LabTransport]]:
    wanted: tuple[LabTransport, ...] = (
        ("inprocess", "http") if transport == "both" else (cast(LabTransport, transport),)
    )
    return [(s, kind) for s in scenarios for kind in wanted if kind in s.transports]


async def _run_lab(args: argparse.Namespace) -> int:
    if args.scenario is None:
        results = [await run_scenario(s, kind) for s, kind in _lab_runs(SCENARIOS, args.transport)]
        failed = [result for result in results if not result.as_expected]
        if args.json:
            for result in results:
                _lab_json(result)
        else:
            _lab_table(results, sys.stdout)
            print(f"{len(results) - len(failed)} of {len(results)} runs behaved as expected")
        return EXIT_OK if not failed else EXIT_FAILED
    scenario = SCENARIOS_BY_NAME[args.scenario]
    runs = _lab_runs([scenario], args.transport)
    if not runs:
        print(f"lockgate: scenario {scenario.name} runs only over http", file=sys.stderr)
        return EXIT_USAGE
    redact = Redactor()
    code = EXIT_OK
    for _, kind in runs:
        print(f"== {scenario.name} ({kind}) ==", file=sys.stderr)
        result = await run_scenario(scenario, kind, _observer(args.json, redact))
        _print_outcome(
            SessionOutcome(
                result.observed, result.stopped, result.tools_executed, result.final_source
            ),
            result.usage,
            args.json,
            redact,
        )
        if result.as_expected:
            print(f"scenario {scenario.name} ({kind}): as expected", file=sys.stderr)
        else:
            problems = "; ".join(result.problems)
            print(
                f"scenario {scenario.name} ({kind}): NOT AS EXPECTED: {problems}", file=sys.stderr
            )
            code = EXIT_FAILED
    return code


async def _serve(args: argparse.Namespace) -> int:
    if args.script is not None:
        try:
            turns = load_script(args.script.read_text(encoding="utf-8"))
        except OSError as exc:
            print(f"lockgate: cannot read script {args.script}: {exc.strerror}", file=sys.stderr)
            return EXIT_USAGE
        except (ScriptError, UnicodeDecodeError) as exc:
            print(f"lockgate: invalid script {args.script}: {exc}", file=sys.stderr)
            return EXIT_USAGE
        name = str(args.script)
    else:
        turns = SCENARIOS_BY_NAME[args.scenario].turns()
        name = args.scenario
    try:
        context = serve_script(turns, args.host, args.port)
        server = await context.__aenter__()
    except OSError as exc:
        print(
            f"lockgate: cannot listen on {args.host}:{args.port}: {exc.strerror}", file=sys.stderr
        )
        return EXIT_USAGE
    try:
        print(f"serving {name} ({len(turns)} turns) at {server.base_url}", flush=True)
        with _interrupt_signal() as stop:
            await stop.wait()
    finally:
        await context.__aexit__(None, None, None)
    print(f"lockgate serve: stopped after {len(server.requests)} requests", file=sys.stderr)
    return EXIT_OK


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    secrets: list[str] = []
    try:
        if args.command == "run":
            api_key = os.environ.get("OPENAI_API_KEY", "").strip()
            if not api_key:
                print("lockgate: OPENAI_API_KEY is not set; no request was made", file=sys.stderr)
                return EXIT_USAGE
            secrets.append(api_key)
            try:
                retry = RetryPolicy.from_environment(
                    attempts=args.retry_attempts,
                    base_delay=args.retry_base_delay,
                    max_delay=args.retry_max_delay,
                    jitter=args.retry_jitter,
                )
            except ValueError as exc:
                print(f"lockgate: invalid retry policy: {exc}", file=sys.stderr)
                return EXIT_USAGE
            return asyncio.run(_run_live(args, api_key, retry))
        if args.command == "serve":
            return asyncio.run(_serve(args))
        return asyncio.run(_run_lab(args))
    except KeyboardInterrupt:
        print("stopped: interrupted", file=sys.stderr)
        return EXIT_INTERRUPTED
    except BrokenPipeError:  # the reader went away (e.g. `| head`): stop quietly
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except Exception as exc:  # a last line of defence: one line, never a traceback
        message = Redactor(secrets)(f"lockgate: internal error: {type(exc).__name__}: {exc}")
        print(message.splitlines()[0] if message else "lockgate: internal error", file=sys.stderr)
        return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
