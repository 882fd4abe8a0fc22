"""The command line's parser: every subcommand's flags. Provider options are not listed here:
each provider declares its own once (`providers/<name>/options.py`), and the parser makes
their flags from the registry (`provider_flags.py`). The argument types are in `argtypes.py`,
the proxy's flags in `proxy_flags.py`; their names used elsewhere stay importable from here."""

from __future__ import annotations

import argparse
from typing import Any

from .. import defaults
from ..version import __version__
from .argtypes import (
    _fraction,
    _key_variable,
    _loopback_host,
    _non_negative_seconds,
    _nonempty_path,
    _number,
    _Parser,
    _port,
    _positive_seconds,
    _script_path,
    _text,
    _tokens,
    add_recording,
    base_url,
    one_line,
    positive_int,
    upstream_url,
)
from .provider_flags import (
    PROVIDER_OPTION,
    _add_provider_options,
    given_provider_options,
    provider_names,
)
from .proxy_flags import (
    GIVEN_FILE_FLAGS,
    HEAD_TIMEOUT_SECONDS,
    LIMIT_HELP,
    PROXY_KEEPALIVE_SECONDS,
    PROXY_MAX_HELD_BYTES,
    PROXY_MAX_STREAMS,
    _add_proxy,
)

__all__ = [
    "DESCRIPTION",
    "GIVEN_FILE_FLAGS",
    "HEAD_TIMEOUT_SECONDS",
    "LIMIT_HELP",
    "PROVIDER_OPTION",
    "PROXY_KEEPALIVE_SECONDS",
    "PROXY_MAX_HELD_BYTES",
    "PROXY_MAX_STREAMS",
    "add_recording",
    "base_url",
    "build_parser",
    "given_provider_options",
    "one_line",
    "positive_int",
    "provider_names",
    "upstream_url",
]

DESCRIPTION = (
    "The lockgate command line: run (live, opt-in), lab (failure lab), serve, proxy (the gate "
    "on the wire), cassette (recorded traffic)."
)


def build_parser() -> argparse.ArgumentParser:
    from ..providers import DEFAULT_PROVIDER

    providers = provider_names()
    parser = _Parser(prog="lockgate", description=DESCRIPTION)
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
        "--base-url", type=base_url, metavar="URL", help="any endpoint speaking the protocol"
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
    run.add_argument(
        "--max-turns",
        type=positive_int,
        default=defaults.MAX_TURNS,
        help=f"turn limit (default {defaults.MAX_TURNS})",
    )
    run.add_argument("--json", action="store_true", help="events as JSON lines on stdout")
    run.add_argument(
        "--idle-timeout",
        type=_positive_seconds,
        default=defaults.IDLE_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help="fail a response after this long without a byte "
        f"(default {defaults.IDLE_TIMEOUT_SECONDS:g})",
    )
    run.add_argument(
        "--deadline",
        type=_positive_seconds,
        default=defaults.DEADLINE_SECONDS,
        metavar="SECONDS",
        help="fail a response that takes longer than this in total "
        f"(default {defaults.DEADLINE_SECONDS:g})",
    )
    run.add_argument(
        "--max-output-tokens",
        type=_tokens,
        default=defaults.MAX_OUTPUT_TOKENS,
        metavar="N",
        help=f"the output token cap of each response (default {defaults.MAX_OUTPUT_TOKENS})",
    )
    _add_provider_options(run)
    run.add_argument(
        "--recover",
        action="store_true",
        help="answer rejected or truncated calls with error observations instead of stopping",
    )
    run.add_argument(
        "--recovery-budget",
        type=positive_int,
        metavar="N",
        help=f"with --recover: stop after N recoveries in a row "
        f"(default {defaults.RECOVERY_BUDGET})",
    )
    run.add_argument(
        "--http-client",
        choices=["aiohttp", "httpx"],
        default="aiohttp",
        help="the SDK's HTTP client: aiohttp-backed (default, the faster) or httpx",
    )
    add_recording(run)
    retry = run.add_argument_group(
        "retry owner (environment: LOCKGATE_RETRY_ATTEMPTS, _BASE_DELAY, _MAX_DELAY, _JITTER)"
    )
    retry.add_argument(
        "--retry-attempts",
        type=_number(int, "a whole number", lambda v: 1 <= v <= 100, "must be between 1 and 100"),
        metavar="N",
        help=f"default {defaults.RETRY_ATTEMPTS}",
    )
    retry.add_argument(
        "--retry-base-delay",
        type=_non_negative_seconds,
        metavar="SECONDS",
        help=f"default {defaults.RETRY_BASE_DELAY:g}",
    )
    retry.add_argument(
        "--retry-max-delay",
        type=_non_negative_seconds,
        metavar="SECONDS",
        help=f"longest wait honoured, also from the server (default {defaults.RETRY_MAX_DELAY:g})",
    )
    retry.add_argument(
        "--retry-jitter",
        type=_fraction,
        metavar="FRACTION",
        # argparse formats help with %: the percent sign is doubled.
        help=f"default {defaults.RETRY_JITTER:g} (±{defaults.RETRY_JITTER:.0%})".replace("%", "%%"),
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
    lab.add_argument(
        "--via",
        choices=["proxy"],
        help="play every scenario as a naive client through `lockgate proxy` in front of "
        "`lockgate serve` (it must execute exactly what `lockgate run` executes)",
    )
    lab.add_argument(
        "--cassettes",
        type=_script_path,
        metavar="DIR",
        help="judge recorded cassettes (a folder of *.cassette.jsonl, or one file) unfaulted "
        "and under every fault at every event",
    )
    lab.add_argument(
        "--budget",
        type=positive_int,
        metavar="N",
        help="with --cassettes: at most N faulted runs in all, drawn with --seed",
    )
    lab.add_argument(
        "--seed",
        type=_number(int, "a whole number", lambda v: 0 <= v < 2**63, "must be 0 or more"),
        default=0,
        metavar="S",
        help="with --cassettes --budget: the seed of the draw (default 0)",
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
        "--cassette",
        type=_script_path,
        metavar="FILE|DIR",
        help="serve recorded exchanges (a cassette, or a folder of *.cassette.jsonl in name order)",
    )
    source.add_argument(
        "--list", action="store_true", help="list the scenarios it can serve and exit"
    )
    serve.add_argument(
        "--fault",
        action="append",
        default=[],
        metavar="SPEC",
        help="with --cassette: overlay a fault on every exchange (cut:inside=3, "
        "stall:before=2:seconds=5, status:429:retry-after=2, random:SEED, ...; repeatable)",
    )
    serve.add_argument(
        "--timing",
        choices=("fast", "recorded"),
        default="fast",
        help="with --cassette: replay the recorded pauses between reads (default fast: none)",
    )
    serve.add_argument(
        "--match",
        choices=("order", "request"),
        default="order",
        help="with --cassette: serve exchanges in order (default), or each request by the "
        "first unused cassette whose request body equals it",
    )
    serve.add_argument("--json", action="store_true", help="with --list: JSON lines")
    serve.add_argument(
        "--websocket",
        choices=("serve", "refuse"),
        default="serve",
        help="a WebSocket upgrade at the Responses path: serve the WebSocket mode (default), "
        "or refuse it with 426 as an HTTP-only server",
    )
    serve.add_argument("--host", type=_loopback_host, default="127.0.0.1", help="loopback only")
    serve.add_argument("--port", type=_port, default=0, help="port (default 0: an ephemeral port)")
    _add_proxy(commands)
    _add_cassette(commands, providers)
    return parser


def _add_cassette(commands: argparse._SubParsersAction[Any], providers: list[str]) -> None:
    """The `cassette` command and its `import` subcommand (standard library only)."""
    cassette = commands.add_parser("cassette", help="import recorded exchanges as cassettes")
    actions = cassette.add_subparsers(
        dest="cassette_command", required=True, metavar="COMMAND", parser_class=type(cassette)
    )
    imports = actions.add_parser(
        "import",
        help="convert real-streams JSON files and vcrpy/pytest-recording cassettes",
        description="One cassette per recorded exchange, written into --to (made if missing).",
    )
    imports.add_argument(
        "sources",
        nargs="+",
        type=_nonempty_path,
        metavar="SRC",
        help="a .json / .yaml / .yml file, or a folder of them",
    )
    imports.add_argument(
        "--to", required=True, type=_nonempty_path, metavar="DIR", help="the folder to write into"
    )
    imports.add_argument(
        "--protocol",
        choices=providers,
        help="import every model request as this protocol (default: from the URL path; "
        "a real-streams file names its own, and one of another protocol is skipped)",
    )
