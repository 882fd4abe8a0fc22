"""The event loop `lockgate proxy` runs on: uvloop's where it is installed (a dependency on
Linux and macOS, with a platform marker), asyncio's elsewhere (Windows, PyPy, an install
without it). The name is said in the proxy's first line (`event loop: uvloop`).
`LOCKGATE_PROXY_LOOP=asyncio` keeps asyncio's loop where uvloop is installed: on uvloop,
libuv deals with running out of descriptors (EMFILE) itself, and the proxy's line
`cannot accept new connections` is never said.

- `loop_name()`: the loop the proxy will run on, `"uvloop"` or `"asyncio"`;
- `run(main)`: `asyncio.run` on that loop;
- `running_loop_name()`: the loop this coroutine runs on (what was actually picked);
- `gunicorn_worker_class()`: aiohttp's gunicorn worker for that loop.
"""

from __future__ import annotations

import asyncio
import importlib
import os
import sys
from collections.abc import Callable, Coroutine
from typing import Any, Literal, TypeVar

__all__ = ["gunicorn_worker_class", "loop_name", "loop_problem", "run", "running_loop_name"]

LoopName = Literal["uvloop", "asyncio"]
VARIABLE = "LOCKGATE_PROXY_LOOP"  # `asyncio`: asyncio's loop even where uvloop is installed
T = TypeVar("T")


def _uvloop_factory() -> Callable[[], asyncio.AbstractEventLoop] | None:
    """uvloop's `new_event_loop` where uvloop can be imported (never on Windows)."""
    if sys.platform == "win32" or os.environ.get(VARIABLE, "").strip().lower() == "asyncio":
        return None
    try:
        uvloop = importlib.import_module("uvloop")
    except ImportError:
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def loop_problem() -> str | None:
    """Why `LOCKGATE_PROXY_LOOP` cannot be followed (one line), or None: it may be unset,
    `asyncio`, or `uvloop` where uvloop is installed."""
    asked = os.environ.get(VARIABLE, "").strip().lower()
    if asked in ("", "asyncio"):
        return None
    if asked != "uvloop":
        return f"{VARIABLE} must be asyncio or uvloop, not {asked[:40]!r}"
    if _uvloop_factory() is None:
        return f"{VARIABLE}=uvloop, but uvloop is not installed here"
    return None


def loop_name() -> LoopName:
    """The loop the proxy runs on here: uvloop where importable, asyncio otherwise."""
    return "uvloop" if _uvloop_factory() is not None else "asyncio"


def run(main: Coroutine[Any, Any, T]) -> T:
    """`main` to its end on the chosen loop (`asyncio.run` with uvloop's loop factory)."""
    with asyncio.Runner(loop_factory=_uvloop_factory()) as runner:
        return runner.run(main)


def running_loop_name() -> LoopName:
    """The loop the calling coroutine runs on."""
    loop = asyncio.get_running_loop()
    return "uvloop" if type(loop).__module__.split(".", 1)[0] == "uvloop" else "asyncio"


def gunicorn_worker_class() -> str:
    """aiohttp's gunicorn worker for the chosen loop."""
    if loop_name() == "uvloop":
        return "aiohttp.GunicornUVLoopWebWorker"
    return "aiohttp.GunicornWebWorker"
