"""A metrics folder (`PROMETHEUS_MULTIPROC_DIR`) that is not there: one line and the usage
exit code, in one process and with `--workers`, before anything listens."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest


@pytest.mark.parametrize("workers", [[], ["--workers", "2"]], ids=["one process", "workers"])
def test_a_missing_metrics_folder_is_one_line_and_exit_2(
    tmp_path: Path, workers: list[str]
) -> None:
    missing = tmp_path / "no-such-folder"
    command = [sys.executable, "-m", "lockgate", "proxy", "--upstream", "http://127.0.0.1:9"]
    done = subprocess.run(
        [*command, "--port", "0", *workers],
        env={**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(missing)},
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 2, done.stderr
    assert done.stdout == ""
    assert done.stderr.splitlines() == [
        f"lockgate: PROMETHEUS_MULTIPROC_DIR names {missing}, which does not exist: make it "
        "(empty) before the proxy starts, or unset PROMETHEUS_MULTIPROC_DIR"
    ]
