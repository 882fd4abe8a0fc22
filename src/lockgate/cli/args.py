"""The command line's parser and argument types. Provider options are not listed here:
each provider declares its own once (`providers/<name>/options.py`), and the parser makes
their flags from the registry."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar

from .. import defaults
from ..version import __version__
from .codes import EXIT_USAGE

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

Number = TypeVar("Number", int, float)
DESCRIPTION = (
    "The lockgate command line: run (live, opt-in), lab (failure lab), serve, proxy (the gate "
    "on the wire), cassette (recorded traffic)."
)
PROXY_KEEPALIVE_SECONDS = 15.0  # proxy.engine.DEFAULT_KEEPALIVE_SECONDS (kept light here)
PROXY_MAX_STREAMS = 256  # proxy.server.DEFAULT_MAX_STREAMS


def one_line(text: str) -> str:
    """`text` as one printable line: line breaks, escape sequences and other controls (in
    an argument, a path, a server's words) shown as escapes, never acted on."""
    from ..display import visible

    return visible(text, multiline=False)


class _Parser(argparse.ArgumentParser):
    def error(self, message: str) -> NoReturn:
        """One line, never the whole usage: `lockgate run: error: … (see lockgate run -h)`.
        argparse quotes some arguments raw (`unrecognized arguments: …`): made visible."""
        line = one_line(f"{self.prog}: error: {message} (see {self.prog} --help)")
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


positive_int = _number(
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


def _text(what: str) -> Callable[[str], str]:
    def parse(text: str) -> str:
        if not text.strip() or any(c.isspace() or not c.isprintable() for c in text):
            raise argparse.ArgumentTypeError(f"{what} must be non-empty, without spaces")
        return text

    return parse


def _variable_name(text: str) -> str:
    """An environment variable name: `[A-Za-z_][A-Za-z0-9_]*`."""
    if (
        not text
        or not (text[0].isalpha() or text[0] == "_")
        or not all(c.isascii() and (c.isalnum() or c == "_") for c in text)
    ):
        raise argparse.ArgumentTypeError(
            "must be an environment variable name (letters, digits and '_')"
        )
    return text


def _key_variable(text: str) -> str:
    """An environment variable name that can hold a key (`_variable_name`), and not one of
    the system's own variables."""
    from ..credentials import key_variable_problem

    problem = key_variable_problem(_variable_name(text))
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def _record_folder(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("the folder path is empty")
    return Path(text)


def add_recording(command: argparse.ArgumentParser) -> None:
    """`--record DIR` and `--redact-env NAME` (run and proxy)."""
    command.add_argument(
        "--record",
        type=_record_folder,
        metavar="DIR",
        help="write every exchange as a cassette into this existing folder (secrets redacted)",
    )
    command.add_argument(
        "--redact-env",
        type=_variable_name,
        action="append",
        default=[],
        metavar="NAME",
        help="with --record: also redact this variable's value from cassettes (repeatable)",
    )


def _loopback_host(text: str) -> str:
    from ..lab.server import check_loopback

    try:
        return check_loopback(text)
    except ValueError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None


def base_url(text: str) -> str:
    """An http(s) URL with a host, a valid port and no user:password part."""
    from ..transport import base_url_problem

    problem = base_url_problem(text)
    if problem is not None:
        raise argparse.ArgumentTypeError(problem)
    return text


def upstream_url(text: str) -> str:
    """A `base_url` without a query or a fragment (a request's own are appended)."""
    base_url(text)
    if "?" in text or "#" in text:
        raise argparse.ArgumentTypeError("the upstream URL must not carry a query or a fragment")
    return text


def _script_path(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("the script path is empty")
    return Path(text)


def provider_names() -> list[str]:
    from ..providers import PROVIDERS

    return list(PROVIDERS)


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
    serve.add_argument("--host", type=_loopback_host, default="127.0.0.1", help="loopback only")
    serve.add_argument("--port", type=_port, default=0, help="port (default 0: an ephemeral port)")
    _add_proxy(commands)
    _add_cassette(commands, providers)
    return parser


def _nonempty_path(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("the path is empty")
    return Path(text)


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


_retry_count = _number(int, "a whole number", lambda v: 0 <= v <= 10, "must be between 0 and 10")


# The namespace attribute that lists the option strings given of `lockgate proxy`'s flags
# that are settings of a config file (each a `_Noted` action): refused beside `--config`.
GIVEN_FILE_FLAGS = "given_file_flags"


class _Noted(argparse.Action):
    """Notes the option string it was given as (`GIVEN_FILE_FLAGS`), then acts as the
    action it is mixed into: a flag's default cannot tell whether it was given."""

    def __call__(
        self,
        parser: argparse.ArgumentParser,
        namespace: argparse.Namespace,
        values: Any,
        option_string: str | None = None,
    ) -> None:
        noted: list[str] = list(getattr(namespace, GIVEN_FILE_FLAGS, []))
        if option_string is not None and option_string not in noted:
            noted.append(option_string)
        setattr(namespace, GIVEN_FILE_FLAGS, noted)
        super().__call__(parser, namespace, values, option_string)


class _NotedStore(_Noted, argparse._StoreAction):
    pass


class _NotedStoreTrue(_Noted, argparse._StoreTrueAction):
    pass


class _NotedAppend(_Noted, argparse._AppendAction):
    pass


class _NotedBoolean(_Noted, argparse.BooleanOptionalAction):
    pass


def _add_proxy(commands: argparse._SubParsersAction[_Parser]) -> None:
    proxy = commands.add_parser(
        "proxy", help="gate every provider's responses for any client (an HTTP proxy)"
    )
    source = proxy.add_mutually_exclusive_group(required=True)
    source.add_argument(
        "--upstream",
        type=upstream_url,
        metavar="URL",
        help="the provider's origin, e.g. https://api.openai.com (request paths appended): "
        "one route, set by the flags below",
    )
    source.add_argument(
        "--config",
        type=_nonempty_path,
        metavar="FILE",
        help="a YAML file naming the routes, their upstreams, keys, gating and retries",
    )
    proxy.add_argument(
        "--check",
        action="store_true",
        help="print the effective routes and settings (no secret) and exit",
    )
    proxy.add_argument(
        "--workers",
        type=positive_int,
        metavar="N",
        help="serve from N processes under gunicorn (needs lockgate[server]); metrics are "
        "summed over them",
    )
    proxy.add_argument(
        "--retries",
        action=_NotedStore,
        type=_retry_count,
        default=0,
        metavar="N",
        help="with --upstream: send a request again, up to N times, when its answer was "
        "refused for a transient reason before any of it reached the client (default 0)",
    )
    proxy.add_argument(
        "--retry-max-wait",
        action=_NotedStore,
        type=_positive_seconds,
        default=60.0,
        metavar="SECONDS",
        help="with --upstream: the longest server-requested wait honoured; longer is "
        "neither waited nor passed on, the client is told not to retry (default 60)",
    )
    proxy.add_argument(
        "--host",
        action=_NotedStore,
        type=_text("--host"),
        default="127.0.0.1",
        help="listen address (default 127.0.0.1; another than loopback needs --allow-remote)",
    )
    proxy.add_argument(
        "--port",
        action=_NotedStore,
        type=_port,
        default=0,
        help="port (default 0: an ephemeral port)",
    )
    proxy.add_argument(
        "--hold",
        action=_NotedStore,
        choices=["tools", "terminal"],
        default="tools",
        help="hold from the first tool call (default), or only the finish (calls stream live)",
    )
    proxy.add_argument(
        "--idle-timeout",
        action=_NotedStore,
        type=_positive_seconds,
        default=defaults.IDLE_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help="refuse a response after this long without a byte "
        f"(default {defaults.IDLE_TIMEOUT_SECONDS:g})",
    )
    proxy.add_argument(
        "--deadline",
        action=_NotedStore,
        type=_positive_seconds,
        default=defaults.DEADLINE_SECONDS,
        metavar="SECONDS",
        help="refuse a response that takes longer than this in total "
        f"(default {defaults.DEADLINE_SECONDS:g})",
    )
    proxy.add_argument(
        "--keepalive",
        action=_NotedStore,
        type=_positive_seconds,
        default=PROXY_KEEPALIVE_SECONDS,
        metavar="SECONDS",
        help="a keep-alive this often while a response is held "
        f"(default {PROXY_KEEPALIVE_SECONDS:g})",
    )
    proxy.add_argument(
        "--validate-schemas",
        action=_NotedBoolean,
        default=True,
        help="check every call's arguments against its tool's schema (the default; "
        "--no-validate-schemas: only that they are a JSON object)",
    )
    proxy.add_argument(
        "--api-key-env",
        action=_NotedStore,
        type=_key_variable,
        metavar="NAME",
        help="hold the key from this variable: it replaces the clients' credentials upstream",
    )
    proxy.add_argument(
        "--client-token-env",
        action=_NotedStore,
        type=_key_variable,
        metavar="NAME",
        help="require the token from this variable on every request",
    )
    proxy.add_argument(
        "--allow-remote",
        action=_NotedStoreTrue,
        help="allow a --host other than loopback (with --api-key-env: --client-token-env too)",
    )
    proxy.add_argument(
        "--max-streams",
        action=_NotedStore,
        type=positive_int,
        default=PROXY_MAX_STREAMS,
        metavar="N",
        help=f"concurrent requests; beyond: 503 (default {PROXY_MAX_STREAMS})",
    )
    proxy.add_argument("--json", action="store_true", help="records as JSON lines on stdout")
    add_recording(proxy)
    _add_proxy_bounds(proxy)


HEAD_TIMEOUT_SECONDS = 30.0  # proxy.server.DEFAULT_HEAD_TIMEOUT (kept light here)
PROXY_MAX_HELD_BYTES = 256 * 1024 * 1024  # proxy.server.DEFAULT_MAX_HELD_BYTES
# The gate's bounds (`gate.GateLimits`): what each flag bounds in one response.
LIMIT_HELP = {
    "max_text_chars": "answer text characters",
    "max_reasoning_chars": "reasoning characters",
    "max_calls": "tool calls",
    "max_argument_chars": "argument characters of one tool call",
    "max_native_items": "provider-side items (executed tools, native output)",
    "max_native_bytes": "bytes of provider-side items",
}

_bound = _number(
    int, "a whole number", lambda v: 1 <= v <= 1_000_000_000, "must be between 1 and 1000000000"
)


def _add_proxy_bounds(proxy: argparse.ArgumentParser) -> None:
    """The flags for where a held key may go, the request head's timeout and the gate's
    bounds."""
    from ..gate import GateLimits

    proxy.add_argument(
        "--allow-host",
        action=_NotedAppend,
        default=[],
        metavar="NAME",
        help="with --api-key-env: a host name clients reach the proxy by, besides IP "
        "literals and localhost (repeatable); any other Host never gets the key",
    )
    proxy.add_argument(
        "--key-on-any-path",
        action=_NotedStoreTrue,
        help="with --api-key-env: send the key with every request, not only model requests, "
        "model listings and token counts",
    )
    proxy.add_argument(
        "--head-timeout",
        action=_NotedStore,
        type=_positive_seconds,
        default=HEAD_TIMEOUT_SECONDS,
        metavar="SECONDS",
        help="close a connection whose request head has not arrived this long after it "
        f"opened or after the previous answer (default {HEAD_TIMEOUT_SECONDS:g})",
    )
    proxy.add_argument(
        "--max-held-bytes",
        action=_NotedStore,
        type=_bound,
        default=PROXY_MAX_HELD_BYTES,
        metavar="N",
        help="the bytes all unfinished responses may hold at once; a response that would go "
        f"beyond is refused, the others go on (default {PROXY_MAX_HELD_BYTES})",
    )
    defaults = GateLimits()
    for name, what in LIMIT_HELP.items():
        default = getattr(defaults, name)
        proxy.add_argument(
            "--" + name.replace("_", "-"),
            action=_NotedStore,
            type=_bound,
            default=default,
            metavar="N",
            help=f"refuse a response with more {what} than this (default {default})",
        )


PROVIDER_OPTION = "provider option "  # the prefix of a provider option's `dest`


def _add_provider_options(run: argparse.ArgumentParser) -> None:
    """One flag per provider option, made from the providers' own declarations: the value
    stays the text given, parsed by the chosen provider's rule (`provider_options`). A flag
    several providers declare is one flag, its help naming them all."""
    from ..providers import PROVIDERS
    from ..providers.base import OptionSpec, option_fields

    owners: dict[str, list[tuple[str, OptionSpec]]] = {}
    for entry in PROVIDERS.values():
        if entry.options is not None:
            for _, spec in option_fields(entry.options):
                owners.setdefault(spec.flag, []).append((entry.name, spec))
    for flag, declared in owners.items():
        spec = declared[0][1]
        shared = all(other.choices == spec.choices for _, other in declared)
        run.add_argument(
            flag,
            dest=PROVIDER_OPTION + flag,
            metavar=spec.metavar,
            choices=spec.choices if shared else None,
            help=f"{', '.join(name for name, _ in declared)} only: {spec.help}",
        )


def given_provider_options(args: argparse.Namespace) -> dict[str, str]:
    """The provider option flags given on the command line, and their text."""
    return {
        dest.removeprefix(PROVIDER_OPTION): value
        for dest, value in vars(args).items()
        if dest.startswith(PROVIDER_OPTION) and value is not None
    }
