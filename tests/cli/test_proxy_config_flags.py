"""`lockgate proxy --config FILE` and the flags beside it (issue 27): a flag that is a
setting of the file (`--port`, `--retries`, `--max-calls` …) is a one-line usage error
naming the file's key, never silently ignored, even when given its default value;
`--record DIR` (and `--redact-env`), no setting of the file, records with a config file."""

from __future__ import annotations

import http.client
import json
import os
import signal
import subprocess
import sys
from pathlib import Path

import pytest

from lockgate.scripted.reply import Call, Reply, Say
from lockgate.scripted.script import Turn

from ..helpers import CLI, EDIT, ServerThread, finish, usage_error_line
from ..proxy.support import request_for

ACCEPTED = Turn(reply=Reply("r1", (Say("Fixing."), Call("call_1", "edit", EDIT))))


def config(tmp_path: Path, upstream: str = "http://127.0.0.1:9") -> Path:
    path = tmp_path / "proxy.yaml"
    path.write_text(f"routes:\n  - {{name: only, upstream: '{upstream}'}}\n")
    return path


FLAGS = {
    ("--port", "9000"): "--port: set in the config file (listen.port)",
    ("--port", "0"): "--port: set in the config file (listen.port)",  # its default, given
    ("--host", "127.0.0.2"): "--host: set in the config file (listen.host)",
    ("--allow-remote",): "--allow-remote: set in the config file (allow_remote)",
    ("--max-streams", "3"): "--max-streams: set in the config file (max_streams)",
    ("--head-timeout", "5"): "--head-timeout: set in the config file (head_timeout)",
    ("--max-held-bytes", "99"): "--max-held-bytes: set in the config file (max_held_bytes)",
    ("--retries", "2"): "--retries: set in the config file (routes[].retries.attempts)",
    ("--retry-max-wait", "5"): (
        "--retry-max-wait: set in the config file (routes[].retries.max_wait)"
    ),
    ("--hold", "terminal"): "--hold: set in the config file (routes[].hold)",
    ("--no-validate-schemas",): (
        "--no-validate-schemas: set in the config file (routes[].validate_schemas)"
    ),
    ("--idle-timeout", "5"): "--idle-timeout: set in the config file (routes[].idle_timeout)",
    ("--deadline", "5"): "--deadline: set in the config file (routes[].deadline)",
    ("--keepalive", "5"): "--keepalive: set in the config file (routes[].keepalive)",
    ("--max-calls", "2"): "--max-calls: set in the config file (routes[].limits.max_calls)",
    ("--max-native-bytes", "2"): (
        "--max-native-bytes: set in the config file (routes[].limits.max_native_bytes)"
    ),
    ("--port", "1", "--deadline", "5"): (
        "--port, --deadline: set in the config file (listen.port, routes[].deadline)"
    ),
}


@pytest.mark.parametrize("flags", list(FLAGS), ids=[" ".join(flags) for flags in FLAGS])
def test_a_flag_that_the_file_sets_is_refused_beside_config(
    cli: CLI, tmp_path: Path, flags: tuple[str, ...]
) -> None:
    path = config(tmp_path)
    result = cli("proxy", "--config", str(path), *flags, "--check")
    assert usage_error_line(result) == f"lockgate: {FLAGS[flags]}, not beside --config"


def test_the_flags_that_are_no_setting_of_the_file_go_beside_it(cli: CLI, tmp_path: Path) -> None:
    path = config(tmp_path)
    folder = tmp_path / "cassettes"
    folder.mkdir()
    result = cli(
        "proxy", "--config", str(path), "--record", str(folder), "--json", "--check"
    )  # fmt: skip
    assert result.code == 0, result.err
    assert f"recording: every exchange as a cassette in {folder}" in result.out.splitlines()
    missing = cli("proxy", "--config", str(path), "--record", str(tmp_path / "no"), "--check")
    assert usage_error_line(missing).startswith(f"lockgate: --record {tmp_path / 'no'}: ")
    alone = cli("proxy", "--config", str(path), "--redact-env", "LG_X", "--check")
    assert usage_error_line(alone) == "lockgate: --redact-env needs --record"


def test_a_proxy_with_a_config_file_records_every_exchange(tmp_path: Path) -> None:
    folder = tmp_path / "cassettes"
    folder.mkdir()
    secret = "extra-SECRET-value-5151"
    with ServerThread([ACCEPTED], provider="chat") as server:
        path = config(tmp_path, server.base_url.removesuffix("/v1"))
        environment = {k: v for k, v in os.environ.items() if not k.startswith("LG_")}
        environment["LG_EXTRA"] = secret
        command = [sys.executable, "-m", "lockgate", "proxy", "--config", str(path)]
        process = subprocess.Popen(
            [*command, "--record", str(folder), "--redact-env", "LG_EXTRA"],
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            stdin=subprocess.DEVNULL,
            text=True,
            env=environment,
        )
        try:
            assert process.stdout is not None
            first = process.stdout.readline()
            port = int(first.split(" -> ")[0].rsplit(":", 1)[1])
            conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
            body = json.dumps(request_for("chat"))
            auth = {"authorization": f"Bearer {secret}"}
            conn.request("POST", "/v1/chat/completions", body, auth)
            response = conn.getresponse()
            assert response.status == 200
            response.read()
            conn.close()
        finally:
            process.send_signal(signal.SIGTERM)
            code, _, err = finish(process)
    assert code == 0, err
    assert err.splitlines()[-1] == f"lockgate proxy: recorded 1 cassette in {folder}"
    [cassette] = list(folder.iterdir())
    assert secret not in cassette.read_text()
