"""`python -m lockgate` and the `lockgate` console script."""

import sys


def run() -> None:
    """Start the CLI; a Ctrl-C even while it is still being imported is an interruption."""
    try:
        from . import interrupts

        interrupts.install()  # before the heavier imports: no signal may be lost in them
        from .cli import main
    except KeyboardInterrupt:
        # An interrupt inside an `exec()` of a string (dataclasses build methods that way)
        # leaves CPython's "unhandled" mark, which kills the process with SIGINT at exit;
        # a successful `exec()` of a string clears it.
        exec("None")
        sys.exit(130)
    sys.exit(main())


if __name__ == "__main__":
    run()
