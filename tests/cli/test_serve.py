"""`lockgate serve` refuses bad scripts and hosts in one line before serving; `--list`."""

from __future__ import annotations

from pathlib import Path

import pytest

from ..helpers import CLI, Outcome, json_records, run_lockgate, usage_error_line

INVALID_SCRIPTS = {
    "fragment-sizes-number": '{"turns": [{"faults": {"fragment_sizes": 5}}]}',
    "fragment-sizes-floats": '{"turns": [{"faults": {"fragment_sizes": [1.5, 2]}}]}',
    "fragment-sizes-strings": '{"turns": [{"faults": {"fragment_sizes": ["3"]}}]}',
    "fragment-sizes-empty": '{"turns": [{"faults": {"fragment_sizes": []}}]}',
    "fragment-sizes-bool": '{"turns": [{"faults": {"fragment_sizes": [true]}}]}',
    "reset-after-float": '{"turns": [{"faults": {"reset_after": 1.5}}]}',
    "stall-after-string": '{"turns": [{"faults": {"stall_after": "2"}}]}',
    "keepalive-float": '{"turns": [{"faults": {"keepalive_every": 2.0}}]}',
    "drip-string": '{"turns": [{"faults": {"drip_ms": "5"}}]}',
    "giant-float": '{"turns": [{"faults": {"giant_frame_bytes": 1e3}}]}',
    "status-float": '{"turns": [{"status": 500.0}]}',
    "status-string": '{"turns": [{"status": "500"}]}',
    "connection-error-string": '{"turns": [{"connection_error": "no"}]}',
    "negative-stall": '{"turns": [{"faults": {"stall_after": 1, "stall_seconds": -1}}]}',
    "huge-stall": '{"turns": [{"faults": {"stall_after": 1, "stall_seconds": 1e9}}]}',
    "nan-stall": '{"turns": [{"faults": {"stall_seconds": NaN}}]}',
    "infinite-stall": '{"turns": [{"faults": {"stall_seconds": Infinity}}]}',
    "nan-in-body": '{"turns": [{"status": 500, "body": {"error": {"x": NaN}}}]}',
    "infinity-in-event": '{"turns": [{"events": [{"type": "x", "n": -Infinity}]}]}',
    "overflowing-float": '{"turns": [{"status": 500, "body": {"x": 1e999}}]}',
    "unhashable-end": '{"turns": [{"faults": {"end": ["eof"]}}]}',
    "header-newline": '{"turns": [{"status": 500, "headers": {"x": "a\\r\\nb: c"}}]}',
    "deep": '{"turns": [{"status": 500, "body": {"x": ' + "[" * 100 + "]" * 100 + "}}]}",
    "very-deep": '{"turns": [' + "[" * 100_000 + "]" * 100_000 + "]}",
    "huge-int": '{"turns": [{"status": ' + "9" * 5000 + "}]}",
    "lone-surrogate-in-event": '{"turns": [{"events": [{"type": "x", "s": "\\ud800"}]}]}',
    "lone-surrogate-in-reply": '{"turns": [{"reply": {"text": "a\\udfffb"}}]}',
}


def not_served(result: Outcome) -> str:
    """A usage error before anything was served: its one line."""
    line = usage_error_line(result)
    assert "serving" not in result.out
    return line


@pytest.mark.parametrize("content", list(INVALID_SCRIPTS.values()), ids=list(INVALID_SCRIPTS))
def test_serve_refuses_an_invalid_script_in_one_line(
    cli: CLI, tmp_path: Path, content: str
) -> None:
    script = tmp_path / "script.json"
    script.write_text(content)
    result = cli("serve", "--script", str(script))
    line = not_served(result)
    assert line.startswith(f"lockgate: invalid script {script}: "), line


def test_serve_refuses_a_script_over_the_size_cap(cli: CLI, tmp_path: Path) -> None:
    from lockgate.scripted.script import MAX_SCRIPT_BYTES

    script = tmp_path / "big.json"
    with script.open("wb") as handle:
        handle.write(b'{"turns": [')
        handle.truncate(MAX_SCRIPT_BYTES + 1)  # sparse: instant
    result = cli("serve", "--script", str(script))
    assert not_served(result) == f"lockgate: script: {script}: larger than {MAX_SCRIPT_BYTES} bytes"


def test_serve_refuses_a_script_that_is_a_named_pipe_without_waiting(tmp_path: Path) -> None:
    import os

    fifo = tmp_path / "script.json"
    os.mkfifo(fifo)  # nobody writes to it: an open that waits would hang
    result = run_lockgate("serve", "--script", str(fifo), timeout=30)
    assert result.returncode == 2
    assert result.stderr.splitlines() == [
        f"lockgate: script: {fifo}: not a regular file (a named pipe)"
    ]


def test_serve_refuses_a_script_that_is_not_utf8(cli: CLI, tmp_path: Path) -> None:
    script = tmp_path / "latin1.json"
    script.write_bytes(b'{"turns": [{"status": 500, "body": {"m": "caf\xe9"}}]}')
    result = cli("serve", "--script", str(script))
    assert not_served(result) == (
        f"lockgate: invalid script {script}: "
        "'utf-8' codec can't decode byte 0xe9 in position 45: invalid continuation byte"
    )


@pytest.mark.parametrize(
    "path", ["", " ", "nul\0byte", "line\nbreak\x1b[2J", "/", "/nonexistent/x.json"]
)
def test_serve_refuses_an_unusable_script_path(cli: CLI, path: str) -> None:
    result = cli("serve", "--script", path)
    not_served(result)
    assert "\x1b" not in result.err


@pytest.mark.parametrize(
    ("content", "needle"),
    [
        ("{not json", "not valid JSON"),
        ("[]", "non-empty list"),
        ('[{"status": 99}]', "status"),
        ('[{"events": [{"no": "type"}]}]', "events"),
        ('[{"faults": {"drip": 1}}]', "faults"),
        ('[{"faults": {"end": "never"}}]', "end must be"),
        ('[{"bogus": 1}]', "unknown keys"),
    ],
)
def test_serve_rejects_invalid_scripts_in_one_line(
    tmp_path: Path, content: str, needle: str
) -> None:
    script = tmp_path / "script.json"
    script.write_text(content)
    result = run_lockgate("serve", "--script", str(script))
    assert result.returncode == 2
    [line] = result.stderr.splitlines()
    assert line.startswith(f"lockgate: invalid script {script}: "), line
    assert needle in line
    assert "Traceback" not in result.stderr


def test_serve_reports_unreadable_script_and_bad_host(tmp_path: Path) -> None:
    missing = run_lockgate("serve", "--script", str(tmp_path / "missing.json"))
    assert missing.returncode == 2
    assert missing.stderr.splitlines() == [
        f"lockgate: script: cannot read {tmp_path / 'missing.json'}: No such file or directory"
    ]
    remote = run_lockgate("serve", "--scenario", "repair", "--host", "10.1.2.3")
    assert remote.returncode == 2
    assert remote.stderr.splitlines() == [
        "lockgate serve: error: argument --host: '10.1.2.3' is not a loopback address; "
        "the scripted server listens only there (see lockgate serve --help)"
    ]


def test_serve_list_shows_what_one_protocol_can_serve() -> None:
    result = run_lockgate("serve", "--provider", "anthropic", "--list", "--json")
    assert result.returncode == 0, result.stderr
    records = json_records(result.stdout)
    assert records
    assert all("anthropic" in r["protocols"] for r in records)
    assert {"repair", "anthropic-pause-turn"} <= {r["name"] for r in records}
    assert run_lockgate("serve", "--scenario", "repair", "--json").returncode == 2
