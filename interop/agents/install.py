"""The pinned agents installed with npm and the results folder made, before any run; and
`UsageError`, the one line a run stops on before it starts (exit 2).
"""

from __future__ import annotations

import datetime
import os
import shutil
import subprocess
from pathlib import Path

from .agents import AI_SDK_SCRIPT, Installation

__all__ = [
    "UsageError",
    "default_cache",
    "install",
    "npm_install",
    "prepare",
    "results_folder",
]


class UsageError(Exception):
    """One line for the user; exit 2."""


def default_cache() -> Path:
    configured = os.environ.get("LOCKGATE_INTEROP_CACHE")
    if configured:
        return Path(configured)
    return Path.home() / ".cache" / "lockgate" / "interop-agents"


def npm_install(installation: Installation, allowed: bool, timeout: float | None = None) -> bool:
    """npm installs the pinned packages into the installation's folder when one is missing;
    whether it did. UsageError (one line) when it may not (`allowed` False), cannot (no npm)
    or failed (an error, more than `timeout` seconds, a package still missing)."""
    cache = installation.root
    missing = installation.missing()
    if not missing:
        return False
    if not allowed:
        raise UsageError(f"not installed in {cache}: {', '.join(missing)} (drop --no-install)")
    npm = shutil.which("npm")
    if npm is None:
        raise UsageError("npm is not on PATH: install Node.js 20+ with npm first")
    cache.mkdir(parents=True, exist_ok=True)
    pinned = [f"{package}@{version}" for package, version in installation.packages.items()]
    command = [npm, "install", "--prefix", str(cache), "--no-audit", "--no-fund", *pinned]
    print(f"installing into {cache}: {' '.join(pinned)}", flush=True)
    try:
        completed = subprocess.run(
            command, capture_output=True, text=True, check=False, timeout=timeout
        )
    except subprocess.TimeoutExpired:
        raise UsageError(f"npm install took longer than {timeout:.0f} s") from None
    if completed.returncode != 0:
        tail = (completed.stderr or completed.stdout).strip().splitlines()[-3:]
        raise UsageError(f"npm install failed ({completed.returncode}): {' / '.join(tail)}")
    still = installation.missing()
    if still:
        raise UsageError(f"npm install left out: {', '.join(still)}")
    return True


def install(cache: Path, allowed: bool) -> Installation:
    """The agents at their pinned versions in `cache` (npm install when one is missing)."""
    installation = Installation(cache)
    if not npm_install(installation, allowed):
        print(f"agents already installed in {cache}", flush=True)
    shutil.copyfile(Path(__file__).with_name(AI_SDK_SCRIPT), cache / AI_SDK_SCRIPT)
    return installation


def results_folder(cache: Path, out: Path | None, prefix: str = "") -> Path:
    """`out`, else `CACHE/results/<prefix><UTC time>`, made."""
    stamp = datetime.datetime.now(datetime.UTC).strftime("%Y%m%dT%H%M%SZ")
    results = (out or cache / "results" / f"{prefix}{stamp}").resolve()
    results.mkdir(parents=True, exist_ok=True)
    return results


def prepare(
    cache: Path | None, out: Path | None, allow_install: bool, prefix: str = ""
) -> tuple[Installation, Path]:
    """The agents installed in `cache` (default `default_cache()`; npm when allowed) and
    the results folder, made: `out`, else `CACHE/results/<prefix><UTC time>`. UsageError
    for whatever fails, an OSError included."""
    try:
        folder = (cache or default_cache()).resolve()
        installation = install(folder, allow_install)
        results = results_folder(folder, out, prefix)
    except OSError as exc:
        raise UsageError(f"{exc.strerror or exc}: {exc.filename or ''}") from None
    return installation, results
