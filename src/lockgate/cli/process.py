"""What the command line does to its own process: read the key and make it unreadable to
what the run starts (the variable forgotten, the memory non-dumpable), turn SIGINT/SIGTERM
into a clean stop, and make temporary folders that a signal never leaves behind."""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import sys
import tempfile
from collections.abc import Awaitable, Iterator
from typing import TYPE_CHECKING

from .. import interrupts
from .codes import EXIT_INTERRUPTED, UsageError

if TYPE_CHECKING:
    from ..providers.base import Provider

SECRETS: list[str] = []  # the key, once read: redacted from any last-resort message


@contextlib.contextmanager
def interrupt_signal() -> Iterator[asyncio.Event]:
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


async def until_interrupted(work: Awaitable[int]) -> int:
    """`work`'s exit code; SIGINT/SIGTERM cancel it instead of raising wherever the code
    happens to be (so that its temporary directories are always removed): then 130."""
    with interrupt_signal() as interrupted:
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


@contextlib.contextmanager
def temporary_directory(prefix: str) -> Iterator[str]:
    try:
        context = tempfile.TemporaryDirectory(prefix=prefix)
    except (OSError, FileNotFoundError) as exc:
        raise UsageError(
            f"no writable temporary directory ({exc.strerror or exc}); set TMPDIR"
        ) from None
    with context as path:
        yield path


def read_api_key(provider: Provider, variable: str | None) -> str:
    """The key from `variable` (`--api-key-env`), else the provider's variable or the first
    of its fallbacks that is set; checked before any request, then removed from the
    environment so that no child process inherits it."""
    from ..credentials import api_key_problem

    if variable is None:
        # The provider's variable, else the first of its fallbacks that is set.
        candidates = (provider.key_variable, *provider.key_fallbacks)
        variable = next((name for name in candidates if os.environ.get(name)), candidates[0])
    key = os.environ.get(variable)
    if key is None or key == "":
        names = (
            " or ".join((variable, *provider.key_fallbacks))
            if variable == provider.key_variable
            else variable
        )
        raise UsageError(f"{names} is not set; no request was made")
    problem = api_key_problem(key)
    if problem is not None:
        raise UsageError(f"{variable}: {problem}; no request was made")
    SECRETS.append(key)
    forget_variable(variable)
    protect_process_memory()
    return key


def forget_variable(variable: str) -> None:
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


def protect_process_memory() -> None:
    """Linux: make this process non-dumpable, so that code it runs as the same user (the
    model-edited tests) cannot read the key from `/proc/<ppid>/environ` or its memory."""
    if not sys.platform.startswith("linux"):
        return
    with contextlib.suppress(Exception):
        import ctypes

        pr_set_dumpable = 4
        ctypes.CDLL(None, use_errno=True).prctl(pr_set_dumpable, 0, 0, 0, 0)
