"""The `lockgate` command line: `run` (live, opt-in), `lab` (failure lab), `serve`, `proxy`.

Exit codes (`codes.py`): 0 success (lab: every scenario as expected); 1 provider failure,
refusal, turn limit or a lab scenario not as expected; 2 usage or configuration error; 74
output could not be written; 130 interrupted; 141 stdout closed early.

Only the standard library is imported at start-up: `--version`, `--help` and usage errors
answer at once, and a Ctrl-C during start-up is an ordinary interruption. The commands live
in `run.py`, `lab.py`, `serve.py` and `proxy.py`; the parser in `args.py`; what the process
does to itself (the key, signals, temporary folders) in `process.py`.
"""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import os
import sys
from collections.abc import Sequence

from .. import interrupts
from .args import build_parser, one_line
from .codes import (
    EXIT_BROKEN_PIPE,
    EXIT_FAILED,
    EXIT_INTERRUPTED,
    EXIT_OUTPUT,
    EXIT_USAGE,
    UsageError,
)
from .process import SECRETS

__all__ = ["build_parser", "main"]


def _run_command(args: argparse.Namespace) -> int:
    if args.command == "run":
        from ..providers import provider as registry_entry
        from .run import check_run_options, read_key, run_live

        provider = registry_entry(args.provider)
        options = check_run_options(provider, args)  # usage errors before the key is read
        api_key = read_key(provider, args)
        return asyncio.run(run_live(args, provider, options, api_key))
    if args.command == "serve":
        from .serve import serve

        return asyncio.run(serve(args))
    if args.command == "proxy":
        from .proxy import proxy

        return proxy(args)
    if args.command == "cassette":
        from .cassette import run_cassette

        return run_cassette(args)
    from .lab import run_lab

    return asyncio.run(run_lab(args))


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
        print(f"lockgate: {one_line(str(exc))}", file=sys.stderr)
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
        from ..credentials import Redactor
        from ..display import visible

        text = Redactor(SECRETS)(f"lockgate: internal error: {type(exc).__name__}: {exc}")
        print(visible(text.splitlines()[0], multiline=False), file=sys.stderr)
    return EXIT_FAILED
