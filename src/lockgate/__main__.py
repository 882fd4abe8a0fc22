"""`python -m lockgate` and the `lockgate` console script."""

import sys
from typing import NoReturn


def run() -> None:
    """Start the CLI; a Ctrl-C even while it is still being imported is an interruption."""
    try:
        from . import interrupts

        interrupts.install()  # before the heavier imports: no signal may be lost in them
        from .cli import main
    except KeyboardInterrupt:
        _interrupted()
    except Exception:
        # An interrupt landing inside a C extension's import can surface as another error
        # (CPython raises TypeError from `from _ssl import …` when its ImportError is cut
        # short): with an interrupt recorded, it is that interruption, not a crash.
        handlers = sys.modules.get("lockgate.interrupts")
        if handlers is None or not getattr(handlers, "arrived", None):
            raise
        _interrupted()
    sys.exit(main())


def _interrupted() -> NoReturn:
    # An interrupt inside an `exec()` of a string (dataclasses build methods that way)
    # leaves CPython's "unhandled" mark, which kills the process with SIGINT at exit;
    # a successful `exec()` of a string clears it.
    exec("None")
    sys.exit(130)


if __name__ == "__main__":
    run()
