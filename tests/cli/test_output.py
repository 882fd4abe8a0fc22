"""Output that cannot be written: a closed or full stdout is exit 74 with one clear line."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lockgate.lab.scenarios import repair_turns

from ..helpers import KEY, serve


def lockgate_shell(command: str, **env: str) -> subprocess.CompletedProcess[str]:
    environment = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    environment.update(env)
    return subprocess.run(
        ["sh", "-c", command],
        capture_output=True,
        text=True,
        env=environment,
        timeout=60,
        check=False,
    )


LAB_REPAIR = "-m lockgate lab --provider responses --transport inprocess --scenario repair"


@pytest.mark.parametrize("arguments", [LAB_REPAIR, "-m lockgate --version", "-m lockgate --help"])
@pytest.mark.parametrize("where", [">&-", ">/dev/full"], ids=["closed", "full"])
def test_unwritable_stdout_is_exit_74_with_one_clear_line(arguments: str, where: str) -> None:
    if where == ">/dev/full" and not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    result = lockgate_shell(f"exec {sys.executable} {arguments} {where}")
    assert result.returncode == 74, result.stderr
    lines = result.stderr.splitlines()
    errors = [line for line in lines if line.startswith("lockgate:")]
    said = {
        ">&-": "standard output is not open",
        ">/dev/full": "I/O error: No space left on device",
    }
    assert errors == [f"lockgate: {said[where]}"], result.stderr
    assert errors[0] == lines[-1]
    assert "Traceback" not in result.stderr
    assert "Exception ignored" not in result.stderr


def test_a_run_into_a_full_stdout_is_exit_74(tmp_path: Path) -> None:
    if not os.path.exists("/dev/full"):
        pytest.skip("no /dev/full")
    with serve(repair_turns()) as server:
        result = lockgate_shell(
            f"exec {sys.executable} -m lockgate run --base-url {server.base_url} "
            "--allow-execution >/dev/full",
            OPENAI_API_KEY=KEY,
        )
    assert result.returncode == 74, result.stderr
    assert result.stderr.splitlines()[-1] == "lockgate: I/O error: No space left on device"
    assert "Traceback" not in result.stderr
