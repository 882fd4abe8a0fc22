"""Once read, the key is out of the environment, /proc and the model-edited code's reach."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from benchmarks.hostile import run_cli

from lockgate.fixture import CALCULATOR

from ..helpers import KEY, call_turn, function_outputs, requests_of, serve, text_turn

READ_KEY = textwrap.dedent(
    """
    import ctypes, json, os, subprocess, sys
    from lockgate.cli.process import read_api_key
    from lockgate.providers import provider

    key = read_api_key(provider("responses"), None)
    child = subprocess.run(
        ["sh", "-c", "printf %s \\"${OPENAI_API_KEY-unset}\\""], capture_output=True, text=True
    )
    with open("/proc/self/environ", "rb") as handle:
        block = handle.read()
    print(json.dumps({
        "read": key == os.environ.get("EXPECTED", key) and len(key),
        "in_environ": "OPENAI_API_KEY" in os.environ,
        "child": child.stdout,
        "dumpable": ctypes.CDLL(None).prctl(3, 0, 0, 0, 0),
        "in_proc_environ": key.encode() in block,
    }))
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="prctl and /proc: Linux")
def test_reading_the_key_hides_it_from_child_processes() -> None:
    env = {k: v for k, v in os.environ.items() if k != "OPENAI_API_KEY"}
    env["OPENAI_API_KEY"] = KEY
    result = subprocess.run(
        [sys.executable, "-c", READ_KEY],
        capture_output=True,
        text=True,
        env=env,
        timeout=30,
        check=False,
    )
    assert result.returncode == 0, result.stderr
    report = json.loads(result.stdout)
    assert report["read"] == len(KEY)
    assert report["in_environ"] is False  # no child inherits it ...
    assert report["child"] == "unset"
    assert report["dumpable"] == 0  # ... nor reads /proc/<ppid>/mem as the same user ...
    assert report["in_proc_environ"] is False  # ... nor /proc/<ppid>/environ (even as root)
    if os.geteuid() == 0:
        print("running as root: root can still read any process's memory")


SNOOP_SOURCE = textwrap.dedent(
    """\
    import os


    def add(a, b):
        return a + b


    print("ENV:", os.environ.get("OPENAI_API_KEY"))
    for pid in (os.getppid(), os.getpid()):
        try:
            with open(f"/proc/{pid}/environ", "rb") as handle:
                print("PROC:", pid, handle.read().replace(b"\\0", b" "))
        except OSError as exc:
            print("PROC:", pid, "denied", exc)
    """
)


@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc: Linux")
def test_model_edited_code_cannot_read_the_key(tmp_path: Path) -> None:
    edit = {"path": "calculator.py", "old": CALCULATOR, "new": SNOOP_SOURCE}
    turns = [call_turn("edit", edit, "resp_e"), call_turn("test", {}, "resp_t"), text_turn()]
    with serve(turns) as server:
        result = run_cli(server.base_url, key=KEY, timeout=60)
        requests = requests_of(server)
    assert result.exit_code == 0, result.stderr
    assert len(requests) == 3
    [edited, tested] = function_outputs(requests[2])
    assert edited.startswith("edited calculator.py")
    assert "ENV: None" in tested
    assert tested.count("PROC:") == 2
    assert KEY not in json.dumps([r.body for r in requests])
    assert KEY not in result.stdout + result.stderr
