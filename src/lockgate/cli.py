"""The `lockgate` command line: `run` (live, opt-in) and `lab` (offline failure lab).

Exit codes: 0 success (lab: every scenario as expected); 1 provider failure, turn limit or a
lab scenario not as expected; 2 usage or configuration error; 130 interrupted.
"""

from __future__ import annotations

import argparse
import asyncio
import os
import sys
import tempfile
from collections.abc import Sequence
from pathlib import Path
from typing import TextIO

import httpx
from rich.console import Console
from rich.table import Table

from . import __version__
from .boundary import StreamingModelClient
from .display import HumanDisplay, JsonLinesDisplay, Redactor
from .events import Observer
from .fixture import create_fixture
from .lab.runner import LabResult, run_scenario
from .lab.scenarios import SCENARIOS, SCENARIOS_BY_NAME
from .providers.openai_responses import ResponsesCodec
from .providers.openai_transport import OpenAIResponsesTransport
from .session import SessionOutcome, run_session

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
DEFAULT_MODEL = "gpt-4.1-mini"


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> None:  # type: ignore[override]
        self.print_usage(sys.stderr)
        self.exit(EXIT_USAGE, f"lockgate: error: {message}\n")


def _positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a whole number") from None
    if value < 1:
        raise argparse.ArgumentTypeError("must be at least 1")
    return value


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

    lab = commands.add_parser("lab", help="run the offline failure laboratory")
    lab.add_argument(
        "--scenario",
        choices=[scenario.name for scenario in SCENARIOS],
        metavar="NAME",
        help="run one scenario with its full trace: " + ", ".join(s.name for s in SCENARIOS),
    )
    lab.add_argument("--json", action="store_true", help="trace as JSON lines on stdout")
    return parser


def _observer(json_lines: bool, redact: Redactor) -> Observer:
    if json_lines:
        return JsonLinesDisplay(sys.stdout, redact=redact)
    return HumanDisplay(sys.stdout, sys.stderr, redact=redact)


def _print_outcome(outcome: SessionOutcome, json_lines: bool, redact: Redactor) -> None:
    if json_lines:
        JsonLinesDisplay(sys.stdout, redact=redact).emit(
            {
                "event": "final",
                "stopped": outcome.stopped,
                "executed_tools": outcome.executed_tools,
                "file": "calculator.py",
                "source": outcome.final_source,
            }
        )
        return
    sys.stdout.write(
        redact(
            f"\nstopped: {outcome.stopped}\n"
            f"executed tools: {outcome.executed_tools}\n"
            f"final calculator.py:\n{outcome.final_source}"
        )
    )
    if not outcome.final_source.endswith("\n"):
        sys.stdout.write("\n")
    sys.stdout.flush()


async def _run_live(args: argparse.Namespace, api_key: str) -> int:
    redact = Redactor([api_key])
    observer = _observer(args.json, redact)
    transport = OpenAIResponsesTransport(api_key=api_key, base_url=args.base_url)
    client = StreamingModelClient(ResponsesCodec(args.model), transport, observer=observer)
    with tempfile.TemporaryDirectory(prefix="lockgate-run-") as parent:
        try:
            outcome = await run_session(
                create_fixture(Path(parent)),
                client,
                allow_execution=args.allow_execution,
                max_turns=args.max_turns,
                observer=observer,
            )
        finally:
            await transport.aclose()
        _print_outcome(outcome, args.json, redact)
    return EXIT_OK if outcome.outcome == "model_finished" else EXIT_FAILED


def _lab_table(results: Sequence[LabResult], out: TextIO) -> None:
    table = Table(title="lockgate lab (in-process replay)")
    for column in ("scenario", "expected", "observed", "tools executed", "stream closed"):
        table.add_column(column)
    table.add_column("opening attempts", justify="right")
    table.add_column("result")
    for result in results:
        table.add_row(
            result.scenario.name,
            result.scenario.expect.outcome,
            result.observed,
            str(result.tools_executed),
            "yes" if result.streams_closed else "NO",
            str(result.attempts),
            "ok" if result.as_expected else "NOT AS EXPECTED: " + "; ".join(result.problems),
        )
    Console(file=out, width=160, highlight=False).print(table)


async def _run_lab(args: argparse.Namespace) -> int:
    if args.scenario is None:
        results = [await run_scenario(scenario) for scenario in SCENARIOS]
        _lab_table(results, sys.stdout)
        failed = [result for result in results if not result.as_expected]
        print(f"{len(results) - len(failed)} of {len(results)} scenarios behaved as expected")
        return EXIT_OK if not failed else EXIT_FAILED
    scenario = SCENARIOS_BY_NAME[args.scenario]
    redact = Redactor()
    result = await run_scenario(scenario, _observer(args.json, redact))
    _print_outcome(
        SessionOutcome(result.observed, result.stopped, result.tools_executed, result.final_source),
        args.json,
        redact,
    )
    if not result.as_expected:
        print(
            f"scenario {scenario.name}: NOT AS EXPECTED: {'; '.join(result.problems)}",
            file=sys.stderr,
        )
        return EXIT_FAILED
    print(f"scenario {scenario.name}: as expected ({scenario.summary})", file=sys.stderr)
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
            return asyncio.run(_run_live(args, api_key))
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
