"""The `lockgate` command line: `run` (live, opt-in), `lab` (failure lab), `serve`.

Exit codes: 0 success (lab: every scenario as expected); 1 provider failure, refusal, turn
limit or a lab scenario not as expected; 2 usage or configuration error; 74 output could
not be written; 130 interrupted; 141 stdout closed early.

Only the standard library is imported at module level: `--version`, `--help` and usage
errors answer at once, and a Ctrl-C during start-up is an ordinary interruption.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import dataclasses
import gc
import math
import os
import signal
import sys
import tempfile
from collections.abc import Awaitable, Callable, Iterator, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TextIO, TypeVar

from . import __version__, interrupts

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

    from .conversation import Usage
    from .credentials import Redactor
    from .display import HumanDisplay, JsonLinesDisplay
    from .lab.runner import LabResult
    from .lab.scenario import Scenario
    from .providers.base import Provider
    from .retry import RetryPolicy
    from .session import SessionOutcome

Number = TypeVar("Number", int, float)

EXIT_OK = 0
EXIT_FAILED = 1
EXIT_USAGE = 2
EXIT_OUTPUT = 74
EXIT_INTERRUPTED = 130
EXIT_BROKEN_PIPE = 141
DEFAULT_IDLE_TIMEOUT_SECONDS = 60.0  # the client's defaults, repeated to keep imports lazy
DEFAULT_DEADLINE_SECONDS = 600.0


class UsageError(Exception):
    """A one-line usage or configuration error (exit 2)."""


_SECRETS: list[str] = []  # the key, once read: redacted from any last-resort message


def _one_line(text: str) -> str:
    """`text` as one printable line: line breaks, escape sequences and other controls (in
    an argument, a path, a server's words) shown as escapes, never acted on."""
    from .display import visible

    return visible(text, multiline=False)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line, never the whole usage: `lockgate run: error: … (see lockgate run -h)`.
        argparse quotes some arguments raw (`unrecognized arguments: …`): made visible."""
        line = _one_line(f"{self.prog}: error: {message} (see {self.prog} --help)")
        self.exit(EXIT_USAGE, line + "\n")

    def _print_message(self, message: str, file: SupportsWrite[str] | None = None) -> None:
        """As argparse's, but a failed write (`--help` into a full disk or a closed pipe)
        is an output error, not silently ignored."""
        if message:
            (file or sys.stderr).write(message)


def _number(
    convert: Callable[[str], Number], what: str, valid: Callable[[Number], bool], rule: str
) -> Callable[[str], Number]:
    """An argparse type: parse with `convert`, then require `valid` (else: `rule`)."""

    def parse(text: str) -> Number:
        try:
            value = convert(text)
        except (ValueError, OverflowError):
            raise argparse.ArgumentTypeError(f"{text!r} is not {what}") from None
        if isinstance(value, float) and not math.isfinite(value):
            raise argparse.ArgumentTypeError(f"{text!r} is not a finite number")
        if not valid(value):
            raise argparse.ArgumentTypeError(rule)
        return value

    return parse


_positive_int = _number(
    int, "a whole number", lambda v: 1 <= v <= 1_000_000, "must be between 1 and 1000000"
)
_positive_seconds = _number(
    float, "a number of seconds", lambda v: 0 < v < 1e9, "must be a positive number of seconds"
)
_non_negative_seconds = _number(
    float, "a number of seconds", lambda v: 0 <= v < 1e9, "must be a non-negative number of seconds"
)
_fraction = _number(float, "a number", lambda v: 0 <= v < 1, "must be at least 0 and less than 1")
_port = _number(int, "a port number", lambda v: 0 <= v <= 65535, "must be between 0 and 65535")
_tokens = _number(
    int, "a whole number", lambda v: 1 <= v <= 10_000_000, "must be between 1 and 10000000"
)
_thinking_tokens = _number(
    int,
    "a whole number",
    lambda v: 1024 <= v <= 10_000_000,
    "must be between 1024 (the API's minimum) and 10000000",
)


def _text(what: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if not text.strip() or any(c.isspace() or not c.isprintable() for c in text):
            raise argparse.ArgumentTypeError(f"{what} must be non-empty, without spaces")
        return text

    return parse


# Variables that hold the system's own settings, never an API key: naming one with
# `--api-key-env` would send its value as the credential (and remove it from the
# environment of every tool the run starts).
_SYSTEM_VARIABLES = frozenset(
    {
        "PATH", "HOME", "USER", "LOGNAME", "SHELL", "PWD", "OLDPWD", "TERM", "LANG",
        "LANGUAGE", "TMPDIR", "TMP", "TEMP", "TZ", "DISPLAY", "EDITOR", "VISUAL", "PAGER",
        "MAIL", "HOSTNAME", "SHLVL", "IFS", "CDPATH", "MANPATH", "LD_LIBRARY_PATH",
        "LD_PRELOAD", "VIRTUAL_ENV", "HTTP_PROXY", "HTTPS_PROXY", "ALL_PROXY", "NO_PROXY",
        "OPENAI_BASE_URL", "ANTHROPIC_BASE_URL",
    }
)  # fmt: skip
_SYSTEM_PREFIXES = ("LC_", "XDG_", "SSH_", "PYTHON", "LOCKGATE_RETRY_")


def _key_variable(text: str) -> str:
    """An environment variable name that can hold a key: `[A-Za-z_][A-Za-z0-9_]*`, and not
    one of the system's own variables."""
    if (
        not text
        or not (text[0].isalpha() or text[0] == "_")
        or not all(c.isascii() and (c.isalnum() or c == "_") for c in text)
    ):
        raise argparse.ArgumentTypeError(
            "must be an environment variable name (letters, digits and '_')"
        )
    upper = text.upper()
    if upper in _SYSTEM_VARIABLES or upper.startswith(_SYSTEM_PREFIXES):
        raise argparse.ArgumentTypeError(
            f"{text} is a system variable, not an API key: its value would be sent as the "
            "credential"
        )
    return text


def _loopback_host(text: str) -> str:
    from .lab.server import check_loopback

    try:
        return check_loopback(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def _base_url(text: str) -> str:
    """An http(s) URL with a host, a valid port and no user:password part."""
    from .http import base_url_problem

    problem = base_url_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def _script_path(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("the script path is empty")
    return Path(text)


def _provider_names() -> list[str]:
    from .providers import PROVIDERS

    return list(PROVIDERS)


def build_parser() -> argparse.ArgumentParser:
    from .providers import DEFAULT_PROVIDER

    providers = _provider_names()
    parser = _Parser(prog="lockgate", description=__doc__.splitlines()[0] if __doc__ else None)
    parser.add_argument("--version", action="version", version=f"lockgate {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, parser_class=_Parser)

    run = commands.add_parser("run", help="run the agent against a live provider")
    run.add_argument(
        "--provider",
        choices=providers,
        default=DEFAULT_PROVIDER,
        help=f"the protocol to speak (default {DEFAULT_PROVIDER})",
    )
    run.add_argument(
        "--model", type=_text("--model"), help="model name (default: the provider's default)"
    )
    run.add_argument(
        "--base-url", type=_base_url, metavar="URL", help="any endpoint speaking the protocol"
    )
    run.add_argument(
        "--api-key-env",
        type=_key_variable,
        metavar="NAME",
        help="read the key from this variable (default: the provider's, e.g. OPENAI_API_KEY)",
    )
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
        "--deadline",
        type=_positive_seconds,
        default=DEFAULT_DEADLINE_SECONDS,
        metavar="SECONDS",
        help="fail a response that takes longer than this in total (default 600)",
    )
    run.add_argument(
        "--max-output-tokens",
        type=_tokens,
        default=2048,
        metavar="N",
        help="the output token cap of each response (default 2048)",
    )
    run.add_argument(
        "--continuation",
        choices=["stateless", "native"],
        help=f"{_providers_with('continuation')} only. stateless: full history, store false "
        "(default); native: store true and previous_response_id",
    )
    run.add_argument(
        "--encrypted-reasoning",
        choices=["auto", "on", "off"],
        help=f"{_providers_with('encrypted_reasoning')} only: ask for encrypted reasoning to "
        "replay (auto: reasoning models)",
    )
    run.add_argument(
        "--thinking-budget",
        type=_thinking_tokens,
        metavar="N",
        help=f"{_providers_with('thinking_budget')} only: extended thinking with this token budget",
    )
    run.add_argument(
        "--recover",
        action="store_true",
        help="answer rejected or truncated calls with error observations instead of stopping",
    )
    run.add_argument(
        "--recovery-budget",
        type=_positive_int,
        metavar="N",
        help="with --recover: stop after N recoveries in a row (default 2)",
    )
    run.add_argument(
        "--http-client",
        choices=["aiohttp", "httpx"],
        default="aiohttp",
        help="the SDK's HTTP client: aiohttp-backed (default, the faster) or httpx",
    )
    retry = run.add_argument_group(
        "retry owner (environment: LOCKGATE_RETRY_ATTEMPTS, _BASE_DELAY, _MAX_DELAY, _JITTER)"
    )
    retry.add_argument(
        "--retry-attempts",
        type=_number(int, "a whole number", lambda v: 1 <= v <= 100, "must be between 1 and 100"),
        metavar="N",
        help="default 3",
    )
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
    retry.add_argument(
        "--retry-unstarted",
        action="store_true",
        help="also retry a stream that failed transiently before any content (off by default)",
    )

    lab = commands.add_parser("lab", help="run the offline failure laboratory")
    lab.add_argument(
        "--provider",
        choices=[*providers, "all"],
        default="all",
        help="the protocols to play (default all)",
    )
    lab.add_argument("--scenario", metavar="NAME", help="run one scenario with its full trace")
    lab.add_argument(
        "--list", action="store_true", help="list the scenarios (one line each) and exit"
    )
    lab.add_argument(
        "--transport",
        choices=["inprocess", "http", "both"],
        default="both",
        help="replay in-process, over loopback HTTP through the SDK, or both (default)",
    )
    lab.add_argument("--json", action="store_true", help="trace as JSON lines on stdout")

    serve = commands.add_parser(
        "serve", help="serve a scripted, fault-injecting provider on loopback"
    )
    serve.add_argument(
        "--provider",
        choices=providers,
        help=f"the protocol to speak (default {DEFAULT_PROVIDER}, or the script's own)",
    )
    source = serve.add_mutually_exclusive_group(required=True)
    source.add_argument("--scenario", metavar="NAME", help="serve a lab scenario's turns")
    source.add_argument("--script", type=_script_path, metavar="FILE", help="serve a JSON script")
    source.add_argument(
        "--list", action="store_true", help="list the scenarios it can serve and exit"
    )
    serve.add_argument("--json", action="store_true", help="with --list: JSON lines")
    serve.add_argument("--host", type=_loopback_host, default="127.0.0.1", help="loopback only")
    serve.add_argument("--port", type=_port, default=0, help="port (default 0: an ephemeral port)")
    return parser


# --- output ------------------------------------------------------------------------------


def _observer(json_lines: bool, redact: Redactor) -> HumanDisplay | JsonLinesDisplay:
    from .display import HumanDisplay, JsonLinesDisplay

    if json_lines:
        return JsonLinesDisplay(sys.stdout, redact=redact)
    return HumanDisplay(sys.stdout, sys.stderr, redact=redact)


def _print_outcome(
    outcome: SessionOutcome,
    usage: Usage | None,
    display: HumanDisplay | JsonLinesDisplay,
    redact: Redactor,
) -> None:
    """The run's last words: stop line, tools executed, the final file (indented: it is
    model-controlled), and usage last."""
    from .display import JsonLinesDisplay, model_block, visible

    display.close()
    if isinstance(display, JsonLinesDisplay):
        display.emit(
            {
                "event": "final",
                "stopped": outcome.stopped,
                "executed_tools": outcome.executed_tools,
                "file": "calculator.py",
                "source": outcome.final_source,
                "usage": dataclasses.asdict(usage) if usage is not None else None,
            }
        )
        return
    source = model_block(redact(outcome.final_source))
    if not source.endswith("\n"):
        source += "\n"
    stopped = visible(redact(outcome.stopped), multiline=False)
    usage_line = usage.line() if usage is not None else "usage: not reported"
    sys.stdout.write(
        f"\nstopped: {stopped}\n"
        f"executed tools: {outcome.executed_tools}\n"
        f"final calculator.py:\n{source}"
        f"{usage_line}\n"
    )
    sys.stdout.flush()


@contextlib.contextmanager
def _interrupt_signal() -> Iterator[asyncio.Event]:
    """SIGINT/SIGTERM set an event instead of raising, so a run can stop cleanly."""
    loop = asyncio.get_running_loop()
    interrupted = asyncio.Event()
    installed = []
    for number in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError, RuntimeError, ValueError):
            loop.add_signal_handler(number, interrupted.set)
            installed.append(number)
    if interrupts.arrived:
        # A signal came before this (one Python may have swallowed, see `interrupts`).
        interrupted.set()
    try:
        yield interrupted
    finally:
        for number in installed:
            loop.remove_signal_handler(number)
        interrupts.install()


# --- run ---------------------------------------------------------------------------------


def _read_api_key(provider: Provider, args: argparse.Namespace) -> str:
    """The key from the provider's variable (or `--api-key-env`), checked before any
    request; then removed from the environment so that no child process inherits it."""
    from .credentials import api_key_problem

    variable = args.api_key_env or provider.key_variable
    key = os.environ.get(variable)
    if key is None or key == "":
        raise UsageError(f"{variable} is not set; no request was made")
    problem = api_key_problem(key)
    if problem is not None:
        raise UsageError(f"{variable}: {problem}; no request was made")
    _SECRETS.append(key)
    _forget_variable(variable)
    _protect_process_memory()
    return key


def _forget_variable(variable: str) -> None:
    """Remove `variable` from the environment. On Linux its value is first overwritten in
    place: `unsetenv` only unlinks it, and the process's initial environment block (what
    `/proc/<pid>/environ` shows, readable by root even when non-dumpable) keeps it."""
    if sys.platform.startswith("linux"):
        with contextlib.suppress(Exception):
            import ctypes

            libc = ctypes.CDLL(None)
            libc.getenv.restype = ctypes.c_void_p
            libc.getenv.argtypes = [ctypes.c_char_p]
            address = libc.getenv(os.fsencode(variable))
            if address:
                ctypes.memset(address, 0, len(ctypes.string_at(address)))
    os.environ.pop(variable, None)


def _protect_process_memory() -> None:
    """Linux: make this process non-dumpable, so that code it runs as the same user (the
    model-edited tests) cannot read the key from `/proc/<ppid>/environ` or its memory."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(Exception):
        import ctypes

        pr_set_dumpable = 4
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_dumpable, 0, 0, 0, 0)


def _providers_with(option: str) -> str:
    """Which providers take a provider option (`continuation` → "responses"), from the
    registry."""
    from .providers import PROVIDERS

    return ", ".join(name for name, entry in PROVIDERS.items() if option in entry.options)


def _check_run_options(provider: Provider, args: argparse.Namespace) -> None:
    from .providers import PROVIDERS

    options = {option for entry in PROVIDERS.values() for option in entry.options}
    for option in sorted(options - provider.options):
        if getattr(args, option) is not None:
            flag = "--" + option.replace("_", "-")
            raise UsageError(f"{flag} is not available with --provider {provider.name}")
    if args.recovery_budget is not None and not args.recover:
        raise UsageError("--recovery-budget needs --recover")
    _check_base_url_variable(provider, args)


def _check_base_url_variable(provider: Provider, args: argparse.Namespace) -> None:
    """Without `--base-url` the SDK reads its own variable (`OPENAI_BASE_URL`,
    `ANTHROPIC_BASE_URL`): held to the same rules as the flag, before any request."""
    if args.base_url is not None:
        return
    variable = provider.base_url_variable
    value = os.environ.get(variable)
    if value is None:
        return
    try:
        _base_url(value)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"{variable}: {exc} (or give --base-url); no request was made") from None


def _retry_policy(args: argparse.Namespace) -> RetryPolicy:
    from .retry import RetryPolicy

    try:
        return RetryPolicy.from_environment(
            retry_unstarted=args.retry_unstarted,
            attempts=args.retry_attempts,
            base_delay=args.retry_base_delay,
            max_delay=args.retry_max_delay,
            jitter=args.retry_jitter,
        )
    except ValueError as exc:
        raise UsageError(f"invalid retry policy: {exc}") from None


async def _run_live(args: argparse.Namespace, provider: Provider, api_key: str) -> int:
    from .client import StreamingModelClient
    from .credentials import Redactor
    from .events import UsageMeter, fan_out
    from .fixture import create_fixture
    from .providers.base import CodecOptions, TransportOptions
    from .session import run_session

    retry = _retry_policy(args)
    redact = Redactor([api_key])
    meter = UsageMeter()
    display = _observer(args.json, redact)
    observer = fan_out(meter, display)
    reasoning = {None: None, "auto": None, "on": True, "off": False}[args.encrypted_reasoning]
    try:
        codec = provider.make_codec(
            CodecOptions(
                args.model or provider.default_model,
                max_output_tokens=args.max_output_tokens,
                continuation=args.continuation or "stateless",
                encrypted_reasoning=reasoning,
                thinking_budget=args.thinking_budget,
            )
        )
    except ValueError as exc:  # options this provider cannot take
        raise UsageError(str(exc)) from None
    transport = provider.make_transport(
        TransportOptions(
            api_key=api_key,
            base_url=args.base_url,
            backend=args.http_client,
        )
    )
    # The SDKs leave a few hundred thousand long-lived objects behind their imports: move
    # them out of the collector's way, so that a full collection never stalls a stream.
    gc.freeze()
    client = StreamingModelClient(
        codec,
        transport,
        observer=observer,
        retry=retry,
        idle_timeout=args.idle_timeout,
        deadline=args.deadline,
        redactor=redact,
    )
    # The signals are flags before the directory exists and until it is removed.
    with (
        _interrupt_signal() as interrupted,
        _temporary_directory("lockgate-run-") as parent,
    ):
        try:
            outcome = await run_session(
                create_fixture(Path(parent)),
                client,
                allow_execution=args.allow_execution,
                max_turns=args.max_turns,
                observer=observer,
                interrupt=interrupted.wait,
                recovery_budget=(args.recovery_budget or 2) if args.recover else 0,
            )
        finally:
            await client.aclose()
        _print_outcome(outcome, meter.usage, display, redact)
    if outcome.outcome == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_OK if outcome.outcome == "model_finished" else EXIT_FAILED


@contextlib.contextmanager
def _temporary_directory(prefix: str) -> Iterator[str]:
    try:
        context = tempfile.TemporaryDirectory(prefix=prefix)
    except (OSError, FileNotFoundError) as exc:
        raise UsageError(
            f"no writable temporary directory ({exc.strerror or exc}); set TMPDIR"
        ) from None
    with context as path:
        yield path


# --- lab ---------------------------------------------------------------------------------


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


async def _until_interrupted(work: Awaitable[int]) -> int:
    """`work`'s exit code; SIGINT/SIGTERM cancel it instead of raising wherever the code
    happens to be (so that its temporary directories are always removed): then 130."""
    with _interrupt_signal() as interrupted:
        task = asyncio.ensure_future(work)
        stop = asyncio.ensure_future(interrupted.wait())
        try:
            await asyncio.wait({task, stop}, return_when=asyncio.FIRST_COMPLETED)
        finally:
            stop.cancel()
            if not task.done():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError):
                    await task
        if task.cancelled():
            print("stopped: interrupted", file=sys.stderr)
            return EXIT_INTERRUPTED
        return task.result()


async def _run_lab(args: argparse.Namespace) -> int:
    return await _until_interrupted(_lab(args))


def _scenario(name: str) -> Scenario:
    from .lab.scenarios import SCENARIOS_BY_NAME

    scenario = SCENARIOS_BY_NAME.get(name)
    if scenario is None:
        raise UsageError(f"unknown scenario {name!r} (see lockgate lab --help)")
    return scenario


def _list_scenarios(providers: Sequence[str], json_lines: bool) -> int:
    """One line per scenario that runs on any of `providers`: its name, the protocols it
    runs on, the transports, what it must show, and what it plays."""
    from .display import JsonLinesDisplay
    from .lab.scenarios import SCENARIOS

    chosen = [s for s in SCENARIOS if any(s.runs_on(provider) for provider in providers)]
    if json_lines:
        lines = JsonLinesDisplay(sys.stdout)
        for scenario in chosen:
            lines.emit(
                {
                    "event": "scenario",
                    "name": scenario.name,
                    "protocols": sorted(scenario.protocols or _provider_names()),
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


async def _lab(args: argparse.Namespace) -> int:
    from .credentials import Redactor
    from .display import JsonLinesDisplay
    from .lab.runner import lab_runs, run_scenario
    from .session import SessionOutcome

    if args.list:
        if args.scenario is not None:
            raise UsageError("--list lists every scenario; leave out --scenario")
        return _list_scenarios(
            _provider_names() if args.provider == "all" else [args.provider], args.json
        )
    with _temporary_directory("lockgate-lab-"):
        pass  # every run needs one: a missing temporary directory is said once, up front
    providers = _provider_names() if args.provider == "all" else [args.provider]
    if args.scenario is None:
        runs = lab_runs(None, providers, args.transport)
        results = []
        progress = sys.stderr.isatty() and not args.json
        for number, (scenario, provider, kind) in enumerate(runs, start=1):
            if progress:
                label = f"{number}/{len(runs)} {scenario.name} ({provider}, {kind})"
                sys.stderr.write(f"\r\x1b[2Klab: {label}")
                sys.stderr.flush()
            results.append(await run_scenario(scenario, kind, provider=provider))
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
    scenario = _scenario(args.scenario)
    runs = lab_runs(scenario, providers, args.transport)
    if not runs:
        raise UsageError(
            f"scenario {scenario.name} does not run on {args.provider} over {args.transport}"
        )
    redact = Redactor()
    code = EXIT_OK
    for _, provider, kind in runs:
        print(f"== {scenario.name} ({provider}, {kind}) ==", file=sys.stderr)
        display = _observer(args.json, redact)
        result = await run_scenario(scenario, kind, display, provider=provider)
        _print_outcome(
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


# --- serve -------------------------------------------------------------------------------


async def _serve(args: argparse.Namespace) -> int:
    from .display import visible
    from .lab.script import MAX_SCRIPT_BYTES, ScriptError, load_script
    from .lab.server import serve_script
    from .providers import DEFAULT_PROVIDER

    provider: str = args.provider or DEFAULT_PROVIDER
    if args.list:
        return _list_scenarios([provider], args.json)
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
            if script.provider not in _provider_names():
                raise UsageError(
                    f"invalid script {args.script}: unknown provider {script.provider!r}"
                )
            if args.provider is not None and args.provider != script.provider:
                raise UsageError(
                    f"the script speaks {script.provider}, not --provider {args.provider}"
                )
            provider = script.provider
        turns = script.turns
        name = _one_line(str(args.script))  # a path may hold any byte
    else:
        scenario = _scenario(args.scenario)
        if not scenario.runs_on(provider):
            raise UsageError(f"scenario {scenario.name} does not run on {provider}")
        turns = scenario.turns()
        name = args.scenario

    def log(line: str) -> None:
        print(f"lockgate serve: {visible(line, multiline=False)}", file=sys.stderr, flush=True)

    with _interrupt_signal() as interrupted:
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


# --- entry -------------------------------------------------------------------------------


def _run_command(args: argparse.Namespace) -> int:
    if args.command == "run":
        from .providers import provider as registry_entry

        provider = registry_entry(args.provider)
        _check_run_options(provider, args)
        _retry_policy(args)  # a bad policy is a usage error before the key is read
        api_key = _read_api_key(provider, args)
        return asyncio.run(_run_live(args, provider, api_key))
    if args.command == "serve":
        return asyncio.run(_serve(args))
    return asyncio.run(_run_lab(args))


def _parse(argv: Sequence[str] | None) -> argparse.Namespace:
    try:
        return build_parser().parse_args(argv)
    except SystemExit:
        # `--help` and `--version` wrote to stdout (argparse ignores write errors): a full
        # disk must still be an output error, not a silent exit 0.
        if sys.stdout is not None:
            sys.stdout.flush()
        raise


def _interrupted() -> int:
    # CPython marks a KeyboardInterrupt that escaped an `exec()` of a string (dataclasses
    # and namedtuple build their methods that way, so an import can be interrupted there)
    # as unhandled, and then kills the process with SIGINT at exit whatever it returns;
    # a successful `exec()` of a string clears that mark.
    exec("None")
    with contextlib.suppress(Exception):
        print("stopped: interrupted", file=sys.stderr)
    return EXIT_INTERRUPTED


def _caused_by_interrupt(exc: BaseException) -> bool:
    """Whether `exc` wraps a Ctrl-C or SIGTERM (Python wraps an exception raised while a
    class is created, e.g. `RuntimeError: Error calling __set_name__`)."""
    seen: set[int] = set()
    current: BaseException | None = exc
    while current is not None and id(current) not in seen:
        if isinstance(current, KeyboardInterrupt):
            return True
        seen.add(id(current))
        current = current.__cause__ or current.__context__
    return False


def main(argv: Sequence[str] | None = None) -> int:
    """The console entry point: every outcome is an exit code and at most one line on
    stderr, never a traceback."""
    interrupts.install()
    try:
        if sys.stdout is None or sys.stderr is None:
            if sys.stderr is not None:
                print("lockgate: standard output is not open", file=sys.stderr)
            return EXIT_OUTPUT
        args = _parse(argv)
        return _run_command(args)
    except UsageError as exc:
        print(f"lockgate: {_one_line(str(exc))}", file=sys.stderr)
        return EXIT_USAGE
    except KeyboardInterrupt:  # Ctrl-C, or SIGTERM (`interrupts.Interrupted`)
        return _interrupted()
    except BrokenPipeError:  # the reader went away (e.g. `| head`): stop quietly
        with contextlib.suppress(OSError):
            devnull = os.open(os.devnull, os.O_WRONLY)
            os.dup2(devnull, sys.stdout.fileno())
        return EXIT_BROKEN_PIPE
    except OSError as exc:  # e.g. stdout on a full disk
        with contextlib.suppress(Exception):
            print(f"lockgate: I/O error: {exc.strerror or type(exc).__name__}", file=sys.stderr)
        return EXIT_OUTPUT
    except Exception as exc:  # a last line of defence: one line, never a traceback
        if _caused_by_interrupt(exc):
            return _interrupted()
        return _internal_error(exc)


def _internal_error(exc: Exception) -> int:
    with contextlib.suppress(Exception):
        from .credentials import Redactor
        from .display import visible

        text = Redactor(_SECRETS)(f"lockgate: internal error: {type(exc).__name__}: {exc}")
        print(visible(text.splitlines()[0], multiline=False), file=sys.stderr)
    return EXIT_FAILED


if __name__ == "__main__":
    sys.exit(main())
