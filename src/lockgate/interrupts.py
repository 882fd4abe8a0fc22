"""The command line's interrupt signals, remembered as well as raised.

Python drops an exception raised inside a callback it runs for itself (a weakref callback
during an import, a `__del__`), printing only "Exception ignored in …" and a traceback: a
Ctrl-C landing there would be lost, and `lockgate serve` would go on serving. So the
handlers record every SIGINT and SIGTERM before raising, the commands' own signal handling
(once their event loop runs) starts from what was recorded, and the swallowed interrupt's
traceback is not printed. Standard library only: `__main__` installs the handlers before
anything else is imported.
"""

from __future__ import annotations

import contextlib
import signal
import sys
from typing import Any

__all__ = ["Interrupted", "arrived", "install", "raise_interrupt"]

arrived: list[int] = []  # the signals received so far, in order


class Interrupted(KeyboardInterrupt):
    """SIGTERM outside a running session (SIGINT raises KeyboardInterrupt itself)."""


def raise_interrupt(number: int, frame: object) -> None:
    arrived.append(number)
    if number == signal.SIGINT:
        raise KeyboardInterrupt
    raise Interrupted(number)


def _unraisable(report: Any) -> None:
    """An interrupt Python swallowed is remembered (`arrived`), so not worth a traceback on
    stderr; anything else goes to Python's own report."""
    if isinstance(report.exc_value, KeyboardInterrupt) and arrived:
        return
    sys.__unraisablehook__(report)


def install() -> None:
    """SIGINT and SIGTERM interrupt (cleanups run) and are remembered."""
    with contextlib.suppress(ValueError):  # not the main thread: leave signals alone
        for number in (signal.SIGINT, signal.SIGTERM):
            signal.signal(number, raise_interrupt)
        sys.unraisablehook = _unraisable
