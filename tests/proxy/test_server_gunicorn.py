"""The proxy under a real gunicorn with aiohttp's worker (skipped when gunicorn is not
installed): two workers serve a gated stream with the key and the token read from files, and
no process of the server (master or worker) holds either in its environment block (M4; read
from variables, every process does); one worker serves the routes of a config file
(`LOCKGATE_CONFIG`); a misconfiguration is one line from each worker that started and
gunicorn's defined exit 4 (App failed to load), never a traceback (L9)."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path

import pytest

from lockgate.scripted.reply import Call, Reply, Say
from lockgate.scripted.script import Turn

from ..helpers import EDIT, ServerThread, dead_port, wait_until
from .support import request_for, turn_bytes
from .test_server import HELD_KEY, TOKEN

_gunicorn = pytest.importorskip("gunicorn")
if not sys.platform.startswith("linux"):  # pragma: no cover
    pytest.skip("reads /proc", allow_module_level=True)

ACCEPTED = Turn(reply=Reply("r1", (Say("Fixing."), Call("call_1", "edit", EDIT))))
FACTORY = "lockgate.proxy.server:app_factory"
# gunicorn 27 opens a control socket in ~/.gunicorn by default: not for a test.
NO_CONTROL_SOCKET = ("--no-control-socket",) if _gunicorn.version_info >= (27,) else ()
WORKER = "aiohttp.GunicornWebWorker"


def clean_environment(**extra: str) -> dict[str, str]:
    kept = {k: v for k, v in os.environ.items() if not k.startswith(("LOCKGATE_", "LG_"))}
    return {**kept, **extra}


@contextmanager
def gunicorn(
    port: int, env: dict[str, str], workers: int = 2, *, config: bool = False
) -> Iterator[subprocess.Popen[str]]:
    given = ("-c", "python:lockgate.proxy.gunicorn_config") if config else ()
    process = subprocess.Popen(
        [
            *(sys.executable, "-m", "gunicorn", *given, FACTORY, "--worker-class", WORKER),
            *("--workers", str(workers), "--bind", f"127.0.0.1:{port}"),
            *("--graceful-timeout", "20"),
            *NO_CONTROL_SOCKET,
        ],
        env=env,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        stdin=subprocess.DEVNULL,
        text=True,
    )
    try:
        yield process
    finally:
        if process.poll() is None:
            process.send_signal(signal.SIGTERM)
            try:
                process.communicate(timeout=30)
            except subprocess.TimeoutExpired:
                process.kill()
                process.communicate()


def children(pid: int) -> list[int]:
    with open(f"/proc/{pid}/task/{pid}/children") as handle:
        return [int(part) for part in handle.read().split()]


def environment_block(pid: int) -> bytes:
    with open(f"/proc/{pid}/environ", "rb") as handle:
        return handle.read()


def accepting(port: int) -> bool:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=5)
    try:
        conn.request("GET", "/lockgate-probe", headers={"x-lockgate-token": TOKEN})
        conn.getresponse().read()
    except OSError:
        return False
    finally:
        conn.close()
    return True


def post_chat(port: int, path: str = "/v1/chat/completions") -> tuple[int, bytes]:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    try:
        conn.request(
            "POST",
            path,
            json.dumps(request_for("chat")),
            {"authorization": f"Bearer {TOKEN}", "content-type": "application/json"},
        )
        response = conn.getresponse()
        return response.status, response.read()
    finally:
        conn.close()


def write_secret(path: Path, value: str) -> str:
    path.write_text(value + "\n")
    path.chmod(0o600)
    return str(path)


@pytest.mark.parametrize("source", ["file", "variable"])
def test_two_workers_gate_with_secrets_kept_out_of_their_environment(
    tmp_path: Path, source: str
) -> None:
    port = dead_port()
    with ServerThread([ACCEPTED, ACCEPTED], provider="chat") as server:
        upstream = server.base_url.removesuffix("/v1")
        if source == "file":
            env = clean_environment(
                LOCKGATE_UPSTREAM=upstream,
                LOCKGATE_API_KEY_FILE=write_secret(tmp_path / "key", HELD_KEY),
                LOCKGATE_CLIENT_TOKEN_FILE=write_secret(tmp_path / "token", TOKEN),
            )
        else:
            env = clean_environment(
                LOCKGATE_UPSTREAM=upstream,
                LOCKGATE_API_KEY_ENV="LG_HELD",
                LG_HELD=HELD_KEY,
                LOCKGATE_CLIENT_TOKEN_ENV="LG_TOKEN",
                LG_TOKEN=TOKEN,
            )
        with gunicorn(port, env) as process:
            wait_until(
                lambda: accepting(port), "gunicorn serves", alive=lambda: process.poll() is None
            )
            wait_until(lambda: len(children(process.pid)) == 2, "two workers booted")
            answers = [post_chat(port), post_chat(port)]
            blocks = [environment_block(pid) for pid in [process.pid, *children(process.pid)]]
    assert answers == [(200, turn_bytes(ACCEPTED, "chat"))] * 2
    assert server.server is not None
    assert [r.headers["authorization"] for r in server.server.requests] == [
        "Bearer [redacted]"
    ] * 2  # the scripted server's own log redacts what it was sent: the held key
    held = [HELD_KEY.encode() in b or TOKEN.encode() in b for b in blocks]
    # From files: no process's environment block (/proc/PID/environ) ever holds a secret.
    # From variables: every process keeps the block it was started with (the README says
    # so, and recommends the files).
    assert held == ([False] * 3 if source == "file" else [True] * 3)


def test_a_misconfigured_factory_is_one_line_and_gunicorns_exit_4() -> None:
    port = dead_port()
    with gunicorn(port, clean_environment(), workers=1) as process:
        _, err = process.communicate(timeout=60)
    assert process.returncode == 4, err
    assert "Traceback" not in err
    ours = [line for line in err.splitlines() if line.startswith("lockgate proxy: ")]
    assert ours == ["lockgate proxy: LOCKGATE_UPSTREAM is not set"]
    assert "App failed to load" in err


def test_raw_gunicorn_serves_the_routes_of_a_config_file(tmp_path: Path) -> None:
    port = dead_port()
    with ServerThread([ACCEPTED], provider="chat") as server:
        upstream = server.base_url.removesuffix("/v1")
        config = tmp_path / "proxy.yaml"
        config.write_text(
            f"client_token: {{file: {write_secret(tmp_path / 'token', TOKEN)}}}\n"
            "routes:\n"
            f"  - {{name: local, prefix: /local, upstream: '{upstream}',"
            f" key: {{file: {write_secret(tmp_path / 'key', HELD_KEY)}}}}}\n"
            "  - {name: other, prefix: /other, upstream: 'http://127.0.0.1:9'}\n"
        )
        env = clean_environment(LOCKGATE_CONFIG=str(config))
        with gunicorn(port, env, workers=1) as process:
            wait_until(
                lambda: accepting(port), "gunicorn serves", alive=lambda: process.poll() is None
            )
            answer = post_chat(port, "/local/v1/chat/completions")
            unrouted = post_chat(port, "/v1/chat/completions")
    assert answer == (200, turn_bytes(ACCEPTED, "chat"))
    assert unrouted[0] == 404  # no route serves a path outside every prefix
    assert server.server is not None
    assert [r.headers["authorization"] for r in server.server.requests] == ["Bearer [redacted]"]


# --- bad settings fail in the master, before any worker (issue 27) ----------------------------

BAD_SETTINGS = {
    "no-upstream": ({}, "LOCKGATE_UPSTREAM is not set"),
    "bad-number": (
        {"LOCKGATE_UPSTREAM": "http://127.0.0.1:9", "LOCKGATE_IDLE_TIMEOUT": "soon"},
        "LOCKGATE_IDLE_TIMEOUT must be a positive number of seconds",
    ),
    "missing-config": ({"LOCKGATE_CONFIG": "{tmp}/missing.yaml"}, "cannot read {tmp}/missing.yaml"),
    "missing-key-file": (
        {"LOCKGATE_UPSTREAM": "http://127.0.0.1:9", "LOCKGATE_API_KEY_FILE": "{tmp}/no-key"},
        "LOCKGATE_API_KEY_FILE names {tmp}/no-key, which cannot be read",
    ),
    "key-without-token": (
        {"LOCKGATE_UPSTREAM": "http://127.0.0.1:9", "LOCKGATE_API_KEY_FILE": "{tmp}/key"},
        "needs LOCKGATE_CLIENT_TOKEN_FILE or LOCKGATE_CLIENT_TOKEN_ENV",
    ),
    "missing-metrics-folder": (
        {"LOCKGATE_UPSTREAM": "http://127.0.0.1:9", "PROMETHEUS_MULTIPROC_DIR": "{tmp}/nowhere"},
        "PROMETHEUS_MULTIPROC_DIR names {tmp}/nowhere, which does not exist",
    ),
}


@pytest.mark.parametrize("case", sorted(BAD_SETTINGS))
def test_with_its_config_gunicorn_refuses_bad_settings_in_the_master(
    tmp_path: Path, case: str
) -> None:
    variables, said = BAD_SETTINGS[case]
    write_secret(tmp_path / "key", HELD_KEY)
    env = clean_environment(**{k: v.format(tmp=tmp_path) for k, v in variables.items()})
    with gunicorn(dead_port(), env, workers=2, config=True) as process:
        _, err = process.communicate(timeout=60)
    assert process.returncode == 4, err
    assert "Traceback" not in err
    assert "Booting worker" not in err  # refused before any worker started
    ours = [line for line in err.splitlines() if line.startswith("lockgate proxy: ")]
    assert len(ours) == 1, err
    assert said.format(tmp=tmp_path) in ours[0]


def test_without_its_config_a_missing_metrics_folder_is_one_line_not_a_traceback(
    tmp_path: Path,
) -> None:
    env = clean_environment(
        LOCKGATE_UPSTREAM="http://127.0.0.1:9", PROMETHEUS_MULTIPROC_DIR=str(tmp_path / "gone")
    )
    with gunicorn(dead_port(), env, workers=1) as process:
        _, err = process.communicate(timeout=60)
    assert process.returncode == 4, err
    assert "Traceback" not in err
    ours = [line for line in err.splitlines() if line.startswith("lockgate proxy: ")]
    assert ours == [
        f"lockgate proxy: PROMETHEUS_MULTIPROC_DIR names {tmp_path / 'gone'}, which does not "
        "exist: make it (empty) before the proxy starts, or unset PROMETHEUS_MULTIPROC_DIR"
    ]


_KILLED_WORKER = """
import os, signal
from lockgate.proxy.metrics import ProxyMetrics
metrics = ProxyMetrics()
metrics.in_flight.labels("r").inc()
metrics.requests.labels("r", "chat", "passed").inc()
os.kill(os.getpid(), signal.SIGKILL)
"""
_RESTARTED_WORKER = """
from lockgate.proxy.metrics import ProxyMetrics
print(ProxyMetrics().render()[0].decode())
"""


def test_a_killed_workers_in_flight_gauge_does_not_survive_a_restart(tmp_path: Path) -> None:
    env = clean_environment(PROMETHEUS_MULTIPROC_DIR=str(tmp_path))
    killed = subprocess.run(
        [sys.executable, "-c", _KILLED_WORKER], env=env, capture_output=True, check=False
    )
    assert killed.returncode == -signal.SIGKILL
    assert any(name.startswith("gauge_livesum_") for name in os.listdir(tmp_path))
    restarted = subprocess.run(
        [sys.executable, "-c", _RESTARTED_WORKER],
        env=env,
        capture_output=True,
        text=True,
        check=True,
    )
    lines = restarted.stdout.splitlines()
    assert 'lockgate_proxy_requests_total{outcome="passed",protocol="chat",route="r"} 1.0' in lines
    assert not [line for line in lines if line.startswith("lockgate_proxy_in_flight{")]
