"""`lockgate proxy --config FILE [--check] [--workers N]` as a user runs it (issue 24): the
effective routes said without a secret; a config error in one line; two workers under a real
gunicorn serving a burst of concurrent streams from the config's routes, `/metrics` summed
over both, and SIGTERM draining every worker (a stream in flight ends whole)."""

from __future__ import annotations

import asyncio
import os
import signal
import subprocess
import sys
from pathlib import Path

import aiohttp
import pytest

from lockgate.lab.server import serve_script
from lockgate.scripted.reply import Call, Reply, Say
from lockgate.scripted.script import Faults, Turn

from ..helpers import EDIT, run_lockgate
from ..proxy.support import request_for

ACCEPTED = Turn(reply=Reply("r1", (Say("Fixing."), Call("call_1", "edit", EDIT))))
BURST = 24


def config(tmp_path: Path, upstream: str, *, port: int = 0) -> Path:
    path = tmp_path / "proxy.yaml"
    path.write_text(
        f"listen: {{host: 127.0.0.1, port: {port}}}\n"
        "client_token: {env: LOCKGATE_TEST_TOKEN}\n"
        "grace_seconds: 5\n"
        "routes:\n"
        f"  - {{name: openai, prefix: /openai, upstream: '{upstream}', "
        "key: {env: LOCKGATE_TEST_KEY}}\n"
        "  - {name: other, prefix: /other, upstream: 'http://127.0.0.1:9'}\n"
    )
    return path


SECRETS = {
    "LOCKGATE_TEST_TOKEN": "team-TOKEN-9988776655",
    "LOCKGATE_TEST_KEY": "sk-HELD-0123456789",
}


def test_check_says_the_routes_without_a_secret(tmp_path: Path) -> None:
    path = config(tmp_path, "http://127.0.0.1:9")
    result = run_lockgate("proxy", "--config", str(path), "--check", env=SECRETS)
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert (
        "route openai: /openai -> http://127.0.0.1:9, key from env LOCKGATE_TEST_KEY as auto"
        in (lines[4])
    )
    assert all(value not in result.stdout for value in SECRETS.values())
    missing = run_lockgate("proxy", "--config", str(path), "--check", env={})
    assert missing.returncode == 2
    assert missing.stderr.splitlines() == [
        f"lockgate: {path}: route openai: key: LOCKGATE_TEST_KEY is not set; the proxy did not "
        "start"
    ]


@pytest.mark.parametrize(
    ("text", "line"),
    [
        ("routes: 7\n", "c.yaml:1: routes: must be a list"),
        ("routes:\n  - {name: a}\n", "c.yaml:2: routes[0]: upstream is required"),
    ],
)
def test_a_config_error_is_one_line_and_exit_2(tmp_path: Path, text: str, line: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text(text)
    result = run_lockgate("proxy", "--config", str(path))
    assert result.returncode == 2
    assert result.stderr.splitlines() == [f"lockgate: {tmp_path}/{line}"]
    both = run_lockgate("proxy", "--config", str(path), "--api-key-env", "X")
    assert both.returncode == 2
    assert "--api-key-env: set in the config file" in both.stderr


# --- two workers under gunicorn --------------------------------------------------------------

_gunicorn = pytest.importorskip("gunicorn")


async def _stream(session: aiohttp.ClientSession, url: str) -> bytes:
    headers = {"authorization": f"Bearer {SECRETS['LOCKGATE_TEST_TOKEN']}"}
    async with session.post(url, json=request_for("chat"), headers=headers) as response:
        assert response.status == 200
        return await response.read()


async def test_two_workers_serve_a_burst_sum_their_metrics_and_drain(tmp_path: Path) -> None:
    metrics_dir = tmp_path / "metrics"
    metrics_dir.mkdir()
    slow = Turn(reply=ACCEPTED.reply, faults=Faults(stall_after=2, stall_seconds=1.5))
    draining = False  # from then on the upstream answers slowly: a stream is in flight

    def answer(_request: object) -> Turn:
        return slow if draining else ACCEPTED

    async with serve_script([], provider="chat", select=answer) as server:
        path = config(tmp_path, f"http://127.0.0.1:{server.port}")
        env = {**os.environ, **SECRETS, "PROMETHEUS_MULTIPROC_DIR": str(metrics_dir)}
        process = subprocess.Popen(  # noqa: ASYNC220 - read from a thread below
            [sys.executable, "-m", "lockgate", "proxy", "--config", str(path), "--workers", "2"],
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
        )
        try:
            assert process.stdout is not None
            first = await asyncio.to_thread(process.stdout.readline)
            assert first.startswith("proxying at http://127.0.0.1:"), first
            base = first.split()[2]
            url = base + "/openai/v1/chat/completions"
            for _ in range(6000):  # both workers up (each made its gauges' file)
                if len([n for n in os.listdir(metrics_dir) if n.startswith("gauge_")]) == 2:
                    break
                await asyncio.sleep(0.01)
            sent = 0
            writers: set[str] = set()
            # Bursts until both workers served (each wrote its own counter file): which
            # worker accepts a connection is the kernel's choice, and on a busy machine one
            # may take a whole burst (a guard of 10 bursts, not a measure).
            for _ in range(10):
                async with aiohttp.ClientSession() as burst:  # new connections each time
                    bodies = await asyncio.gather(*(_stream(burst, url) for _ in range(BURST)))
                assert all(b'"edit"' in body for body in bodies)
                sent += BURST
                writers = {name for name in os.listdir(metrics_dir) if name.startswith("counter_")}
                if len(writers) == 2:
                    break
            assert len(writers) == 2, writers
            async with aiohttp.ClientSession() as session:
                token = {"x-lockgate-token": SECRETS["LOCKGATE_TEST_TOKEN"]}
                sample = (
                    'lockgate_proxy_requests_total{outcome="passed",protocol="chat",route="openai"}'
                )
                counted = 0.0
                for _ in range(600):  # a request is counted as it ends, just after its body
                    async with session.get(base + "/metrics", headers=token) as response:
                        exposition = await response.text()
                    lines = [line for line in exposition.splitlines() if line.startswith(sample)]
                    counted = float(lines[0].split()[-1]) if lines else 0.0
                    if counted >= sent:
                        break
                    await asyncio.sleep(0.01)
                assert counted == sent  # summed over the two workers
                # A stream in flight when SIGTERM comes ends whole: every worker drains.
                draining = True
                in_flight = asyncio.ensure_future(_stream(session, url))
                for _ in range(6000):  # a guard against a hang, not a measure of time
                    if len(server.requests) == sent + 1:
                        break
                    await asyncio.sleep(0.01)
                process.send_signal(signal.SIGTERM)
                body = await in_flight
            assert b'"edit"' in body
            assert b"[DONE]" in body
            code = await asyncio.to_thread(process.wait, 60)
            assert code == 0
            assert process.stderr is not None
            assert process.stderr.read().strip().endswith("lockgate proxy: stopped (2 workers)")
        finally:
            if process.poll() is None:
                process.kill()
                process.wait()
