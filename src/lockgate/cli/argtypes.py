"""The command line's shared argument types: the parser class (a usage error is one line),
the checked numbers, names, URLs and paths of its flags, `--record`'s flags, and `one_line`."""

from __future__ import annotations

import argparse
import math
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, NoReturn, TypeVar

from .codes import EXIT_USAGE

if TYPE_CHECKING:
    from _typeshed import SupportsWrite

Number = TypeVar("Number", int, float)


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


def _nonempty_path(text: str) -> Path:
    if not text.strip():
        raise argparse.ArgumentTypeError("the path is empty")
    return Path(text)
