"""`lockgate proxy`: the gate on the wire, in front of one provider, for any client.

Every option is checked before a key is read; the key (`--api-key-env`) and the client token
(`--client-token-env`) are then read once, removed from the environment and kept out of
everything printed. The first line on stdout, flushed, says where it listens:
`proxying at http://HOST:PORT -> UPSTREAM`; then one line per request, when it ends:
`METHOD PATH PROTOCOL OUTCOME STATUS DURATION ms`, OUTCOME being `passed`, `withheld N
calls: KIND: REASON`, `refused: KIND: REASON`, `forwarded`, `rejected: REASON`, `error:
REASON`, `abandoned` or `cut: REASON` (`--json`: the same as JSON lines, the first
`{"event": "listening", …}`). SIGINT/SIGTERM: no new request is taken, those in flight may
end within the grace period (then they are cut), exit 0.

Loopback by default: another `--host` needs `--allow-remote`, and a proxy that holds a key
and listens beyond loopback must require a client token. A proxy that holds a key sends it
only with model requests, model listings and token counts (`--key-on-any-path`: with every
request), never with a browser's request, and only to requests whose `Host` is an IP
literal, a `localhost` name or one given with `--allow-host NAME`. `--head-timeout` bounds
how long a request head may take; the gate's bounds have a flag each (`--max-calls`,
`--max-argument-chars`, `--max-text-chars`, `--max-reasoning-chars`, `--max-native-items`,
`--max-native-bytes`). Beside `--config FILE` a flag that is a setting of the file is a
usage error naming the file's key; `--check`, `--workers`, `--json` and `--record DIR` (with
`--redact-env`) go beside it. A line
about the server itself (connections it cannot accept at the file-descriptor limit) goes
to stderr.
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
from dataclasses import replace
from typing import TYPE_CHECKING

from . import process
from .args import GIVEN_FILE_FLAGS, LIMIT_HELP, one_line
from .codes import EXIT_OK, EXIT_OUTPUT, UsageError
from .output import listening_output, record_output
from .process import SECRETS

if TYPE_CHECKING:
    from ..proxy.config import ProxySettings
    from ..proxy.server import ProxyRecord

__all__ = ["check_proxy_options", "proxy"]


def check_proxy_options(args: argparse.Namespace) -> str:
    """The options that need each other, before any secret is read: the address to listen
    on (`localhost` as 127.0.0.1)."""
    from ..lab.server import check_loopback  # the rule `lockgate serve --host` follows

    host: str = args.host
    try:
        address = check_loopback(host)
    except ValueError:
        address = host
        if not args.allow_remote:
            raise UsageError(
                f"--host {host} is not a loopback address: give --allow-remote to listen there"
            ) from None
        if args.api_key_env is not None and args.client_token_env is None:
            raise UsageError(
                "a proxy that holds a key (--api-key-env) and listens beyond loopback needs "
                "--client-token-env"
            ) from None
    if args.client_token_env is not None and args.client_token_env == args.api_key_env:
        raise UsageError("--client-token-env must name another variable than --api-key-env")
    held_key_flags = [
        flag
        for flag, given in (
            ("--allow-host", args.allow_host),
            ("--key-on-any-path", args.key_on_any_path),
        )
        if given
    ]
    if held_key_flags and args.api_key_env is None:
        verb = "matters" if len(held_key_flags) == 1 else "matter"
        raise UsageError(
            f"{' and '.join(held_key_flags)} only {verb} for a proxy that holds a key "
            "(--api-key-env)"
        )
    if args.allow_host:
        from ..proxy.access import host_name_problem  # the server's own rule

        for name in args.allow_host:
            problem = host_name_problem(name)
            if problem is not None:
                raise UsageError(f"--allow-host: {problem}")
    return address


def _read_secret(variable: str, what: str) -> str:
    """The value of `variable`, checked, then removed from the environment (never
    printed: its reasons do not quote it)."""
    from ..credentials import api_key_problem

    value = os.environ.get(variable)
    if value is None or value == "":
        raise UsageError(f"{variable} is not set; the proxy did not start")
    problem = api_key_problem(value)
    if problem is not None:
        problem = problem.replace("the API key", f"the {what}")
        raise UsageError(f"{variable}: {problem}; the proxy did not start")
    SECRETS.append(value)
    process.forget_variable(variable)
    process.protect_process_memory()
    return value


def proxy(args: argparse.Namespace) -> int:
    from ..proxy.config import (
        ConfigError,
        describe,
        key_warnings,
        listen_problem,
        resolve_secrets,
    )

    if args.config is not None:
        settings = _file_settings(args)
        problem = listen_problem(settings)
        if problem is not None:
            raise UsageError(f"{args.config}: {problem}")
        try:
            resolved, values, variables = resolve_secrets(settings)
        except ConfigError as exc:
            raise UsageError(f"{args.config}: {exc}; the proxy did not start") from None
        if args.check:
            for line in describe(settings):
                print(one_line(line))
            return EXIT_OK
        for line in key_warnings(settings):
            print(f"lockgate proxy: {one_line(line)}", file=sys.stderr, flush=True)
        for value in values:
            SECRETS.append(value)
        for variable in variables:
            process.forget_variable(variable)
        if values:
            process.protect_process_memory()
    else:
        from .run import check_recording

        host = check_proxy_options(args)
        redact = tuple(check_recording(args))  # `--record DIR`, `--redact-env NAME` first
        api_key = _read_secret(args.api_key_env, "API key") if args.api_key_env else None
        token = (
            _read_secret(args.client_token_env, "client token") if args.client_token_env else None
        )
        if api_key is not None and token is not None:
            from ..credentials import same_secret

            if same_secret(api_key, token):
                raise UsageError(
                    f"--client-token-env {args.client_token_env}: the same value as "
                    f"--api-key-env {args.api_key_env}: clients would hold the provider's key; "
                    "give them a token of their own; the proxy did not start"
                )
        resolved = _flag_settings(args, host, api_key, token, redact)
        if args.check:
            for line in describe(resolved):
                print(one_line(line))
            return EXIT_OK
    from ..proxy import loop_policy

    problem = loop_policy.loop_problem()
    if problem is not None:
        raise UsageError(problem)
    if args.workers is not None:
        from .workers import serve_workers

        return serve_workers(args, resolved)
    return loop_policy.run(_serve(args, resolved))


# The flags that are settings of a config file, and the key each is there: refused beside
# `--config` (the file is the one place a setting is written; a flag beside it would be
# either ignored or a second source of the same setting).
_FILE_KEYS = {
    "--host": "listen.host",
    "--port": "listen.port",
    "--allow-remote": "allow_remote",
    "--client-token-env": "client_token",
    "--allow-host": "allow_hosts",
    "--key-on-any-path": "key_on_any_path",
    "--max-streams": "max_streams",
    "--max-held-bytes": "max_held_bytes",
    "--head-timeout": "head_timeout",
    "--api-key-env": "routes[].key",
    "--hold": "routes[].hold",
    "--validate-schemas": "routes[].validate_schemas",
    "--no-validate-schemas": "routes[].validate_schemas",
    "--idle-timeout": "routes[].idle_timeout",
    "--first-byte-timeout": "routes[].first_byte_timeout",
    "--deadline": "routes[].deadline",
    "--keepalive": "routes[].keepalive",
    "--retries": "routes[].retries.attempts",
    "--retry-max-wait": "routes[].retries.max_wait",
    "--websocket": "routes[].websocket",
    **{"--" + name.replace("_", "-"): f"routes[].limits.{name}" for name in LIMIT_HELP},
}


def _file_settings(args: argparse.Namespace) -> ProxySettings:
    """The config file's settings, with `--record DIR` (and `--redact-env`) applied: they
    are no setting of the file. Any flag that is (`_FILE_KEYS`) is a usage error."""
    from ..proxy.config import ConfigError, load_settings
    from .run import check_recording

    given = list(getattr(args, GIVEN_FILE_FLAGS, []))
    if given:
        keys = ", ".join(dict.fromkeys(_FILE_KEYS.get(flag, flag) for flag in given))
        raise UsageError(
            f"{', '.join(given)}: set in the config file ({keys}), not beside --config"
        )
    redact = tuple(check_recording(args))  # `--record DIR`, `--redact-env NAME` first
    try:
        settings = load_settings(args.config)
    except ConfigError as exc:
        raise UsageError(str(exc)) from None
    return replace(settings, record=args.record, redact=redact)


def _flag_settings(
    args: argparse.Namespace,
    host: str,
    api_key: str | None,
    token: str | None,
    redact: tuple[str, ...],
) -> ProxySettings:
    """The one route the flags describe."""
    from ..gate import GateLimits
    from ..proxy import GatingOptions
    from ..proxy.config import ProxyConfig, RouteRetries

    gating = GatingOptions(
        limits=GateLimits(**{name: getattr(args, name) for name in LIMIT_HELP}),
        idle_timeout=args.idle_timeout,
        first_byte_timeout=args.first_byte_timeout,
        deadline=args.deadline,
        keepalive_interval=args.keepalive,
        validate_schemas=args.validate_schemas,
        hold=args.hold,
    )
    config = ProxyConfig(
        args.upstream,
        host,
        args.port,
        gating,
        api_key=api_key,
        client_token=token,
        max_streams=args.max_streams,
        record=getattr(args, "record", None),
        redact=redact,
        allow_hosts=tuple(args.allow_host),
        key_on_any_path=args.key_on_any_path,
        head_timeout=args.head_timeout,
        max_held_bytes=args.max_held_bytes,
        retries=RouteRetries(args.retries, args.retry_max_wait),
        websocket=args.websocket,
    )
    return config.settings()


def _quiet_aiohttp() -> None:
    """aiohttp logs a client's malformed request with a traceback on Python's last-resort
    handler: the proxy answers it (400) and says nothing more."""
    import logging

    for name in ("aiohttp",):
        logger = logging.getLogger(name)
        logger.addHandler(logging.NullHandler())
        logger.propagate = False


async def _serve(args: argparse.Namespace, settings: ProxySettings) -> int:
    from ..cassette.format import CassetteError
    from ..credentials import Redactor
    from ..display import visible
    from ..proxy import loop_policy
    from ..proxy.config import ConfigError
    from ..proxy.server import serving
    from ..telemetry import NO_TRACING
    from .telemetry import environment_tracing

    redact = Redactor(SECRETS)
    _quiet_aiohttp()
    failed: list[OSError] = []

    def emit(line: str) -> None:
        sys.stdout.write(line + "\n")
        sys.stdout.flush()

    def warn(line: str) -> None:
        """A line about the server itself, on stderr (a failure to write it is no reason
        to stop serving)."""
        with contextlib.suppress(OSError, ValueError):
            print(visible(redact(line), multiline=False), file=sys.stderr, flush=True)

    with process.interrupt_signal() as interrupted:

        def log(record: ProxyRecord) -> None:
            if failed:
                return
            try:
                emit(record_output(record, args.json, redact))
            except OSError as exc:  # stdout closed or full: stop serving, report it
                failed.append(exc)
                interrupted.set()

        # OpenTelemetry export when `OTEL_*` asks for it (flushed when the proxy stops)
        tracing = environment_tracing()
        context = serving(settings, log, warn, tracing=NO_TRACING if tracing is None else tracing)
        try:
            running = await context.__aenter__()
        except OSError as exc:
            reason = exc.strerror or type(exc).__name__
            where = f"{settings.host}:{settings.port}"
            raise UsageError(f"cannot listen on {where}: {reason}") from None
        except (CassetteError, ConfigError) as exc:  # the --record folder went away since
            # it was checked; a metrics folder (PROMETHEUS_MULTIPROC_DIR) that is not one
            raise UsageError(str(exc)) from None
        try:
            loop = loop_policy.running_loop_name()
            emit(listening_output(running.url, settings, args.json, loop=loop))
            await interrupted.wait()
        except OSError as exc:
            failed.append(exc)
        finally:
            await context.__aexit__(None, None, None)
    if failed:
        raise failed[0]  # the entry point's exit code for an output error
    served = running.requests
    plural = "" if served == 1 else "s"
    print(f"lockgate proxy: stopped after {served} request{plural}", file=sys.stderr)
    recorder = running.recorder
    if recorder is not None:
        count = len(recorder.saved)
        where = one_line(str(recorder.folder))
        if recorder.errors:
            lost = len(recorder.errors)
            print(
                f"lockgate proxy: {lost} cassette{'' if lost == 1 else 's'} could not be "
                f"written ({one_line(redact(recorder.errors[0]))}); {count} recorded in {where}",
                file=sys.stderr,
            )
            return EXIT_OUTPUT
        plural = "" if count == 1 else "s"
        print(f"lockgate proxy: recorded {count} cassette{plural} in {where}", file=sys.stderr)
    return EXIT_OK
