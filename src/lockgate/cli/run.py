"""`lockgate run`: the agent against a live provider."""

from __future__ import annotations

import argparse
import gc
import os
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .. import defaults
from . import process
from .args import base_url, given_provider_options, one_line
from .codes import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_OUTPUT, UsageError
from .output import observer, print_outcome
from .process import read_api_key, temporary_directory
from .telemetry import environment_tracing

if TYPE_CHECKING:
    from ..cassette.recorder import CassetteRecorder, RecordingTransport
    from ..credentials import Redactor
    from ..events import Observer
    from ..providers.base import Provider
    from ..retry import RetryPolicy
    from ..telemetry.otel import OtelTracing
    from ..transport import Transport


def check_run_options(provider: Provider, args: argparse.Namespace) -> Any:
    """Every option checked before the key is read: the provider's own options (parsed by
    its own rules; another provider's flag is a usage error), the retry policy, the flags
    that need each other and the SDK's base-URL variable. Returns the provider's options."""
    options = provider_options(provider, args)
    retry_policy(args)
    if args.recovery_budget is not None and not args.recover:
        raise UsageError("--recovery-budget needs --recover")
    _check_base_url_variable(provider, args)
    check_recording(args)
    return options


def check_recording(args: argparse.Namespace) -> list[str]:
    """`--record DIR` (an existing, writable folder) and the values of `--redact-env`
    (each variable set and not empty; `--redact-env` needs `--record`): the extra secrets
    to redact from cassettes. Usage errors before anything is read or sent."""
    names: list[str] = list(getattr(args, "redact_env", None) or [])
    folder = getattr(args, "record", None)
    if folder is None:
        if names:
            raise UsageError("--redact-env needs --record")
        return []
    from ..cassette.format import CassetteError
    from ..cassette.recorder import check_folder

    try:
        check_folder(folder)
    except CassetteError as exc:
        raise UsageError(str(exc)) from None
    values: list[str] = []
    for name in names:
        value = os.environ.get(name)
        if not value:
            raise UsageError(f"--redact-env {name}: the variable is not set or empty")
        values.append(value)
    process.SECRETS.extend(v for v in values if v not in process.SECRETS)
    return values


def provider_options(provider: Provider, args: argparse.Namespace) -> Any:
    """The provider's options from the flags given (None when it declares none)."""
    from ..providers.base import option_fields

    declared = option_fields(provider.options) if provider.options is not None else []
    own = {spec.flag: (name, spec) for name, spec in declared}
    values: dict[str, object] = {}
    for flag, text in given_provider_options(args).items():
        if flag not in own:
            raise UsageError(f"{flag} is not available with --provider {provider.name}")
        name, spec = own[flag]
        try:
            values[name] = spec.parse(text)
        except ValueError as exc:
            raise UsageError(f"argument {flag}: {exc} (see lockgate run --help)") from None
    return provider.options(**values) if provider.options is not None else None


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
        base_url(value)
    except argparse.ArgumentTypeError as exc:
        raise UsageError(f"{variable}: {exc} (or give --base-url); no request was made") from None


def retry_policy(args: argparse.Namespace) -> RetryPolicy:
    from ..retry import RetryPolicy

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


def read_key(provider: Provider, args: argparse.Namespace) -> str:
    return read_api_key(provider, args.api_key_env)


async def run_live(args: argparse.Namespace, provider: Provider, options: Any, api_key: str) -> int:
    from ..client import StreamingModelClient
    from ..credentials import Redactor
    from ..events import UsageMeter, fan_out
    from ..fixture import create_fixture
    from ..providers.base import CodecOptions
    from ..session import run_session
    from ..transport import TransportOptions

    retry = retry_policy(args)
    redact = Redactor([api_key, *check_recording(args)])  # `--redact-env` values too
    meter = UsageMeter()
    display = observer(args.json, redact)
    tracing = environment_tracing()  # OpenTelemetry export, when `OTEL_*` asks for it
    turns = (
        []
        if tracing is None
        else [_turns(tracing, provider.name, args.model or provider.default_model)]
    )
    events = fan_out(meter, display, *turns)
    try:
        codec = provider.make_codec(
            CodecOptions(
                args.model or provider.default_model,
                max_output_tokens=args.max_output_tokens,
                provider_options=options,
            )
        )
    except ValueError as exc:  # options this provider cannot take
        raise UsageError(str(exc)) from None
    transport = provider.make_transport(
        TransportOptions(api_key=api_key, base_url=args.base_url, backend=args.http_client)
    )
    recorder = None
    if args.record is not None:
        recording, recorder = _recording(args, provider, transport, api_key)
        transport = recording
        events = fan_out(meter, recording.observe, display, *turns)
    # The SDKs leave a few hundred thousand long-lived objects behind their imports: move
    # them out of the collector's way, so that a full collection never stalls a stream.
    gc.freeze()
    client = StreamingModelClient(
        codec,
        transport,
        observer=events,
        retry=retry,
        idle_timeout=args.idle_timeout,
        deadline=args.deadline,
        redactor=redact,
    )
    # The signals are flags before the directory exists and until it is removed.
    with (
        process.interrupt_signal() as interrupted,
        temporary_directory("lockgate-run-") as parent,
    ):
        try:
            outcome = await run_session(
                create_fixture(Path(parent)),
                client,
                allow_execution=args.allow_execution,
                max_turns=args.max_turns,
                observer=events,
                interrupt=interrupted.wait,
                recovery_budget=(args.recovery_budget or defaults.RECOVERY_BUDGET)
                if args.recover
                else 0,
            )
        finally:
            await client.aclose()
            if tracing is not None:
                tracing.close()  # flushes what is pending
        print_outcome(outcome, meter.usage, display, redact)
    if recorder is not None and not _recorded(recorder, redact):
        return EXIT_OUTPUT
    if outcome.outcome == "interrupted":
        return EXIT_INTERRUPTED
    return EXIT_OK if outcome.outcome == "model_finished" else EXIT_FAILED


def _turns(tracing: OtelTracing, protocol: str, model: str | None) -> Observer:
    from ..telemetry.client import TurnObserver

    return TurnObserver(tracing, protocol=protocol, model=model)


def _recording(
    args: argparse.Namespace, provider: Provider, transport: Transport, api_key: str
) -> tuple[RecordingTransport, CassetteRecorder]:
    """The provider's transport wrapped to record every exchange into `--record DIR`."""
    from ..cassette.format import CassetteError
    from ..cassette.recorder import CassetteRecorder, RecordingTransport

    secrets = [api_key, *check_recording(args)]
    try:
        recorder = CassetteRecorder(args.record, secrets=secrets)
    except CassetteError as exc:
        raise UsageError(str(exc)) from None
    base = args.base_url or os.environ.get(provider.base_url_variable) or provider.base_url_hint
    recording = RecordingTransport(transport, recorder, protocol=provider.name, base_url=base)
    return recording, recorder


def _recorded(recorder: CassetteRecorder, redact: Redactor) -> bool:
    """Say on stderr what was recorded; False (exit 74) when a cassette could not be
    written."""
    import sys

    count = len(recorder.saved)
    plural = "" if count == 1 else "s"
    folder = one_line(str(recorder.folder))
    if recorder.errors:
        reason = one_line(redact(recorder.errors[0]))
        failed = len(recorder.errors)
        print(
            f"lockgate: {failed} cassette{'' if failed == 1 else 's'} could not be written "
            f"({reason}); {count} recorded in {folder}",
            file=sys.stderr,
        )
        return False
    print(f"lockgate: recorded {count} cassette{plural} in {folder}", file=sys.stderr)
    return True
