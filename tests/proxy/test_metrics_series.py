"""The series the alert rules need (issue 28): the requests that still failed after their
retries were spent, the held-bytes budget beside the bytes held, and readiness; what each
reads in one process, and across workers in multiprocess mode."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

from lockgate.lab.server import serve_script
from lockgate.proxy.attempt import failed_as_retried
from lockgate.proxy.config import ProxySettings, RouteRetries
from lockgate.proxy.flow import Flow, Outcome
from lockgate.proxy.metrics import ProxyMetrics
from lockgate.proxy.server import serving
from lockgate.scripted.reply import OpeningError
from lockgate.scripted.script import Turn

from .support import request_for
from .test_server import origin
from .test_server_routes import ACCEPTED, request, route


def samples(exposition: str) -> dict[str, float]:
    return {
        line.rsplit(" ", 1)[0]: float(line.rsplit(" ", 1)[1])
        for line in exposition.splitlines()
        if line and not line.startswith("#")
    }


def _flow(outcome: Outcome, retries: int, status: int = 200, incomplete: bool = False) -> Flow:
    flow = Flow("POST", "/v1/messages", "anthropic", 0.0, route="r")
    flow.outcome = outcome
    flow.retries = retries
    flow.status = status
    flow.incomplete = incomplete
    return flow


@pytest.mark.parametrize(
    ("flow", "exhausted"),
    [
        (_flow("error", 2, 502), True),  # no answer on the last attempt
        (_flow("forwarded", 2, 503), True),
        (_flow("forwarded", 1, 429), True),
        (_flow("refused", 1, 200, incomplete=True), True),  # the last stream was cut
        (_flow("error", 0, 502), True),  # whether retries were left is the loop's to say
        (_flow("forwarded", 2, 400), False),  # an error no retry is tried for
        (_flow("passed", 2), False),  # the retry succeeded
        (_flow("withheld", 1), False),  # refused on its merits after a retry
        (_flow("abandoned", 1), False),  # the client left
    ],
)
def test_a_final_answer_fails_as_a_retry_would_have_been_tried_for(
    flow: Flow, exhausted: bool
) -> None:
    """With its retries spent (the attempt stage checks that), the flow's final answer
    counts as retries exhausted only for a failure a retry is tried for."""
    assert failed_as_retried(flow) is exhausted


async def test_a_route_whose_upstream_fails_every_attempt_counts_its_retries_exhausted() -> None:
    failing = Turn(error=OpeningError(500, "server", "it broke"))
    async with (
        serve_script([failing, failing, failing], provider="anthropic") as broken,
        serve_script([failing, ACCEPTED], provider="anthropic") as flaky,
    ):
        settings = ProxySettings(
            (
                route("broken", "/broken", origin(broken), retries=RouteRetries(2, 5.0)),
                route("flaky", "/flaky", origin(flaky), retries=RouteRetries(2, 5.0)),
            )
        )
        async with serving(settings) as running:
            body = request_for("anthropic")
            status, _, _ = await request("POST", running.url + "/broken/v1/messages", body)
            assert status == 500
            status, _, _ = await request("POST", running.url + "/flaky/v1/messages", body)
            assert status == 200
            _, _, text = await request("GET", running.url + "/metrics")
    series = samples(text.decode())
    assert series['lockgate_proxy_retries_total{route="broken"}'] == 2
    assert series['lockgate_proxy_retries_exhausted_total{route="broken"}'] == 1
    assert series['lockgate_proxy_retries_total{route="flaky"}'] == 1
    assert 'lockgate_proxy_retries_exhausted_total{route="flaky"}' not in series


def test_the_budget_and_readiness_read_what_the_server_states() -> None:
    metrics = ProxyMetrics()
    before = samples(metrics.render()[0].decode())
    assert before["lockgate_proxy_ready"] == 0  # not ready until the server says so
    assert before["lockgate_proxy_held_bytes_limit"] == 0
    metrics.set_held_limit(1024)
    metrics.held_bytes(256)
    metrics.set_ready(True)
    now = samples(metrics.render()[0].decode())
    assert now["lockgate_proxy_held_bytes_limit"] == 1024
    assert now["lockgate_proxy_held_bytes"] == 256
    assert now["lockgate_proxy_ready"] == 1
    metrics.set_ready(False)  # draining
    assert samples(metrics.render()[0].decode())["lockgate_proxy_ready"] == 0


_WORKER = """
import sys
from lockgate.proxy.metrics import ProxyMetrics
metrics = ProxyMetrics()
metrics.set_held_limit(1000)
metrics.held_bytes(100)
metrics.set_ready(sys.argv[1] == "ready")
print("set", flush=True)
sys.stdin.readline()
"""
_SCRAPED = """
import sys
from lockgate.proxy.metrics import ProxyMetrics
metrics = ProxyMetrics()
metrics.set_held_limit(1000)
metrics.held_bytes(300)
metrics.set_ready(sys.argv[1] == "ready")
print(metrics.render()[0].decode())
"""


@pytest.mark.parametrize(
    ("other", "scraped", "ready"),
    [("draining", "ready", 1.0), ("ready", "draining", 1.0), ("draining", "draining", 0.0)],
)
def test_across_workers_the_budgets_add_up_and_ready_is_any_live_workers(
    tmp_path: Path, other: str, scraped: str, ready: float
) -> None:
    env = {**os.environ, "PROMETHEUS_MULTIPROC_DIR": str(tmp_path)}
    worker = subprocess.Popen(
        [sys.executable, "-c", _WORKER, other],
        env=env,
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    try:
        assert worker.stdout is not None
        assert worker.stdout.readline() == "set\n"
        rendered = subprocess.run(
            [sys.executable, "-c", _SCRAPED, scraped],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
    finally:
        if worker.stdin is not None:
            worker.stdin.close()
        worker.wait(timeout=30)
    series = samples(rendered.stdout)
    assert series["lockgate_proxy_held_bytes_limit"] == 2000
    assert series["lockgate_proxy_held_bytes"] == 400
    assert series["lockgate_proxy_ready"] == ready
