"""Fixtures shared by the test files."""

from __future__ import annotations

import signal
import sys
from collections.abc import Iterator

import pytest

import lockgate.cli.process as cli_process
from lockgate import interrupts


@pytest.fixture
def in_process_main(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """For tests that call `lockgate.cli.main` in this process: main() installs lockgate's
    signal handlers and unraisable hook and makes the process non-dumpable once it read a
    key. Keep this process's own: no dumpability change, no interrupt recorded earlier, and
    the handlers and hook put back afterwards."""
    monkeypatch.setattr(cli_process, "protect_process_memory", lambda: None)
    monkeypatch.setattr(interrupts, "arrived", [])
    handlers = {number: signal.getsignal(number) for number in (signal.SIGINT, signal.SIGTERM)}
    unraisable = sys.unraisablehook
    try:
        yield
    finally:
        for number, handler in handlers.items():
            signal.signal(number, handler)
        sys.unraisablehook = unraisable
