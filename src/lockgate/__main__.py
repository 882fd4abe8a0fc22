"""`python -m lockgate` and the `lockgate` console script."""

import sys


def run() -> None:
    """Start the CLI; a Ctrl-C even while it is still being imported is an interruption."""
    try:
        from .cli import main
    except KeyboardInterrupt:
        sys.exit(130)
    sys.exit(main())


if __name__ == "__main__":
    run()
