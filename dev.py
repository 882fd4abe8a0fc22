#!/usr/bin/env python3
"""Developer entry point: installs the locked dependencies on first use, then runs a command.

    python3 dev.py lab [ARGS...]    run `lockgate lab` (any lockgate subcommand works)
    python3 dev.py test [ARGS...]   run the test suite (pytest, on every core; -n 0: one process)
    python3 dev.py check            ruff lint, ruff format check, strict mypy
    python3 dev.py bench            run the benchmarks

Needs only python3 (3.11+) and pip. The virtual environment lives in `.venv`; it is
re-synced whenever `requirements-dev.lock` changes.
"""

from __future__ import annotations

import hashlib
import os
import subprocess
import sys
import venv
from pathlib import Path

ROOT = Path(__file__).resolve().parent
VENV = ROOT / ".venv"
LOCK = ROOT / "requirements-dev.lock"
STAMP = VENV / ".lockgate-lock-sha256"


def _venv_bin(name: str) -> Path:
    folder = "Scripts" if os.name == "nt" else "bin"
    suffix = ".exe" if os.name == "nt" else ""
    return VENV / folder / f"{name}{suffix}"


def _lock_digest() -> str:
    digest = hashlib.sha256(LOCK.read_bytes())
    digest.update((ROOT / "pyproject.toml").read_bytes())
    return digest.hexdigest()


def _run(command: list[str]) -> int:
    try:
        return subprocess.call(command, cwd=ROOT)
    except KeyboardInterrupt:
        return 130


def ensure_environment() -> None:
    """Create `.venv` and install the locked dependencies unless already in sync."""
    wanted = _lock_digest()
    if STAMP.exists() and STAMP.read_text().strip() == wanted and _venv_bin("lockgate").exists():
        return
    print("dev.py: installing locked dependencies into .venv (first use) ...", file=sys.stderr)
    if not _venv_bin("python").exists():
        try:
            venv.EnvBuilder(with_pip=True, clear=True).create(VENV)
        except (OSError, subprocess.CalledProcessError):
            # Some distributions ship python3 without ensurepip: make the environment
            # without pip and drive it with the outer pip (`pip --python`).
            venv.EnvBuilder(with_pip=False, clear=True).create(VENV)
    python = str(_venv_bin("python"))
    if subprocess.call([python, "-m", "pip", "--version"], stdout=subprocess.DEVNULL) == 0:
        pip = [python, "-m", "pip", "--disable-pip-version-check", "-q"]
    else:
        pip = [sys.executable, "-m", "pip", "--python", python, "--disable-pip-version-check", "-q"]
    steps = [
        [*pip, "install", "--require-hashes", "-r", str(LOCK)],
        [*pip, "install", "--no-deps", "--no-build-isolation", "-e", str(ROOT)],
    ]
    for step in steps:
        if subprocess.call(step, cwd=ROOT) != 0:
            sys.exit("dev.py: dependency installation failed (see pip's message above)")
    STAMP.write_text(wanted + "\n")


def main(argv: list[str]) -> int:
    if sys.version_info < (3, 11):  # noqa: UP036 - the guard is for older interpreters
        print("dev.py: lockgate needs Python 3.11 or newer", file=sys.stderr)
        return 2
    if not argv or argv[0] in {"-h", "--help"}:
        print(__doc__)
        return 0 if argv else 2
    ensure_environment()
    command, rest = argv[0], argv[1:]
    python = str(_venv_bin("python"))
    if command == "test":
        # The suite is mostly waiting on subprocesses and sockets: spread it over the cores
        # (pytest-xdist), unless the caller chose otherwise.
        spread = (
            []
            if any(a == "-n" or a.startswith(("-n", "--numprocesses")) for a in rest)
            else ["-n", "auto"]
        )
        return _run([python, "-m", "pytest", *spread, *rest])
    if command == "check":
        for step in (
            [python, "-m", "ruff", "check", "."],
            [python, "-m", "ruff", "format", "--check", "."],
            [python, "-m", "mypy"],
        ):
            code = _run(step)
            if code != 0:
                return code
        return 0
    if command == "bench":
        for script in sorted((ROOT / "benchmarks").glob("[!_]*.py")):
            code = _run([python, str(script), *rest])
            if code != 0:
                return code
        return 0
    return _run([str(_venv_bin("lockgate")), command, *rest])


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
