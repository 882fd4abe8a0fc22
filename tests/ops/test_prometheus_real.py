"""The real Prometheus run (`python -m interop.prometheus.run`), opt in: with
`LOCKGATE_REAL_PROMETHEUS=1` and `prometheus` on PATH (Debian: `apt-get install
prometheus`). It starts a loopback upstream, `lockgate proxy --workers 2` and a Prometheus
scraping it every second, and takes about half a minute: out of the default run."""

from __future__ import annotations

import os
import shutil
import subprocess
import sys

import pytest

from ..helpers import ROOT

pytestmark = [
    pytest.mark.skipif(
        os.environ.get("LOCKGATE_REAL_PROMETHEUS") != "1",
        reason="opt-in: set LOCKGATE_REAL_PROMETHEUS=1 to run a real Prometheus",
    ),
    pytest.mark.skipif(
        shutil.which("prometheus") is None,
        reason="prometheus is not on PATH (Debian: apt-get install prometheus)",
    ),
]


def test_a_real_prometheus_answers_every_dashboard_query_and_rule_over_two_workers() -> None:
    command = [sys.executable, "-m", "interop.prometheus.run", "--workers", "2"]
    ran = subprocess.run(
        command, cwd=ROOT, capture_output=True, text=True, timeout=600, check=False
    )
    print(ran.stdout)
    assert ran.returncode == 0, ran.stdout + ran.stderr
    assert "workers that counted requests: 2" in ran.stdout
    assert "NO SERIES" not in ran.stdout
